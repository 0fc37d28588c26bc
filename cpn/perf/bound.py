"""The makespan no schedule of a trace can beat on given nodes, from perfect runtimes: the latest
(arrival + runtime on the job's fastest GPU type), and all the jobs' GPU-work over all the cards."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from cpn.engine.scheduler import EstimateSource
from cpn.inventory import Node
from cpn.jobs import JobSpec


@dataclass(frozen=True)
class LowerBound:
    """Makespan no schedule can beat, and why."""

    longest_job_s: float
    """Latest (arrival + run time on the job's fastest GPU type), from the first arrival."""
    work_over_capacity_s: float
    """Sum over jobs of GPUs x run time on the fastest type, over the total GPU count."""
    jobs_covered: int = 0
    """Jobs the bound counts: those some GPU type of the clusters has a run time for."""
    jobs_total: int = 0

    @property
    def makespan_s(self) -> float:
        """The larger of the two bounds."""
        return max(self.longest_job_s, self.work_over_capacity_s)


def lower_bound(jobs: Sequence[JobSpec], nodes: Sequence[Node], oracle: EstimateSource) -> LowerBound:
    """Bounds from perfect runtimes; jobs no GPU type can run are left out (`jobs_covered` says how
    many are in)."""
    gpu_types = sorted({n.gpu_type for n in nodes})
    total_gpus = sum(n.gpu_count for n in nodes)
    if not total_gpus:
        raise ValueError("the cluster description has no GPUs")
    start = min((j.arrival_s for j in jobs), default=0.0)
    latest_end = start
    gpu_work = 0.0
    covered = 0
    for job in jobs:
        estimates = (oracle.estimate(job, g) for g in gpu_types)
        runtimes = [e.runtime_s for e in estimates if e is not None and e.runtime_s < math.inf]
        if not runtimes:
            continue
        covered += 1
        latest_end = max(latest_end, job.arrival_s + min(runtimes))
        gpu_work += job.num_gpus * min(runtimes)
    return LowerBound(
        longest_job_s=latest_end - start,
        work_over_capacity_s=gpu_work / total_gpus,
        jobs_covered=covered,
        jobs_total=len(jobs),
    )
