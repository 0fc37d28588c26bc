"""First-in first-out: the baseline the seed compared against.

Jobs start strictly in arrival order. The head job goes to the first node, in inventory order,
that has enough free cards in a pool the job may use and keeps its CPU load within the threshold;
if no node can take it now it blocks everything behind it (head-of-line blocking). A head job that
no node could ever take, even empty, is rejected instead, so the queue never blocks forever.

Two flavours: `fifo` also requires the job's GPU memory to fit the node's cards; `fifo-naive`
ignores memory, as the seed's baseline did, and so runs into OOM kills.
"""

from __future__ import annotations

from cpn.inventory import NodeState
from cpn.jobs import JobKind, JobSpec
from cpn.policies.base import Decision, Placement, Rejection, Snapshot

POOLS_FOR_KIND: dict[JobKind, frozenset[str]] = {
    "training": frozenset({"training", "hybrid"}),
    "inference": frozenset({"inference", "hybrid"}),
}
"""Node pools (`<domain>/node.usage`) each job kind tolerates, as in the seed's scheme."""


def job_memory_gb(job: JobSpec, snapshot: Snapshot, gpu_type: str) -> float | None:
    """GB per card the job needs on `gpu_type`: the larger of declared and estimated; None if neither."""
    estimate = snapshot.estimates.get(job.job_id, {}).get(gpu_type)
    known = [m for m in (job.gpu_mem_gb, estimate.gpu_mem_gb if estimate else None) if m is not None]
    return max(known) if known else None


class FifoPolicy:
    """Strict FIFO with first-fit placement; `memory_aware=False` is the seed's naive baseline."""

    def __init__(self, memory_aware: bool = True) -> None:
        self.memory_aware = memory_aware
        self.name = "fifo" if memory_aware else "fifo-naive"

    def _fits_card(self, job: JobSpec, snapshot: Snapshot, state: NodeState) -> bool:
        if not self.memory_aware:
            return True
        mem = job_memory_gb(job, snapshot, state.node.gpu_type)
        return mem is None or mem <= state.node.gpu_memory_gb

    def _never_fits(self, job: JobSpec, snapshot: Snapshot) -> str | None:
        """Why no node could take `job` even if it were empty; None if some node could."""
        nodes = [s for s in snapshot.nodes if s.node.usage in POOLS_FOR_KIND[job.kind]]
        if not nodes:
            return f"no node in a pool for {job.kind} jobs ({', '.join(sorted(POOLS_FOR_KIND[job.kind]))})"
        nodes = [s for s in nodes if s.node.gpu_count >= job.num_gpus]
        if not nodes:
            return f"needs {job.num_gpus} GPUs on one node; no eligible node has that many"
        nodes = [s for s in nodes if self._fits_card(job, snapshot, s)]
        if not nodes:
            return "needs more GPU memory per card than any eligible node's GPUs have"
        if not any(job.cpu <= snapshot.cpu_threshold * s.node.cpu_cores for s in nodes):
            return f"needs {job.cpu:g} CPU cores; no eligible node allows that under the CPU threshold"
        return None

    def decide(self, snapshot: Snapshot) -> Decision:
        """Place queued jobs in order until the first that cannot start now; reject impossible ones."""
        free = {s.node.key: s.free_gpus for s in snapshot.nodes}
        cpu = {s.node.key: s.cpu_used for s in snapshot.nodes}
        placements: list[Placement] = []
        rejections: list[Rejection] = []
        for job in snapshot.pending:
            target = next(
                (
                    s
                    for s in snapshot.nodes
                    if s.node.usage in POOLS_FOR_KIND[job.kind]
                    and free[s.node.key] >= job.num_gpus
                    and cpu[s.node.key] + job.cpu <= snapshot.cpu_threshold * s.node.cpu_cores
                    and self._fits_card(job, snapshot, s)
                ),
                None,
            )
            if target is not None:
                key = target.node.key
                free[key] -= job.num_gpus
                cpu[key] += job.cpu
                placements.append(Placement(job.job_id, target.node.cluster, target.node.name, job.num_gpus))
                continue
            reason = self._never_fits(job, snapshot)
            if reason is None:
                break
            rejections.append(Rejection(job.job_id, reason))
        return Decision(placements=tuple(placements), rejections=tuple(rejections))
