"""Heterogeneity-aware greedy: each job to the free GPU type where it would finish earliest.

The idea behind Gavel's throughput-aware policies, without preemption. Jobs are taken in queue order
(higher `priority` first, then arrival); each goes to the option `cpn.policies.placement` offers now
that minimises its predicted finish, `now + transfer_s[job][cluster] + runtime_s[job][gpu type]` (no
transfer where the job already is), ties to the earlier option (own pool before hybrid, then inventory
order). Only what is free now counts: a job never waits for a faster type that is busy, and one that
cannot start now is skipped, not waited for. GPU types without an estimate for the job are unusable for
it. With `pessimism` (GreedySettings, default 1) > 0, runtimes are each estimate's upper quantile
(`placement.pessimistic_runtime`): a job is not sent to a type whose estimate is a guess when one it is
surer of finishes first on that reckoning. Memory-aware, as `fifo` is. A job with no estimate for any
GPU type (asked while anything is free), or that no node could ever take, is rejected with the reason;
every job left queued gets its reason (cpn.policies.waiting).
"""

from __future__ import annotations

from config.policies import GreedySettings
from cpn.decisions import Decision, Placement, Rejection, Snapshot
from cpn.jobs import JobSpec
from cpn.policies.base import by_priority
from cpn.policies.placement import NO_ESTIMATE, Capacity, Option, usable_runtimes
from cpn.policies.waiting import WaitingExplainer


def finish_time(snapshot: Snapshot, job: JobSpec, option: Option, runtimes: dict[str, float]) -> float:
    """When `job` would finish if it started now on `option`: transfer, then its runtime on the type."""
    transfer = snapshot.transfer_s.get(job.job_id, {}).get(option.placement.cluster, 0.0)
    return snapshot.now + transfer + runtimes[option.gpu_type]


class GreedyPolicy:
    """Earliest predicted finish over the GPU types free now, jobs in queue order."""

    name = "greedy"

    def __init__(self, settings: GreedySettings | None = None) -> None:
        self.settings = settings or GreedySettings()

    def decide(self, snapshot: Snapshot) -> Decision:
        """Place each job where it finishes first while anything is free; reject jobs that can never run."""
        capacity = Capacity(snapshot)
        placements: list[Placement] = []
        rejections: list[Rejection] = []
        left: list[JobSpec] = []
        hopeless = capacity.hopeless(snapshot.shapes)
        queue = by_priority(snapshot.pending)
        for i, job in enumerate(queue):
            if hopeless:  # nothing that waits could start on what is left: stop scanning the queue
                left.extend(queue[i:])
                break
            if not snapshot.estimates.get(job.job_id):
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                continue
            if not capacity.worth_trying(job):
                left.append(job)
                continue
            runtimes = usable_runtimes(snapshot, job, self.settings.pessimism)
            if not runtimes:
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                continue
            fit = capacity.fit(job, runtimes)
            if not fit.options:
                if fit.never is not None:
                    rejections.append(Rejection(job.job_id, fit.never))
                else:
                    left.append(job)
                continue
            best = min(fit.options, key=lambda o: finish_time(snapshot, job, o, runtimes))
            placements.append(capacity.take(best, job))
            hopeless = capacity.hopeless(snapshot.shapes)
        waiting: tuple = ()
        if snapshot.explain:
            explainer = WaitingExplainer(capacity)
            waiting = tuple(explainer.explain(job, estimated=True) for job in left)
        return Decision(placements=tuple(placements), rejections=tuple(rejections), waiting=waiting)
