"""Shortest job first: the queued job with the shortest estimated runtime starts first.

Jobs are ranked by `priority` (higher first), then by their estimated runtime on their fastest GPU type
(`snapshot.estimates`), ties in arrival order. Each takes the first option `cpn.policies.placement`
offers among the GPU types it has an estimate for (own pool before hybrid, then inventory order); a job
that cannot start now is skipped, not waited for, so short jobs behind it still start. Memory-aware, as
`fifo` is. A service (`JobSpec.is_service`) needs no estimate: it has no length to rank by and no end the
queue could wait for, so it goes first within its priority, on any GPU type. A training job with no
estimate for any GPU type (asked while anything is free) is rejected with the reason, and so is a job no
node could ever take, in the round it is new (`Capacity.vet`); every job left queued gets its reason
(cpn.policies.waiting).
"""

from __future__ import annotations

import math

from config.policies import SjfSettings
from cpn.decisions import Decision, Placement, Rejection, Snapshot
from cpn.policies.base import by_priority
from cpn.policies.placement import NO_ESTIMATE, Capacity, usable_runtimes
from cpn.policies.waiting import WaitingExplainer


class SjfPolicy:
    """Shortest estimated job first, first fit, skipping jobs that cannot start now."""

    name = "sjf"

    def __init__(self, settings: SjfSettings | None = None) -> None:
        self.settings = settings or SjfSettings()

    def decide(self, snapshot: Snapshot) -> Decision:
        """Place jobs shortest first while anything is free; reject jobs that can never run."""
        capacity = Capacity(snapshot)
        placements: list[Placement] = []
        rejections, pending = capacity.vet(estimated=True)
        left = []
        hopeless = capacity.hopeless(snapshot.shapes)
        if hopeless:
            left = by_priority(pending)
        ranked = []
        for order, job in enumerate(() if hopeless else pending):
            if job.is_service:
                ranked.append((-job.priority, -math.inf, order, job, None))
                continue
            runtimes = usable_runtimes(snapshot, job)
            if not runtimes:
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
            else:
                ranked.append((-job.priority, min(runtimes.values()), order, job, runtimes))
        ranked.sort(key=lambda r: r[:3])
        for *_, job, runtimes in ranked:
            if hopeless or not capacity.worth_trying(job):
                left.append(job)
                continue
            fit = capacity.fit(job, runtimes)
            if fit.options:
                placements.append(capacity.take(fit.options[0], job))
                hopeless = capacity.hopeless(snapshot.shapes)
            elif fit.never is not None:
                rejections.append(Rejection(job.job_id, fit.never))
            else:
                left.append(job)
        waiting: tuple = ()
        if snapshot.explain:
            explainer = WaitingExplainer(capacity)
            waiting = tuple(explainer.explain(job, estimated=not job.is_service) for job in left)
        return Decision(placements=tuple(placements), rejections=tuple(rejections), waiting=waiting)
