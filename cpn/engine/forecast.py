"""The forward look: when each waiting job should start and end, by running the policy itself forward.

After a round's decision, `look` replays the policy on a copy of the snapshot in simulated time: the
round's placements start now (once their transfer is done), running jobs end at their predicted ends
(`Snapshot.running`), a placed job runs for its estimated runtime on the GPU type it was placed on, a
service (`JobSpec.is_service`) never ends, and nothing new arrives. At every simulated end the policy
decides again on what is then free; the time it places a job (plus the job's transfer to the cluster)
is the job's predicted start. Policies are pure functions of the snapshot, so the plan is the one the
production policy would carry out if the estimates held. At each end the policy is asked only about the
jobs its declared traits say its decision depends on (cpn.engine.look_queue): the same decision as on the
whole queue, at a cost that follows what can start rather than the queue's length.

Each prediction carries an interval from the estimates' spread (`Estimate.uncertainty`, symmetric in
log space): a job's runtime lies in [r / (1 + u), r x (1 + u)], a start lies between the earliest and
the latest of the ends that freed its cards, and the spread adds up along a chain of jobs.

`Forecaster` keeps the latest look and reuses it while nothing it depended on changed (no arrival, no
end earlier or later than predicted, the same nodes, the decision the look predicted for now): with
exact estimates and no arrivals, a replay looks forward once per arrival, not once per round. When only
arrivals changed, the new look follows the last one's decisions without asking the policy up to the
first simulated end where an arrival could start (`_Follow`: what the policy declares of itself,
`queue_order` and `skips_blocked`, says when an arrival cannot change an end's decision), and asks the
policy from there on. When it looks again, each prediction that moved says why (`Waiting.moved`).

A policy that plans over time itself (`keeps_plan`, the optimiser) is not looked forward with: its
plan's predicted starts are kept.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from cpn.booking import Booking
from cpn.decisions import Decision, Estimate, Placement, RunningJob, Snapshot, Waiting, shape_of
from cpn.engine.look_queue import FIRST_PART, LookQueue, asked_whole
from cpn.inventory import NodeState
from cpn.jobs import JobSpec
from cpn.policies.base import Policy
from cpn.policies.placement import Capacity, job_memory_gb
from cpn.rules import is_sharing

LIVE_SHARE = 0.2
"""Share of the wall time the live service's forward look may take (`Forecaster.max_share`): a look that
cost 2 s is not run again for 10 s, so rounds keep their pace with any queue."""

EPS_S = 1e-6
"""Times closer than this (seconds) are the same moment."""

MOVED_NAMES = 3
"""Jobs named at most in one reason a prediction moved (the rest are counted)."""


@dataclass(frozen=True)
class Forecast:
    """When the forward look starts and ends one job, and the interval its start lies in."""

    start: float
    end: float
    """inf for a service, and for a job with no estimate on the GPU type it is placed on."""
    low: float
    """Earliest start the estimates' spread allows."""
    high: float
    """Latest start the estimates' spread allows."""


@dataclass
class Outlook:
    """One forward look: a forecast per job it places, and what it assumed, to tell when it still holds."""

    now: float
    forecasts: dict[str, Forecast] = field(default_factory=dict)
    placed_at: dict[str, float] = field(default_factory=dict)
    """job_id -> simulated time the policy places it (its start less its transfer)."""
    ends: dict[str, float] = field(default_factory=dict)
    """job_id -> predicted end of every job the look has running (running at `now`, or placed by it)."""
    jobs: frozenset[str] = frozenset()
    """The queued jobs it looked at."""
    nodes: tuple = ()
    """The nodes it ran on."""
    estimates: Mapping[str, Mapping[str, Estimate]] = field(default_factory=dict)
    """The estimates it ran on."""
    steps: list[tuple[float, Decision]] = field(default_factory=list)
    """The policy's decision at each simulated end after `now`, in time order: what a later look follows
    while nothing it depended on changed (`look`'s `prior`)."""


