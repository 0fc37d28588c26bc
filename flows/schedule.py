"""`schedule-round`: one scheduling round, each stage a task (see tasks/schedule.py).

The deployment runs it on an interval and from the Prefect UI with parameters: the policy, a dry run
(decide and publish the table, change nothing) and a subset of clusters to place on.
"""

from __future__ import annotations

from collections.abc import Sequence

from prefect import flow, get_run_logger
from prefect.utilities.annotations import quote

from config.settings import DEMO_DIR
from cpn.engine.scheduler import Scheduler
from tasks.config import load_settings
from tasks.schedule import (
    assign,
    collect,
    decide,
    migrate,
    publish_decisions,
    record_waiting,
    snapshot,
    submit,
    track_completions,
)
from tasks.service import open_service


def run_round(scheduler: Scheduler, dry_run: bool = False, clusters: Sequence[str] = ()) -> dict:
    """Run every stage of one round as its own task; returns what the round did.

    The snapshot, the decision and the events go to the tasks `quote`d: Prefect would otherwise walk
    every job, node and estimate in them looking for futures, which cost more than the round itself
    (2 minutes instead of seconds over the demo's 218 rounds).
    """
    events = collect(scheduler)
    completed = track_completions(quote(events))
    view = snapshot(scheduler)
    decision, solve_s = decide(scheduler, quote(view), tuple(clusters))
    publish_decisions(quote(view), quote(decision), solve_s, dry_run)
    result = {
        "time": view.now,
        "events": len(events),
        "completed": completed,
        "pending": len(view.pending),
        "placed": len(decision.placements),
        "rejected": len(decision.rejections),
        "solve_s": solve_s,
        "submitted": 0,
        "migrating": 0,
        "refused": 0,
    }
    if dry_run:
        return result
    to_migrate, to_submit = assign(scheduler, quote(decision))
    result["migrating"] = migrate(scheduler, to_migrate)
    result["submitted"], result["refused"] = submit(scheduler, to_submit)
    record_waiting(scheduler, quote(decision))
    return result


@flow(name="schedule-round", log_prints=True)
def schedule_round(
    policy: str | None = None,
    dry_run: bool = False,
    clusters: list[str] | None = None,
    estimates: str = "oracle",
    config_dir: str | None = None,
) -> dict:
    """One round on the clusters of `config_dir` (default: the built-in demo profile) over the job store
    of this cpn home ($CPN_HOME).

    `policy` overrides the profile's; `dry_run` decides and publishes the decision table without
    assigning, migrating or submitting anything; `clusters` limits placement to those clusters;
    `estimates` names the estimate source (oracle, noisy:SIGMA, predictor, champion).
    """
    profile = load_settings(config_dir or str(DEMO_DIR))
    service = open_service(profile, policy, estimates)
    try:
        result = run_round(service.scheduler, dry_run=dry_run, clusters=clusters or ())
    finally:
        service.close()
    get_run_logger().info(
        "round: %(pending)d pending, %(placed)d placed (%(submitted)d submitted, %(migrating)d migrating), "
        "%(rejected)d rejected, %(completed)d completed; policy solved in %(solve_s).3f s",
        result,
    )
    return result
