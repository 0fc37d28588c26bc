"""`cpn store copy`: a SQLite store copied into a new store, SQLite and PostgreSQL (`store_target`), and
an interrupted copy refused until it is finished."""

from __future__ import annotations

import pytest

from cli import main
from cpn.clock import SimClock
from cpn.decisions import Waiting
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore, StoreCopyUnfinished, StoreError, StoreLeased
from cpn.store.copier import copy_store
from cpn.store.facts import CopyStarted, SavedProgress


def fill(store: JobStore, clock: SimClock) -> None:
    """Seven jobs in different states, with every kind of data a job carries, a cancel request and a
    scheduler lease."""
    store.submit(
        [JobSpec(job_id=f"ns/j{i}", model="ResNet-50", num_gpus=2, source_cluster="bj") for i in range(7)]
    )
    store.set_waiting([Waiting("ns/j0", "memory", "needs 20 GB", predicted_start=50.0)])
    clock.advance_to(110.0)
    store.transition("ns/j1", JobState.ASSIGNED, cluster="sh", node="n1", placement=[("n1", 1), ("n2", 1)])
    store.transition("ns/j1", JobState.MIGRATING)
    store.transition("ns/j1", JobState.SUBMITTED, location="sh", image="reg/x@sha256:ab")
    store.transition("ns/j1", JobState.RUNNING)
    store.transition(
        "ns/j1", JobState.FAILED, reason="OOMKilled", gpu_mem_gb=15.5, log_tail="CUDA out of memory"
    )
    store.transition("ns/j2", JobState.SCHEDULE_FAILED, reason="no node has 2 GPUs")
    store.transition("ns/j3", JobState.ASSIGNED, cluster="bj", node="n3")
    store.transition(
        "ns/j3", JobState.QUEUED, reason="replan", needs_more_than_gb=12.0, fact=SavedProgress(0.4)
    )
    store.transition("ns/j4", JobState.ASSIGNED, cluster="bj", node="n4", placement=[("n4", 2)])
    store.transition("ns/j4", JobState.MIGRATING, fact=CopyStarted("sh", whole_cards=True))
    assert store.cancel("ns/j4", "alice").status == "requested"
    store.acquire_lease("host:1:cpn run", 60.0)
    store.release_lease("host:1:cpn run", 1)


def contents(store: JobStore) -> tuple:
    """Everything a reader of the store can see, the lease apart."""
    return (
        store.jobs(),
        store.transitions_all(),
        store.changes_since(0),
        store.page(limit=4),
        store.counts(),
        store.cancel_requests(),
        store.saved_progress(),
        store.copies(),
    )


@pytest.fixture
def source(tmp_path):
    path, clock = tmp_path / "source.db", SimClock(100.0)
    with JobStore(path, clock) as store:
        fill(store, clock)
    return path


def test_a_copy_holds_every_job_and_transition_and_new_jobs_follow_them(source, store_target):
    seen = []
    result = copy_store(source, store_target, batch=3, progress=lambda *p: seen.append(p))
    assert (result.jobs, result.transitions, result.resumed) == (7, 17, False)
    assert seen == [("jobs", 3, 7), ("jobs", 6, 7), ("jobs", 7, 7)] + [
        ("transitions", n, 17) for n in (3, 6, 9, 12, 15, 17)
    ]
    with JobStore(source) as original, JobStore(store_target, SimClock(500.0)) as copy:
        assert contents(copy) == contents(original)
        assert copy.get("ns/j0").waiting.predicted_start == 50.0
        assert copy.saved_progress() == {"ns/j3": 0.4}
        assert [c.placement.job_id for c in copy.copies()] == ["ns/j4"]
        assert copy.lease() is None  # the copy's first scheduler takes its own
        copy.submit([JobSpec(job_id="ns/new", model="ResNet-50")])
        position, changes = copy.changes_since(original.changes_since(0)[0])
        assert [c.job_id for c in changes] == ["ns/new"] and position > 17
        assert copy.jobs()[-1].job_id == "ns/new"


def test_an_interrupted_copy_is_refused_until_the_same_command_finishes_it(source, store_target):
    def interrupt(table: str, done: int, total: int) -> None:
        if table == "transitions":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_store(source, store_target, batch=3, progress=interrupt)
    with pytest.raises(StoreCopyUnfinished, match="did not finish") as refused:
        JobStore(store_target)
    assert f"cpn store copy {source} " in str(refused.value)
    with pytest.raises(StoreError, match="unfinished copy from"):
        copy_store(source.with_name("other.db"), store_target)
    result = copy_store(source, store_target, batch=3)
    assert (result.jobs, result.transitions, result.resumed) == (7, 17, True)
    with JobStore(source) as original, JobStore(store_target) as copy:
        assert contents(copy) == contents(original)


def test_a_source_that_changed_under_an_interrupted_copy_is_caught_and_the_copy_stays_marked(
    source, store_target
):
    def interrupt(table: str, done: int, total: int) -> None:
        if table == "transitions":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copy_store(source, store_target, batch=3, progress=interrupt)
    with JobStore(source) as store:
        store.transition("ns/j0", JobState.ASSIGNED, cluster="bj", node="n1")
    with pytest.raises(StoreError, match="changed during the copy"):
        copy_store(source, store_target, batch=3)
    with pytest.raises(StoreCopyUnfinished):
        JobStore(store_target)


def test_refuses_a_destination_with_jobs_and_a_source_a_scheduler_holds(source, tmp_path):
    with pytest.raises(StoreError, match="holds 7 jobs already"):
        copy_store(source, source)
    with JobStore(source) as store:
        store.acquire_lease("host:2:cpn run", 60.0)
    with pytest.raises(StoreLeased, match="host:2:cpn run"):
        copy_store(source, tmp_path / "copy.db")


def test_the_command_copies_and_reports_progress(source, tmp_path, capsys):
    assert main(["store", "copy", str(source), str(tmp_path / "copy.db"), "--batch", "5"]) == 0
    out, err = capsys.readouterr()
    assert out == f"copied 7 jobs and 17 transitions into {tmp_path / 'copy.db'}; the counts match\n"
    assert err.splitlines() == [
        "jobs: 5 of 7 copied",
        "jobs: 7 of 7 copied",
        "transitions: 5 of 17 copied",
        "transitions: 10 of 17 copied",
        "transitions: 15 of 17 copied",
        "transitions: 17 of 17 copied",
    ]
    assert main(["store", "copy", str(source), str(tmp_path / "copy.db")]) == 1
    assert "holds 7 jobs already" in capsys.readouterr().err
