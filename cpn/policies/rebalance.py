"""Re-balancing for makespan (issue #21): the last job's end kept near its bound, long jobs on faster cards.

A policy set with `rebalance=true` (config.policies) is wrapped in `RebalancingPolicy`. The inner policy
orders the queue for its own aim (completion times, fairness); this rule keeps the longest jobs from being
left to the end, where they would set the makespan, and from finishing on slow cards. Each round:

1. **The bound.** No schedule ends before `M`: the latest of, over every job queued or running, now plus
   its work left on its fastest GPU type, and now plus the GPU-seconds left over all jobs (each on its
   fastest type) spread over every card. `H = M - now` is the time left to it.
2. **Urgent jobs start first.** A queued job is urgent when, waiting for room on each GPU type (until
   enough cards of one node free by the running jobs' predicted ends) and then running there, it could
   not end before `H` is reached, `makespan_slack` of `H` aside: waiting any longer would push the makespan
   past the bound. Longest first, each starts on the free option where it ends first among the GPU types
   on which it ends within `H (1 + makespan_slack)`, on the smallest node, then the one whose running jobs
   end last (long jobs gather on the same nodes, so the wide nodes of short jobs soon free whole for wide
   gangs).
3. **Room for an urgent job** that finds no free option, when the policy may preempt (`preemption=true`):
   the running jobs of one node of such a type make room, that node losing least work. A job that
   checkpoints and can afford it (restarted from its last checkpoint on its slowest GPU type, it would
   still end within `H`: it goes back to the queue and may land anywhere) is stopped; a job that cannot
   afford it moves to a free card of a GPU type at least as fast on another node. Jobs that never
   checkpoint, or are marked not preemptible, stay. An urgent job that finds no room is left to the inner
   policy.
4. **The inner policy** decides on what is left: the other queued jobs and the cards not taken.
5. **Gangs gather.** A gang the inner policy starts on a slower GPU type than it could run on goes to a
   node of a faster type instead when running jobs that checkpoint can free that node by moving to free
   cards at least as fast on other nodes, and the GPU-seconds the gang saves there outweigh those the moves
   lose (their work since their last checkpoint and the restart): narrow jobs scattered over the fast
   nodes otherwise keep wide jobs on slow cards.
6. **Moves.** Each running job that checkpoints, latest predicted end first, moves to a free card of
   another GPU type when its next run there (transfer, the restart cost, and the work left at its last
   checkpoint) ends sooner than its current run by more than one checkpoint interval.

A move is a `Preemption` of the job for itself with its `Placement` on the new card, in one decision: the
scheduler deletes it with `GRACE_S`, queues it with the progress of its last checkpoint and submits it at
once under a new name generation. The running jobs' whole-run estimates, work left and specs come with the
snapshot (`RunningJob`; the scheduler fills them for a policy that `rebalances`). The rule is pure: it reads
only the snapshot and the inner decision.
"""

from __future__ import annotations

import math
from collections import ChainMap
from dataclasses import dataclass, replace

from config.policies import PolicySettings
from cpn.admission import Room
from cpn.booking import hold_cards, release_cards
from cpn.decisions import Decision, Placement, Preemption, RunningJob, Snapshot
from cpn.inventory import NodeState
from cpn.jobs import JobSpec
from cpn.policies.base import Policy, looked_forward_with
from cpn.policies.placement import Capacity, Option, usable_runtimes
from cpn.policies.preemption import GRACE_S, holds_when_free, lost_gpu_s
from cpn.rules import is_sharing


@dataclass(frozen=True)
class Bound:
    """The makespan's bound now (module doc, 1)."""

    now: float
    end: float
    """`M`: no schedule ends before it."""

    @property
    def horizon(self) -> float:
        """`H`: seconds left to the bound."""
        return self.end - self.now