class _Cluster:
    """The node states of a forward look, booked and freed as simulated jobs start and end."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.states = list(snapshot.nodes)
        self.index = {s.node.key: i for i, s in enumerate(self.states)}
        self.by_name = {(s.node.cluster, s.node.name): i for i, s in enumerate(self.states)}
        self.free_cards = sum(s.free_gpus for s in self.states)
        self.shared_cards = sum(len(s.shared) for s in self.states)
        self.held: dict[str, list[tuple[int, Booking]]] = {}
        """job_id -> (node index, booking) of each node it holds."""

    def gpu_type(self, cluster: str, node: str) -> str:
        return self.states[self.by_name[(cluster, node)]].node.gpu_type

    def book(self, job: JobSpec, placement: Placement, mem_gb: float) -> None:
        """Take `placement`'s cards and CPU for `job` (a sharing job joins or opens a shared card)."""
        held = []
        for name, cards in placement.nodes:
            i = self.by_name[(placement.cluster, name)]
            booking = Booking.on(self.states[i], job, cards, mem_gb)
            self._set(i, booking.take(self.states[i]))
            held.append((i, booking))
        self.held[job.job_id] = held

    def hold_running(self, job_id: str, running: RunningJob) -> None:
        """Record the whole cards a job running at the look's start holds, to free at its end; its CPU is
        taken as its cards' share of what the node has in use (the snapshot does not say its CPU)."""
        held = []
        for key, cards in running.cards:
            i = self.index.get(key)
            if i is not None:
                held.append((i, Booking.running(job_id, cards, self.states[i])))
        self.held[job_id] = held

    def has_room(self) -> bool:
        """Whether any node has a free card, or a shared card (which may have share left)."""
        return self.free_cards > 0 or self.shared_cards > 0

    def _set(self, i: int, state: NodeState) -> None:
        """Replace node `i`'s state, keeping the counts `has_room` reads."""
        old = self.states[i]
        self.free_cards += state.free_gpus - old.free_gpus
        self.shared_cards += len(state.shared) - len(old.shared)
        self.states[i] = state

    def free(self, job_id: str) -> None:
        """Give back what `job_id` holds."""
        for i, booking in self.held.pop(job_id, ()):
            self._set(i, booking.give_back(self.states[i]))


