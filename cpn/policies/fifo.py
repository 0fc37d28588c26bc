"""First-in first-out: the baseline the seed compared against.

Jobs start strictly in queue order: higher `priority` first, then arrival. The head job takes the first
option `cpn.policies.placement` offers (own pool before hybrid, then inventory order; pools, taints, CPU
threshold, gangs and shared cards as that module says); if it cannot start now it blocks everything
behind it (head-of-line blocking); with teams (cpn.policies.teams), teams take turns in fair order and a
head blocks only its own team, and a job its team's limits never let start (`over-quota`, "never")
blocks no one. A job that no node could ever take, even empty, is rejected in the
round it is new, wherever it queues (`Capacity.vet`), so the queue never blocks on it. Every job left
queued gets its reason (cpn.policies.waiting).

Two flavours: `fifo` also requires the job's GPU memory to fit the cards; `fifo-naive` ignores
memory, as the seed's baseline did, and so runs into OOM kills.
"""

from __future__ import annotations

from config.policies import FifoSettings
from cpn.decisions import Decision, Placement, Rejection, Snapshot
from cpn.policies.base import Traits, by_priority
from cpn.policies.placement import Capacity
from cpn.policies.teams import FairQueue
from cpn.policies.waiting import WaitingExplainer


class FifoPolicy:
    """Strict FIFO with first-fit placement; `memory_aware=False` is the seed's naive baseline."""

    traits = Traits(queue_order=True)

    def __init__(self, memory_aware: bool = True) -> None:
        self.memory_aware = memory_aware
        self.name = "fifo" if memory_aware else "fifo-naive"
        self.settings = FifoSettings(name=self.name)

    def decide(self, snapshot: Snapshot) -> Decision:
        """Place queued jobs in order until the first that cannot start now; reject impossible ones."""
        capacity = Capacity(snapshot, self.memory_aware)
        placements: list[Placement] = []
        rejections, pending = capacity.vet(estimated=False)
        queue = FairQueue(snapshot, by_priority(pending))  # with teams, each team's head blocks only its team
        left: list = []
        for job in queue:
            if capacity.exhausted:
                left += [job, *queue.rest()]
                break
            fit = capacity.fit(job)
            options = queue.allowed(job, fit.options)
            if options:
                queue.took(job, options[0])
                placements.append(capacity.take(options[0], job))
            elif not fit.options and (reason := fit.never or capacity.why_never(job)) is not None:
                rejections.append(Rejection(job.job_id, reason))
            elif queue.never(job) is not None:  # its team's limits never let it start: it holds no one back
                left.append(job)
            else:
                left += [job, *queue.block(job)]
        waiting: tuple = ()
        if snapshot.explain:
            explainer = WaitingExplainer(capacity)
            waiting = tuple(queue.waiting(explainer, job) for job in left)
        return Decision(placements=tuple(placements), rejections=tuple(rejections), waiting=waiting)
