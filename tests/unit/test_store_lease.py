"""The store's scheduler lease (one scheduler per store) and its read-only opening (dry runs).

The lease tests run on SQLite and on PostgreSQL (`store_target`, tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest

from cpn.clock import SimClock
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore, Lease, StoreError, StoreLeased, StoreUnavailable

RUN = "host-a:100:cpn run"
FLOW = "host-b:200:schedule-round"


@pytest.fixture
def path(store_target):
    return store_target


@pytest.fixture
def store(path):
    with JobStore(path) as s:
        yield s


def test_first_holder_gets_term_1_and_the_lease_names_it(store):
    assert store.lease() is None
    before = time.time()
    assert store.acquire_lease(RUN, 30.0) == 1
    lease = store.lease()
    assert (lease.holder, lease.term) == (RUN, 1)
    assert before + 30.0 <= lease.expires_at <= time.time() + 30.0


def test_a_second_process_is_refused_while_the_lease_holds_and_told_who_holds_it(path, store):
    store.acquire_lease(RUN, 30.0)
    with JobStore(path) as other, pytest.raises(StoreLeased, match=RUN) as refused:
        other.acquire_lease(FLOW, 30.0)
    assert refused.value.holder == RUN
    assert refused.value.expires_at == store.lease().expires_at
    assert isinstance(refused.value, StoreError)
    assert store.lease().holder == RUN


def test_reacquiring_ones_own_lease_renews_it_and_keeps_the_term(store):
    store.acquire_lease(RUN, 5.0)
    first = store.lease().expires_at
    assert store.acquire_lease(RUN, 60.0) == 1
    assert store.lease().expires_at > first + 50.0


def test_an_expired_lease_is_taken_over_in_a_new_term_and_the_old_holder_cannot_renew(store):
    store.acquire_lease(RUN, 0.001)
    time.sleep(0.01)
    assert store.acquire_lease(FLOW, 30.0) == 2
    assert store.renew_lease(RUN, 1, 30.0) is False
    assert store.lease().holder == FLOW
    store.release_lease(RUN, 1)  # a stale holder's release leaves the new lease alone
    assert store.lease().holder == FLOW and store.lease().expires_at > time.time()


def test_processes_racing_for_a_free_lease_get_it_once(path):
    stores = [JobStore(path) for _ in range(4)]
    won, refused = [], []

    def take(store: JobStore, holder: str) -> None:
        try:
            won.append((holder, store.acquire_lease(holder, 30.0)))
        except StoreLeased as exc:
            refused.append(exc.holder)

    threads = [threading.Thread(target=take, args=(s, f"host:{k}:cpn run")) for k, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and won[0][1] == 1
    assert refused == [won[0][0]] * 3
    assert stores[0].lease().holder == won[0][0]
    for s in stores:
        s.close()


def test_renewal_extends_the_lease_of_its_holder_and_term_only(store):
    term = store.acquire_lease(RUN, 1.0)
    first = store.lease().expires_at
    assert store.renew_lease(RUN, term, 60.0) is True
    assert store.lease().expires_at > first + 50.0
    assert store.renew_lease(RUN, term + 1, 60.0) is False
    assert store.renew_lease(FLOW, term, 60.0) is False


def test_release_frees_the_store_at_once_and_the_next_holder_gets_a_new_term(path, store):
    term = store.acquire_lease(RUN, 60.0)
    store.release_lease(RUN, term)
    assert store.lease() == Lease(RUN, 1, 0.0)
    with JobStore(path) as other:
        assert other.acquire_lease(FLOW, 60.0) == 2


def test_lease_survives_reopening_the_store(path):
    with JobStore(path) as first:
        first.acquire_lease(RUN, 60.0)
    with JobStore(path) as again, pytest.raises(StoreLeased):
        again.acquire_lease(FLOW, 60.0)


@pytest.mark.parametrize("ttl", [0, -1.0, float("nan")])
def test_ttl_must_be_positive(store, ttl):
    with pytest.raises(ValueError, match="ttl_s"):
        store.acquire_lease(RUN, ttl)
    with pytest.raises(ValueError, match="ttl_s"):
        store.renew_lease(RUN, 1, ttl)


def _digest(*files: Path) -> list[str]:
    return [hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else "" for f in files]


def test_read_only_store_reads_and_refuses_every_write_leaving_the_files_unchanged(tmp_path):
    path = tmp_path / "jobs.db"
    spec = JobSpec(job_id="default/a", model="ResNet-50", num_gpus=1, epochs=1)
    writer = JobStore(path, SimClock(5.0))  # kept open, as a live scheduler would, so the WAL stays
    writer.submit([spec])
    files = (path, path.with_name(path.name + "-wal"))
    assert files[1].stat().st_size > 0
    before = _digest(*files)
    with JobStore(path, read_only=True) as reader:
        assert [r.job_id for r in reader.jobs(JobState.QUEUED)] == ["default/a"]
        with pytest.raises(StoreUnavailable, match="read-only"):
            reader.transition("default/a", JobState.ASSIGNED, cluster="x", node="x-0")
        with pytest.raises(StoreUnavailable, match="read-only"):
            reader.acquire_lease(FLOW, 30.0)
    assert _digest(*files) == before
    assert writer.get("default/a").state == JobState.QUEUED
    writer.close()


@pytest.mark.postgres
@pytest.mark.integration
def test_read_only_database_reads_and_refuses_every_write(postgres_server):
    url = postgres_server.create_database()
    with JobStore(url) as writer:
        writer.submit([JobSpec(job_id="default/a", model="ResNet-50")])
    with JobStore(url, read_only=True) as reader:
        assert [r.job_id for r in reader.jobs(JobState.QUEUED)] == ["default/a"]
        for write in (
            lambda: reader.transition("default/a", JobState.ASSIGNED, cluster="x", node="x-0"),
            lambda: reader.submit([JobSpec(job_id="default/b", model="ResNet-50")]),
            lambda: reader.acquire_lease(FLOW, 30.0),
        ):
            with pytest.raises(StoreUnavailable, match="read-only"):
                write()
    with JobStore(url) as again:
        assert [r.job_id for r in again.jobs()] == ["default/a"] and again.lease() is None


def test_read_only_refuses_a_missing_file_and_memory(tmp_path):
    with pytest.raises(StoreError, match="missing.db"):
        JobStore(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()
    with pytest.raises(ValueError, match="read_only"):
        JobStore(":memory:", read_only=True)