def look(policy: Policy, snapshot: Snapshot, decision: Decision, prior: Outlook | None = None) -> Outlook:
    """Run `policy` forward from `snapshot`, after `decision` (this round's), until every queued job is
    placed or nothing more ends; returns a forecast per job it places (see the module doc).

    `prior`: an earlier look whose plan still holds but for the jobs that arrived since (`Forecaster`
    checks): its decisions are followed, without asking the policy, up to the first simulated end at
    which an arrival could start (see `_Follow`); the policy decides from there on."""
    now = snapshot.now
    out = Outlook(
        now,
        jobs=frozenset(j.job_id for j in snapshot.pending),
        nodes=_node_set(snapshot),
        estimates=snapshot.estimates,
    )
    cluster = _Cluster(snapshot)
    running = dict(snapshot.running)
    spread: dict[str, tuple[float, float]] = {}
    """job_id -> (earliest, latest) end of each job the look has running."""
    events: list[tuple[float, str]] = []
    for job_id, job in snapshot.running.items():
        cluster.hold_running(job_id, job)
        end = max(job.end, now)
        out.ends[job_id] = end
        u = _running_uncertainty(snapshot, job_id, job, cluster)
        spread[job_id] = (now + (end - now) / (1 + u), now + (end - now) * (1 + u))
        if end < math.inf:
            heapq.heappush(events, (end, job_id))
    by_id = {j.job_id: j for j in snapshot.pending}
    pending = LookQueue(snapshot)
    follow = _Follow.of(policy, snapshot, decision, prior)
    t, low, high = now, now, now

    def carry_out(decision: Decision, current: Snapshot) -> None:
        for placement in decision.placements:
            job = by_id.get(placement.job_id)
            if job is None or placement.job_id not in pending:
                continue
            pending.drop(placement.job_id)
            forecast, u_end = _start(current, job, placement, cluster, (low, high))
            out.placed_at[job.job_id] = t
            out.forecasts[job.job_id] = forecast
            out.ends[job.job_id] = forecast.end
            spread[job.job_id] = u_end
            running[job.job_id] = RunningJob(forecast.end, _whole_cards(job, placement))
            if forecast.end < math.inf:
                heapq.heappush(events, (forecast.end, job.job_id))
        for rejection in decision.rejections:
            if rejection.job_id in pending:
                pending.drop(rejection.job_id)

    def asked(jobs: tuple[JobSpec, ...], shapes: tuple[JobSpec, ...]) -> Snapshot:
        """The look's snapshot at `t` with `jobs` queued."""
        return _state(snapshot, t, jobs, cluster, running, shapes if snapshot.shapes is not None else None)

    def decide() -> Decision:
        """The policy's decision at the end at `t` on the whole queue, carried out: asked about the jobs
        it can depend on, a part at a time where it keeps the queue's order (cpn.engine.look_queue)."""
        traits = policy.traits
        if asked_whole(traits, snapshot.teams is not None):
            current = asked(pending.whole(), pending.shapes())
            decision = policy.decide(current)
            carry_out(decision, current)
            return decision
        placements: list[Placement] = []
        rejections: list = []
        after, size = None, FIRST_PART
        while pending:
            capacity = Capacity(asked((), ())) if traits.skips_blocked else None
            if traits.queue_order:
                jobs = pending.part(after, size, capacity)
            else:
                jobs = pending.may_start(capacity)
            if not jobs:
                break
            after = pending.rank[jobs[-1].job_id]
            current = asked(jobs, _shapes(jobs))
            part = policy.decide(current)
            carry_out(part, current)
            placements += part.placements
            rejections += part.rejections
            if not traits.queue_order or len(jobs) < size:
                break
            if not traits.skips_blocked and len(part.placements) + len(part.rejections) < len(jobs):
                break  # a job waits, and so does every job behind it
            if not cluster.has_room():
                break
            size *= 2
        return Decision(placements=tuple(placements), rejections=tuple(rejections))

    carry_out(decision, snapshot)
    while pending and events:
        t = events[0][0]
        low, high = math.inf, -math.inf
        while events and events[0][0] <= t + EPS_S:
            _, job_id = heapq.heappop(events)
            cluster.free(job_id)
            running.pop(job_id, None)
            low, high = min(low, spread[job_id][0]), max(high, spread[job_id][1])
        decision = None
        if follow is not None:
            current = asked((), ())
            decision = follow.decision_at(t, policy, current, pending)
            if decision is None:
                follow = None
            else:
                carry_out(decision, current)
        if decision is None:
            decision = decide()
        if follow is not None and follow.behind:
            # every arrival comes after every other job: it takes what the followed decision left
            after = _state(snapshot, t, (), cluster, running, None)
            extra = follow.arrivals_now(policy, after, pending)
            if extra is not None:
                follow = None
                carry_out(extra, after)
                decision = replace(
                    decision,
                    placements=(*decision.placements, *extra.placements),
                    rejections=(*decision.rejections, *extra.rejections),
                )
        out.steps.append((t, decision))
    return out


def _state(
    snapshot: Snapshot,
    t: float,
    pending: tuple[JobSpec, ...],
    cluster: _Cluster,
    running: dict[str, RunningJob],
    shapes: tuple[JobSpec, ...] | None,
) -> Snapshot:
    """The look's snapshot at simulated time `t` with `pending` queued."""
    return replace(
        snapshot,
        now=t,
        pending=pending,
        nodes=tuple(cluster.states),
        running=MappingProxyType(running),
        explain=False,
        fresh=(),
        shapes=shapes,
    )


def _shapes(jobs: tuple[JobSpec, ...]) -> tuple[JobSpec, ...]:
    """One of `jobs` of each shape (`Snapshot.shapes`)."""
    return tuple({shape_of(job): job for job in reversed(jobs)}.values())


