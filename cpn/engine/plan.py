"""A dry run: what the scheduler would do with some jobs on the clusters as they are now, submitting nothing.

`plan` gives the jobs to the policy in one snapshot of the current inventory and renders each placed job
as the objects its cluster would receive (a ManifestBinder per cluster), each validated as before a real
submission. What the manifests already say about where a job may run (GPU product, pool, least card
memory: cpn.rules.constraint_problem) is honoured: a job no node of any cluster satisfies is rejected
with the reason, estimates on GPU types it may not use are withheld from the policy, and a placement a
policy makes against them anyway is turned into a wait.
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
from cpn.rules import job_admission_problem

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
    out: dict[str, PlannedJob] = {}
    pending = []
    allowed: dict[str, set[str]] = {}
    for job in jobs:
        problems = [job_admission_problem(s.node, job) for s in nodes]
        if nodes and all(problems):
            out[job.job_id] = PlannedJob(
                job.job_id, "rejected", reason=f"no node of any cluster takes it (e.g. {problems[0]})"
            )
            continue
        pending.append(job)
        allowed[job.job_id] = {s.node.gpu_type for s, p in zip(nodes, problems, strict=True) if p is None}
    narrowed = {
        job_id: {gpu: e for gpu, e in row.items() if gpu in allowed.get(job_id, ())}
        for job_id, row in estimates.items()
    }
    snapshot = Snapshot(
        now=now,
        pending=tuple(pending),
        nodes=nodes,
        estimates=narrowed,
        transfer_s=transfer_s,
        cpu_threshold=cpu_threshold,
    )
    decision = policy.decide(snapshot) if pending else None
    specs = {job.job_id: job for job in pending}
    by_name = {(s.node.cluster, s.node.name): s.node for s in nodes}
    for rejection in decision.rejections if decision else ():
        out[rejection.job_id] = PlannedJob(rejection.job_id, "rejected", reason=rejection.reason)
    for waiting in decision.waiting if decision else ():
        out[waiting.job_id] = PlannedJob(waiting.job_id, "waiting", code=waiting.code, reason=waiting.detail)
    for placement in decision.placements if decision else ():
        job = specs[placement.job_id]
        node = by_name[(placement.cluster, placement.node)]
        problem = next(
            (
                p
                for name, _ in placement.nodes
                if (p := job_admission_problem(by_name[(placement.cluster, name)], job))
            ),
            None,
        )
        if problem:
            out[job.job_id] = PlannedJob(job.job_id, "waiting", code="pool-or-taint", reason=problem)
            continue
        estimate = narrowed.get(job.job_id, {}).get(node.gpu_type)
        base = PlannedJob(
            job.job_id,
            "placed",
            cluster=placement.cluster,
            nodes=placement.nodes,
            gpu_type=node.gpu_type,
            predicted_runtime_s=None if estimate is None else estimate.runtime_s,
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
