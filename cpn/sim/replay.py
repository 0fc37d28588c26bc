"""Replay a stream of arriving jobs on simulated clusters with the production scheduler.

Only the clock (simulated), the job source (arrivals) and the executor (the
simulated gateway) differ from the live loop; the Scheduler and the policy are
the very same objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from cpn.clock import SimClock
from cpn.engine.scheduler import Scheduler
from cpn.jobs import JobSpec, JobState
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.migrator import SimulatedMigrator

STUCK_REASON = "stuck: no placement possible and nothing left running or arriving"

R = TypeVar("R")


@dataclass(frozen=True)
class Arrival:
    """Jobs that reach intake at `time` (seconds of simulated time)."""

    time: float
    jobs: tuple[JobSpec, ...]


@dataclass(frozen=True)
class ReplayResult:
    """How a replay ended."""

    rounds: int
    end_time: float
    stuck: tuple[str, ...]
    """Jobs left queued when nothing could ever run them (moved to schedule-failed)."""


def arrivals_from_jobs(jobs: Sequence[JobSpec]) -> list[Arrival]:
    """Group jobs by their `arrival_s`, in time order."""
    by_time: dict[float, list[JobSpec]] = {}
    for job in sorted(jobs, key=lambda j: j.arrival_s):
        by_time.setdefault(job.arrival_s, []).append(job)
    return [Arrival(t, tuple(js)) for t, js in by_time.items()]


def replay(
    scheduler: Scheduler,
    gateway: SimulatedGateway,
    clock: SimClock,
    arrivals: Sequence[Arrival],
    on_round: Callable[[R], None] | None = None,
    migrator: SimulatedMigrator | None = None,
    run_round: Callable[[], R] | None = None,
) -> ReplayResult:
    """Run rounds at every arrival, cluster event and finished migration until nothing is left to happen.

    A queue that can make no progress (jobs waiting, nothing running, nothing
    arriving) ends the run: those jobs go to schedule-failed with STUCK_REASON.

    `run_round` runs one round on `scheduler` (default: `scheduler.round`, every stage in one call); an
    orchestrator passes its own to run each stage as a step of its own (the demo flow runs
    flows.schedule.run_round). `on_round` is handed what each round returned.
    """
    store = scheduler.store
    pending_arrivals = sorted(arrivals, key=lambda a: a.time)
    next_arrival = 0
    rounds = 0
    while True:
        while next_arrival < len(pending_arrivals) and pending_arrivals[next_arrival].time <= clock.now():
            store.submit(pending_arrivals[next_arrival].jobs)
            next_arrival += 1
        result = run_round() if run_round is not None else scheduler.round()
        rounds += 1
        if on_round is not None:
            on_round(result)
        sources = (gateway, migrator) if migrator is not None else (gateway,)
        times = [t for t in (s.next_event_time() for s in sources) if t is not None]
        if next_arrival < len(pending_arrivals):
            times.append(pending_arrivals[next_arrival].time)
        if not times:
            break
        until = max(min(times), clock.now())
        for source in sources:
            source.advance(until)
    scheduler.apply_events(gateway.poll_events())
    stuck = tuple(r.spec.job_id for r in store.jobs([JobState.QUEUED]))
    for job_id in stuck:
        store.transition(job_id, JobState.SCHEDULE_FAILED, reason=STUCK_REASON)
    return ReplayResult(rounds=rounds, end_time=clock.now(), stuck=stuck)
