"""The services a deployment's flow run works on, built from settings by the composition root."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from config.runtime import runtime_settings
from config.settings import Profile
from cpn.bootstrap import Service, build_simulation
from cpn.engine.estimates import OracleEstimates
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def open_service(profile: Profile, policy: str | None = None) -> Service:
    """The scheduler over the job store of this cpn home and the profile's clusters (simulated ones
    where the profile names no real cluster), with `policy` or the profile's."""
    settings = runtime_settings()
    settings.store_path.parent.mkdir(parents=True, exist_ok=True)
    table = ThroughputTable.load(GAVEL_ISOLATED)
    return build_simulation(
        profile.clusters,
        settings.store_path,
        policy or profile.policy.name,
        table,
        cpu_threshold=profile.policy.cpu_threshold,
        estimator=OracleEstimates(table),
    )
