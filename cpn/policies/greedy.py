"""Heterogeneity-aware greedy: each job to the free GPU type where it would finish earliest.

The idea behind Gavel's throughput-aware policies, without preemption. Jobs are taken in queue order
(higher `priority` first, then arrival); each goes to the option `cpn.policies.placement` offers now
that minimises its predicted finish, `now + transfer_s[job][cluster] + runtime_s[job][gpu type]` (no
transfer where the job already is), ties to the earlier option (own pool before hybrid, then inventory
order). Only what is free now counts: a job never waits for a faster type that is busy, and one that
cannot start now is skipped, not waited for. With teams, teams take turns in fair order and a team takes
only the options its quota and borrowing limit allow (cpn.policies.teams). GPU types without an
estimate for the job are unusable for
it. With `pessimism` (GreedySettings, default 1) > 0, runtimes are each estimate's upper quantile
(`placement.pessimistic_runtime`): a job is not sent to a type whose estimate is a guess when one it is
surer of finishes first on that reckoning. Memory-aware, as `fifo` is. A service (`JobSpec.is_service`)
needs no estimate: it runs on any GPU type until deleted, so it goes where it starts first
(`service_option`). A training job with no estimate at all is rejected with the reason in the round it
is new, as is a job no node could ever take (`Capacity.vet`), and one whose estimates are all infinite
when it is asked (while anything is free); every job left queued gets its reason (cpn.policies.waiting).
"""

from __future__ import annotations

import heapq

from config.policies import GreedySettings
from cpn.decisions import Decision, Placement, Rejection, Snapshot
from cpn.jobs import JobSpec
from cpn.policies.base import by_priority
from cpn.policies.placement import NO_ESTIMATE, Capacity, Option, awaits_benchmark, usable_runtimes
from cpn.policies.teams import FairQueue
from cpn.policies.waiting import WaitingExplainer


def finish_time(snapshot: Snapshot, job: JobSpec, option: Option, runtimes: dict[str, float]) -> float:
    """When `job` would finish if it started now on `option`: transfer, then its runtime on the type."""
    return start_time(snapshot, job, option) + runtimes[option.gpu_type]


def start_time(snapshot: Snapshot, job: JobSpec, option: Option) -> float:
    """When `job` would start running if placed now on `option`: once its image and data are there."""
    return snapshot.now + snapshot.transfer_s.get(job.job_id, {}).get(option.placement.cluster, 0.0)


def service_option(snapshot: Snapshot, job: JobSpec, options: tuple[Option, ...]) -> Option:
    """Where a service goes among `options`: it has no end to finish early by, so where it starts first
    (least transfer), ties to the earlier option (own pool before hybrid, then inventory order)."""
    return min(options, key=lambda o: start_time(snapshot, job, o))


class GreedyPolicy:
    """Earliest predicted finish over the GPU types free now, jobs in queue order."""

    name = "greedy"
    queue_order = True
    """Takes the queue in `by_priority` order (what the forward look may rely on: cpn.engine.forecast)."""
    skips_blocked = True
    """A job that cannot start now is passed over and changes nothing for the rest (ditto)."""

    def __init__(self, settings: GreedySettings | None = None) -> None:
        self.settings = settings or GreedySettings()

    def decide(self, snapshot: Snapshot) -> Decision:
        """Place each job where it finishes first while anything is free; reject jobs that can never run.

        The queue is taken in order one shape at a time (`queue_lines`): once a job is not worth trying
        on what is left, no job of its shape is (what is free only shrinks within a round), so the rest
        of its shape is not visited, and a round costs what can start, not what is queued."""
        capacity = Capacity(snapshot)
        placements: list[Placement] = []
        rejections, pending = capacity.vet(estimated=True)
        done = {r.job_id for r in rejections}
        for job in snapshot.pending if snapshot.fresh is None else snapshot.fresh:
            if job.job_id not in done and not job.is_service and not snapshot.estimates.get(job.job_id):
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                done.add(job.job_id)
        lines = queue_lines(snapshot).lines
        heads = [(line[0][0], key, 0) for key, line in lines.items()]
        heapq.heapify(heads)
        while heads and not capacity.exhausted:
            _, key, i = heapq.heappop(heads)
            line = lines[key]
            job = line[i][1]
            if job.job_id not in done and not capacity.worth_trying(job):
                continue  # nor is any job of its shape behind it this round
            if i + 1 < len(line):
                heapq.heappush(heads, (line[i + 1][0], key, i + 1))
            if job.job_id in done:
                continue
            service = job.is_service
            runtimes = None if service else usable_runtimes(snapshot, job, self.settings.pessimism)
            if runtimes is not None and not runtimes:
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                done.add(job.job_id)
                continue
            fit = capacity.fit(job, runtimes)
            if not fit.options:
                if fit.never is not None:
                    rejections.append(Rejection(job.job_id, fit.never))
                    done.add(job.job_id)
                continue
            if runtimes is None:
                best = service_option(snapshot, job, fit.options)
            else:
                best = min(fit.options, key=lambda o: finish_time(snapshot, job, o, runtimes))
            placements.append(capacity.take(best, job))
            done.add(job.job_id)
        waiting: tuple = ()
        if snapshot.explain:
            explainer = WaitingExplainer(capacity)
            left = (job for job in by_priority(pending) if job.job_id not in done)
            waiting = tuple(explainer.explain(job, estimated=not job.is_service) for job in left)
        return Decision(placements=tuple(placements), rejections=tuple(rejections), waiting=waiting)
