"""The service a deployment's flow run works on, built from settings by the composition root."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from config.runtime import runtime_settings
from config.settings import Profile
from cpn.bootstrap import Service, build_service
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def open_service(
    profile: Profile, policy: str | None = None, estimates: str = "oracle", time_scale: float = 1.0
) -> Service:
    """The live service over this cpn home's job store and the profile's clusters, as `cpn run` builds
    it (simulated clusters where the profile names no real one, resumed from their journal beside the
    store), brought up to date: journal replayed, store reconciled with what the clusters hold."""
    from models.sources import estimate_source

    settings = runtime_settings()
    settings.store_path.parent.mkdir(parents=True, exist_ok=True)
    table = ThroughputTable.load(GAVEL_ISOLATED)
    service = build_service(
        profile.clusters,
        settings.store_path,
        policy or profile.policy.name,
        table,
        estimator=estimate_source(estimates, table),
        cpu_threshold=profile.policy.cpu_threshold,
        time_scale=time_scale,
    )
    service.start()
    return service
