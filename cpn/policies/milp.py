"""The queue optimiser: a MILP (PuLP; HiGHS or CBC) that plans which queued jobs start when and on which
GPU group, with EASY-style reservations and greedy's plan as warm start and fallback.

The formulation is written out in docs/optimiser.md. In short: queued jobs x groups (cluster, GPU type,
pool, from `Capacity.groups`) x time buckets that double in length; a job starts in at most one
(group, bucket) or overflows the horizon; at each bucket's start the jobs planned to be running on a
group fit its cards (free now plus what running jobs free by then); the objective is the
priority-weighted predicted completion time (or the makespan). Only the `window` most urgent jobs are
in the model; the rest are backfilled on what is free now where that delays nothing the plan starts
later. What starts now is realised through `Capacity.fit`, so every placement keeps the cluster rules.

The policy keeps nothing between rounds: when running jobs free their cards comes from the snapshot
(`plan.releases` over `Snapshot.running`). Services (`JobSpec.is_service`) take no part in the time plan:
they have no end to weigh, so they start first, in queue order, where they start soonest (greedy's rule,
`greedy.service_option`), and their cards count as never coming back; one that cannot start now waits
with the projection's predicted start.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace

import highspy
import pulp

from config.policies import GreedySettings, MilpSettings
from cpn.decisions import Decision, Placement, Rejection, Snapshot, SolverRound, Waiting, shape_of
from cpn.jobs import JobSpec
from cpn.policies.base import Traits, by_priority
from cpn.policies.greedy import GreedyPolicy, service_option
from cpn.policies.placement import NO_ESTIMATE, Capacity, Group, awaits_benchmark, usable_runtimes
from cpn.policies.plan import GroupKey, Projection, Releases, releases
from cpn.policies.sjf import SjfPolicy
from cpn.policies.teams import FairQueue, option_cards
from cpn.policies.waiting import WaitingExplainer
from cpn.rules import is_sharing, job_pins

AFFINITY_TIE = 1e-6
"""Relative cost per place an option stands after the job's first (own pool first, then inventory order)."""

MIN_BUCKET_S = 60.0
"""Shortest first bucket: rounds are not planned finer than a minute."""


@dataclass
class _Job:
    """A queued job the policy may plan: its options (group, duration incl. transfer) and weight."""

    spec: JobSpec
    runtimes: dict[str, float]
    """GPU type -> runtime; empty for a service (any GPU type, no end)."""
    options: list[tuple[Group, float]]
    """(group, duration incl. transfer); a service's duration is infinite."""
    weight: float
    shortest: float
    costs: list[float]
    """Per option, what choosing it is ranked by: the transfer plus the runtime `pessimism` spreads up
    (placement.pessimistic_runtime); the duration itself with pessimism 0."""

    cards: int = 0
    """Whole cards it holds (a sharing job: the one card it joins or opens)."""
    size: float = 0.0
    """Cards the model counts it for: its share of a card for a sharing job."""

    def __post_init__(self) -> None:
        sharing = is_sharing(self.spec)
        self.cards = 1 if sharing else self.spec.num_gpus
        self.size = (self.spec.gpu_share or 1.0) if sharing else float(self.spec.num_gpus)


def planned_start(starts: list[float], k: int) -> float:
    """When a job planned in bucket `k` is counted to start: now for bucket 0, else mid-bucket."""
    return starts[0] if k == 0 else (starts[k] + starts[k + 1]) / 2


class _WarmHighs(pulp.HiGHS):
    """PuLP's HiGHS interface, started from the variables' initial values (PuLP 3.3 passes none)."""

    def callSolver(self, lp):  # noqa: N802 (PuLP's name)
        solution = highspy.HighsSolution()
        solution.col_value = [v.varValue if v.varValue is not None else 0.0 for v in lp.variables()]
        solution.value_valid = True
        lp.solverModel.setSolution(solution)
        lp.solverModel.run()


@dataclass
class _Hold:
    """Cards held for the reserved job: on `nodes` (of `group`) from `shadow`; `extra` more are free then."""

    group: GroupKey
    nodes: frozenset[str]
    shadow: float
    extra: int
    whole_group: bool = False
    """Held over the whole group (a gang wider than any node), counted in cards."""

    def cards_on(self, placement: Placement) -> int:
        """Cards `placement` takes on the held nodes."""
        return sum(c for n, c in placement.nodes if f"{placement.cluster}/{n}" in self.nodes)


@dataclass
class _Model:
    """The built model with what reading its solution needs."""

    problem: pulp.LpProblem
    x: dict[tuple[int, int, int], pulp.LpVariable]
    """(job index, option index, bucket) -> start there."""
    overflow: list[pulp.LpVariable]
    """Per job: planned past the horizon."""
    span: pulp.LpVariable | None
    """The makespan, when that is the objective."""
    starts: list[float]
    """Bucket start times."""
    room: dict[GroupKey, list[float]]
    """Group -> card-seconds free from now to the end of each bucket (`MilpPolicy._room`)."""
    constraints: list[pulp.LpConstraint]
    wide: list[tuple[pulp.LpVariable, list[pulp.LpVariable]]]
    """Per (group, bucket, job size): the variable bounding the starts of that size there, and the starts."""