@dataclass
class _Follow:
    """Following an earlier look's decisions while the jobs that arrived since cannot change them.

    A policy that declares `queue_order` (it takes the queue in `by_priority` order, each job on what
    the jobs ahead of it left) decides the jobs ahead of an arrival as if it were not there: when every
    arrival comes after every other job, an end's decision is the followed one plus what the policy
    makes of the arrivals on what that left (nothing, for one that does not `skip_blocked`, while any
    older job still waits ahead of them). A policy that declares `skips_blocked` (a job it cannot
    start now is passed over and changes nothing for the rest) decides as before at an end where the
    arrivals cannot start even alone on what is free. Any other policy, or teams (their order is not
    the queue's), is looked at afresh."""

    steps: list[tuple[float, Decision]]
    arrivals: list[JobSpec]
    behind: bool
    """Every arrival comes after every other queued job in the policy's order."""
    blocks: bool
    """The policy waits for a job it cannot start (it does not skip it)."""
    at: int = 0

    @classmethod
    def of(
        cls, policy: Policy, snapshot: Snapshot, decision: Decision, prior: Outlook | None
    ) -> _Follow | None:
        """How a look after `decision` follows `prior`; None where it cannot (nothing to follow, teams,
        a round that starts an arrival, or a policy that declares neither trait)."""
        if prior is None or snapshot.teams is not None:
            return None
        arrivals = [j for j in snapshot.pending if j.job_id not in prior.jobs]
        new = {j.job_id for j in arrivals}
        if any(p.job_id in new for p in decision.placements):
            return None
        in_order = policy.traits.queue_order
        skips = policy.traits.skips_blocked
        old = [j for j in snapshot.pending if j.job_id not in new]
        queue = snapshot.pending
        first_new = next((i for i, j in enumerate(queue) if j.job_id in new), len(queue))
        behind = (
            in_order
            and all(j.job_id in new for j in queue[first_new:])
            and max((j.priority for j in arrivals), default=0) <= min((j.priority for j in old), default=0)
        )
        if not behind and not skips:
            return None
        steps = [s for s in prior.steps if s[0] > snapshot.now + EPS_S]
        return cls(steps, arrivals, behind, not skips)

    def left(self, pending: LookQueue) -> tuple[JobSpec, ...]:
        return tuple(j for j in self.arrivals if j.job_id in pending)

    def decision_at(self, t: float, policy: Policy, current: Snapshot, pending: LookQueue) -> Decision | None:
        """The followed decision at the end at `t`; None when the look must ask the policy from here."""
        if self.at >= len(self.steps) or abs(self.steps[self.at][0] - t) > EPS_S:
            return None
        _, decision = self.steps[self.at]
        self.at += 1
        if not self.behind and _decides(policy, replace(current, pending=self.left(pending), shapes=None)):
            return None
        return decision

    def arrivals_now(self, policy: Policy, after: Snapshot, pending: LookQueue) -> Decision | None:
        """What the policy makes of the arrivals on what the followed decision left (`after`), when that
        is anything: the rest of that end's decision."""
        arrivals = self.left(pending)
        if not arrivals or (self.blocks and len(pending) > len(arrivals)):
            return None
        return _decides(policy, replace(after, pending=arrivals))


def _decides(policy: Policy, snapshot: Snapshot) -> Decision | None:
    """`policy`'s decision on `snapshot` when it starts or rejects any job, else None (a count of free
    cards first: a job wider than all the free cards together cannot start)."""
    if not snapshot.pending:
        return None
    free = sum(s.free_gpus for s in snapshot.nodes)
    if not any(is_sharing(j) for j in snapshot.pending) and free < min(j.num_gpus for j in snapshot.pending):
        return None
    decision = policy.decide(snapshot)
    return decision if decision.placements or decision.rejections else None


def _start(
    snapshot: Snapshot, job: JobSpec, placement: Placement, cluster: _Cluster, released: tuple[float, float]
) -> tuple[Forecast, tuple[float, float]]:
    """Book `placement` for `job` at the snapshot's time; its forecast and its end's interval."""
    gpu = cluster.gpu_type(placement.cluster, placement.node)
    estimate = snapshot.estimates.get(job.job_id, {}).get(gpu)
    cluster.book(job, placement, job_memory_gb(job, snapshot.estimates, gpu) or 0.0)
    transfer = snapshot.transfer_s.get(job.job_id, {}).get(placement.cluster, 0.0)
    start = snapshot.now + transfer
    low, high = released[0] + transfer, released[1] + transfer
    if job.is_service or estimate is None:
        return Forecast(start, math.inf, low, high), (math.inf, math.inf)
    r, u = estimate.runtime_s, estimate.uncertainty
    return Forecast(start, start + r, low, high), (low + r / (1 + u), high + r * (1 + u))


