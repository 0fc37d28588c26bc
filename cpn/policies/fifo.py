"""First-in first-out: the baseline the seed compared against.

Jobs start strictly in arrival order. The head job takes the first option `cpn.policies.placement`
offers (own pool before hybrid, then inventory order; pools, taints, CPU threshold, gangs and shared
cards as that module says); if it cannot start now it blocks everything behind it (head-of-line
blocking). A head job that no node could ever take, even empty, is rejected instead (always asked,
as only the head is), so the queue never blocks on it.

Two flavours: `fifo` also requires the job's GPU memory to fit the cards; `fifo-naive` ignores
memory, as the seed's baseline did, and so runs into OOM kills.
"""

from __future__ import annotations

from cpn.decisions import Decision, Placement, Rejection, Snapshot
from cpn.policies.placement import Capacity


class FifoPolicy:
    """Strict FIFO with first-fit placement; `memory_aware=False` is the seed's naive baseline."""

    def __init__(self, memory_aware: bool = True) -> None:
        self.memory_aware = memory_aware
        self.name = "fifo" if memory_aware else "fifo-naive"

    def decide(self, snapshot: Snapshot) -> Decision:
        """Place queued jobs in order until the first that cannot start now; reject impossible ones."""
        capacity = Capacity(snapshot, self.memory_aware)
        placements: list[Placement] = []
        rejections: list[Rejection] = []
        for job in snapshot.pending:
            if capacity.exhausted:
                break
            fit = capacity.fit(job)
            if fit.options:
                placements.append(capacity.take(fit.options[0], job))
            elif (reason := fit.never or capacity.why_never(job)) is not None:
                rejections.append(Rejection(job.job_id, reason))
            else:
                break
        return Decision(placements=tuple(placements), rejections=tuple(rejections))
