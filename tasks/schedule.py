"""The stages of one scheduling round, each a Prefect task with its own retries, timeout and timing.

collect (cluster events and finished migrations) -> cancel -> snapshot (inventory, load, estimates, transfer
times) -> decide (the policy: the optimiser) -> assign -> migrate -> submit -> record waiting reasons,
in the order cpn.engine.scheduler.run_stages gives (flows/schedule.py); the round's decision table is
published as an artifact and every completed job as an event. Each task only calls its Scheduler stage.

Stages that only read the clusters (collect, snapshot) retry with backoff; stages that change them
(migrate, submit) do not, so that a retry can never start a copy or submit a job twice: the store
records `assigned` before the cluster is called, and the next round's reconcile settles the rest.
"""

from __future__ import annotations

import time

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.events import emit_event

from cpn.adapters.gateway import JobEvent
from cpn.decisions import Decision, Placement, Snapshot
from cpn.engine.scheduler import Scheduler
from cpn.views.decision_table import decision_rows, only_clusters

COMPLETED_EVENT = "cpn.job.completed"
"""Prefect event emitted once per job a cluster reports succeeded; the retrain deployment counts them."""

_READ = {"retries": 3, "retry_delay_seconds": [1, 5, 15], "cache_policy": NO_CACHE}


@task(name="collect", timeout_seconds=120, **_READ)
def collect(scheduler: Scheduler) -> list[JobEvent]:
    """Apply the clusters' job events and finished migrations to the store; returns the events."""
    return scheduler.collect()


@task(name="track-completions", cache_policy=NO_CACHE, timeout_seconds=60)
def track_completions(events: list[JobEvent]) -> int:
    """One `cpn.job.completed` Prefect event per succeeded job (it is in the store, so in the next
    retraining's data); returns how many."""
    done = [e for e in events if e.kind == "succeeded"]
    for e in done:
        emit_event(
            event=COMPLETED_EVENT,
            resource={"prefect.resource.id": f"cpn.job.{e.job_id}", "prefect.resource.name": e.job_id},
            payload={"time": e.time, "gpu_mem_gb": e.gpu_mem_gb},
        )
    return len(done)


@task(name="cancel", timeout_seconds=120, cache_policy=NO_CACHE)
def cancel(scheduler: Scheduler) -> int:
    """Delete the jobs someone cancelled from their clusters and record them cancelled; returns how many."""
    return scheduler.cancel()


@task(name="snapshot-and-estimates", timeout_seconds=300, **_READ)
def snapshot(scheduler: Scheduler) -> Snapshot:
    """The frozen view the policy decides on: inventory, load, estimates, transfer times."""
    return scheduler.snapshot()


@task(name="optimise", timeout_seconds=600, cache_policy=NO_CACHE)
def decide(scheduler: Scheduler, view: Snapshot, clusters: tuple[str, ...] = ()) -> tuple[Decision, float]:
    """The policy's decision on the nodes of `clusters` (all when empty), and the seconds it took."""
    started = time.perf_counter()
    decision = scheduler.decide(only_clusters(view, clusters))
    return decision, time.perf_counter() - started


@task(name="assign", timeout_seconds=120, cache_policy=NO_CACHE)
def assign(scheduler: Scheduler, decision: Decision) -> tuple[list[Placement], list[Placement]]:
    """Record rejections and assignments; returns (placements to migrate first, to submit now)."""
    return scheduler.assign(decision)


@task(name="migrate", timeout_seconds=300, cache_policy=NO_CACHE)
def migrate(scheduler: Scheduler, placements: list[Placement]) -> int:
    """Start copying images and data to the chosen clusters; returns how many copies started."""
    return scheduler.migrate(placements)


@task(name="submit", timeout_seconds=300, cache_policy=NO_CACHE)
def submit(scheduler: Scheduler, placements: list[Placement]) -> tuple[int, int]:
    """Submit the placed jobs to their clusters; returns (submitted, refused)."""
    return scheduler.submit(placements)


@task(name="record-waiting", timeout_seconds=60, cache_policy=NO_CACHE)
def record_waiting(scheduler: Scheduler, decision: Decision) -> int:
    """Store why each queued job waits; returns how many reasons changed."""
    return scheduler.record_waiting(decision)


@task(name="publish-decisions", timeout_seconds=60, cache_policy=NO_CACHE)
def publish_decisions(view: Snapshot, decision: Decision, solve_s: float, dry_run: bool) -> str:
    """The round's decision table as a Prefect artifact (key `schedule-round`); returns its id."""
    rows = decision_rows(view, decision)
    what = "dry run, nothing submitted" if dry_run else "carried out"
    description = (
        f"Round at t={view.now:.0f} s ({what}): {len(decision.placements)} placed, "
        f"{len(decision.rejections)} rejected, {len(decision.waiting)} waiting; "
        f"policy solved in {solve_s * 1000:.1f} ms."
    )
    return str(create_table_artifact(key="schedule-round", table=rows, description=description))
