"""Where a job can start now, for every policy: pools, taints, memory, CPU, free cards, gangs, sharing.

Every policy asks a `Capacity` what is feasible and differs only in the order it considers jobs and
which feasible option it takes. Whether a job may go on a node now is the admission rule the clusters
apply (cpn.admission: pools, taints and the job's pins, free and shared cards, CPU; each node a
`Room` whose `refusal` the capacity asks), under `snapshot.cpu_threshold` of each node's cores;
beyond it, a placement keeps to:

- the seed's soft affinity (weight 100 on the job's own pool): options in the job's own pool come
  before hybrid ones, then inventory order;
- memory (memory-aware policies only): the job's GB per card, the larger of declared and estimated,
  fits the card, or what is left of a shared card;
- one node when it can: a gang runs on one node when some node it may use in the group (one cluster,
  GPU type and pool) has that many cards, taking the node with the fewest free cards that suffice
  (best fit, which keeps whole nodes free for wide jobs); a job wider than every such node spans
  several nodes of the group, those with the most free cards first;
- spread (`JobSpec.spread`, a manifest asking its pods onto distinct hostnames): one pod per node of the
  group, the widest pod first, each on the unused node with the fewest free cards that suffice. Whether
  a group could ever take it counts nodes that hold its widest pod (exact for a Deployment's equal
  replicas).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from cpn.admission import Room
from cpn.booking import Booking
from cpn.decisions import Estimate, Placement, QueueLines, Rejection, Snapshot, shape_of
from cpn.inventory import Node
from cpn.jobs import JobKind, JobSpec
from cpn.rules import (
    POOLS_FOR_KIND,
    SHARE_EPS,
    constraint_problem,
    gang_cpu,
    is_sharing,
    kind_admits,
    untolerated_taint,
)


def job_memory_gb(
    job: JobSpec, estimates: Mapping[str, Mapping[str, Estimate]], gpu_type: str
) -> float | None:
    """GB per card the job needs on `gpu_type`: the larger of declared and estimated; None if neither."""
    return memory_need(job, estimates.get(job.job_id, {}).get(gpu_type))


def memory_need(job: JobSpec, estimate: Estimate | None) -> float | None:
    """GB per card the job needs given its `estimate` on a GPU type: the larger of declared and estimated."""
    if estimate is None or estimate.gpu_mem_gb is None:
        return job.gpu_mem_gb
    return estimate.gpu_mem_gb if job.gpu_mem_gb is None else max(job.gpu_mem_gb, estimate.gpu_mem_gb)


@dataclass(eq=False)
class Group:
    """The nodes of one cluster, GPU type and pool, in inventory order: where one gang may go.

    The unit an optimiser counts capacity in (`Capacity.groups`): a job runs within one group, and
    `admits_ever` says which groups could ever take a job. Read-only outside this module.
    """

    cluster: str
    gpu_type: str
    usage: str
    """The pool (`<domain>/node.usage`): training, inference or hybrid."""
    slots: list[Room]
    admits: dict[JobKind, tuple[Room, ...]] = field(default_factory=dict)
    """Slots each job kind may use (pool and taints)."""
    sizes: dict[JobKind, tuple[int, int, float]] = field(default_factory=dict)
    """Per job kind, over the slots it may use: most cards on a node, cards in all, largest CPU cap."""
    free: int = 0
    """Free cards over the group."""
    max_free: int = 0
    """Most free cards on one node of the group."""
    shared_room: bool = False
    """Some shared card of the group has share left."""
    _eligible: dict[tuple[JobKind, float | None], tuple[Room, ...]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        """(cluster, GPU type, pool): unique within a Capacity."""
        return (self.cluster, self.gpu_type, self.usage)

    def cards(self, kind: JobKind) -> int:
        """Cards in all on the nodes jobs of `kind` may use (busy or free)."""
        return self.sizes[kind][1]

    def free_for(self, kind: JobKind) -> int:
        """Free cards on the nodes jobs of `kind` may use."""
        return sum(s.free for s in self.admits[kind])

    def recount(self) -> None:
        """Recompute `free`, `max_free` and `shared_room` from the slots."""
        free = [s.free for s in self.slots]
        self.free = sum(free)
        self.max_free = max(free, default=0)
        self.shared_room = any(share > SHARE_EPS for s in self.slots if s.shared for share, _ in s.shared)

    def has_cards(self, kind: JobKind, n: int, spread: bool = False) -> bool:
        """Whether enough cards are free now for a job of `kind` and `n` cards, counting cards only:
        on one node when a node it may use is that wide (and its pods need not spread), else over the
        group."""
        return n <= (self.max_free if n <= self.sizes[kind][0] and not spread else self.free)

    def might_take(self, job: JobSpec) -> bool:
        """Whether the group could take `job` when empty, as far as its size and CPU tell (memory unknown)."""
        widest, total, cpu_cap = self.sizes[job.kind]
        n = 1 if is_sharing(job) else job.num_gpus
        if job.spread:
            pod = max(job.pod_gpus)
            return n <= total and pod <= widest and gang_cpu(job, pod) <= cpu_cap
        return n <= total and (job.cpu if n <= widest else gang_cpu(job, widest)) <= cpu_cap

    def eligible(self, kind: JobKind, mem: float | None) -> tuple[Room, ...]:
        """Slots a job of `kind` needing `mem` GB per card may use (None = memory not checked)."""
        key = (kind, mem)
        if key not in self._eligible:
            self._eligible[key] = tuple(
                s for s in self.admits[kind] if mem is None or mem <= s.node.gpu_memory_gb
            )
        return self._eligible[key]

    def admits_ever(self, job: JobSpec, mem: float | None) -> bool:
        """Whether `job`, needing `mem` GB per card (None = unchecked), could run here on empty nodes:
        pool, taints, its own constraints, memory, cards (on one node, or as a gang over the group) and
        the CPU threshold."""
        slots = allowed(job, self.eligible(job.kind, mem))
        n = 1 if is_sharing(job) else job.num_gpus
        if job.spread:
            pod = max(job.pod_gpus)
            wide = [s for s in slots if s.node.gpu_count >= pod and gang_cpu(job, pod) <= s.cpu_cap]
            return len(wide) >= len(job.pod_gpus)
        if any(s.node.gpu_count >= n and job.cpu <= s.cpu_cap for s in slots):
            return True
        widest = self.sizes[job.kind][0]
        return (
            n > widest
            and sum(s.node.gpu_count for s in slots if gang_cpu(job, s.node.gpu_count) <= s.cpu_cap) >= n
        )


def constrained(job: JobSpec) -> bool:
    """Whether the job's manifest narrows where it may run (GPU products, pools, least card memory, HAMi,
    DRA device classes, a workload kind a CRD defines: cpn.rules.job_pins)."""
    return bool(
        job.gpu_products
        or job.node_pools
        or job.gpu_memory_min_gb is not None
        or job.hami
        or job.device_classes
        or job.workload
    )


def allowed(job: JobSpec, slots: tuple[Room, ...]) -> tuple[Room, ...]:
    """The slots whose nodes the job's own constraints allow (cpn.rules.constraint_problem)."""
    if not constrained(job):
        return slots
    return tuple(s for s in slots if constraint_problem(s.node, job) is None)


