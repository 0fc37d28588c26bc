"""When a running job should end: its run's start plus the estimate source's runtime on the card it holds,
with the interval the estimate's spread allows. The API (`GET /jobs`, `GET /jobs/{id}`) and the web UI's
job page answer with this one computation.

A resumed run's restart and earlier work are not known here, so the end is the whole run's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cpn.decisions import Estimate
from cpn.jobs import JobSpec, JobState

if TYPE_CHECKING:
    from cpn.engine.scheduler import EstimateSource
    from cpn.store import JobRecord


@dataclass(frozen=True)
class PredictedEnd:
    """A running job's predicted end and the interval around it (store times)."""

    at: float
    low: float
    high: float


def predicted_end(started: float | None, estimate: Estimate | None) -> PredictedEnd | None:
    """`started` plus the estimate's runtime, +- its spread; None without a start or a finite estimate."""
    if started is None or estimate is None or not math.isfinite(estimate.runtime_s):
        return None
    runtime, spread = estimate.runtime_s, estimate.runtime_s * estimate.uncertainty
    return PredictedEnd(started + runtime, started + runtime - spread, started + runtime + spread)


def running_ends(
    records: Sequence[JobRecord], estimates: EstimateSource, node_gpu: Mapping[tuple[str, str], str]
) -> dict[str, PredictedEnd]:
    """job_id -> predicted end of each record that runs on a node of known GPU type (`node_gpu`: (cluster,
    node) -> GPU type, the service's inventory), one estimate call per GPU type. A running record's
    `updated_at` is its entry into `running` (every transition sets it). A service, which never ends, and
    a job whose estimate is not finite get none."""
    by_type: dict[str, list[JobRecord]] = defaultdict(list)
    for r in records:
        gpu = node_gpu.get((r.cluster or "", r.node or ""))
        if r.state == JobState.RUNNING and gpu is not None and not r.spec.is_service:
            by_type[gpu].append(r)
    ends = {}
    for gpu, running in by_type.items():
        specs: tuple[JobSpec, ...] = tuple(r.spec for r in running)
        known = estimates.estimates(specs, (gpu,))
        for r in running:
            end = predicted_end(r.updated_at, known.get(r.job_id, {}).get(gpu))
            if end is not None:
                ends[r.job_id] = end
    return ends
