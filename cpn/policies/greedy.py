"""Heterogeneity-aware greedy: each job to the free GPU type where it would finish earliest.

The idea behind Gavel's throughput-aware policies, without preemption. Jobs are taken in arrival
order; each goes to the option `cpn.policies.placement` offers now that minimises its predicted finish,
`now + transfer_s[job][cluster] + runtime_s[job][gpu type]` (no transfer where the job already is),
ties to the earlier option (own pool before hybrid, then inventory order). Only what is free now counts:
a job never waits for a faster type that is busy, and one that cannot start now is skipped, not waited
for. GPU types without an estimate for the job are unusable for it. Memory-aware, as `fifo` is. A job
with no estimate for any GPU type, or that no node could ever take, is rejected with the reason.
"""

from __future__ import annotations

from cpn.decisions import Decision, Placement, Rejection, Snapshot
from cpn.policies.placement import NO_ESTIMATE, Capacity, usable_runtimes


class GreedyPolicy:
    """Earliest predicted finish over the GPU types free now, jobs in arrival order."""

    name = "greedy"

    def decide(self, snapshot: Snapshot) -> Decision:
        """Place each job where it finishes first while anything is free; reject jobs that can never run."""
        capacity = Capacity(snapshot)
        placements: list[Placement] = []
        rejections: list[Rejection] = []
        hopeless = capacity.hopeless(snapshot.shapes)
        for job in snapshot.pending:
            if hopeless:
                break
            if not snapshot.estimates.get(job.job_id):
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                continue
            if not capacity.worth_trying(job):
                continue
            runtimes = usable_runtimes(snapshot, job)
            if not runtimes:
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                continue
            fit = capacity.fit(job, runtimes)
            if not fit.options:
                if fit.never is not None:
                    rejections.append(Rejection(job.job_id, fit.never))
                continue
            transfer = snapshot.transfer_s.get(job.job_id, {})
            best = min(
                fit.options,
                key=lambda o: snapshot.now + transfer.get(o.placement.cluster, 0.0) + runtimes[o.gpu_type],
            )
            placements.append(capacity.take(best, job))
            hopeless = capacity.hopeless(snapshot.shapes)
        return Decision(placements=tuple(placements), rejections=tuple(rejections))