@dataclass(frozen=True, eq=False)
class Option:
    """One way to start a job now, in one group: `take` it to book its cards."""

    placement: Placement
    gpu_type: str
    group: Group
    plan: tuple[tuple[Room, int], ...]
    """Slots and the cards taken on each."""
    card: int | None = None
    """Shared card joined (position in the slot's list); None = whole cards."""


@dataclass(frozen=True)
class Fit:
    """Where a job can start now, and, when nowhere, whether it never can."""

    options: tuple[Option, ...]
    """Own pool first, then in inventory order."""
    never: str | None = None
    """Why no placement could ever satisfy the job; None when some could (or it was not worth asking)."""


@dataclass(frozen=True)
class _GroupLayout:
    """Where one group's nodes are in the inventory, and what never changes about it."""

    key: tuple[str, str, str]
    members: tuple[int, ...]
    """Positions of its nodes in the inventory."""
    admits: dict[JobKind, tuple[int, ...] | None]
    """Per job kind, the positions within the group of the nodes it may use (pool and taints); None: all."""
    sizes: dict[JobKind, tuple[int, int, float]]
    """`Group.sizes`, under the CPU threshold the layout was made for."""

    def used_by(self, kind: JobKind) -> bool:
        """Whether jobs of `kind` may use any of its nodes."""
        positions = self.admits[kind]
        return bool(self.members if positions is None else positions)


