"""A dry run: what the scheduler would do with some jobs on the clusters as they are now, submitting nothing.

`plan` gives the jobs to the policy in one snapshot of the current inventory and renders each placed job
as the objects its cluster would receive (a ManifestBinder per cluster), each validated as before a real
submission. The verdict is the policy's, as in a scheduling round: what the manifests say about where a
job may run (GPU product, pool, least card memory) is the admission rule's (cpn.admission), which the
policies place by, and a job no node of any cluster could ever take is rejected with the reason every
policy gives in its first round (cpn.policies.placement.Capacity.vet).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from cpn.adapters.binding import ManifestBinder
from cpn.decisions import Estimate, Snapshot
from cpn.inventory import NodeState
from cpn.jobs import JobSpec
from cpn.policies.base import Policy

Outcome = Literal["placed", "waiting", "rejected", "invalid"]


@dataclass(frozen=True)
class PlannedJob:
    """What the dry run decided for one job."""

    job_id: str
    outcome: Outcome
    cluster: str | None = None
    nodes: tuple[tuple[str, int], ...] = ()
    """(node, cards) of the gang."""
    gpu_type: str | None = None
    predicted_runtime_s: float | None = None
    uncertainty: float | None = None
    """Relative spread of the runtime estimate (Estimate.uncertainty)."""
    explore: bool = False
    """The estimate is a guess to learn from (Estimate.explore): the job runs on whole cards, alone."""
    transfer_s: float | None = None
    code: str = ""
    """Why it waits (a cpn.decisions.WaitCode), when it does."""
    reason: str = ""
    """Why it waits, is rejected or its objects are invalid."""
    objects: tuple[dict[str, Any], ...] = ()
    """What would be submitted, workload first."""

    @property
    def gpus(self) -> int:
        """Cards over all its nodes."""
        return sum(c for _, c in self.nodes)


def plan(
    jobs: tuple[JobSpec, ...],
    nodes: tuple[NodeState, ...],
    policy: Policy,
    *,
    binders: Mapping[str, ManifestBinder],
    validate: Callable[[str, dict[str, Any]], None],
    estimates: Mapping[str, Mapping[str, Estimate]] | None = None,
    transfer_s: Mapping[str, Mapping[str, float]] | None = None,
    cpu_threshold: float = 0.7,
    now: float = 0.0,
) -> list[PlannedJob]:
    """One decision for `jobs` on `nodes`, in job order; `validate(cluster, obj)` raises on a bad object."""
    estimates = estimates or {}
    transfer_s = transfer_s or {}
    snapshot = Snapshot(
        now=now,
        pending=jobs,
        nodes=nodes,
        estimates=estimates,
        transfer_s=transfer_s,
        cpu_threshold=cpu_threshold,
    )
    out: dict[str, PlannedJob] = {}
    decision = policy.decide(snapshot) if jobs else None
    specs = {job.job_id: job for job in jobs}
    by_name = {(s.node.cluster, s.node.name): s.node for s in nodes}
    for rejection in decision.rejections if decision else ():
        out[rejection.job_id] = PlannedJob(rejection.job_id, "rejected", reason=rejection.reason)
    for waiting in decision.waiting if decision else ():
        out[waiting.job_id] = PlannedJob(waiting.job_id, "waiting", code=waiting.code, reason=waiting.detail)
    for placement in decision.placements if decision else ():
        job = specs[placement.job_id]
        node = by_name[(placement.cluster, placement.node)]
        estimate = estimates.get(job.job_id, {}).get(node.gpu_type)
        base = PlannedJob(
            job.job_id,
            "placed",
            cluster=placement.cluster,
            nodes=placement.nodes,
            gpu_type=node.gpu_type,
            predicted_runtime_s=None if estimate is None else estimate.runtime_s,
            uncertainty=None if estimate is None else estimate.uncertainty,
            explore=estimate is not None and estimate.explore,
            transfer_s=transfer_s.get(job.job_id, {}).get(placement.cluster),
        )
        try:
            objects = binders[placement.cluster].bind(job, placement)
            for obj in objects:
                validate(placement.cluster, obj)
        except ValueError as exc:
            out[job.job_id] = replace(base, outcome="invalid", reason=str(exc))
            continue
        out[job.job_id] = replace(base, objects=objects)
    return [
        out.get(job.job_id) or PlannedJob(job.job_id, "waiting", code="queue-order", reason="left queued")
        for job in jobs
    ]
