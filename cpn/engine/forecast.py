"""The forward look: when each waiting job should start and end, by running the policy itself forward.

After a round's decision, `look` replays the policy on a copy of the snapshot in simulated time: the
round's placements start now (once their transfer is done), running jobs end at their predicted ends
(`Snapshot.running`), a placed job runs for its estimated runtime on the GPU type it was placed on, a
service (`JobSpec.is_service`) never ends, and nothing new arrives. At every simulated end the policy
decides again on what is then free; the time it places a job (plus the job's transfer to the cluster)
is the job's predicted start. Policies are pure functions of the snapshot, so the plan is the one the
production policy would carry out if the estimates held.

Each prediction carries an interval from the estimates' spread (`Estimate.uncertainty`, symmetric in
log space): a job's runtime lies in [r / (1 + u), r x (1 + u)], a start lies between the earliest and
the latest of the ends that freed its cards, and the spread adds up along a chain of jobs.

`Forecaster` keeps the latest look and reuses it while nothing it depended on changed (no arrival, no
end earlier or later than predicted, the same nodes, the decision the look predicted for now): with
exact estimates and no arrivals, a replay looks forward once per arrival, not once per round. When it
looks again, each prediction that moved says why (`Waiting.moved`).
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from cpn.decisions import Decision, Placement, RunningJob, Snapshot, Waiting
from cpn.inventory import NodeState, SharedCard
from cpn.jobs import JobSpec
from cpn.policies.base import Policy
from cpn.policies.placement import job_memory_gb
from cpn.rules import SHARE_EPS, gang_cpu, is_sharing, pick_shared_card

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


class _Cluster:
    """The node states of a forward look, booked and freed as simulated jobs start and end."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.states = list(snapshot.nodes)
        self.index = {s.node.key: i for i, s in enumerate(self.states)}
        self.by_name = {(s.node.cluster, s.node.name): i for i, s in enumerate(self.states)}
        self.held: dict[str, list[tuple[int, int, float, int | None, float, float]]] = {}
        """job_id -> (node index, cards, CPU, shared card index, share, GB) it holds on each node."""

    def gpu_type(self, cluster: str, node: str) -> str:
        return self.states[self.by_name[(cluster, node)]].node.gpu_type

    def book(self, job: JobSpec, placement: Placement, mem_gb: float) -> None:
        """Take `placement`'s cards and CPU for `job` (a sharing job joins or opens a shared card)."""
        held = []
        for name, cards in placement.nodes:
            i = self.by_name[(placement.cluster, name)]
            state = self.states[i]
            cpu = gang_cpu(job, cards)
            card = None
            share = job.gpu_share or 1.0
            if is_sharing(job):
                shared = list(state.shared)
                pos = pick_shared_card([(c.free_share, c.free_memory_gb) for c in shared], share, mem_gb)
                if pos is not None:
                    c = shared[pos]
                    shared[pos] = replace(
                        c, free_share=c.free_share - share, free_memory_gb=c.free_memory_gb - mem_gb
                    )
                    card, free = c.index, state.free_gpus
                else:
                    card = max((c.index for c in shared), default=-1) + 1
                    shared.append(SharedCard(card, 1.0 - share, state.node.gpu_memory_gb - mem_gb))
                    free = state.free_gpus - 1
                state = replace(state, free_gpus=free, shared=tuple(shared))
            else:
                state = replace(state, free_gpus=state.free_gpus - cards)
            self.states[i] = replace(
                state, cpu_used=state.cpu_used + cpu, running=(*state.running, job.job_id)
            )
            held.append((i, cards, cpu, card, share, mem_gb))
        self.held[job.job_id] = held

    def hold_running(self, job_id: str, running: RunningJob) -> None:
        """Record the whole cards a job running at the look's start holds, to free at its end; its CPU is
        taken as its cards' share of what the node has in use (the snapshot does not say its CPU)."""
        held = []
        for key, cards in running.cards:
            i = self.index.get(key)
            if i is None:
                continue
            state = self.states[i]
            busy = state.node.gpu_count - state.free_gpus - len(state.shared)
            cpu = state.cpu_used * cards / busy if busy > 0 else 0.0
            held.append((i, cards, cpu, None, 1.0, 0.0))
        self.held[job_id] = held

    def free(self, job_id: str) -> None:
        """Give back what `job_id` holds."""
        for i, cards, cpu, card, share, gb in self.held.pop(job_id, ()):
            state = self.states[i]
            free = state.free_gpus
            shared = state.shared
            if card is None:
                free += cards
            else:
                kept = []
                for c in shared:
                    if c.index == card:
                        c = replace(c, free_share=c.free_share + share, free_memory_gb=c.free_memory_gb + gb)
                        if c.free_share >= 1.0 - SHARE_EPS:
                            free += 1
                            continue
                    kept.append(c)
                shared = tuple(kept)
            running = tuple(j for j in state.running if j != job_id)
            self.states[i] = NodeState(state.node, free, max(0.0, state.cpu_used - cpu), running, shared)


