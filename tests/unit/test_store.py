"""The durable job store: state machine, idempotent submission, history times, persistence.

A contract suite: every test taking `store` or `store_target` runs on a SQLite file and on a real
PostgreSQL database (tests/conftest.py); SQLite's own behaviour (WAL, its files, stores written before
the migrations) is tested on SQLite only.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from contextlib import closing
from dataclasses import replace

import pytest

from cpn import migrations
from cpn.clock import SimClock
from cpn.decisions import Waiting
from cpn.jobs import IllegalTransition, JobSpec, JobState
from cpn.store import (
    JobConflict,
    JobStore,
    StoreDatabase,
    StoreError,
    StoreUnavailable,
    SubmitOutcome,
    Transition,
    UnknownJob,
)


def spec(name: str = "a", **changes: object) -> JobSpec:
    base = JobSpec(
        job_id=f"default/{name}", model="ResNet-50", num_gpus=2, epochs=3, manifest=f"name: {name}\n"
    )
    return replace(base, **changes)


@pytest.fixture
def clock() -> SimClock:
    return SimClock(100.0)


@pytest.fixture
def store(store_target, clock):
    with JobStore(store_target, clock) as s:
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


def test_one_job_alone_is_created_once_and_its_conflict_stores_nothing(store):
    """A submission of one job writes it without reading first (ON CONFLICT DO NOTHING); a stored id then
    takes the comparing path: identical content is `already_exists`, different content a JobConflict."""
    assert store.submit([spec("a")]) == [SubmitOutcome("default/a", "created")]
    assert store.submit([spec("a")]) == [SubmitOutcome("default/a", "already_exists")]
    with pytest.raises(JobConflict) as caught:
        store.submit([spec("a", epochs=99)])
    assert caught.value.differing == ("epochs",)
    assert store.submit([spec("b")]) == [SubmitOutcome("default/b", "created")]
    assert [r.job_id for r in store.jobs()] == ["default/a", "default/b"]
    assert [(t.job_id, t.to_state) for t in store.transitions_all()] == [
        ("default/a", JobState.QUEUED),
        ("default/b", JobState.QUEUED),
    ]
    assert store.get("default/a").spec.epochs == spec("a").epochs


def test_persists_across_reopen(store_target, clock):
    path = store_target
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


def test_two_stores_on_one_database_see_each_others_writes(store_target, clock):
    with JobStore(store_target, clock) as api, JobStore(store_target, clock) as scheduler:
        api.submit([spec("a")])
        scheduler.transition("default/a", JobState.ASSIGNED, cluster="bj", node="n1")
        assert api.get("default/a").state is JobState.ASSIGNED


def test_a_sqlite_store_is_in_wal_mode(tmp_path):
    with JobStore(tmp_path / "jobs.db"), closing(sqlite3.connect(tmp_path / "jobs.db")) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_processes_submitting_the_same_jobs_at_once_store_each_once(store_target, clock):
    """Writers race on the same new ids: each is created by exactly one, reported existing to the others."""
    specs = [spec(f"j{i}") for i in range(30)]
    stores = [JobStore(store_target, clock) for _ in range(3)]
    outcomes: list[list[SubmitOutcome]] = []

    def submit_one_by_one(store: JobStore) -> None:
        outcomes.append([store.submit([s])[0] for s in specs])

    threads = [threading.Thread(target=submit_one_by_one, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(outcomes) == len(stores), "a writer failed"
    created = [o.job_id for run in outcomes for o in run if o.status == "created"]
    assert sorted(created) == sorted(s.job_id for s in specs)
    assert len(stores[0].transitions_all()) == 30
    for s in stores:
        s.close()


def test_a_follower_sees_every_transition_once_while_writers_race(store_target, clock):
    """Positions grow in commit order: a reader following `changes_since` never skips a late commit."""
    with JobStore(store_target, clock) as setup:
        setup.submit([spec(f"j{i}") for i in range(40)])
    writers = [JobStore(store_target, clock) for _ in range(4)]

    def walk(store: JobStore, names: list[str]) -> None:
        for name in names:
            store.transition(f"default/{name}", JobState.ASSIGNED, cluster="bj", node=name)

    threads = [
        threading.Thread(target=walk, args=(w, [f"j{i}" for i in range(k, 40, 4)]))
        for k, w in enumerate(writers)
    ]
    seen: list[str] = []
    with JobStore(store_target, clock) as follower:
        after, _ = follower.changes_since(0)
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            after, changes = follower.changes_since(after)
            seen += [c.job_id for c in changes if c.state is JobState.ASSIGNED]
        after, changes = follower.changes_since(after)
        seen += [c.job_id for c in changes if c.state is JobState.ASSIGNED]
    for w in writers:
        w.close()
    assert sorted(seen) == sorted(f"default/j{i}" for i in range(40))


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


def test_refuses_a_store_a_newer_cpn_migrated(store_target):
    JobStore(store_target).close()
    with StoreDatabase(store_target) as database, database.write() as db:
        db.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    with pytest.raises(StoreError, match="schema 9999 is newer than this cpn"):
        JobStore(store_target)


def test_database_urls_pick_the_database_and_hide_the_password(tmp_path):
    with JobStore(f"sqlite:///{tmp_path / 'jobs.db'}") as by_url:
        by_url.submit([spec()])
    with JobStore(tmp_path / "jobs.db") as by_path:
        assert by_path.get("default/a").state is JobState.QUEUED
    with pytest.raises(StoreError, match="a mysql URL cannot hold a job store") as refused:
        JobStore("mysql://root@localhost/cpn")
    assert "postgresql://" in str(refused.value)
    with pytest.raises(StoreError, match="cannot open the job store") as unreachable:
        JobStore("postgresql://cpn:s3cret@127.0.0.1:1/jobs")  # nothing listens on port 1
    assert "s3cret" not in str(unreachable.value) and "postgresql://cpn:***@127.0.0.1:1/jobs" in str(
        unreachable.value
    )
    with pytest.raises(StoreError, match="cannot read the database URL") as unreadable:
        JobStore("postgresql://cpn:s3cret@db:port/jobs")
    assert "s3cret" not in str(unreadable.value)


def test_refuses_files_it_cannot_use(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="junk.db"):
        JobStore(junk)
    newer = tmp_path / "newer.db"
    with closing(sqlite3.connect(newer)) as raw, raw:
        raw.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        raw.execute("INSERT INTO alembic_version VALUES ('9999')")  # a revision this cpn lacks
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
    with closing(sqlite3.connect(tmp_path / "donor.db")) as raw:
        spec_text = raw.execute("SELECT spec FROM jobs").fetchone()[0]
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
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [(migrations.HEAD,)]


SCHEMA_4 = (
    "CREATE TABLE jobs (seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL UNIQUE, spec TEXT NOT NULL, "
    "state TEXT NOT NULL, cluster TEXT, node TEXT, location TEXT, submitted_at REAL NOT NULL, "
    "updated_at REAL NOT NULL, placement TEXT, wait_code TEXT, wait_detail TEXT, predicted_start REAL, "
    "first_predicted_start REAL, image TEXT, needs_more_than_gb REAL)",
    "CREATE INDEX jobs_by_state ON jobs (state, seq)",
    "CREATE TABLE transitions (seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL REFERENCES jobs (job_id), "
    "from_state TEXT, to_state TEXT NOT NULL, time REAL NOT NULL, reason TEXT NOT NULL, cluster TEXT, "
    "node TEXT, gpu_mem_gb REAL, log_tail TEXT NOT NULL DEFAULT '')",
    "CREATE INDEX transitions_by_job ON transitions (job_id, seq)",
)
"""The last hand-written schema (version 4), as cpn wrote it before its migrations."""

LEASE_TABLE = (
    "CREATE TABLE scheduler_lease (id INTEGER PRIMARY KEY CHECK (id = 1), holder TEXT NOT NULL, "
    "term INTEGER NOT NULL, expires_at REAL NOT NULL)"
)
"""The lease table that schema 4 gained just before the migrations."""


@pytest.mark.parametrize("with_lease", [False, True])
def test_store_of_schema_4_comes_under_the_migrations_keeping_jobs_history_and_lease(
    tmp_path, clock, with_lease
):
    path = tmp_path / "v4.db"
    spec_text = '{"job_id":"ns/old","model":"ResNet-18","num_gpus":2}'
    with closing(sqlite3.connect(path)) as raw, raw:
        for statement in SCHEMA_4 + ((LEASE_TABLE,) if with_lease else ()):
            raw.execute(statement)
        raw.execute(
            "INSERT INTO jobs (job_id, spec, state, cluster, node, submitted_at, updated_at, placement) "
            "VALUES ('ns/old', ?, 'assigned', 'bj', 'n1', 5, 7, '[[\"n1\", 2]]')",
            (spec_text,),
        )
        raw.executemany(
            "INSERT INTO transitions (job_id, from_state, to_state, time, reason) "
            "VALUES ('ns/old', ?, ?, ?, ?)",
            [(None, "queued", 5, "accepted"), ("queued", "assigned", 7, "")],
        )
        if with_lease:
            raw.execute("INSERT INTO scheduler_lease VALUES (1, 'host:1:cpn run', 3, 0)")
        raw.execute("PRAGMA user_version = 4")
    with JobStore(path, clock) as store:
        old = store.get("ns/old")
        assert (old.state, old.placement, old.submitted_at) == (JobState.ASSIGNED, (("n1", 2),), 5.0)
        assert [(t.to_state, t.time) for t in store.history("ns/old")] == [
            (JobState.QUEUED, 5.0),
            (JobState.ASSIGNED, 7.0),
        ]
        assert store.acquire_lease("host:2:cpn run", 30.0) == (4 if with_lease else 1)
        store.submit([spec("new")])
        assert [r.job_id for r in store.jobs()] == ["ns/old", "default/new"]
    JobStore(tmp_path / "new.db").close()
    with closing(sqlite3.connect(path)) as raw, closing(sqlite3.connect(tmp_path / "new.db")) as new:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [(migrations.HEAD,)]
        assert _columns(raw) == _columns(new)


def _columns(db: sqlite3.Connection) -> dict[str, list[str]]:
    """Every table's column names, in order."""
    tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t: [c[1] for c in db.execute(f"PRAGMA table_info({t})")] for t in sorted(tables)}