def _whole_cards(job: JobSpec, placement: Placement) -> tuple[tuple[str, int], ...]:
    if is_sharing(job):
        return ()
    return tuple((f"{placement.cluster}/{node}", cards) for node, cards in placement.nodes)


def _running_uncertainty(snapshot: Snapshot, job_id: str, job: RunningJob, cluster: _Cluster) -> float:
    """The spread of a running job's estimate on the GPU type it runs on; 0 when the snapshot has none."""
    row = snapshot.estimates.get(job_id)
    if not row or not job.cards:
        return 0.0
    i = cluster.index.get(job.cards[0][0])
    estimate = None if i is None else row.get(cluster.states[i].node.gpu_type)
    return estimate.uncertainty if estimate is not None else 0.0


def _node_set(snapshot: Snapshot) -> tuple:
    return tuple(s.node for s in snapshot.nodes)


class Forecaster:
    """Forward looks for one scheduler, round after round: reuses the last while it holds, and says why a
    prediction moved when it looks again.

    `keep_plan`: keep the predicted starts the policy's own decisions give (a plan over time, as the
    optimiser's) rather than looking forward with the policy; None = as the policy says of itself
    (`keeps_plan`). On the 300-job cut of docs/service.md the optimiser's own plan predicted better than a
    look with greedy in its place.
    """

    def __init__(self, policy: Policy, keep_plan: bool | None = None, max_share: float | None = None) -> None:
        self.policy = policy
        self.keep_plan = policy.traits.keeps_plan if keep_plan is None else keep_plan
        self.max_share = max_share
        """At most this share of the wall time goes to looking forward (None: look whenever the last look no
        longer holds). The live service sets it so that a long queue, whose look costs seconds, never holds up
        its rounds: between looks, jobs keep the last look's predictions and jobs new since get none yet."""
        self._next_look_at = 0.0
        self.last: Outlook | None = None
        self.looks = 0
        """Forward looks run (rounds that reused the last look do not count)."""
        self.followed = 0
        """Of `looks`, those that followed the last look up to where the jobs that arrived since count."""
        self.spent_s = 0.0
        """Wall time spent in `apply`, all rounds together (what the forward look costs)."""
        self.spent_cpu_s = 0.0
        """CPU time of this process spent in `apply`: what the look costs on a machine shared with others."""

    def apply(self, snapshot: Snapshot, decision: Decision) -> Decision:
        """`decision` with a predicted start, end, interval and, where it moved, why, in the waiting record
        of every queued job it leaves waiting (a record of code `queue-order` where the policy gave none,
        as in rounds that do not explain)."""
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return self._apply(snapshot, decision)
        finally:
            self.spent_s += time.perf_counter() - started
            self.spent_cpu_s += time.process_time() - cpu

    def _apply(self, snapshot: Snapshot, decision: Decision) -> Decision:
        if not snapshot.pending:
            return decision
        if self.keep_plan:
            return decision
        previous = self.last
        moved: dict[str, str] = {}
        holds = previous is not None and _holds(previous, snapshot, decision)
        stale = not holds or any(j.job_id not in previous.jobs for j in snapshot.pending)
        if stale and (previous is None or time.monotonic() >= self._next_look_at):
            started = time.monotonic()
            self.last = look(self.policy, snapshot, decision, previous if holds else None)
            if self.max_share:
                cost = time.monotonic() - started
                self._next_look_at = started + cost / self.max_share
            self.looks += 1
            self.followed += holds
            if previous is not None:
                moved = _why_moved(previous, self.last, snapshot)
        outlook = self.last
        gone = {p.job_id for p in decision.placements} | {r.job_id for r in decision.rejections}
        given = {w.job_id: w for w in decision.waiting}
        waiting = []
        for job in snapshot.pending:
            if job.job_id in gone:
                continue
            w = given.get(job.job_id) or Waiting(job.job_id, "queue-order")
            f = outlook.forecasts.get(job.job_id)
            if f is not None:
                w = replace(
                    w,
                    predicted_start=f.start,
                    predicted_end=f.end,
                    start_low=f.low,
                    start_high=f.high,
                    moved=moved.get(job.job_id, ""),
                )
            waiting.append(w)
        return replace(decision, waiting=tuple(waiting))