def _projected_completion(snapshot: Snapshot, jobs: list[_Job], placements) -> float:
    """Weighted completion time of `jobs` (seconds from now) when `placements` start now and every other
    job follows, shortest area first, on the group where it finishes first (whole cards per group); a
    job no group could take counts its shortest runtime after the last end."""
    now = snapshot.now
    capacity = Capacity(snapshot)
    projection = Projection(now, {g.key: g.free for g in capacity.groups()}, releases(snapshot).groups)
    by_id = {j.spec.job_id: j for j in jobs}
    total, started, last = 0.0, set(), now
    for p in placements:
        job = by_id.get(p.job_id)
        if job is None:
            continue
        for group, duration in job.options:
            if group.cluster == p.cluster and p.node in {s.node.name for s in group.slots}:
                projection.book(group.key, job.cards, now, duration)
                total += job.weight * duration
                last = max(last, now + duration)
                started.add(p.job_id)
                break
    unplaced = []
    for job in sorted(jobs, key=lambda j: (-j.spec.priority, j.size * j.shortest)):
        if job.spec.job_id in started:
            continue
        best = projection.best(((g.key, d) for g, d in job.options), job.cards, now)
        if best is None:
            unplaced.append(job)
            continue
        key, start, duration = best
        projection.book(key, job.cards, start, duration)
        total += job.weight * (start + duration - now)
        last = max(last, start + duration)
    return total + sum(j.weight * (last - now + j.shortest) for j in unplaced)