@dataclass(frozen=True)
class _Layout:
    nodes: tuple[Node, ...]
    """Held so that the identities the layout is known by are not reused."""
    groups: tuple[_GroupLayout, ...]
    by_kind: dict[JobKind, tuple[int, ...]]
    """Per job kind, the positions in `groups` of those it may use, own pool first, then inventory order."""
    gpu_types: tuple[str, ...]
    """The GPU types of the nodes, each once."""


_LAYOUTS: dict[tuple[tuple[int, ...], float], _Layout] = {}
"""(node identities, CPU threshold) -> their layout."""


def _layout(nodes: tuple[Node, ...], cpu_threshold: float) -> _Layout:
    """How `nodes` fall into groups, which depends on the nodes (and the CPU threshold) alone, worked out
    once per inventory: a forward look builds a Capacity at every simulated end on the same nodes."""
    key = (tuple(map(id, nodes)), cpu_threshold)
    known = _LAYOUTS.get(key)
    if known is not None:
        return known
    members: dict[tuple[str, str, str], list[int]] = {}
    for i, node in enumerate(nodes):
        members.setdefault((node.cluster, node.gpu_type, node.usage), []).append(i)
    groups = []
    for group, at in members.items():
        admits, sizes = {}, {}
        for kind in POOLS_FOR_KIND:
            positions = tuple(j for j, i in enumerate(at) if kind_admits(nodes[i], kind))
            admitted = [nodes[at[j]] for j in positions]
            admits[kind] = None if len(positions) == len(at) else positions
            sizes[kind] = (
                max((n.gpu_count for n in admitted), default=0),
                sum(n.gpu_count for n in admitted),
                max((cpu_threshold * n.cpu_cores for n in admitted), default=0.0),
            )
        groups.append(_GroupLayout(group, tuple(at), admits, sizes))
    by_kind = {
        kind: tuple(i for i, g in enumerate(groups) if g.key[2] == kind and g.used_by(kind))
        + tuple(i for i, g in enumerate(groups) if g.key[2] != kind and g.used_by(kind))
        for kind in POOLS_FOR_KIND
    }
    if len(_LAYOUTS) >= 16:  # inventories that changed: keep only recent ones
        _LAYOUTS.clear()
    gpu_types = tuple(dict.fromkeys(g.key[1] for g in groups))
    layout = _LAYOUTS[key] = _Layout(nodes, tuple(groups), by_kind, gpu_types)
    return layout