class RebalancingPolicy:
    """`inner`'s decision around the urgent jobs' starts, plus moves of running jobs to faster cards (module
    doc)."""

    def __init__(self, inner: Policy, settings: PolicySettings) -> None:
        self.inner = inner
        self.name = inner.name
        self.slack = settings.makespan_slack
        self.preemption = settings.preemption
        self.traits = replace(inner.traits, rebalances=True, looks_with=looked_forward_with(inner))
        """It decides while nothing is queued and reads the running jobs' estimates (Traits.rebalances); a
        forward look replays the policy `inner` looks with: the look starts jobs, it never stops or moves
        them."""

    def decide(self, snapshot: Snapshot) -> Decision:
        """Urgent starts, then `inner` on the rest, its gangs gathered, then moves (module doc)."""
        runtimes = {j.job_id: usable_runtimes(snapshot, j) for j in snapshot.pending if not j.is_service}
        bound = makespan_bound(snapshot, runtimes)
        urgent, stops, rest = self._urgent(snapshot, bound, runtimes)
        decision = self.inner.decide(rest) if rest.pending else Decision()
        decision, after = _gather(rest, decision)
        stopping = {p.job_id for p in decision.preemptions} | stops.keys()
        moves, placed = _moves(after, stopping)
        preemptions = tuple(stops.values()) + moves
        if not urgent and not preemptions:
            return decision
        return replace(
            decision,
            placements=(*urgent, *decision.placements, *placed),
            preemptions=(*decision.preemptions, *preemptions),
        )

    def _urgent(
        self, snapshot: Snapshot, bound: Bound, usable: dict[str, dict[str, float]]
    ) -> tuple[list[Placement], dict[str, Preemption], Snapshot]:
        """The urgent jobs' placements, the jobs stopped for them, and the snapshot left for the inner
        policy (those jobs and cards taken, the stopped jobs gone); `usable`: each queued job's runtimes
        (placement.usable_runtimes)."""
        h = bound.horizon
        urgent = []
        rooms = _Rooms(snapshot)
        for job in snapshot.pending:
            runtimes = usable.get(job.job_id)
            if not runtimes:
                continue
            n = 1 if is_sharing(job) else job.num_gpus
            soonest = min(rooms.delay(g, n, h) + t for g, t in runtimes.items())
            if soonest * (1 + self.slack) >= h:
                urgent.append((min(runtimes.values()), job, runtimes))
        if not urgent:
            return [], {}, snapshot
        urgent.sort(key=lambda u: -u[0])
        capacity = Capacity(snapshot)
        placements: list[Placement] = []
        taken: list[tuple[JobSpec, Placement]] = []
        running = dict(snapshot.running)
        room = _Room()
        for _, job, runtimes in urgent:
            transfer = snapshot.transfer_s.get(job.job_id, {})
            fast = {g: t for g, t in runtimes.items() if t <= h * (1 + self.slack)}
            fast = fast or dict([min(runtimes.items(), key=lambda kv: kv[1])])
            options = [o for o in capacity.fit(job, fast, rooms.rank).options if not room.blocks(o.placement)]
            if options:
                best = min(options, key=lambda o: transfer.get(o.placement.cluster, 0.0) + fast[o.gpu_type])
                placement, gpu = capacity.take(best, job), best.gpu_type
            elif self.preemption and not is_sharing(job) and not job.spread:
                made = self._make_room(snapshot, bound, job, fast, room, capacity, rooms.rank)
                if made is None:
                    continue
                placement, gpu = made
            else:
                continue
            room.book(placement)
            placements.append(placement)
            taken.append((job, placement))
            ends = snapshot.now + transfer.get(placement.cluster, 0.0) + runtimes[gpu]
            running[job.job_id] = RunningJob(
                ends, tuple((f"{placement.cluster}/{n}", c) for n, c in placement.nodes)
            )
        stops = room.stops
        placed = {p.job_id for p in placements}
        for moved, placement in room.moved.values():
            assert moved.spec is not None
            taken.append((moved.spec, placement))
            placements.append(placement)
        nodes = hold_cards(release_cards(snapshot.nodes, stops, snapshot.running), taken)
        for job_id in stops:
            del running[job_id]
        gpu_of = {s.node.key: s.node.gpu_type for s in snapshot.nodes}
        for job_id, (moved, placement) in room.moved.items():
            running[job_id] = _resumed(moved, placement, gpu_of, snapshot)
        rest = replace(
            snapshot,
            pending=tuple(j for j in snapshot.pending if j.job_id not in placed),
            nodes=nodes,
            running=running,
            fresh=None
            if snapshot.fresh is None
            else tuple(j for j in snapshot.fresh if j.job_id not in placed),
        )
        return placements, stops, rest

    def _make_room(
        self,
        snapshot: Snapshot,
        bound: Bound,
        job: JobSpec,
        fast: dict[str, float],
        room: _Room,
        capacity: Capacity,
        rank,
    ) -> tuple[Placement, str] | None:
        """A one-node placement for urgent `job` on a node of a type in `fast` and its GPU type, the running
        jobs stopped or moved for it booked in `room` (module doc, 3), on the node losing least; None if no
        node can be freed."""
        h = bound.horizon

        def may_stop(running: RunningJob) -> bool:
            return _affords(running, snapshot.now, h, self.slack, snapshot.restart_s)

        plan = _plan_room(snapshot, job, fast, room, capacity, rank, may_stop)
        if plan is None:
            return None
        why = f"{job.job_id} would end past the makespan's bound ({bound.end:.0f}) if it waited longer"
        return _make(snapshot, job, plan, room, capacity, rank, why)


