"""What a job holds on one node, and the one rule that books it onto a node's state and gives it back.

The policies' capacity (placing within one decision), the holds and stops of re-balancing and time
slicing, the scheduler's copies in flight, the forward look and the simulated clusters all book a job's
cards on a node and free them again; they do it with a `Booking`, so a card, a share of a card, its
memory and the node's CPU are counted one way everywhere:

- a job on whole cards takes `cards` of the node's free cards;
- a sharing job (cpn.rules.is_sharing) takes `share` and `memory_gb` of one shared card (`card`): one
  other sharing jobs hold already, or a free card it opens as a shared card;
- either takes its CPU on the node (cpn.rules.gang_cpu) and is listed among the node's running jobs.

Giving a booking back returns all of it: a shared card nobody holds any more is a free card again. A
booking takes what it says even past what is free (a forward look that follows an earlier look's
decisions may book a card twice until one of the jobs ends), so giving it back returns exactly what it
took; only `hold_cards`, whose holds are never given back, shows no node with fewer than no free cards.
Where the sites really differ it is said where the booking is made: which shared card a sharing job
joins (`Booking.on` bin packs as the clusters do; the simulator names the card its device plugin took),
whether a sharing job is counted on a whole card (`Booking.whole`), and what a running job's CPU is when
only its cards are known (`Booking.running`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from cpn.admission import Room
from cpn.decisions import Placement, RunningJob
from cpn.inventory import Node, NodeState, SharedCard
from cpn.jobs import JobSpec
from cpn.rules import SHARE_EPS, gang_cpu, is_sharing, pick_shared_card


@dataclass(frozen=True, slots=True)
class Booking:
    """What one job holds on one node: whole cards, or a share of one shared card, and CPU."""

    job_id: str
    cards: int
    """The job's cards on this node (a sharing job: 1)."""
    cpu: float = 0.0
    """CPU cores it holds on the node (given back with its cards)."""
    card: int | None = None
    """Index of the shared card it holds a share of; None: `cards` whole cards."""
    share: float = 1.0
    """Its share of the shared card `card`."""
    memory_gb: float = 0.0
    """GPU memory it holds on the shared card `card`."""

    @classmethod
    def whole(cls, job: JobSpec, cards: int) -> Booking:
        """`job` on `cards` whole cards with its CPU for them, even where it would share a card: what a
        policy holds for a job it has placed but whose card the cluster picks only at submit."""
        return cls(job.job_id, cards, gang_cpu(job, cards))

    @classmethod
    def on(cls, state: NodeState, job: JobSpec, cards: int, memory_gb: float) -> Booking:
        """`job` taking `cards` of its cards on the node `state` describes: a sharing job joins the shared
        card bin packing picks (cpn.rules.pick_shared_card) with room for its share and `memory_gb`, or
        opens a free card (numbered after the node's shared cards); any other job takes whole cards."""
        if not is_sharing(job):
            return cls.whole(job, cards)
        share = job.gpu_share or 1.0
        pos = pick_shared_card([(c.free_share, c.free_memory_gb) for c in state.shared], share, memory_gb)
        card = (
            state.shared[pos].index
            if pos is not None
            else max((c.index for c in state.shared), default=-1) + 1
        )
        return cls(job.job_id, cards, gang_cpu(job, cards), card, share, memory_gb)

    @classmethod
    def running(cls, job_id: str, cards: int, state: NodeState | None = None) -> Booking:
        """A job already running on `cards` whole cards of a node, where the snapshot says its cards but
        not its CPU (RunningJob). With the node's `state`, it holds its cards' share of the CPU the
        node's whole cards have in use, and freeing it gives that back (the forward look's ends); without,
        it holds none here, and freeing it leaves the node's CPU in use as the snapshot has it
        (`release_cards`)."""
        cpu = 0.0
        if state is not None:
            busy = state.node.gpu_count - state.free_gpus - len(state.shared)
            cpu = state.cpu_used * cards / busy if busy > 0 else 0.0
        return cls(job_id, cards, cpu)

    def take(self, state: NodeState) -> NodeState:
        """`state` with this booking held: its cards (or its share and memory of its shared card, opened
        from a free card when no job holds it yet), its CPU, and the job among the node's running."""
        free, shared = state.free_gpus, state.shared
        if self.card is None:
            free -= self.cards
        else:
            held = next((c for c in shared if c.index == self.card), None)
            if held is None:
                free -= 1
                held = SharedCard(self.card, 1.0, state.node.gpu_memory_gb)
            held = replace(
                held,
                free_share=held.free_share - self.share,
                free_memory_gb=held.free_memory_gb - self.memory_gb,
            )
            shared = tuple(sorted((*(c for c in shared if c.index != self.card), held), key=_index))
        return replace(
            state,
            free_gpus=free,
            cpu_used=state.cpu_used + self.cpu,
            running=(*state.running, self.job_id),
            shared=shared,
        )

    def take_room(self, room: Room) -> None:
        """Hold this booking in `room`, the policies' working copy of a node within one decision
        (cpn.admission.Room, mutable), as `take` does in a node state; there a shared card is named by
        its position in `room.shared`, and a position past its end opens a free card."""
        room.cpu_used += self.cpu
        if self.card is None:
            room.free -= self.cards
        elif self.card < len(room.shared):
            free_share, free_gb = room.shared[self.card]
            room.shared[self.card] = (free_share - self.share, free_gb - self.memory_gb)
        else:
            room.free -= 1
            room.shared.append((1.0 - self.share, room.node.gpu_memory_gb - self.memory_gb))

    def give_back(self, state: NodeState) -> NodeState:
        """`state` without this booking: its cards free again (a shared card once no share of it is held),
        its CPU given back, the job no longer among the node's running."""
        free, shared = state.free_gpus, state.shared
        if self.card is None:
            free += self.cards
        else:
            kept = []
            for c in shared:
                if c.index == self.card:
                    c = replace(
                        c,
                        free_share=c.free_share + self.share,
                        free_memory_gb=c.free_memory_gb + self.memory_gb,
                    )
                    if c.free_share >= 1.0 - SHARE_EPS:
                        free += 1
                        continue
                kept.append(c)
            shared = tuple(kept)
        return NodeState(
            state.node,
            free,
            max(0.0, state.cpu_used - self.cpu),
            tuple(j for j in state.running if j != self.job_id),
            shared,
        )


