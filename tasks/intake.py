"""Intake tasks: a job source, and validation of manifests into accepted jobs."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from config.settings import ClustersConfig
from cpn.formats.throughput import ThroughputTable
from cpn.jobs import JobSpec
from cpn.sim import generated


@task(cache_policy=NO_CACHE)
def generate_manifests(
    clusters: ClustersConfig, table: ThroughputTable, jobs: int, seed: int, arrival_window_s: float
) -> list[tuple[float, str]]:
    """A seeded random queue rendered as Kubernetes manifests, with arrival times."""
    return generated.generate_manifests(clusters, table, jobs, seed, arrival_window_s)


@task(cache_policy=NO_CACHE)
def accept_manifests(manifests: list[tuple[float, str]]) -> list[JobSpec]:
    """Validate every manifest through intake."""
    return generated.accept_manifests(manifests)