def _moves(snapshot: Snapshot, stopping: set[str]) -> tuple[tuple[Preemption, ...], list[Placement]]:
    """Running jobs moved to faster free cards (module doc, 6): their preemptions and new placements."""
    if not any(s.free_gpus for s in snapshot.nodes):
        return (), []
    movable = [
        (job_id, r)
        for job_id, r in snapshot.running.items()
        if job_id not in stopping
        and r.spec is not None
        and r.preemptible
        and r.checkpoint_interval_s
        and r.gpu_type is not None
        and r.end < math.inf
        and not is_sharing(r.spec)
    ]
    if not movable:
        return (), []
    rooms = _Rooms(snapshot)
    estimates = ChainMap({job_id: r.estimates for job_id, r in movable}, snapshot.estimates)
    capacity = Capacity(replace(snapshot, estimates=estimates))
    out: list[Preemption] = []
    placed: list[Placement] = []
    for job_id, running in sorted(movable, key=lambda m: -m[1].end):
        left = running.left_at_checkpoint(snapshot.now, running.gpu_type)
        if left is None:
            continue
        assert running.spec is not None and running.checkpoint_interval_s
        sooner = running.end - running.checkpoint_interval_s
        ends = {
            g: snapshot.now + snapshot.restart_s + left * e.runtime_s
            for g, e in running.estimates.items()
            if g != running.gpu_type and e.runtime_s < math.inf
        }
        ends = {g: t for g, t in ends.items() if t < sooner}
        if not ends:
            continue
        options = capacity.fit(running.spec, ends, rooms.rank).options
        if not options:
            continue
        best = min(options, key=lambda o: ends[o.gpu_type] + running.transfer_s.get(o.placement.cluster, 0.0))
        end = ends[best.gpu_type] + running.transfer_s.get(best.placement.cluster, 0.0)
        if end >= sooner:
            continue
        placed.append(capacity.take(best, running.spec))
        out.append(
            Preemption(
                job_id,
                job_id,
                f"rebalance: moves from {running.gpu_type} to {best.gpu_type}, "
                f"ending at {end:.0f} instead of {running.end:.0f}",
                running.cards,
                lost_gpu_s(running, snapshot.now) / 3600,
                GRACE_S,
            )
        )
    return tuple(out), placed


def makespan_bound(snapshot: Snapshot, usable: dict[str, dict[str, float]]) -> Bound:
    """No schedule of the snapshot's jobs ends before this (module doc, 1); `usable`: each queued job's
    runtimes (placement.usable_runtimes)."""
    now = snapshot.now
    latest = now
    gpu_s = 0.0
    for job in snapshot.pending:
        runtimes = usable.get(job.job_id)
        if runtimes:
            best = min(runtimes.values())
            latest = max(latest, now + best)
            gpu_s += best * job.num_gpus
    for running in snapshot.running.values():
        left = _left_now(running, now)
        if left is None:
            continue
        latest = max(latest, now + left[0])
        gpu_s += left[0] * left[1]
    cards = sum(s.node.gpu_count for s in snapshot.nodes)
    return Bound(now, max(latest, now + gpu_s / cards if cards else now))


