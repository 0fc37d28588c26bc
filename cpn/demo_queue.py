"""The demo's job source: a generated queue that enters through real intake, as users' YAML would."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from config.settings import ClustersConfig
from cpn.intake import parse_manifests
from cpn.jobs import JobSpec
from cpn.throughput import ThroughputTable
from cpn.traces import generate_queue, to_manifest


def generate_manifests(
    clusters: ClustersConfig, table: ThroughputTable, jobs: int, seed: int, arrival_window_s: float = 0.0
) -> list[tuple[float, str]]:
    """A seeded random queue rendered as Volcano Job manifests, each with its arrival time."""
    queue = generate_queue(jobs, seed, table, clusters, arrival_window_s=arrival_window_s)
    return [(job.arrival_s, to_manifest(job, clusters.label_domain)) for job in queue]


def accept_manifests(manifests: Sequence[tuple[float, str]]) -> list[JobSpec]:
    """Parse and validate each manifest through intake; the arrival time stays with the job."""
    accepted = []
    for i, (arrival, text) in enumerate(manifests, start=1):
        for spec in parse_manifests(text, source=f"generated manifest {i}"):
            accepted.append(replace(spec, arrival_s=arrival))
    return accepted
