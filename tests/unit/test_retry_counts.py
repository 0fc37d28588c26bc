"""A job's retries (OOM kills, failed copies) are counted from the cause stored with each transition,
never from the wording of its reason."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from cpn import migrations
from cpn.adapters.gateway import OOM_REASON, JobEvent
from cpn.adapters.migrator import MigrationDone
from cpn.clock import SimClock
from cpn.engine.scheduler import MAX_MIGRATION_FAILURES, Scheduler
from cpn.jobs import Cause, JobSpec, JobState
from cpn.policies import make_policy
from cpn.store import JobStore
from tests.unit.test_explain_throttle import Busy

RUN = (JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING)


def one_job(oom_retries: int = 1) -> tuple[JobStore, Scheduler]:
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    store.submit([JobSpec(job_id="ns/a", model="m")])
    return store, Scheduler(store, Busy(), make_policy("fifo"), clock, oom_retries=oom_retries)


def run_it(store: JobStore) -> None:
    for state in RUN:
        store.transition("ns/a", state, cluster="c", node="n0")


def test_an_oom_kill_recorded_in_other_words_still_counts_and_the_next_kill_fails_the_job():
    store, scheduler = one_job(oom_retries=1)
    run_it(store)
    store.transition("ns/a", JobState.QUEUED, reason="re-planned: out of card memory", cause=Cause.OOM_KILLED)
    run_it(store)
    scheduler.apply_events([JobEvent("ns/a", "failed", 10.0, reason=OOM_REASON)])
    assert store.get("ns/a").state == JobState.FAILED
    assert [t.cause for t in store.history("ns/a")].count(Cause.OOM_KILLED) == 2


def test_a_reason_that_merely_starts_like_an_oom_kill_is_not_one():
    store, scheduler = one_job(oom_retries=1)
    store.transition("ns/a", JobState.ASSIGNED, reason=f"{OOM_REASON} elsewhere once; placed again")
    store.transition("ns/a", JobState.SUBMITTED)
    store.transition("ns/a", JobState.RUNNING, cluster="c", node="n0")
    scheduler.apply_events([JobEvent("ns/a", "failed", 10.0, reason=OOM_REASON)])
    history = store.history("ns/a")
    assert store.get("ns/a").state == JobState.QUEUED, "its first kill: queued again"
    assert history[-1].cause == Cause.OOM_KILLED and history[1].cause == Cause.NONE


def test_failed_copies_are_counted_by_cause_until_the_last_one_fails_the_job():
    store, scheduler = one_job()
    for i in range(MAX_MIGRATION_FAILURES):
        store.transition("ns/a", JobState.ASSIGNED, cluster="far", node="n0")
        store.transition("ns/a", JobState.MIGRATING)
        scheduler.apply_migrations([MigrationDone("ns/a", "far", float(i), ok=False, reason="registry down")])
    causes = [t.cause for t in store.history("ns/a")]
    assert causes.count(Cause.MIGRATION_FAILED) == MAX_MIGRATION_FAILURES
    assert store.get("ns/a").state == JobState.FAILED


def test_a_store_of_schema_4_gets_the_causes_its_reasons_said(tmp_path):
    path = tmp_path / "jobs.db"
    with JobStore(path) as store:
        store.submit([JobSpec(job_id="ns/a", model="m")])
        for state in RUN:
            store.transition("ns/a", state, cluster="c", node="n0")
        store.transition("ns/a", JobState.QUEUED, reason=f"{OOM_REASON} on c/n0: queued again")
        store.transition("ns/a", JobState.ASSIGNED, cluster="far", node="n0")
        store.transition("ns/a", JobState.MIGRATING)
        store.transition("ns/a", JobState.QUEUED, reason="migration failed to far: registry down")
    with closing(sqlite3.connect(path)) as raw:  # as schema 4 wrote it: no cause column
        columns = "seq, job_id, from_state, to_state, time, reason, cluster, node, gpu_mem_gb, log_tail"
        raw.execute(f"CREATE TABLE v4 AS SELECT {columns} FROM transitions")
        raw.execute("DROP TABLE transitions")
        raw.execute("ALTER TABLE v4 RENAME TO transitions")
        raw.execute("DROP TABLE alembic_version")  # as cpn wrote it before its migrations
        raw.commit()
    with JobStore(path) as store:
        causes = [t.cause for t in store.history("ns/a")]
    assert causes == [Cause.NONE] * 4 + [Cause.OOM_KILLED] + [Cause.NONE] * 2 + [Cause.MIGRATION_FAILED]
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [(migrations.HEAD,)]
