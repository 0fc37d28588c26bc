"""`schedule-round`: one scheduling round, each stage a task (see tasks/schedule.py).

The deployment runs it on an interval and from the Prefect UI with parameters: the policy, a dry run
(decide and publish the table, change nothing) and a subset of clusters to place on.

The round is `Scheduler.round`'s own: `run_stages` (cpn/engine/scheduler.py) gives the stages and
their order, and `TaskStages` runs each as its task. A run rebuilds the service `cpn run` builds from
the store and the simulated clusters' journal beside it, with the config folder's teams, so it decides as
`cpn run` would: the facts a round needs beyond the jobs' states (a preempted job's saved progress, the
copies in flight, which it goes on with) are in the store too (cpn.store.facts). A run that is not dry
takes the store's scheduler lease first, so it is refused, naming the holder, while `cpn run` (or another
run) schedules the store; a dry run opens the store read-only and writes nothing, on the service `cpn plan`
decides on (cpn.bootstrap.open_dry_run), so the two agree on every queued job.
"""

from __future__ import annotations

from collections.abc import Sequence

from prefect import flow, get_run_logger
from prefect.utilities.annotations import quote

from config.runtime import runtime_settings
from cpn.adapters.gateway import JobEvent
from cpn.bootstrap import service_teams
from cpn.decisions import Decision, Placement, Snapshot
from cpn.engine.scheduler import RoundResult, Scheduler, run_stages
from tasks import schedule as stage
from tasks.config import load_settings
from tasks.service import open_service


class TaskStages:
    """The Scheduler's stages, each run as its Prefect task; collect also emits the completions, and
    decide publishes the decision table.

    What goes to the tasks is `quote`d: Prefect would otherwise walk every job, node and estimate in
    a snapshot or decision looking for futures, which cost more than the round itself (2 minutes
    instead of seconds over the demo's 218 rounds).
    """

    def __init__(self, scheduler: Scheduler, dry_run: bool, clusters: Sequence[str]) -> None:
        self.scheduler = scheduler
        self.dry_run = dry_run
        self.clusters = tuple(clusters)
        self.completed = 0
        """Succeeded jobs the collect stage reported."""
        self.solve_s = 0.0
        """Seconds the policy took to decide."""

    def collect(self) -> list[JobEvent]:
        events = stage.collect(self.scheduler)
        self.completed = stage.track_completions(quote(events))
        return events

    def cancel(self) -> int:
        return stage.cancel(self.scheduler)

    def snapshot(self) -> Snapshot:
        return stage.snapshot(self.scheduler)

    def decide(self, snapshot: Snapshot) -> Decision:
        decision, self.solve_s = stage.decide(self.scheduler, quote(snapshot), self.clusters)
        stage.publish_decisions(quote(snapshot), quote(decision), self.solve_s, self.dry_run)
        return decision

    def assign(self, decision: Decision) -> tuple[list[Placement], list[Placement]]:
        return stage.assign(self.scheduler, quote(decision))

    def migrate(self, placements: list[Placement]) -> int:
        return stage.migrate(self.scheduler, placements)

    def submit(self, placements: list[Placement]) -> tuple[int, int]:
        return stage.submit(self.scheduler, placements)

    def record_waiting(self, decision: Decision) -> int:
        return stage.record_waiting(self.scheduler, quote(decision))


def run_round(scheduler: Scheduler, dry_run: bool = False, clusters: Sequence[str] = ()) -> RoundResult:
    """One round with every stage its own task (a dry run: snapshot, decide, publish); returns what it did."""
    stages = TaskStages(scheduler, dry_run, clusters)
    result = run_stages(stages, dry_run=dry_run)
    get_run_logger().info(
        "round%s: %d pending, %d placed (%d submitted, %d migrating), %d rejected, %d completed; "
        "policy solved in %.3f s",
        " (dry run)" if dry_run else "",
        result.pending,
        result.decided,
        result.placed,
        result.migrating,
        result.rejected,
        stages.completed,
        stages.solve_s,
    )
    return result


@flow(name="schedule-round", log_prints=True)
def schedule_round(
    policy: str | None = None,
    dry_run: bool = False,
    clusters: list[str] | None = None,
    estimates: str = "champion",
    config_dir: str | None = None,
    settings: dict[str, str] | None = None,
) -> RoundResult:
    """One round on the clusters of `config_dir` (default: CPN_CONFIG, as `cpn up` sets it, else the
    built-in demo profile), by its teams (`teams.yaml`) when it has them, over the job store of this cpn
    home ($CPN_HOME).

    `policy` and `settings` (`{"preemption": "true"}`, as `--set` pairs) override the profile's policy.yaml
    (config.policies.SchedulerPolicy.overridden); `dry_run` only reads: it decides and publishes the decision
    table, with the store opened read-only and nothing reconciled, collected, assigned, migrated or submitted;
    `clusters` limits placement to those clusters; `estimates` names the estimate source: champion (the
    registered model, trained first if this home's MLflow store has none), predictor, or oracle or noisy:SIGMA
    (simulated clusters only). A run that is not dry fails with StoreLeased, naming the holder, while another
    process (`cpn run`) schedules the store.
    """
    folder = config_dir or str(runtime_settings().config_dir)
    profile = load_settings(folder)
    teams = service_teams(folder, profile.clusters)
    policy_now = profile.policy.overridden(policy, settings)
    service = open_service(profile, policy_now, estimates, dry_run=dry_run, teams=teams)
    try:
        return run_round(service.scheduler, dry_run=dry_run, clusters=clusters or ())
    finally:
        service.close()