def _elsewhere(capacity: Capacity, running: RunningJob, room: _Room, avoid: set[str], rank):
    """A free option for running job `running` on a GPU type at least as fast as its own, on no node in
    `avoid` nor held: where it may move to make room; None if none."""
    if running.spec is None or running.gpu_type not in running.estimates or is_sharing(running.spec):
        return None
    if not running.preemptible or not running.checkpoint_interval_s:
        return None
    own = running.estimates[running.gpu_type].runtime_s
    types = [g for g, e in running.estimates.items() if e.runtime_s <= own]
    for option in capacity.fit(running.spec, types, rank).options:
        keys = {f"{option.placement.cluster}/{n}" for n, _ in option.placement.nodes}
        if not keys & avoid and not room.blocks(option.placement):
            return option
    return None


def _left_now(running: RunningJob, now: float) -> tuple[float, int] | None:
    """(seconds of work left on its fastest type, cards) of a running job; None if not known."""
    if running.end == math.inf:
        return None
    cards = sum(n for _, n in running.cards)
    current = running.estimates.get(running.gpu_type) if running.gpu_type else None
    finite = [e.runtime_s for e in running.estimates.values() if e.runtime_s < math.inf]
    if current is None or not finite or running.started is None or not current.runtime_s < math.inf:
        return max(0.0, running.end - now), cards
    fraction = max(0.0, running.left - running.trained_s(now) / current.runtime_s)
    return fraction * min(finite), cards


def _affords(running: RunningJob, now: float, horizon: float, slack: float, restart_s: float) -> bool:
    """Whether a running job may be stopped for an urgent one: it checkpoints, may be preempted, and,
    restarted from its last checkpoint on any GPU type it runs on (it goes back to the queue, and may
    land on the slowest), would still end within `horizon`."""
    if not running.preemptible or not running.checkpoint_interval_s or running.gpu_type is None:
        return False
    left = running.left_at_checkpoint(now, running.gpu_type)
    finite = [e.runtime_s for e in running.estimates.values() if e.runtime_s < math.inf]
    if left is None or not finite:
        return False
    return restart_s + left * max(finite) * (1 + slack) < horizon


def _holding(running: dict, key: str) -> list[tuple[str, RunningJob]]:
    """The running jobs holding whole cards on node `key`."""
    return [(job_id, r) for job_id, r in running.items() if any(k == key for k, _ in r.cards)]


def _gather(snapshot: Snapshot, decision: Decision) -> tuple[Decision, Snapshot]:
    """The inner `decision` with each gang it starts on a slower GPU type than it could run on moved to a
    node of a faster type that running jobs free by moving to free cards elsewhere (at least as fast),
    where the GPU-seconds it saves outweigh those the moves lose; and the snapshot after all of it (what
    the moves of module doc 6 may use); module doc 5."""
    after = _after(snapshot, decision.placements)
    by_id = {j.job_id: j for j in snapshot.pending}
    gpu_of = {s.node.key: s.node.gpu_type for s in snapshot.nodes}
    capacity = Capacity(after)
    room = _Room()
    rooms = _Rooms(after)
    placements = []
    for p in decision.placements:
        job = by_id.get(p.job_id)
        if job is None or job.num_gpus < 2 or job.spread or is_sharing(job):
            placements.append(p)
            continue
        runtimes = usable_runtimes(snapshot, job)
        current = runtimes.get(gpu_of[f"{p.cluster}/{p.node}"], math.inf)
        faster = {g: t for g, t in runtimes.items() if t < current}
        plan = _plan_room(after, job, faster, room, capacity, rooms.rank, lambda _: False) if faster else None
        if plan is None or (current - faster[plan.state.node.gpu_type]) * job.num_gpus <= plan.lost_gpu_s:
            placements.append(p)
            continue
        why = f"{job.job_id} runs on {plan.state.node.gpu_type} instead of {gpu_of[f'{p.cluster}/{p.node}']}"
        placement, _ = _make(after, job, plan, room, capacity, rooms.rank, why)
        room.reserve(placement)
        placements.append(placement)
    if not room.stops:
        return decision, after
    moved = [(r.spec, p) for r, p in room.moved.values()]
    placed = [(by_id[p.job_id], p) for p in placements]
    nodes = hold_cards(release_cards(snapshot.nodes, room.stops, snapshot.running), [*placed, *moved])
    running = {j: r for j, r in snapshot.running.items() if j not in room.stops}
    decision = replace(
        decision,
        placements=(*placements, *(p for _, p in moved)),
        preemptions=(*decision.preemptions, *room.stops.values()),
    )
    return decision, replace(snapshot, nodes=nodes, running=running)


