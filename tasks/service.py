"""The service a deployment's flow run works on, built from settings by the composition root."""

from __future__ import annotations

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import TaskRun
from prefect.states import State

from config.policies import SchedulerPolicy
from config.runtime import runtime_settings
from config.settings import Profile
from cpn.bootstrap import Service, build_service, open_dry_run
from cpn.decisions import Teams
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.store import StoreLeased
from tasks.predictor import predictor_logs_in_prefect


def _not_leased(task: Task, run: TaskRun, state: State) -> bool:
    """Retry a failed start, unless another process holds the store: that does not pass in seconds."""
    return not isinstance(state.data, StoreLeased)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=_not_leased)
def open_service(
    profile: Profile,
    policy: SchedulerPolicy | None = None,
    estimates: str = "champion",
    time_scale: float = 1.0,
    dry_run: bool = False,
    teams: Teams | None = None,
) -> Service:
    """The live service over this cpn home's job store and the profile's clusters, as `cpn run` builds it
    (simulated clusters where the profile names no real one, resumed from their journal beside the store),
    brought up to date: journal replayed, store reconciled with what the clusters hold. `policy` replaces the
    profile's policy.yaml (`--policy`/`--set` applied); `estimates` names the estimate source (models.sources;
    the champion by default, trained first if the store has none); `teams` those of the config folder
    (cpn.bootstrap.service_teams), as `cpn run` orders and limits the queue by them.

    It holds the store's scheduler lease (StoreLeased, naming the holder, while `cpn run` or another
    run holds it). A `dry_run` service is the one `cpn plan` decides on (cpn.bootstrap.open_dry_run): the
    store opened read-only, nothing written, no lease, no reconciliation, the journal only read.
    """
    from models.sources import estimate_source

    settings = runtime_settings()
    table = ThroughputTable.load(GAVEL_ISOLATED)
    with predictor_logs_in_prefect():  # a first champion's training, in the run's logs
        source = estimate_source(
            estimates, table, benchmarks=settings.predictor_benchmarks, clusters=profile.clusters
        )
    policy = policy or profile.policy
    if dry_run:
        return open_dry_run(
            profile.clusters, settings.store_path, policy, table, estimator=source, teams=teams
        )
    return build_service(
        profile.clusters,
        settings.store_path,
        policy.settings,
        table,
        estimator=source,
        cpu_threshold=policy.cpu_threshold,
        time_scale=time_scale,
        purpose="schedule-round",
        teams=teams,
    ).started()
