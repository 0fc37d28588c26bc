"""The admission rule: may a job start on the nodes of a placement now, and if not, the one reason why.

Written once, here: both cluster gateways call `admit` before they hold anything (the simulated clusters
to book cards, the Kubernetes gateway to claim them until the pods show) and translate its answer into
their own bookkeeping or a `SubmitRejected`; the policies' capacity (cpn.policies.placement) asks the
same `Room.refusal` of every node it considers, so a placement a policy makes is one the clusters take.
A placement is refused, the first of these that holds giving the reason, when:

1. a node does not exist in the placement's cluster, is named twice, or has another GPU type than the
   gang's first node;
2. the node's pool or taints keep the job's kind off it, or the job's own pins do (GPU products, pools,
   least card memory, HAMi, DRA classes: cpn.rules.job_admission_problem), or the node's cluster does not
   serve the CRD its workload kind needs (JobSpec.workload, Node.workloads);
3. too few of its cards are free; for a job sharing a card: no free card and no shared card with room
   for its share and the memory it declares (the card it joins is the one cpn.rules.pick_shared_card
   bin packs it onto);
4. the job's CPU on the node (cpn.rules.gang_cpu) would take the node over its CPU cap: its cores times
   the CPU threshold, 1 for the clusters themselves, the policy's threshold for the policies;
5. the gang's cards do not add up to the job's GPUs.

GPU memory beyond that (a job's estimated need against a whole card) is the policies' business
(`memory_gb` of `Room.joins`, and their choice of nodes); a cluster runs what it is given, and a job
over its card's memory is OOM-killed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from cpn.decisions import Placement
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.rules import gang_cpu, is_sharing, job_admission_problem, pick_shared_card

Limit = Literal["cards", "share", "cpu"]
"""Which of a node's limits now refuses a job (`Room.refusal`): too few free cards, no card to share
(a sharing job), or CPU over the cap."""


@dataclass(eq=False, slots=True)
class Room:
    """What one node has free now, as the admission rule counts it. Mutable: a policy books the
    placements it decides into its rooms, one after another, within one decision."""

    node: Node
    free: int
    """Whole cards free."""
    cpu_used: float
    """CPU cores in use (with what has been booked here)."""
    cpu_cap: float
    """CPU cores the node may have in use: its cores times the CPU threshold."""
    shared: list[tuple[float, float]]
    """(free share, free GB) of each card sharing jobs hold, lowest card index first."""

    @classmethod
    def of(cls, state: NodeState, cpu_threshold: float = 1.0) -> Room:
        """The room a node state leaves, under `cpu_threshold` (1: all the node's cores)."""
        shared = [(c.free_share, c.free_memory_gb) for c in state.shared] if state.shared else []
        return cls(state.node, state.free_gpus, state.cpu_used, cpu_threshold * state.node.cpu_cores, shared)

    def cpu_fits(self, cores: float) -> bool:
        """Whether `cores` more stay within the CPU cap."""
        return self.cpu_used + cores <= self.cpu_cap

    def joins(self, job: JobSpec, memory_gb: float | None = None) -> int | None:
        """Position in `shared` of the card a sharing job joins: bin packed (pick_shared_card) among the
        cards with room for its share and `memory_gb` (None: the memory it declares); None if none has."""
        need = (job.gpu_mem_gb or 0.0) if memory_gb is None else memory_gb
        return pick_shared_card(self.shared, job.gpu_share or 1.0, need)

    def refusal(self, job: JobSpec, cards: int, memory_gb: float | None = None) -> Limit | None:
        """Which limit keeps `job` from taking `cards` of the node's cards now (see the module doc, 3 and
        4), or None if it may; `memory_gb` as `joins` takes it, for a sharing job."""
        if not 1 <= cards <= self.free:
            if cards == 1 and is_sharing(job):
                if self.joins(job, memory_gb) is None:
                    return "share"
            else:
                return "cards"
        if self.cpu_used + gang_cpu(job, cards) > self.cpu_cap:
            return "cpu"
        return None


@dataclass(frozen=True)
class Admitted:
    """A placement the nodes take now, and what it holds on each."""

    job_id: str
    nodes: tuple[tuple[Node, int, float], ...]
    """(node, cards, CPU cores) of each node of the gang, in the placement's order."""
    card: int | None = None
    """Index of the shared card a sharing job joins; None: whole cards, or a sharing job that opens a
    free card (which one is the cluster's bookkeeping)."""


@dataclass(frozen=True)
class Refused:
    """Why the nodes do not take a placement now: the one reason, in words."""

    reason: str


def admit(
    job: JobSpec,
    placement: Placement,
    states: Mapping[tuple[str, str], NodeState],
    cpu_threshold: float = 1.0,
) -> Admitted | Refused:
    """Whether `job` may start as `placement` says on the nodes as `states` ((cluster, node) -> state)
    have them now, under `cpu_threshold` of each node's cores: what it holds, or the one reason."""
    held: list[tuple[Node, int, float]] = []
    room = None
    for name, cards in placement.nodes:
        state = states.get((placement.cluster, name))
        if state is None:
            return Refused(f"no node {placement.cluster}/{name}")
        node = state.node
        if any(n is node for n, _, _ in held):
            return Refused(f"node {node.key} is listed twice in the placement of {job.job_id}")
        if held and node.gpu_type != held[0][0].gpu_type:
            return Refused(f"a gang runs on one GPU type; {node.key} has {node.gpu_type}")
        if (problem := job_admission_problem(node, job)) is not None:
            return Refused(problem)
        room = Room.of(state, cpu_threshold)
        limit = room.refusal(job, cards)
        if limit is not None:
            return Refused(_limit_reason(limit, room, job, cards))
        held.append((node, cards, gang_cpu(job, cards)))
    if placement.total_gpus != job.num_gpus:
        return Refused(
            f"job {job.job_id} needs {job.num_gpus} GPUs; the placement gives it {placement.total_gpus}"
        )
    card = None
    if room is not None and is_sharing(job):
        pos = room.joins(job)
        card = None if pos is None else states[(placement.cluster, placement.node)].shared[pos].index
    return Admitted(job.job_id, tuple(held), card)


def _limit_reason(limit: Limit, room: Room, job: JobSpec, cards: int) -> str:
    """The words for a node's limit that refuses `job`."""
    key = room.node.key
    if limit == "cards":
        return f"node {key} has {room.free} free GPUs; job {job.job_id} asks for {cards}"
    if limit == "share":
        most = max((share for share, _ in room.shared), default=0.0)
        memory = f" and {job.gpu_mem_gb:g} GB" if job.gpu_mem_gb else ""
        return (
            f"node {key} has no free GPU and no shared card with room for a share of "
            f"{job.gpu_share or 1.0:g}{memory} (most left: {most:g})"
        )
    under = "" if room.cpu_cap >= room.node.cpu_cores else " under the CPU threshold"
    return (
        f"node {key} has {max(0.0, room.cpu_cap - room.cpu_used):g} free CPU cores{under}; "
        f"job {job.job_id} asks for {gang_cpu(job, cards):g}"
    )