def _after(snapshot: Snapshot, placements) -> Snapshot:
    """`snapshot` with `placements`' cards taken (what the moves may use)."""
    by_id = {j.job_id: j for j in snapshot.pending}
    placed = [(by_id[p.job_id], p) for p in placements if p.job_id in by_id]
    return replace(snapshot, nodes=hold_cards(snapshot.nodes, placed)) if placed else snapshot


@dataclass
class _Plan:
    """How to free one node for a job: the running jobs to stop or move (with the free option each moves
    to, None = stop), and the GPU-seconds they lose."""

    state: NodeState
    victims: list[tuple[str, RunningJob, Option | None]]
    lost_gpu_s: float


def _plan_room(snapshot: Snapshot, job: JobSpec, types, room: _Room, capacity: Capacity, rank, may_stop):
    """The cheapest `_Plan` to free a node of one of `types` for `job` (one node, whole cards): running jobs
    `may_stop` allows are stopped, others that checkpoint move to a free card at least as fast elsewhere;
    None if no node can be freed."""
    best: _Plan | None = None
    for state in snapshot.nodes:
        node = state.node
        if node.gpu_type not in types or not holds_when_free(snapshot, job, node):
            continue
        free = room.free(state)
        victims: list[tuple[str, RunningJob, Option | None]] = []
        targets: set[str] = {node.key}
        for job_id, running in sorted(
            _holding(snapshot.running, node.key), key=lambda v: lost_gpu_s(v[1], snapshot.now)
        ):
            if free >= job.num_gpus:
                break
            if job_id in room.stops:
                continue
            option = None
            if not may_stop(running):
                option = _elsewhere(capacity, running, room, targets, rank)
                if option is None:
                    continue
                targets.update(f"{option.placement.cluster}/{n}" for n, _ in option.placement.nodes)
            victims.append((job_id, running, option))
            free += sum(c for key, c in running.cards if key == node.key)
        if free < job.num_gpus:
            continue
        lost = sum(lost_gpu_s(v, snapshot.now) + snapshot.restart_s * _cards(v) for _, v, _ in victims)
        if best is None or lost < best.lost_gpu_s:
            best = _Plan(state, victims, lost)
    return best


def _make(
    snapshot: Snapshot, job: JobSpec, plan: _Plan, room: _Room, capacity: Capacity, rank, why: str
) -> tuple[Placement, str]:
    """Carry out `plan` in `room` (the stops and moves, each move's card taken) and return `job`'s
    placement on the freed node and its GPU type."""
    state = plan.state
    for job_id, running, option in plan.victims:
        # the free card found for a job to move to is taken now (another one if an earlier move took it)
        option = option and _elsewhere(capacity, running, room, {state.node.key}, rank)
        lost = lost_gpu_s(running, snapshot.now) / 3600
        if option is not None:
            assert running.spec is not None
            where = f"{option.placement.cluster}/{option.placement.node}"
            stop = Preemption(
                job_id, job_id, f"rebalance: moves to {where}: {why}", running.cards, lost, GRACE_S
            )
            room.move(stop, running, capacity.take(option, running.spec))
        else:
            room.stop(
                Preemption(job_id, job.job_id, f"rebalance: {why}", running.cards, lost, GRACE_S), running
            )
    return Placement(job.job_id, state.node.cluster, state.node.name, job.num_gpus), state.node.gpu_type


def _resumed(
    running: RunningJob, placement: Placement, gpu_of: dict[str, str], snapshot: Snapshot
) -> RunningJob:
    """`running` as it runs again from its last checkpoint on `placement`: its cards and predicted end."""
    cards = tuple((f"{placement.cluster}/{n}", c) for n, c in placement.nodes)
    gpu = gpu_of[cards[0][0]]
    left = running.left_at_checkpoint(snapshot.now, running.gpu_type or "")
    estimate = running.estimates.get(gpu)
    if left is None or estimate is None:
        return replace(running, cards=cards, gpu_type=gpu)
    restart = snapshot.restart_s
    end = snapshot.now + restart + left * estimate.runtime_s
    return replace(
        running, end=end, cards=cards, gpu_type=gpu, started=snapshot.now, left=left, restart_s=restart
    )


