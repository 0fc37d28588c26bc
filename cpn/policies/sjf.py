"""Shortest job first: the queued job with the shortest estimated runtime starts first.

Jobs are ranked by their estimated runtime on their fastest GPU type (`snapshot.estimates`), ties in
arrival order. Each takes the first option `cpn.policies.placement` offers among the GPU types it has an
estimate for (own pool before hybrid, then inventory order); a job that cannot start now is skipped,
not waited for, so short jobs behind it still start. Memory-aware, as `fifo` is. A job with no estimate
for any GPU type, or that no node could ever take, is rejected with the reason.
"""

from __future__ import annotations

import math

from cpn.decisions import Decision, Placement, Rejection, Snapshot
from cpn.policies.placement import NO_ESTIMATE, Capacity, usable_runtimes


class SjfPolicy:
    """Shortest estimated job first, first fit, skipping jobs that cannot start now."""

    name = "sjf"

    def decide(self, snapshot: Snapshot) -> Decision:
        """Place jobs shortest first while anything is free; reject jobs that can never run."""
        capacity = Capacity(snapshot)
        if capacity.hopeless(snapshot.shapes):
            return Decision()
        placements: list[Placement] = []
        rejections: list[Rejection] = []
        ranked = []
        for order, job in enumerate(snapshot.pending):
            estimates = snapshot.estimates.get(job.job_id, {})
            if not estimates:
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
            elif capacity.worth_trying(job):
                shortest = min([e.runtime_s for e in estimates.values()])
                if shortest == math.inf:
                    rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                else:
                    ranked.append((shortest, order, job))
        ranked.sort(key=lambda r: r[:2])
        hopeless = False
        for _, _, job in ranked:
            if hopeless:
                break
            fit = capacity.fit(job, usable_runtimes(snapshot, job))
            if fit.options:
                placements.append(capacity.take(fit.options[0], job))
                hopeless = capacity.hopeless(snapshot.shapes)
            elif fit.never is not None:
                rejections.append(Rejection(job.job_id, fit.never))
        return Decision(placements=tuple(placements), rejections=tuple(rejections))