class MilpPolicy:
    """Plans the queue with a MILP each round; see the module and docs/optimiser.md."""

    name = "milp"
    traits = Traits(keeps_plan=True)

    def __init__(self, settings: MilpSettings | None = None) -> None:
        self.settings = settings or MilpSettings()
        self._greedy = GreedyPolicy(GreedySettings(pessimism=self.settings.pessimism))
        self._sjf = SjfPolicy()

    # --- the round ---------------------------------------------------------------------------------

    def decide(self, snapshot: Snapshot) -> Decision:
        """Plan, start what the plan starts now, backfill, and explain every wait with a predicted start."""
        capacity = Capacity(snapshot)
        jobs, services, rejections = self._candidates(snapshot, capacity)
        first, services, released = self._serve(snapshot, capacity, services, releases(snapshot))
        ends: list[tuple[GroupKey, int, float]] = []
        candidates = jobs
        fair = self._fair_first(snapshot, capacity, jobs, ends)
        if fair:
            started = {p.job_id for p in fair}
            jobs = [j for j in jobs if j.spec.job_id not in started]
            first += fair
        reserved = self._reserved(snapshot, jobs) if self.settings.reservation else None
        easy = reserved is not None  # EASY's head comes first: no comparison with sjf's starts
        hold = None
        if reserved is not None:
            fit = capacity.fit(reserved.spec, reserved.runtimes)
            durations = {g.key: d for g, d in reserved.options}
            ranks = {g.key: c for (g, _), c in zip(reserved.options, reserved.costs, strict=True)}
            usable = [o for o in fit.options if o.group.key in durations]
            if usable:  # EASY's head starts first when it can
                option = min(usable, key=lambda o: ranks[o.group.key])
                first.append(self._start(snapshot.now, capacity, reserved, option, durations, ends))
                jobs = [j for j in jobs if j is not reserved]
                reserved = None
            else:
                hold = self._hold(snapshot, capacity, released, reserved)
        window = self._window(jobs, reserved)
        held = {key: list(v) for key, v in released.groups.items()}  # what runs, and what starts now
        for key, cards, end in ends:
            held.setdefault(key, []).append((end, cards))
        starts = self._bucket_starts(snapshot.now, window, held)
        room = self._room(capacity, held, starts)
        stats = None
        if not first and capacity.hopeless(snapshot.shapes):
            # Nothing could start now, and only what starts now is carried out: no solve; the window is
            # projected in its order on the cards as they free.
            plan: dict[int, tuple[int, int] | None] = dict.fromkeys(range(len(window)))
        else:
            building = time.perf_counter()
            model = self._build(window, starts, capacity, room, held, reserved, hold)
            warm = self._warm_start(snapshot, capacity, model, window, held)
            status, objective, gap = self._solve(model, warm is not None)
            solve_s = time.perf_counter() - building
            plan, fallback = self._choose(model, window, status, objective, warm)
            kept = None if plan is None or fallback is None else warm[1]
            stats = SolverRound(
                self.settings.solver,
                status,
                objective if fallback is None else kept,
                gap,
                solve_s,
                fallback,
                len(window),
                len(model.x),
            )
            if plan is None:  # no plan at all: greedy decides this round
                decision = self._greedy.decide(snapshot)
                return Decision(decision.placements, decision.rejections, decision.waiting, stats)
        placements, waiting = self._realise(
            snapshot,
            capacity,
            released,
            jobs,
            services,
            window,
            plan,
            starts,
            room,
            reserved,
            hold,
            first,
            ends,
        )
        if not easy:
            placements, waiting = self._no_worse_than_sjf(snapshot, candidates, placements, waiting)
        fair = FairQueue(snapshot, ())
        placements, over = fair.limit(placements)  # teams' borrowing limits
        specs = {job.job_id: job for job in snapshot.pending}
        waiting = [(fair.never(specs[w.job_id]) if w.job_id in specs else None) or w for w in waiting] + over
        if snapshot.explain:  # jobs left out of the model: no runtime until a benchmark runs
            gone = {r.job_id for r in rejections}
            explainer = WaitingExplainer(capacity)
            waiting += [
                explainer.explain(job, estimated=True)
                for job in snapshot.pending
                if job.job_id not in gone
                and not job.is_service
                and not usable_runtimes(snapshot, job)
                and awaits_benchmark(snapshot, job)
            ]
        return Decision(tuple(placements), tuple(rejections), tuple(waiting), stats)

    def _no_worse_than_sjf(
        self, snapshot: Snapshot, jobs: list[_Job], placements: list[Placement], waiting: list[Waiting]
    ) -> tuple[list[Placement], list[Waiting]]:
        """The plan's starts, or sjf's where they project a lower weighted completion time. The plan's
        later buckets are fluid: a wide job may be counted into the gaps narrow jobs leave, and then long
        narrow jobs started now hold the cards it waits for. Both sets of starts are scored the same way,
        whole cards per group (`plan.Projection`): what each starts now, then every other queued job
        shortest-area first where it finishes first; so no round starts worse than shortest-job-first
        would by that reckoning (the test: tests/unit/test_milp_vs_sjf.py)."""
        if not jobs:
            return placements, waiting
        alternative = self._sjf.decide(replace(snapshot, explain=False))
        ours = {p.job_id for p in placements}
        theirs = {p.job_id for p in alternative.placements}
        if ours == theirs:
            return placements, waiting
        mine = _projected_completion(snapshot, jobs, placements)
        other = _projected_completion(snapshot, jobs, alternative.placements)
        if other >= mine * (1 - 1e-6):
            return placements, waiting
        left = {p.job_id for p in placements} - theirs
        kept = [w for w in waiting if w.job_id not in theirs]
        kept += [Waiting(job_id, "queue-order", "", None) for job_id in sorted(left)]
        return list(alternative.placements), kept

    # --- what goes into the model ------------------------------------------------------------------

    def _candidates(
        self, snapshot: Snapshot, capacity: Capacity
    ) -> tuple[list[_Job], list[_Job], list[Rejection]]:
        """Every queued job with the groups that could ever take it, training jobs and services apart (in
        queue order); jobs none can take are rejected. A service needs no estimate: it may use any GPU
        type, for ever."""
        rejections, pending = capacity.vet(estimated=True)
        jobs, services = [], []
        admits: dict[tuple, bool] = {}
        fair = FairQueue(snapshot, by_priority(pending))  # teams' turns, and their shares as weights
        for job in fair:
            service = job.is_service
            runtimes = {} if service else usable_runtimes(snapshot, job)
            ranked = {} if service else usable_runtimes(snapshot, job, self.settings.pessimism)
            if not runtimes and not service:
                if not awaits_benchmark(snapshot, job):  # else it waits for the benchmark (`decide`)
                    rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                continue
            transfer = snapshot.transfer_s.get(job.job_id, {})
            options, costs = [], []
            for group in capacity.groups(job.kind):
                if not service and group.gpu_type not in runtimes:
                    continue
                mem = capacity.memory(job, group.gpu_type)
                pins = job_pins(job)
                key = (group.key, shape_of(job), mem, pins)
                if key not in admits:
                    admits[key] = group.admits_ever(job, mem)
                if admits[key]:
                    move = transfer.get(group.cluster, 0.0)
                    options.append((group, move + runtimes.get(group.gpu_type, math.inf)))
                    costs.append(move + ranked.get(group.gpu_type, 0.0))
            if not options:
                types = None if service else runtimes
                reason = capacity.why_never(job, types) or "no GPU group could ever take it"
                rejections.append(Rejection(job.job_id, reason))
                continue
            weight = 2.0 ** max(-20, min(20, job.priority)) * fair.weight(job)
            found = _Job(job, runtimes, options, weight, min(d for _, d in options), costs)
            (services if service else jobs).append(found)
        return jobs, services, rejections

    def _serve(
        self, snapshot: Snapshot, capacity: Capacity, services: list[_Job], released: Releases
    ) -> tuple[list[Placement], list[_Job], Releases]:
        """Start the services that can start now, in queue order, where each starts soonest; returns
        their placements, the services left waiting, and `released` with the started ones' whole cards
        never coming back."""
        placements, waiting = [], []
        groups = {key: list(held) for key, held in released.groups.items()}
        nodes = {key: list(held) for key, held in released.nodes.items()}
        for job in services:
            fit = capacity.fit(job.spec)
            if not fit.options:
                waiting.append(job)
                continue
            option = service_option(snapshot, job.spec, fit.options)
            placement = capacity.take(option, job.spec)
            placements.append(placement)
            if is_sharing(job.spec):
                continue
            groups.setdefault(option.group.key, []).append((math.inf, job.cards))
            for name, cards in placement.nodes:
                nodes.setdefault(f"{placement.cluster}/{name}", []).append((math.inf, cards))
        return placements, waiting, Releases(groups, nodes)

    def _fair_first(
        self, snapshot: Snapshot, capacity: Capacity, jobs: list[_Job], ends: list
    ) -> list[Placement]:
        """With teams, greedy's teams rule before the plan: teams below their quota take turns in fair
        order (cpn.policies.teams), each starting its next job (in the window's order) on free cards of
        its quota's classes, where it ranks best, while any can. The optimiser then plans the rest: its
        weighted completion times alone would start a flooding team's short jobs before a late team's,
        and preemption (which reclaims only where no free card is left) would not step in. Only cards
        within the team's quota are taken here, so no start adds borrowed cards that preemption would
        reclaim. Returns the placements; `ends` gets each started job's cards and predicted end."""
        if snapshot.teams is None or not jobs:
            return []
        by_id = {j.spec.job_id: j for j in jobs}
        queue = FairQueue(snapshot, [j.spec for j in self._window(jobs, None, len(jobs))])
        placements: list[Placement] = []
        for spec in queue:
            use = queue.ledger.team(spec)
            if not use.below_quota():
                break  # every team left in turn is at its quota: the plan decides the rest
            if not capacity.worth_trying(spec):
                continue
            job = by_id[spec.job_id]
            durations = {g.key: d for g, d in job.options}
            ranks = {g.key: c for (g, _), c in zip(job.options, job.costs, strict=True)}
            borrowed = use.borrowed()
            within = [
                o
                for o in capacity.fit(spec, job.runtimes).options
                if o.group.key in durations and use.borrowed(option_cards(o)) == borrowed
            ]
            if within:
                option = min(within, key=lambda o: ranks[o.group.key])
                queue.took(spec, option)
                placements.append(self._start(snapshot.now, capacity, job, option, durations, ends))
        return placements

    def _reserved(self, snapshot: Snapshot, jobs: list[_Job]) -> _Job | None:
        """The oldest job once it is starving (EASY's head): it starts first when it can, else its cards
        are held for it. Starving: it has waited longer than it would run and longer than the queue's
        backlog needs to drain (every queued job's cards x its shortest runtime, over all the cards),
        so jobs that arrived after it have had time enough to pass it; a queue that turns over faster than
        the job waits is mean completion time's business, not starvation."""
        oldest = min(jobs, key=lambda j: j.spec.arrival_s, default=None)
        if oldest is None:
            return None
        cards = sum(s.node.gpu_count for s in snapshot.nodes)
        backlog = sum(j.size * j.shortest for j in jobs) / cards if cards else 0.0
        if snapshot.now - oldest.spec.arrival_s >= max(oldest.shortest, backlog):
            return oldest
        return None

    def _window(self, jobs: list[_Job], reserved: _Job | None, size: int | None = None) -> list[_Job]:
        """The jobs the MILP plans (`size`, default the `window` setting): the reserved one, then by
        priority and shortest-area first (longest first when minimising the makespan)."""
        if self.settings.objective == "makespan":
            key = lambda j: (-j.spec.priority, -j.shortest)  # noqa: E731
        else:
            key = lambda j: (-j.spec.priority, j.size * j.shortest)  # noqa: E731
        rest = sorted((j for j in jobs if j is not reserved), key=key)
        head = [reserved] if reserved is not None else []
        return head + rest[: (size or self.settings.window) - len(head)]

    def _bucket_starts(self, now: float, window: list[_Job], held: dict) -> list[float]:
        """now, then starts of buckets that double in length; the last entry is the horizon's end. The
        first bucket is the `first_bucket_s` setting, else the median predicted runtime of the window,
        cut to when running jobs first free cards (so that waiting for cards that free soon is planned
        at about that time, not at the middle of a bucket as long as a typical job); buckets are added
        so that the horizon reaches as far as with the uncut first bucket."""
        first = self.settings.first_bucket_s
        buckets = self.settings.buckets
        if not first:
            first = max(
                statistics.median([j.shortest for j in window]) if window else MIN_BUCKET_S, MIN_BUCKET_S
            )
            soon = min(
                (when - now for v in held.values() for when, _ in v if now < when < math.inf), default=None
            )
            if soon is not None and soon < first:
                cut = max(soon, MIN_BUCKET_S)
                buckets += math.ceil(math.log2(first / cut))
                first = cut
        first = max(first, MIN_BUCKET_S)
        return [now + first * (2**k - 1) for k in range(buckets + 1)]

    @staticmethod
    def _room(capacity: Capacity, releases: dict, starts: list[float]) -> dict[GroupKey, list[float]]:
        """Card-seconds each group has free from now to the end of each bucket: its cards over the span,
        less what running jobs hold of it (until their predicted end; to the end for unknown ones)."""
        now = starts[0]
        room = {}
        for group in capacity.groups():
            cards = sum(s.node.gpu_count for s in group.slots)
            held = releases.get(group.key, [])
            room[group.key] = [
                cards * (end - now) - sum(c * (min(when, end) - now) for when, c in held)
                for end in starts[1:]
            ]
        return room

    def _build(
        self,
        window: list[_Job],
        starts: list[float],
        capacity: Capacity,
        room: dict,
        held: dict[GroupKey, list[tuple[float, int]]],
        reserved: _Job | None,
        hold: _Hold | None,
    ) -> _Model:
        """The MILP of docs/optimiser.md. `held`: group -> (when, cards) its running jobs (and those
        started this round) free."""
        now, horizon = starts[0], starts[-1]
        buckets = len(starts) - 1
        free = {
            g.key: g.free + sum(share for s in g.slots for share, _ in s.shared) for g in capacity.groups()
        }
        sizes = {g.key: sum(s.node.gpu_count for s in g.slots) for g in capacity.groups()}
        problem = pulp.LpProblem("cpn_plan", pulp.LpMinimize)
        x: dict[tuple[int, int, int], pulp.LpVariable] = {}
        constraints: list[pulp.LpConstraint] = []
        overflows: list[pulp.LpVariable] = []
        weights = [j.weight for j in window]
        if reserved is not None and window and window[0] is reserved:
            weights[0] = 1.0 + sum(weights[1:])
        now_terms: dict[GroupKey, list[tuple[pulp.LpVariable, float]]] = {}
        area_terms: dict[GroupKey, list[list[tuple[pulp.LpVariable, float]]]] = {}
        running_terms: dict[GroupKey, list[list[tuple[pulp.LpVariable, float]]]] = {}
        starting: dict[tuple[GroupKey, int, float], list[pulp.LpVariable]] = {}
        wides: list[tuple[pulp.LpVariable, list[pulp.LpVariable]]] = []
        completion: list[list[tuple[pulp.LpVariable, float]]] = []
        for i, job in enumerate(window):
            mine = []
            for o, (group, duration) in enumerate(job.options):
                key = group.key
                for k in range(buckets):
                    if job.size > (free[key] if k == 0 else sizes[key]):
                        continue
                    # Only what starts now is carried out this round: it is binary; the later buckets
                    # are a fluid plan, re-solved every round.
                    if k == 0:
                        var = problem.add_variable(f"x_{i}_{o}_{k}", cat=pulp.LpBinary)
                    else:
                        var = problem.add_variable(f"x_{i}_{o}_{k}", lowBound=0, upBound=1)
                    x[(i, o, k)] = var
                    # Options come own pool first, then inventory order: a tiny tie-breaker keeps the
                    # seed's soft pool affinity where completion times are equal.
                    end = (planned_start(starts, k) - now + job.costs[o]) * (1 + AFFINITY_TIE * o)
                    mine.append((var, end))
                    if k == 0:
                        now_terms.setdefault(key, []).append((var, job.size))
                    rows = area_terms.setdefault(key, [[] for _ in range(buckets)])
                    for kk in range(k, buckets):
                        rows[kk].append((var, job.size * min(duration, starts[kk + 1] - starts[k])))
                    if k > 0:
                        starting.setdefault((key, k, job.size), []).append(var)
                    along = running_terms.setdefault(key, [[] for _ in range(buckets)])
                    for kk in range(k + 1, buckets):
                        if planned_start(starts, k) + duration > starts[kk]:
                            along[kk].append((var, job.size))
            overflow = problem.add_variable(f"y_{i}", lowBound=0, upBound=1)
            overflows.append(overflow)
            mine.append((overflow, horizon - now + job.shortest))
            completion.append(mine)
            constraints.append(pulp.LpAffineExpression([(v, 1.0) for v, _ in mine]) == 1)
        for key, terms in now_terms.items():
            constraints.append(pulp.LpAffineExpression(terms) <= free[key])
        if hold is not None and hold.whole_group:
            # a whole group held for a wide gang: what starts there now past its time fits beside it
            key, shadow, extra = hold.group, hold.shadow, hold.extra
            past = [
                (x[(i, o, 0)], job.size)
                for i, job in enumerate(window)
                for o, (group, duration) in enumerate(job.options)
                if group.key == key and (i, o, 0) in x and now + duration > shadow
            ]
            if past:
                constraints.append(pulp.LpAffineExpression(past) <= max(0, extra))
        for key, rows in area_terms.items():
            for k, terms in enumerate(rows):
                if terms:
                    constraints.append(pulp.LpAffineExpression(terms) <= max(0.0, room[key][k]))
        # At each bucket's start the jobs planned to be running on a group, and each job planned to start
        # in it (`wide`: the share of the widest such job of each size), fit the cards its running jobs
        # leave then: without it the fluid area lets a wide job into the gaps narrow long jobs leave, and
        # the plan starts long narrow jobs now on cards it counts on for wide ones.
        for (key, k, size), terms in starting.items():
            wide = problem.add_variable(f"w_{len(constraints)}", lowBound=0, upBound=1)
            constraints += [var <= wide for var in terms]
            wides.append((wide, terms))
            along = running_terms.get(key, [[]] * buckets)[k]
            busy = sum(c for when, c in held.get(key, ()) if when > starts[k])
            constraints.append(pulp.LpAffineExpression([(wide, size), *along]) <= max(0.0, sizes[key] - busy))
        weighted = pulp.LpAffineExpression(
            [(v, w * end) for w, mine in zip(weights, completion, strict=True) for v, end in mine]
        )
        span = None
        if self.settings.objective == "makespan":
            span = problem.add_variable("makespan", lowBound=0)
            for mine in completion:
                constraints.append(span >= pulp.LpAffineExpression([(v, end) for v, end in mine]))
            problem += span + 1e-3 / max(1.0, sum(weights)) * weighted
        else:
            problem += weighted
        for n, constraint in enumerate(constraints):
            problem += constraint, f"c{n}"
        return _Model(problem, x, overflows, span, starts, room, constraints, wides)

    # --- greedy's plan as warm start and fallback ------------------------------------------------

    def _warm_start(
        self, snapshot: Snapshot, capacity: Capacity, model: _Model, window: list[_Job], releases: dict
    ) -> tuple[dict[int, tuple[int, int] | None], float] | None:
        """Greedy's plan in the model's terms: what greedy starts now in bucket 0, the rest of the window
        list-scheduled on the earliest-finishing group. Set as the variables' initial values; returns
        (assignment, objective) when it is feasible in the model, else None."""
        greedy = {p.job_id: p for p in self._greedy.decide(snapshot).placements}
        free = {g.key: g.free for g in capacity.groups()}
        projection = Projection(snapshot.now, free, releases)
        assignment: dict[int, tuple[int, int] | None] = {}
        starts = model.starts
        for i, job in enumerate(window):
            placement = greedy.get(job.spec.job_id)
            choice = None
            if placement is not None:
                for o, (group, duration) in enumerate(job.options):
                    if group.cluster == placement.cluster and (i, o, 0) in model.x:
                        if placement.node in {s.node.name for s in group.slots}:
                            choice = (o, 0, group.key, snapshot.now, duration)
                            break
            if choice is None:
                best = projection.best(((g.key, d) for g, d in job.options), job.cards, snapshot.now)
                if best is not None and best[1] < starts[-1]:
                    key, start, duration = best
                    k = max(kk for kk in range(len(starts) - 1) if starts[kk] <= start)
                    o = next(oo for oo, (g, _) in enumerate(job.options) if g.key == key)
                    if (i, o, k) in model.x:
                        choice = (o, k, key, start, duration)
            if choice is not None:
                o, k, key, start, duration = choice
                projection.book(key, job.cards, start, duration)
                assignment[i] = (o, k)
            else:
                assignment[i] = None
        for var in model.x.values():
            var.setInitialValue(0)
        for i, chosen in assignment.items():
            model.overflow[i].setInitialValue(1 if chosen is None else 0, check=False)
            if chosen is not None:
                model.x[(i, *chosen)].setInitialValue(1)
        for wide, terms in model.wide:
            wide.setInitialValue(max(v.varValue or 0 for v in terms))
        span = model.span
        if span is not None:
            now, horizon = starts[0], starts[-1]
            ends = [
                horizon - now + job.shortest
                if chosen is None
                else planned_start(starts, chosen[1]) - now + job.costs[chosen[0]]
                for job, chosen in zip(window, assignment.values(), strict=True)
            ]
            span.setInitialValue(max(ends, default=0.0))
        in_bounds = all(v.valid(1e-6) for v in model.overflow)
        if not in_bounds or not all(c.valid(1e-6) for c in model.constraints):
            return None
        return assignment, model.problem.objective.value()

    def _solve(self, model: _Model, warm: bool) -> tuple[str, float | None, float | None]:
        """Solve within the time limit: (status, objective, gap)."""
        limit = self.settings.time_limit_s
        if self.settings.solver == "highs":
            solver = _WarmHighs(msg=False, timeLimit=limit, threads=1, gapRel=self.settings.gap)
        else:
            solver = pulp.PULP_CBC_CMD(
                msg=False, timeLimit=max(1, math.ceil(limit)), warmStart=warm, gapRel=self.settings.gap
            )
        try:
            model.problem.solve(solver)
        except pulp.PulpSolverError as exc:
            return f"error: {exc}", None, None
        sol = model.problem.sol_status
        if sol == pulp.LpSolutionOptimal:
            status = "optimal"
        elif sol == pulp.LpSolutionIntegerFeasible:
            status = "feasible"
        else:
            return "no-solution", None, None
        gap = None
        if self.settings.solver == "highs":
            info = model.problem.solverModel.getInfo()
            gap = float(info.mip_gap) if math.isfinite(info.mip_gap) else None
        return status, pulp.value(model.problem.objective), gap

    @staticmethod
    def _choose(model: _Model, window: list[_Job], status: str, objective: float | None, warm):
        """The solver's plan, or greedy's where the solver has none or a worse one."""
        if objective is None:
            if warm is not None:
                return warm[0], f"solver: {status}; greedy's plan"
            return None, f"solver: {status}; no feasible greedy plan either"
        if warm is not None and warm[1] < objective - 1e-6 * max(1.0, abs(objective)):
            return warm[0], "greedy's plan scores better than the solver's within the time limit"
        assignment: dict[int, tuple[int, int] | None] = {i: None for i in range(len(window))}
        best: dict[int, float] = {}
        for (i, o, k), var in model.x.items():
            value = var.varValue or 0.0
            if k == 0 and value > 0.5:
                best[i], assignment[i] = math.inf, (o, k)
            elif value > max(best.get(i, 0.0), 1e-6):
                best[i], assignment[i] = value, (o, k)
        return assignment, None

    # --- carrying the plan out ---------------------------------------------------------------------

    @staticmethod
    def _start(now, capacity, job: _Job, option, durations: dict, ends: list) -> Placement:
        """Take `option` for `job` now and note the cards it frees at its predicted end."""
        duration = durations[option.group.key]
        placement = capacity.take(option, job.spec)
        ends.append((option.group.key, job.cards, now + duration))
        return placement

    def _realise(
        self,
        snapshot,
        capacity,
        freed,
        jobs,
        services,
        window,
        plan,
        starts,
        room,
        reserved,
        hold,
        first,
        ends,
    ):
        """Start what the plan starts now, backfill what delays nothing planned, explain the rest (the
        `services` left waiting too, each predicted to start when enough of its cards are first free).
        `freed`: when running jobs free their cards, the services started this round never."""
        now = snapshot.now
        buckets = len(starts) - 1
        usage = {key: [0.0] * buckets for key in room}
        for i, chosen in plan.items():
            if chosen is None:
                continue
            o, k = chosen
            group, duration = window[i].options[o]
            for kk in range(k, buckets):
                usage[group.key][kk] += window[i].size * min(duration, starts[kk + 1] - starts[k])
        placements: list[Placement] = list(first)
        planned = {id(window[i]): chosen for i, chosen in plan.items()}
        index = {id(j): i for i, j in enumerate(window)}
        blocked_by_plan: set[str] = set()

        def allowed(job: _Job, option, duration: float) -> bool:
            """EASY: on the held nodes, start only what ends before the reservation or fits beside it."""
            if hold is None or now + duration <= hold.shadow:
                return True
            return hold.cards_on(option.placement) <= hold.extra

        def start(job: _Job, option, duration: float) -> None:
            if hold is not None and now + duration > hold.shadow:
                hold.extra -= hold.cards_on(option.placement)
            placements.append(self._start(now, capacity, job, option, {option.group.key: duration}, ends))

        for i in sorted(
            (i for i, c in plan.items() if c is not None and c[1] == 0),
            key=lambda i: (-window[i].spec.priority, window[i].shortest),
        ):
            job = window[i]
            group, duration = job.options[plan[i][0]]
            option = next(
                (o for o in capacity.fit(job.spec, {group.gpu_type}).options if o.group is group), None
            )
            if option is not None and allowed(job, option, duration):
                start(job, option, duration)
            elif option is not None:
                blocked_by_plan.add(job.spec.job_id)
        durations = {id(j): {g.key: d for g, d in j.options} for j in jobs}
        ranks = {id(j): {g.key: c for (g, _), c in zip(j.options, j.costs, strict=True)} for j in jobs}
        started_ids = {p.job_id for p in placements}
        # The projection: what runs now, then the plan's waiting jobs on their groups in bucket order.
        free = {g.key: g.free for g in capacity.groups()}
        merged = {k: list(v) for k, v in freed.groups.items()}
        for key, cards, end in ends:
            merged.setdefault(key, []).append((end, cards))
        projection = Projection(now, free, merged)
        predicted: dict[str, float] = {}
        transfer = snapshot.transfer_s

        def project(job: _Job, key: GroupKey, when: float, duration: float) -> None:
            projection.book(key, job.cards, when, duration)
            predicted[job.spec.job_id] = when + transfer.get(job.spec.job_id, {}).get(key[0], 0.0)

        waiting_plan = sorted(
            (j for j in window if planned.get(id(j)) is not None and j.spec.job_id not in started_ids),
            key=lambda j: (planned[id(j)][1], index[id(j)]),
        )
        for job in waiting_plan:
            group, duration = job.options[planned[id(job)][0]]
            when = projection.earliest(group.key, job.cards, now)
            if when < math.inf:
                project(job, group.key, when, duration)
        # Backfill: start now where it delays nothing planned and finishes no later than waiting would.
        rest = []
        backfill = [j for j in jobs if planned.get(id(j)) is None]
        for job in sorted(backfill, key=lambda j: (-j.spec.priority, j.size * j.shortest)):
            if capacity.hopeless(snapshot.shapes) or not capacity.worth_trying(job.spec):
                rest.append(job)
                continue
            fit = capacity.fit(job.spec, job.runtimes)
            waited = projection.best(((g.key, d) for g, d in job.options), job.cards, now)
            finish = waited[1] + waited[2] if waited is not None else math.inf
            held = False
            for option in sorted(fit.options, key=lambda o: ranks[id(job)].get(o.group.key, math.inf)):
                key = option.group.key
                duration = durations[id(job)].get(key)
                if duration is None or now + duration > finish + 1e-6:
                    continue
                need = [job.size * min(duration, starts[k + 1] - now) for k in range(buckets)]
                fits = all(usage[key][k] + need[k] <= room[key][k] + 1e-6 for k in range(buckets))
                if fits and allowed(job, option, duration):
                    for k in range(buckets):
                        usage[key][k] += need[k]
                    start(job, option, duration)
                    projection.book(key, job.cards, now, duration)
                    break
                held = True
            else:
                if held:
                    blocked_by_plan.add(job.spec.job_id)
                rest.append(job)
        for job in rest:
            best = projection.best(((g.key, d) for g, d in job.options), job.cards, now)
            if best is not None:
                project(job, *best)
        for job in services:
            moves = transfer.get(job.spec.job_id, {})
            when = min(
                projection.earliest(g.key, job.cards, now) + moves.get(g.cluster, 0.0) for g, _ in job.options
            )
            if when < math.inf:
                predicted[job.spec.job_id] = when
        placed = {p.job_id for p in placements}
        explainer = WaitingExplainer(capacity)
        held = reserved.spec.job_id if reserved is not None else "the jobs the plan starts soon"
        waiting: list[Waiting] = []
        for job in [*jobs, *services]:
            job_id = job.spec.job_id
            if job_id in placed:
                continue
            if not capacity.snapshot.explain:
                waiting.append(Waiting(job_id, "queue-order", "", predicted.get(job_id)))
                continue
            waiting.append(
                explainer.explain(
                    job.spec,
                    estimated=not job.spec.is_service,
                    held_for=held if job_id in blocked_by_plan else None,
                    predicted_start=predicted.get(job_id),
                )
            )
        return placements, waiting

    def _hold(self, snapshot, capacity, released: Releases, reserved) -> _Hold | None:
        """The reserved job's reservation (EASY): the node where it would finish first given what runs
        now, when enough of its cards are free, and the cards free then beyond its own. A gang wider than
        any node holds its whole group, counted in cards. None when no time can be given."""
        if reserved is None:
            return None
        now, n = snapshot.now, reserved.cards
        best: _Hold | None = None
        finish = math.inf
        for group, duration in reserved.options:
            if n > group.sizes[reserved.spec.kind][0]:
                continue
            for slot in group.eligible(reserved.spec.kind, capacity.memory(reserved.spec, group.gpu_type)):
                if slot.node.gpu_count < n or not slot.cpu_fits(0):
                    continue
                times = sorted(t for t, c in released.nodes.get(slot.node.key, []) for _ in range(c))
                need = n - slot.free
                shadow = now if need <= 0 else (times[need - 1] if need <= len(times) else math.inf)
                if shadow + duration < finish:
                    free_then = slot.free + sum(1 for t in times if t <= shadow)
                    best = _Hold(group.key, frozenset({slot.node.key}), shadow, free_then - n)
                    finish = shadow + duration
        if best is not None:
            return best
        projection = Projection(now, {g.key: g.free for g in capacity.groups()}, released.groups)
        wide = projection.best(((g.key, d) for g, d in reserved.options), n, now)
        if wide is None:
            return None
        key, shadow, _ = wide
        nodes = next(frozenset(s.node.key for s in g.slots) for g, _ in reserved.options if g.key == key)
        return _Hold(key, nodes, shadow, projection.free_at(key, shadow) - n, whole_group=True)