class Capacity:
    """A working copy of what a snapshot has free, for one decision: ask `fit`, then `take` an option.

    The feasibility API every policy, and the optimiser, builds on:

    - `fit(job, gpu_types)`: the candidate placements of a job on what is free now (`Option`s, one per
      group at most), or why it never fits;
    - `take(option, job)`: book an option in this working copy;
    - `groups(kind)`: capacity grouped by cluster, GPU type and pool (`Group`), the unit a plan over time
      counts cards in; `Group.admits_ever` says which groups could ever take a job, with `memory(job, gpu)`;
    - `vet(estimated)`: the round's rejections of jobs no placement could ever satisfy, asked once per
      job (`Snapshot.fresh`), so that every policy rejects them in the first round;
    - `why_never(job)`, `worth_trying(job)`, `hopeless(shapes)`: cheap tests to skip or reject jobs.

    `memory_aware=False` ignores GPU memory altogether (the seed's naive baseline).
    """

    def __init__(self, snapshot: Snapshot, memory_aware: bool = True) -> None:
        self.snapshot = snapshot
        self.memory_aware = memory_aware
        threshold = snapshot.cpu_threshold
        rooms = [Room.of(state, threshold) for state in snapshot.nodes]
        layout = _layout(tuple(state.node for state in snapshot.nodes), threshold)
        self._groups = []
        for known in layout.groups:
            slots = [rooms[i] for i in known.members]
            group = Group(*known.key, slots)
            self._groups.append(group)
            group.recount()
            for kind, positions in known.admits.items():
                group.admits[kind] = tuple(slots) if positions is None else tuple(slots[i] for i in positions)
            group.sizes = known.sizes
        self._by_kind = {kind: [self._groups[i] for i in at] for kind, at in layout.by_kind.items()}
        self._gpu_types = layout.gpu_types
        self._waits: set[tuple] = set()
        """`_waits_key`s of the jobs `fit` found no option for, while some group might take them."""
        self._might: dict[tuple[JobKind, int, float, tuple[int, ...]], bool] = {}
        """(kind, cards, CPU, pods that spread) -> whether some group might take such a job once empty."""
        self._refresh()

    def _refresh(self) -> None:
        """Recount what each job kind could use now (after construction and every take)."""
        self._has_cards: dict[tuple[JobKind, int, bool], bool] = {}
        """(kind, cards, spread) -> whether some group has that many cards free for such a job (has_cards)."""
        self._worth: dict[tuple, bool] = {}
        """shape (`shape_of`) -> `worth_trying`, which depends on the shape alone."""
        self._roomy: dict[tuple[JobKind, int, float], list[float | None]] = {}
        """(kind, cards, CPU) -> per group of the kind, `_most_memory` (may_start)."""
        self._shared_room = {
            kind: any(g.shared_room for g in groups) for kind, groups in self._by_kind.items()
        }
        self.exhausted = not any(g.free or g.shared_room for g in self._groups)
        """Nothing left to place anything on: no free card and no shared card with room."""

    def worth_trying(self, job: JobSpec) -> bool:
        """False when `job` surely cannot start now but might once nodes empty: a cheap first test.

        No group it may use has as many free cards (or, sharing, a free card or shared room), while some
        group might take it when empty. A job no group could ever take stays worth trying, so that
        `fit` can say why.
        """
        shape = shape_of(job)
        worth = self._worth.get(shape)
        if worth is None:
            worth = self._worth[shape] = self._worth_trying(job)
        return worth

    def _worth_trying(self, job: JobSpec) -> bool:
        key = (job.kind, job.num_gpus, job.spread)
        has_cards = self._has_cards.get(key)
        if has_cards is None:
            has_cards = self._has_cards[key] = any(
                g.has_cards(job.kind, job.num_gpus, job.spread) for g in self._by_kind[job.kind]
            )
        if has_cards:
            return True
        if is_sharing(job) and self._shared_room[job.kind]:
            return True
        return not self._might_take(job)

    def _might_take(self, job: JobSpec) -> bool:
        """Whether some group might take `job` once empty (`Group.might_take`)."""
        static = (job.kind, job.num_gpus, job.cpu, job.pod_gpus if job.spread else ())
        might = self._might.get(static)
        if might is None:
            might = self._might[static] = any(g.might_take(job) for g in self._by_kind[job.kind])
        return might

    def may_start(self, job: JobSpec) -> bool:
        """False when no job alike could start now, whatever its own constraints and estimates: a job
        of its shape (`shape_of`) needing its memory per card on each GPU type. A stricter first test than
        `worth_trying` (it asks of the nodes with the cards free whether their CPU and memory allow it),
        for a forward look that asks a policy only about the jobs that may start (cpn.engine.look_queue).
        A job no group could ever take, a gang over several nodes and a sharing job may start, so that
        `fit` says why or places them."""
        if not self.worth_trying(job):
            return False
        if is_sharing(job) or job.spread or not self._might_take(job):
            return True
        key = (job.kind, job.num_gpus, job.cpu)
        roomy = self._roomy.get(key)
        if roomy is None:
            roomy = self._roomy[key] = [_most_memory(g, job) for g in self._by_kind[job.kind]]
        for group, most in zip(self._by_kind[job.kind], roomy, strict=True):
            if most is not None:
                mem = self.memory(job, group.gpu_type)
                if mem is None or mem <= most:
                    return True
        return False

    def hopeless(self, shapes: tuple[JobSpec, ...] | None) -> bool:
        """True when nothing is free, or when no job of the waiting shapes (Snapshot.shapes) is worth
        trying: the rest of the queue need not be scanned this round."""
        if self.exhausted:
            return True
        return shapes is not None and not any(self.worth_trying(job) for job in shapes)

    def memory(self, job: JobSpec, gpu_type: str) -> float | None:
        """GB per card `job` needs on `gpu_type` as this capacity counts it (None = not checked)."""
        return job_memory_gb(job, self.snapshot.estimates, gpu_type) if self.memory_aware else None

    def groups(self, kind: JobKind | None = None) -> list[Group]:
        """Every group (cluster, GPU type, pool); with `kind`, those jobs of that kind may use, own pool
        first, then inventory order."""
        return list(self._groups if kind is None else self._by_kind[kind])

    def fit(
        self,
        job: JobSpec,
        gpu_types: Collection[str] | None = None,
        rank: Callable[[Room], Any] | None = None,
    ) -> Fit:
        """Every group where `job` can start now; if none, whether it never can.

        `gpu_types` limits the GPU types considered (None = all). `rank` orders the nodes a job that fits
        on one node may take in a group, the least first (default: best fit, the fewest free cards).
        Free cards are counted before anything else, so a job turned away for want of free cards costs
        little. Whether it could ever run is asked only when no group that turned it away for now (too few
        free cards, cards free on too many nodes, CPU in use) might take it once empty, by its size and
        CPU; memory is not looked up for full groups, so a job that only memory keeps off every node is
        rejected in a round where the groups it might use have cards free.
        """
        sharing = is_sharing(job)
        alike = not sharing and rank is None  # a job whose answer may be one alike it had (`_waits_key`)
        if alike and self._waits and self._waits_key(job, gpu_types) in self._waits:
            return Fit(())
        n = job.num_gpus
        options: list[Option] = []
        short = False
        for group in self._by_kind[job.kind]:
            if gpu_types is not None and group.gpu_type not in gpu_types:
                continue
            if not group.has_cards(job.kind, n, job.spread) and not (sharing and group.shared_room):
                short = short or group.might_take(job)
                continue
            slots = allowed(job, group.eligible(job.kind, self.memory(job, group.gpu_type)))
            if not slots:
                continue
            if sharing:
                option = self._shared_option(job, group, slots)
            elif job.spread:
                option = self._spread_option(job, group, slots)
            elif n <= group.sizes[job.kind][0]:
                option = self._node_option(job, group, slots, rank=rank)
            else:
                option = self._gang_option(job, group, slots)
            if option is not None:
                options.append(option)
            else:
                short = short or group.might_take(job)
        if options:
            return Fit(tuple(options))
        if short and alike:
            self._waits.add(self._waits_key(job, gpu_types))
        return Fit((), None if short else self.why_never(job, gpu_types))

    def _waits_key(self, job: JobSpec, gpu_types: Collection[str] | None) -> tuple:
        """What `fit` depends on of a job that holds whole cards: jobs alike in it fit alike. What is free
        only shrinks as options are taken, so a job that found no option finds none for the rest of the
        decision, nor does one alike: `fit` answers those at once (a queue of thousands asks it of many
        jobs alike that the CPU or memory in use keeps waiting)."""
        return (
            job.kind,
            job.num_gpus,
            job.cpu,
            job.pod_gpus if job.spread else None,
            job.gpu_products,
            job.node_pools,
            job.gpu_memory_min_gb,
            None if gpu_types is None else frozenset(gpu_types),
            tuple(self.memory(job, gpu) for gpu in self._gpu_types),
        )

    def _option(self, job: JobSpec, group: Group, plan: list[tuple[Room, int]], card: int | None = None):
        (first, cards), *rest = plan
        placement = Placement(
            job.job_id, group.cluster, first.node.name, cards, tuple((s.node.name, n) for s, n in rest)
        )
        return Option(placement, group.gpu_type, group, tuple(plan), card)

    def _node_option(
        self,
        job: JobSpec,
        group: Group,
        slots: tuple[Room, ...],
        mem: float | None = None,
        rank: Callable[[Room], Any] | None = None,
    ) -> Option | None:
        """Best fit: the node with the fewest free cards that suffice (or the least by `rank`; first such in
        inventory order); `mem` as `Room.refusal` takes it (a sharing job's need)."""
        best, n = None, job.num_gpus
        key = rank or _free
        for s in slots:
            if (best is None or key(s) < key(best)) and s.refusal(job, n, mem) is None:
                best = s
        return None if best is None else self._option(job, group, [(best, n)])

    def _gang_option(self, job: JobSpec, group: Group, slots: tuple[Room, ...]) -> Option | None:
        """Nodes with the most free cards first, until the gang has all its cards."""
        plan, need = [], job.num_gpus
        for s in sorted(slots, key=lambda s: -s.free):
            take = min(s.free, need)
            if s.refusal(job, take) is None:
                plan.append((s, take))
                need -= take
                if need == 0:
                    return self._option(job, group, plan)
        return None

    def _spread_option(self, job: JobSpec, group: Group, slots: tuple[Room, ...]) -> Option | None:
        """One pod per node, the widest first, each on the unused node with the fewest free cards that
        suffice (first such in inventory order)."""
        plan: list[tuple[Room, int]] = []
        for cards in sorted(job.pod_gpus, reverse=True):
            used = [s for s, _ in plan]
            best = min(
                (s for s in slots if s not in used and s.refusal(job, cards) is None),
                key=lambda s: s.free,
                default=None,
            )
            if best is None:
                return None
            plan.append((best, cards))
        return self._option(job, group, plan)

    def _shared_option(self, job: JobSpec, group: Group, slots: tuple[Room, ...]) -> Option | None:
        """The node whose shared card bin packing fills most; else a free card, as `_node_option` picks."""
        mem = self.memory(job, group.gpu_type)
        best, best_key = None, None
        for s in slots:
            pos = s.joins(job, mem)
            if pos is None or s.refusal(job, 1, mem) is not None:
                continue
            free_share, free_gb = s.shared[pos]
            if best_key is None or (free_share, -free_gb) < best_key:
                best, best_key = (s, pos), (free_share, -free_gb)
        if best is not None:
            return self._option(job, group, [(best[0], 1)], best[1])
        return self._node_option(job, group, slots, mem)

    def take(self, option: Option, job: JobSpec) -> Placement:
        """Book `option` for `job` in this working copy and return its placement."""
        held_gb = job_memory_gb(job, self.snapshot.estimates, option.gpu_type) or 0.0
        share = job.gpu_share or 1.0
        for slot, cards in option.plan:
            card = option.card
            if card is None and is_sharing(job):
                card = len(slot.shared)  # a free card it opens as a shared card
            Booking(job.job_id, cards, gang_cpu(job, cards), card, share, held_gb).take_room(slot)
        option.group.recount()
        self._refresh()
        return option.placement

    def vet(self, estimated: bool) -> tuple[list[Rejection], tuple[JobSpec, ...]]:
        """Reject, in the round they are new, the jobs no placement could ever satisfy (`why_never`): the
        snapshot's `fresh` jobs, every pending one when it gives none. Every policy vets first, so that
        such a job is rejected at once with its reason, whatever the policy's order or what is free.

        `estimated`: the policy uses only GPU types the job has a finite runtime estimate for (those
        are the types asked about, when it has any). Returns the rejections and the pending jobs left.
        """
        snapshot = self.snapshot
        fresh = snapshot.pending if snapshot.fresh is None else snapshot.fresh
        rejections = []
        for job in fresh:
            types = None
            if estimated:
                row = snapshot.estimates.get(job.job_id, {})
                # A type pending its benchmark will be usable: it does not make the job hopeless.
                types = {
                    gpu for gpu, e in row.items() if e.runtime_s < math.inf or e.pending_benchmark
                } or None
            reason = self.why_never(job, types)
            if reason is not None:
                rejections.append(Rejection(job.job_id, reason))
        if not rejections:
            return rejections, snapshot.pending
        gone = {r.job_id for r in rejections}
        return rejections, tuple(job for job in snapshot.pending if job.job_id not in gone)

    def why_never(self, job: JobSpec, gpu_types: Collection[str] | None = None) -> str | None:
        """Why no placement could ever satisfy `job`, even on empty nodes; None if one could.

        `gpu_types` are the GPU types the policy would use for it (None = all).
        """
        groups = self._by_kind[job.kind]
        usable = groups if gpu_types is None else [g for g in groups if g.gpu_type in gpu_types]
        if any(g.admits_ever(job, self.memory(job, g.gpu_type)) for g in usable):
            return None
        pools = POOLS_FOR_KIND[job.kind]
        pooled = [s for g in self._groups if g.usage in pools for s in g.slots]
        if not pooled:
            return f"no node in a pool for {job.kind} jobs ({', '.join(sorted(pools))})"
        if not groups:
            taint = untolerated_taint(pooled[0].node, job.kind)
            return (
                f"every node in a pool for {job.kind} jobs has a taint they do not tolerate "
                f"(such as {taint.key}={taint.value}:{taint.effect})"
            )
        if not usable:
            return "no estimate for any GPU type it may use"
        groups = usable
        if constrained(job):
            problems = [constraint_problem(s.node, job) for g in groups for s in g.slots]
            if all(problems):
                return f"its own constraints rule out every node (such as: {problems[0]})"
        eligible = [g for g in groups if allowed(job, g.eligible(job.kind, self.memory(job, g.gpu_type)))]
        if not eligible:
            return "needs more GPU memory per card than any eligible node's GPUs have"
        n = 1 if is_sharing(job) else job.num_gpus
        mems = [self.memory(job, g.gpu_type) for g in eligible]
        if not any(
            sum(s.node.gpu_count for s in allowed(job, g.eligible(job.kind, m))) >= n
            for g, m in zip(eligible, mems, strict=True)
        ):
            return f"needs {n} GPUs; no cluster has that many eligible GPUs of one type in one pool"
        if job.spread:
            return (
                f"its {len(job.pod_gpus)} pods must run on distinct nodes; no cluster has that many eligible "
                "nodes of one GPU type in one pool that can take one"
            )
        return f"needs {job.cpu:g} CPU cores; no eligible node allows that under the CPU threshold"