def _cards(running: RunningJob) -> int:
    return sum(n for _, n in running.cards)


class _Rooms:
    """When a gang of n cards of a GPU type next finds room on one node, by the running jobs' predicted
    ends (worked out once per type and width in a round)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._ends: dict[str, list[tuple[float, int]]] = {}
        for running in snapshot.running.values():
            for key, cards in running.cards:
                self._ends.setdefault(key, []).append((running.end, cards))
        self._delay: dict[tuple[str, int], float] = {}
        self._last: dict[str, float] = {key: max(end for end, _ in ends) for key, ends in self._ends.items()}

    def rank(self, room: Room) -> tuple[int, float, int]:
        """Order of the nodes a long job may take: the smallest nodes first (they never hold the widest
        gangs), then where the jobs running end last, then best fit. Long jobs gather on the same nodes,
        and the wide nodes of short jobs soon free whole for wide gangs."""
        return (room.node.gpu_count, -self._last.get(room.node.key, self.snapshot.now), room.free)

    def delay(self, gpu_type: str, n: int, horizon: float) -> float:
        """Seconds from now until some node of `gpu_type` has `n` cards free (at most `horizon`; `horizon`
        when none ever will by the predictions)."""
        key = (gpu_type, n)
        if key not in self._delay:
            self._delay[key] = min((self._room_at(s, n) for s in self._nodes(gpu_type, n)), default=horizon)
        return min(self._delay[key], horizon)

    def _nodes(self, gpu_type: str, n: int) -> list[NodeState]:
        return [s for s in self.snapshot.nodes if s.node.gpu_type == gpu_type and s.node.gpu_count >= n]

    def _room_at(self, state: NodeState, n: int) -> float:
        """Seconds from now until `state`'s node has `n` cards free by the running jobs' predicted ends."""
        free, at = state.free_gpus, self.snapshot.now
        for end, cards in sorted(self._ends.get(state.node.key, ())):
            if free >= n:
                break
            free, at = free + cards, end
        return max(0.0, at - self.snapshot.now) if free >= n else math.inf


class _Room:
    """What the urgent starts did to the nodes: the jobs stopped (and the cards they free), the cards the
    urgent jobs took."""

    def __init__(self) -> None:
        self.stops: dict[str, Preemption] = {}
        self.moved: dict[str, tuple[RunningJob, Placement]] = {}
        """job_id -> (the running job, its new placement) of each job moved to make room."""
        self._freed: dict[str, int] = {}
        self._reserved: set[str] = set()
        self._taken: dict[str, int] = {}

    def stop(self, preemption: Preemption, running: RunningJob) -> None:
        """Book `running` stopped by `preemption`: its cards free."""
        self.stops[preemption.job_id] = preemption
        for key, cards in running.cards:
            self._freed[key] = self._freed.get(key, 0) + cards

    def book(self, placement: Placement) -> None:
        """Book the cards an urgent job takes."""
        for node, cards in placement.nodes:
            key = f"{placement.cluster}/{node}"
            self._taken[key] = self._taken.get(key, 0) + cards

    def free(self, state: NodeState) -> int:
        """Cards free on the node after the stops and the urgent starts so far."""
        key = state.node.key
        return state.free_gpus + self._freed.get(key, 0) - self._taken.get(key, 0)

    def move(self, preemption: Preemption, running: RunningJob, placement: Placement) -> None:
        """Book `running` moved by `preemption` to `placement`: its old cards free, its new ones taken."""
        self.stop(preemption, running)
        self.moved[preemption.job_id] = (running, placement)
        self.book(placement)

    def reserve(self, placement: Placement) -> None:
        """Book a placement the capacity does not know of: no move goes to its nodes."""
        self.book(placement)
        self._reserved.update(f"{placement.cluster}/{node}" for node, _ in placement.nodes)

    def blocks(self, placement: Placement) -> bool:
        """Whether `placement` uses a node where jobs were stopped or moved from (whose free cards the
        capacity does not count as the stops left them), or one reserved."""
        keys = {f"{placement.cluster}/{node}" for node, _ in placement.nodes}
        return bool(keys & self._reserved) or any(k in self._freed for k in keys)
