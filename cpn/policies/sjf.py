"""Shortest job first: the queued job with the shortest estimated runtime starts first.

Jobs are ranked by `priority` (higher first), then by their estimated runtime on their fastest GPU type
(`snapshot.estimates`), ties in arrival order. Each takes the first option `cpn.policies.placement`
offers among the GPU types it has an estimate for (own pool before hybrid, then inventory order); a job
that cannot start now is skipped, not waited for, so short jobs behind it still start. With teams, teams
take turns in fair order, each in this order, and
a team takes only the options its quota and borrowing limit allow (cpn.policies.teams). Memory-aware, as
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
from cpn.policies.base import Traits, by_priority
from cpn.policies.placement import NO_ESTIMATE, Capacity, awaits_benchmark, usable_runtimes
from cpn.policies.teams import FairQueue
from cpn.policies.waiting import WaitingExplainer


class SjfPolicy:
    """Shortest estimated job first, first fit, skipping jobs that cannot start now."""

    name = "sjf"
    traits = Traits(skips_blocked=True)

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
            if not runtimes and awaits_benchmark(snapshot, job):
                left.append(job)
            elif not runtimes:
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
            else:
                ranked.append((-job.priority, min(runtimes.values()), order, job, runtimes))
        ranked.sort(key=lambda r: r[:3])
        by_id = {r[3].job_id: r[4] for r in ranked}
        queue = FairQueue(snapshot, [r[3] for r in ranked])  # teams in fair order (cpn.policies.teams)
        for job in queue:
            runtimes = by_id[job.job_id]
            if hopeless or not capacity.worth_trying(job):
                left.append(job)
                continue
            fit = capacity.fit(job, runtimes)
            options = queue.allowed(job, fit.options)
            if options:
                queue.took(job, options[0])
                placements.append(capacity.take(options[0], job))
                hopeless = capacity.hopeless(snapshot.shapes)
            elif not fit.options and fit.never is not None:
                rejections.append(Rejection(job.job_id, fit.never))
            else:
                left.append(job)
        waiting: tuple = ()
        if snapshot.explain:
            explainer = WaitingExplainer(capacity)
            waiting = tuple(queue.waiting(explainer, job, estimated=not job.is_service) for job in left)
        return Decision(placements=tuple(placements), rejections=tuple(rejections), waiting=waiting)