def node_state(node: Node, bookings: Iterable[Booking]) -> NodeState:
    """The state of `node` holding `bookings` (in start order), counted afresh from all free: what a
    cluster that keeps every job's booking reports (the simulated clusters). Each shared card's free
    share and memory are what is left once its bookings' sum is taken off, so a long run leaves no
    rounding behind as taking and giving back one booking at a time would."""
    free, cpu, running = node.gpu_count, 0.0, []
    shares: dict[int, list[Booking]] = {}
    for booking in bookings:
        if booking.card is None:
            free -= booking.cards
        else:
            shares.setdefault(booking.card, []).append(booking)
        cpu += booking.cpu
        running.append(booking.job_id)
    shared = tuple(
        SharedCard(
            card,
            max(0.0, 1.0 - sum(b.share for b in on_card)),
            node.gpu_memory_gb - sum(b.memory_gb for b in on_card),
        )
        for card, on_card in sorted(shares.items())
    )
    return NodeState(node, max(0, free - len(shared)), cpu, tuple(running), shared)


def hold_cards(
    nodes: tuple[NodeState, ...], placed: Iterable[tuple[JobSpec, Placement]]
) -> tuple[NodeState, ...]:
    """`nodes` with each (job, placement) in `placed` booked on whole cards (`Booking.whole`), as if it
    ran there already: what a policy or the scheduler holds for jobs placed but not yet on the clusters.
    A node shows no fewer than no free cards (a copy in flight may hold cards the inventory already
    counts as taken)."""
    held: dict[str, list[Booking]] = {}
    for job, placement in placed:
        for node, cards in placement.nodes:
            held.setdefault(f"{placement.cluster}/{node}", []).append(Booking.whole(job, cards))
    return _each(nodes, held, _hold)


def release_cards(
    nodes: tuple[NodeState, ...], job_ids: Iterable[str], running: Mapping[str, RunningJob]
) -> tuple[NodeState, ...]:
    """`nodes` with the whole cards of the running jobs `job_ids` free and the jobs gone from them; the
    CPU the nodes have in use stays as the snapshot has it (`Booking.running` without a node state), as
    re-balancing and time slicing count a round's stops."""
    freed: dict[str, list[Booking]] = {}
    for job_id in job_ids:
        for key, cards in running[job_id].cards:
            freed.setdefault(key, []).append(Booking.running(job_id, cards))
    return _each(nodes, freed, Booking.give_back)


def _each(
    nodes: tuple[NodeState, ...],
    by_node: dict[str, list[Booking]],
    step: Callable[[Booking, NodeState], NodeState],
) -> tuple[NodeState, ...]:
    """`nodes` with `step` (take or give back) applied for each booking of `by_node` (node key ->
    bookings), in order; the same tuple when there is none."""
    if not by_node:
        return nodes
    out = []
    for state in nodes:
        for booking in by_node.get(state.node.key, ()):
            state = step(booking, state)
        out.append(state)
    return tuple(out)


def _hold(booking: Booking, state: NodeState) -> NodeState:
    """`state` with `booking` taken, and no fewer than no free cards (`hold_cards`)."""
    state = booking.take(state)
    return state if state.free_gpus >= 0 else replace(state, free_gpus=0)


def _index(card: SharedCard) -> int:
    return card.index
