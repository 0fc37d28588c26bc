"""Scheduling tasks on simulated clusters."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cpn.bootstrap import Service
from cpn.engine.replay import ReplayResult, arrivals_from_jobs, replay
from cpn.engine.scheduler import RoundResult
from cpn.jobs import JobSpec


@task(cache_policy=NO_CACHE)
def schedule_until_drained(sim: Service, jobs: list[JobSpec]) -> ReplayResult:
    """Feed the jobs to intake at their arrival times and run scheduling rounds until the queue drains."""
    logger = get_run_logger()

    def progress(r: RoundResult) -> None:
        if r.placed or r.rejected:
            logger.info(
                "t=%8.0fs placed %d, rejected %d, still queued %d",
                r.time,
                r.placed,
                r.rejected,
                r.pending_after,
            )

    return replay(
        sim.scheduler,
        sim.simulator,
        sim.clock,
        arrivals_from_jobs(jobs),
        on_round=progress,
        migrator=sim.migrator,
    )
