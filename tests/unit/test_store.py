"""The durable job store: state machine, idempotent submission, history times, persistence."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from dataclasses import replace

import pytest

from cpn.clock import SimClock
from cpn.decisions import Waiting
from cpn.jobs import IllegalTransition, JobSpec, JobState
from cpn.store import SCHEMA_VERSION, JobConflict, JobStore, StoreError, SubmitOutcome, Transition, UnknownJob


def spec(name: str = "a", **changes: object) -> JobSpec:
    base = JobSpec(
        job_id=f"default/{name}", model="ResNet-50", num_gpus=2, epochs=3, manifest=f"name: {name}\n"
    )
    return replace(base, **changes)


@pytest.fixture
def clock() -> SimClock:
    return SimClock(100.0)


@pytest.fixture
def store(tmp_path, clock):
    with JobStore(tmp_path / "jobs.db", clock) as s:
        yield s


def test_submit_queues_and_records_entry_at_clock_time(store):
    assert store.submit([spec("a"), spec("b")]) == [
        SubmitOutcome("default/a", "created"),
        SubmitOutcome("default/b", "created"),
    ]
    record = store.get("default/a")
    assert record.spec == spec("a") and record.spec.manifest == "name: a\n"
    assert (record.state, record.cluster, record.node) == (JobState.QUEUED, None, None)
    assert (record.submitted_at, record.updated_at) == (100.0, 100.0)
    assert store.history("default/a") == [Transition("default/a", None, JobState.QUEUED, 100.0, "accepted")]


def test_full_life_records_every_move_with_its_time_and_placement(store, clock):
    store.submit([spec()])
    moves = [
        (110.0, JobState.ASSIGNED, {"cluster": "bj", "node": "n1"}),
        (120.0, JobState.MIGRATING, {}),
        (150.0, JobState.SUBMITTED, {}),
        (155.0, JobState.RUNNING, {}),
        (300.0, JobState.SUCCEEDED, {"reason": "Completed"}),
    ]
    for t, state, kwargs in moves:
        clock.advance_to(t)
        store.transition("default/a", state, **kwargs)
    record = store.get("default/a")
    assert (record.state, record.cluster, record.node) == (JobState.SUCCEEDED, "bj", "n1")
    assert (record.submitted_at, record.updated_at) == (100.0, 300.0)
    history = store.history("default/a")
    assert [(t.from_state, t.to_state, t.time) for t in history] == [
        (None, JobState.QUEUED, 100.0),
        (JobState.QUEUED, JobState.ASSIGNED, 110.0),
        (JobState.ASSIGNED, JobState.MIGRATING, 120.0),
        (JobState.MIGRATING, JobState.SUBMITTED, 150.0),
        (JobState.SUBMITTED, JobState.RUNNING, 155.0),
        (JobState.RUNNING, JobState.SUCCEEDED, 300.0),
    ]
    assert {(t.cluster, t.node) for t in history[1:]} == {("bj", "n1")}
    assert history[-1].reason == "Completed"


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ((), JobState.RUNNING),
        ((), JobState.SUCCEEDED),
        ((JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING), JobState.ASSIGNED),
        ((JobState.ASSIGNED, JobState.FAILED), JobState.QUEUED),
        ((JobState.SCHEDULE_FAILED,), JobState.ASSIGNED),
    ],
)
def test_illegal_transition_is_refused_and_changes_nothing(store, path, illegal):
    store.submit([spec()])
    for state in path:
        store.transition("default/a", state, cluster="bj", node="n1")
    before = (store.get("default/a"), store.history("default/a"))
    with pytest.raises(IllegalTransition, match="default/a"):
        store.transition("default/a", illegal)
    assert (store.get("default/a"), store.history("default/a")) == before


def test_back_to_queue_clears_the_placement(store):
    store.submit([spec()])
    store.transition("default/a", JobState.ASSIGNED, cluster="bj", node="n1")
    store.transition("default/a", JobState.QUEUED, reason="node went away")
    record = store.get("default/a")
    assert (record.state, record.cluster, record.node) == (JobState.QUEUED, None, None)
    assert store.history("default/a")[-1] == Transition(
        "default/a", JobState.ASSIGNED, JobState.QUEUED, 100.0, "node went away"
    )


def test_unknown_job(store):
    for call in (lambda: store.get("default/x"), lambda: store.history("default/x")):
        with pytest.raises(UnknownJob, match="default/x"):
            call()
    with pytest.raises(KeyError):
        store.transition("default/x", JobState.ASSIGNED)


def test_resubmitting_identical_jobs_is_a_no_op(store, clock):
    store.submit([spec("a")])
    clock.advance_to(200.0)
    outcomes = store.submit([spec("a"), spec("b")])
    assert [o.status for o in outcomes] == ["already_exists", "created"]
    assert store.get("default/a").submitted_at == 100.0
    assert len(store.history("default/a")) == 1
    assert store.get("default/b").submitted_at == 200.0


def test_whole_numbers_in_float_fields_compare_equal(store):
    store.submit([spec(data_size_gb=20.0, cpu=2.0)])
    assert store.submit([spec(data_size_gb=20, cpu=2)])[0].status == "already_exists"


def test_same_id_twice_in_one_call(store):
    assert [o.status for o in store.submit([spec(), spec()])] == ["created", "already_exists"]
    with pytest.raises(JobConflict):
        store.submit([spec("b"), spec("b", epochs=9)])
    assert [r.job_id for r in store.jobs()] == ["default/a"]


@pytest.mark.parametrize(("field", "value"), [("epochs", 99), ("manifest", "name: changed\n")])
def test_conflicting_resubmission_stores_nothing_from_the_call(store, field, value):
    store.submit([spec("a")])
    with pytest.raises(JobConflict) as caught:
        store.submit([spec("new"), spec("a", **{field: value})])
    assert caught.value.job_id == "default/a" and caught.value.differing == (field,)
    assert "default/a" in str(caught.value) and field in str(caught.value)
    assert [r.job_id for r in store.jobs()] == ["default/a"]
    assert store.get("default/a").spec.manifest == "name: a\n"
    assert len(store.transitions_all()) == 1


def test_persists_across_reopen(tmp_path, clock):
    path = tmp_path / "jobs.db"
    with JobStore(path, clock) as first:
        first.submit([spec("a", gpu_share=0.5, source_cluster="bj")])
        first.transition("default/a", JobState.ASSIGNED, cluster="bj", node="n1")
    with JobStore(path, SimClock(500.0)) as again:
        record = again.get("default/a")
        assert record.spec == spec("a", gpu_share=0.5, source_cluster="bj")
        assert record.spec.manifest == "name: a\n"
        assert (record.state, record.cluster, record.node) == (JobState.ASSIGNED, "bj", "n1")
        again.transition("default/a", JobState.SUBMITTED)
        assert [t.time for t in again.history("default/a")] == [100.0, 100.0, 500.0]
        assert again.submit([spec("a", gpu_share=0.5, source_cluster="bj")])[0].status == "already_exists"


def test_jobs_in_acceptance_order_filtered_by_state_and_counted(store):
    names = ["c", "a", "b", "d"]
    store.submit([spec(n) for n in names])
    store.transition("default/a", JobState.ASSIGNED, cluster="bj", node="n1")
    store.transition("default/d", JobState.SCHEDULE_FAILED, reason="no node has 2 GPUs")
    assert [r.job_id for r in store.jobs()] == [f"default/{n}" for n in names]
    assert [r.job_id for r in store.jobs([JobState.QUEUED])] == ["default/c", "default/b"]
    assert [r.job_id for r in store.jobs(JobState.QUEUED)] == ["default/c", "default/b"]
    both = store.jobs([JobState.ASSIGNED, JobState.SCHEDULE_FAILED])
    assert [r.job_id for r in both] == ["default/a", "default/d"]
    counts = store.counts()
    assert set(counts) == set(JobState)
    assert counts[JobState.QUEUED] == 2 and counts[JobState.ASSIGNED] == 1 and counts[JobState.RUNNING] == 0


def test_transitions_all_gives_reports_jct_and_wait(store, clock):
    store.submit([spec("a"), spec("b")])
    for t, job, state in [
        (110.0, "a", JobState.ASSIGNED),
        (120.0, "a", JobState.SUBMITTED),
        (130.0, "b", JobState.ASSIGNED),
        (140.0, "b", JobState.SUBMITTED),
        (150.0, "b", JobState.RUNNING),
        (400.0, "a", JobState.SUCCEEDED),
        (500.0, "b", JobState.SUCCEEDED),
    ]:
        clock.advance_to(t)
        store.transition(f"default/{job}", state, cluster="bj", node="n1")
    transitions = store.transitions_all()
    assert [t.time for t in transitions] == sorted(t.time for t in transitions)
    queued, started, done = {}, {}, {}
    for t in transitions:
        if t.to_state is JobState.QUEUED:
            queued.setdefault(t.job_id, t.time)
        elif t.to_state in (JobState.SUBMITTED, JobState.RUNNING):
            started.setdefault(t.job_id, t.time)
        elif t.to_state is JobState.SUCCEEDED:
            done[t.job_id] = t.time
    assert {j: done[j] - queued[j] for j in done} == {"default/a": 300.0, "default/b": 400.0}
    assert {j: started[j] - queued[j] for j in started} == {"default/a": 20.0, "default/b": 40.0}


def test_two_stores_on_one_file_see_each_others_writes(tmp_path, clock):
    path = tmp_path / "jobs.db"
    with JobStore(path, clock) as api, JobStore(path, clock) as scheduler:
        api.submit([spec("a")])
        scheduler.transition("default/a", JobState.ASSIGNED, cluster="bj", node="n1")
        assert api.get("default/a").state is JobState.ASSIGNED
        with closing(sqlite3.connect(path)) as raw:
            assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_concurrent_threads_lose_no_writes(store):
    store.submit([spec(f"j{i}") for i in range(40)])

    def walk(names: list[str]) -> None:
        for name in names:
            store.transition(f"default/{name}", JobState.ASSIGNED, cluster="bj", node=name)
            store.transition(f"default/{name}", JobState.SUBMITTED)

    threads = [threading.Thread(target=walk, args=([f"j{i}" for i in range(k, 40, 4)],)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.counts()[JobState.SUBMITTED] == 40
    assert len(store.transitions_all()) == 40 * 3


@pytest.mark.integration  # a scale test: 5 s, kept out of the one-minute unit run
def test_tens_of_thousands_of_jobs(store):
    specs = [spec(f"j{i}", manifest="x" * 500) for i in range(20_000)]
    assert {o.status for o in store.submit(specs)} == {"created"}
    assert {o.status for o in store.submit(specs)} == {"already_exists"}
    pending = store.jobs(JobState.QUEUED)
    assert len(pending) == 20_000 and pending[-1].job_id == "default/j19999"
    assert store.counts()[JobState.QUEUED] == 20_000


def test_refuses_files_it_cannot_use(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="junk.db"):
        JobStore(junk)
    newer = tmp_path / "newer.db"
    with closing(sqlite3.connect(newer)) as raw:
        raw.execute("PRAGMA user_version = 99")
    with pytest.raises(StoreError, match="newer than this cpn"):
        JobStore(newer)


def test_in_memory_store():
    with JobStore(":memory:", SimClock()) as store:
        store.submit([spec()])
        assert store.get("default/a").submitted_at == 0.0


SCHEMA_1 = (
    "CREATE TABLE jobs (seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL, "
    "state TEXT NOT NULL, cluster TEXT, node TEXT, location TEXT, submitted_at REAL NOT NULL, "
    "updated_at REAL NOT NULL)",
    "CREATE TABLE transitions (seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL REFERENCES jobs (job_id), "
    "from_state TEXT, to_state TEXT NOT NULL, time REAL NOT NULL, reason TEXT NOT NULL, cluster TEXT, "
    "node TEXT)",
)


def test_store_of_schema_1_is_upgraded_in_place_keeping_its_jobs(tmp_path, clock):
    """A store written before measured memory was recorded opens, keeps its history, and records memory."""
    path = tmp_path / "v1.db"
    with JobStore(tmp_path / "donor.db", clock=clock) as donor:
        donor.submit([JobSpec(job_id="old", model="ResNet-18", batch_size=32, num_gpus=1, total_steps=10)])
        spec_text = donor._read("SELECT spec FROM jobs")[0][0]
    with closing(sqlite3.connect(path)) as raw, raw:
        for statement in SCHEMA_1:
            raw.execute(statement)
        raw.execute(
            "INSERT INTO jobs (job_id, spec, state, submitted_at, updated_at) "
            "VALUES ('old', ?, 'queued', 0, 0)",
            (spec_text,),
        )
        raw.execute(
            "INSERT INTO transitions (job_id, to_state, time, reason) VALUES ('old', 'queued', 0, 'accepted')"
        )
        raw.execute("PRAGMA user_version = 1")
    with JobStore(path, clock=clock) as store:
        assert [t.reason for t in store.history("old")] == ["accepted"]
        assert store.history("old")[0].gpu_mem_gb is None
        for state in (JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING):
            store.transition("old", state, cluster="a", node="a-0")
        store.transition("old", JobState.SUCCEEDED, gpu_mem_gb=3.5)
    with JobStore(path, clock=clock) as store:
        assert store.history("old")[-1].gpu_mem_gb == 3.5
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_waiting_reason_and_first_predicted_start_are_kept_until_the_job_leaves_the_queue(store, clock):
    store.submit([JobSpec(job_id="ns/a", model="m"), JobSpec(job_id="ns/b", model="m")])
    store.set_waiting([Waiting("ns/a", "memory", "needs 20 GB", predicted_start=50.0)])
    store.set_waiting([Waiting("ns/a", "gang", "needs 8 cards together", predicted_start=70.0)])
    a = store.get("ns/a")
    assert (a.waiting.code, a.waiting.detail, a.waiting.predicted_start) == (
        "gang",
        "needs 8 cards together",
        70.0,
    )
    assert a.first_predicted_start == 50.0
    assert store.get("ns/b").waiting is None
    store.transition("ns/a", JobState.ASSIGNED, cluster="c", node="n1", placement=[("n1", 2), ("n2", 2)])
    a = store.get("ns/a")
    assert a.waiting is None and a.first_predicted_start == 50.0
    assert a.placement == (("n1", 2), ("n2", 2)) and a.gpus == 4
    store.set_waiting([Waiting("ns/a", "memory")])  # no longer queued: left alone
    assert store.get("ns/a").waiting is None
    store.transition("ns/a", JobState.QUEUED, reason="submit refused")
    assert store.get("ns/a").placement == ()


def test_listeners_hear_of_new_jobs_only(store):
    heard = []
    store.add_listener(lambda: heard.append(1))
    store.submit([JobSpec(job_id="ns/a", model="m")])
    store.submit([JobSpec(job_id="ns/a", model="m")])  # already there: nothing new
    assert heard == [1]