def look(policy: Policy, snapshot: Snapshot, decision: Decision) -> Outlook:
    """Run `policy` forward from `snapshot`, after `decision` (this round's), until every queued job is
    placed or nothing more ends; returns a forecast per job it places (see the module doc)."""
    now = snapshot.now
    out = Outlook(now, jobs=frozenset(j.job_id for j in snapshot.pending), nodes=_node_set(snapshot))
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
    pending = dict.fromkeys(by_id)
    current = snapshot
    t, low, high = now, now, now
    while True:
        for placement in decision.placements:
            job = by_id.get(placement.job_id)
            if job is None or placement.job_id not in pending:
                continue
            del pending[placement.job_id]
            forecast, u_end = _start(current, job, placement, cluster, (low, high))
            out.placed_at[job.job_id] = t
            out.forecasts[job.job_id] = forecast
            out.ends[job.job_id] = forecast.end
            spread[job.job_id] = u_end
            running[job.job_id] = RunningJob(forecast.end, _whole_cards(job, placement))
            if forecast.end < math.inf:
                heapq.heappush(events, (forecast.end, job.job_id))
        for rejection in decision.rejections:
            pending.pop(rejection.job_id, None)
        if not pending or not events:
            return out
        t = events[0][0]
        low, high = math.inf, -math.inf
        while events and events[0][0] <= t + EPS_S:
            _, job_id = heapq.heappop(events)
            cluster.free(job_id)
            running.pop(job_id, None)
            low, high = min(low, spread[job_id][0]), max(high, spread[job_id][1])
        current = replace(
            snapshot,
            now=t,
            pending=tuple(by_id[j] for j in pending),
            nodes=tuple(cluster.states),
            running=MappingProxyType(running),
            explain=False,
            fresh=(),
        )
        decision = policy.decide(current)


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

    `keep_plan`: where the policy's own decision gives a job a predicted start (a plan over time, as the
    optimiser's), keep it rather than looking forward with the policy (an optimiser solved per simulated
    end is too slow to look with).
    """

    def __init__(self, policy: Policy, keep_plan: bool = False) -> None:
        self.policy = policy
        self.keep_plan = keep_plan
        self.last: Outlook | None = None
        self.looks = 0
        """Forward looks run (rounds that reused the last look do not count)."""
        self.spent_s = 0.0
        """Wall time spent in `apply`, all rounds together (what the forward look costs)."""

    def apply(self, snapshot: Snapshot, decision: Decision) -> Decision:
        """`decision` with a predicted start, end, interval and, where it moved, why, in the waiting record
        of every queued job it leaves waiting (a record of code `queue-order` where the policy gave none,
        as in rounds that do not explain)."""
        started = time.perf_counter()
        try:
            return self._apply(snapshot, decision)
        finally:
            self.spent_s += time.perf_counter() - started

    def _apply(self, snapshot: Snapshot, decision: Decision) -> Decision:
        if not snapshot.pending:
            return decision
        if self.keep_plan and any(w.predicted_start is not None for w in decision.waiting):
            return decision
        previous = self.last
        moved: dict[str, str] = {}
        if previous is None or not self._holds(previous, snapshot, decision):
            self.last = look(self.policy, snapshot, decision)
            self.looks += 1
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

    def _holds(self, outlook: Outlook, snapshot: Snapshot, decision: Decision) -> bool:
        """Whether the state now is the one `outlook` predicted for now: no job it did not see queued,
        the jobs it placed by now gone from the queue, every job running that it has running and ending
        when it said, the same nodes, and this round placing what it placed for now."""
        t = snapshot.now
        if decision.rejections or _node_set(snapshot) != outlook.nodes:
            return False
        for job in snapshot.pending:
            if job.job_id not in outlook.jobs or outlook.placed_at.get(job.job_id, math.inf) < t - EPS_S:
                return False
        placed_now = {j for j, at in outlook.placed_at.items() if abs(at - t) <= EPS_S}
        if {p.job_id for p in decision.placements} != placed_now:
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