def test_head_is_the_newest_migration():
    assert migrations.HEAD == migrations.scripts().get_current_head()


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


def test_the_forward_look_s_prediction_is_kept_while_queued_and_cleared_when_the_job_leaves(store):
    store.submit([JobSpec(job_id="ns/a", model="m"), JobSpec(job_id="ns/svc", model="m", kind="inference")])
    moved = "ns/b arrived with higher priority"
    store.set_waiting(
        [
            Waiting("ns/a", "capacity", "all 4 busy", 100.0, 150.0, 80.0, 125.0, moved),
            Waiting("ns/svc", "capacity", "", 60.0, math.inf, 55.0, 70.0),
        ]
    )
    a = store.get("ns/a").waiting
    assert (a.predicted_start, a.predicted_end, a.start_low, a.start_high, a.moved) == (
        100.0,
        150.0,
        80.0,
        125.0,
        moved,
    )
    svc = store.get("ns/svc").waiting
    assert (svc.predicted_end, svc.moved) == (math.inf, "")
    store.set_waiting([Waiting("ns/a", "capacity", "all 4 busy", 100.0, 150.0, 90.0, 110.0)])
    a = store.get("ns/a").waiting  # a look that did not move it keeps why it last moved
    assert (a.start_low, a.start_high, a.moved) == (90.0, 110.0, moved)
    store.transition("ns/a", JobState.ASSIGNED, cluster="c", node="n1", placement=[("n1", 1)])
    store.transition("ns/a", JobState.QUEUED, reason="submit refused")
    store.set_waiting([Waiting("ns/a", "memory", "needs 20 GB")])  # a round with no forward look
    a = store.get("ns/a").waiting
    assert (a.predicted_start, a.predicted_end, a.start_low, a.start_high, a.moved) == (
        None,
        None,
        None,
        None,
        "",
    )


@pytest.mark.postgres
@pytest.mark.integration
def test_a_lost_server_connection_is_unavailable_and_the_next_call_reconnects(postgres_server):
    url = postgres_server.create_database()
    with JobStore(url) as store, StoreDatabase(url) as admin:
        store.submit([spec()])
        with admin.write() as db:
            db.exec_driver_sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(StoreUnavailable, match="unreachable") as lost:
            store.get("default/a")
        assert lost.value.kind == "unreachable"
        assert store.get("default/a").state is JobState.QUEUED


def test_listeners_hear_of_new_jobs_only(store):
    heard = []
    store.add_listener(lambda: heard.append(1))
    store.submit([JobSpec(job_id="ns/a", model="m")])
    store.submit([JobSpec(job_id="ns/a", model="m")])  # already there: nothing new
    assert heard == [1]