def _holds(outlook: Outlook, snapshot: Snapshot, decision: Decision) -> bool:
    """Whether the state now is the one `outlook` predicted for now, but for jobs that arrived since: the
    jobs it placed by now gone from the queue, the queued jobs it saw estimated as it saw them, every
    job running that it has running and ending when it said, the same nodes, and this round placing of
    the jobs it saw what it placed for now and rejecting none."""
    t = snapshot.now
    if decision.rejections or _node_set(snapshot) != outlook.nodes:
        return False
    for job in snapshot.pending:
        if job.job_id not in outlook.jobs:
            continue
        if outlook.placed_at.get(job.job_id, math.inf) < t - EPS_S:
            return False
        if snapshot.estimates.get(job.job_id) != outlook.estimates.get(job.job_id):
            return False
    placed_now = {j for j, at in outlook.placed_at.items() if abs(at - t) <= EPS_S}
    if {p.job_id for p in decision.placements if p.job_id in outlook.jobs} != placed_now:
        return False
    for job_id, job in snapshot.running.items():
        end = outlook.ends.get(job_id)
        if end is None or abs(max(job.end, t) - end) > EPS_S:
            return False
    expected = sum(
        1
        for j, end in outlook.ends.items()
        if end > t + EPS_S and outlook.placed_at.get(j, -math.inf) < t - EPS_S
    )
    return expected == sum(1 for j in snapshot.running if outlook.ends.get(j, 0.0) > t + EPS_S)


def _why_moved(before: Outlook, after: Outlook, snapshot: Snapshot) -> dict[str, str]:
    """job_id -> why its predicted start moved between two looks: what changed that it depends on (a
    higher-priority arrival, a job ending earlier or later than predicted, the nodes), or, failing
    those, the arrivals the policy now fits in around it."""
    t = snapshot.now
    arrivals = [j for j in snapshot.pending if j.job_id not in before.jobs]
    ended_early = [
        j
        for j, end in before.ends.items()
        if end > t + EPS_S and before.placed_at.get(j, -math.inf) < t - EPS_S and j not in snapshot.running
    ]
    late, changed = [], []
    for job_id, job in snapshot.running.items():
        end = before.ends.get(job_id)
        if end is not None and end < t - EPS_S:
            late.append(job_id)
        elif end is not None and abs(max(job.end, t) - end) > EPS_S:
            changed.append(job_id)
    common = []
    if ended_early:
        common.append(f"{_names(ended_early)} ended earlier than predicted")
    if late:
        common.append(f"{_names(late)} ran longer than predicted")
    if changed:
        common.append(f"the predicted end of {_names(changed)} changed")
    if _node_set(snapshot) != before.nodes:
        common.append("the clusters' nodes changed")
    out: dict[str, str] = {}
    for job in snapshot.pending:
        old, new = before.forecasts.get(job.job_id), after.forecasts.get(job.job_id)
        if old is None or (new is not None and abs(new.start - old.start) <= EPS_S):
            continue
        why = list(common)
        ahead = [a.job_id for a in arrivals if a.priority > job.priority]
        if ahead:
            why.insert(0, f"{_names(ahead)} arrived with higher priority")
        if not why:
            why.append(f"{_names([a.job_id for a in arrivals])} arrived" if arrivals else "the plan changed")
        out[job.job_id] = "; ".join(why)
    return out


def _names(job_ids: list[str]) -> str:
    shown = ", ".join(job_ids[:MOVED_NAMES])
    more = len(job_ids) - MOVED_NAMES
    return f"{shown} and {more} more" if more > 0 else shown