def queue_lines(snapshot: Snapshot) -> QueueLines | None:
    """The snapshot's pending jobs by shape, each shape's in queue order (`Snapshot.lines`), when the
    scheduler's lines group this very tuple of pending jobs and there are no teams (whose fair order is
    not the queue's); None otherwise, as in a forward look's copies of the snapshot: take the queue job
    by job then."""
    given = snapshot.lines
    if given is None or given.pending is not snapshot.pending or snapshot.teams is not None:
        return None
    return given


NO_ESTIMATE = "no runtime estimate for any GPU type"
"""Rejection reason of a job that estimate-driven policies cannot rank or place."""


def _free(room: Room) -> int:
    return room.free


def _most_memory(group: Group, job: JobSpec) -> float | None:
    """The most GPU memory per card on a node of `group` that has `job`'s cards and CPU free now (inf
    where it would span several nodes: not asked); None where none has."""
    if job.num_gpus > group.sizes[job.kind][0]:
        return math.inf
    if not group.has_cards(job.kind, job.num_gpus):
        return None
    n = job.num_gpus
    roomy = [s for s in group.admits[job.kind] if s.free >= n]  # a first cut before asking each node
    return max((s.node.gpu_memory_gb for s in roomy if s.refusal(job, n) is None), default=None)


def pessimistic_runtime(estimate: Estimate, pessimism: float) -> float:
    """The runtime `pessimism` stated spreads above the estimate: `runtime_s x (1 + uncertainty)^pessimism`.

    The predictor's spread is symmetric in log space (`uncertainty = exp(spread) - 1`), so this is the
    runtime's upper quantile: with pessimism 1, the estimate plus one spread (about the 84th percentile
    of a log-normal error). A policy that compares GPU types by it does not send a job to a card on a
    guess: a type whose estimate is much less certain than another's must look faster by more than the
    difference in their spreads to be preferred, while equally certain estimates keep their order.
    """
    if pessimism == 0 or estimate.uncertainty <= 0:
        return estimate.runtime_s
    return estimate.runtime_s * (1.0 + estimate.uncertainty) ** pessimism


def awaits_benchmark(snapshot: Snapshot, job: JobSpec) -> bool:
    """Whether `job` has a GPU type pending its benchmark (Estimate.pending_benchmark): with no usable
    runtime anywhere, it waits for the benchmark instead of being rejected."""
    return any(e.pending_benchmark for e in snapshot.estimates.get(job.job_id, {}).values())


def usable_runtimes(snapshot: Snapshot, job: JobSpec, pessimism: float = 0.0) -> dict[str, float]:
    """GPU type -> runtime (s) of `job`, for the types it has a finite estimate for.

    Policies that rank by estimates treat a type without one as unusable for the job. With `pessimism`
    > 0, each runtime is the estimate's upper quantile (`pessimistic_runtime`): what to rank GPU types by,
    so that they are ranked by what the job may take on them, not by what it takes if the guess is right.
    """
    return {
        gpu: pessimistic_runtime(e, pessimism)
        for gpu, e in snapshot.estimates.get(job.job_id, {}).items()
        if e.runtime_s < math.inf
    }
