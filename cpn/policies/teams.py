"""Fair share across teams, for every policy: the order teams take turns in, and what a team may take.

A snapshot with `teams` (cpn.decisions.Teams) makes every policy order its queue across teams, and within
a team as it does without teams:

- **use**: a team's cards are the whole cards of its running jobs (`Snapshot.running`, jobs by their
  namespace), counted per card class (GPU product, GPU type, pool). A job on a shared card counts no card.
- **quota**: each quota key (a GPU product label, a canonical GPU type or a pool) matches the cards of that
  product, type or pool. A team with no quota is entitled, per GPU type, to its weight's share (among the
  teams with no quota) of the cards no other team's quota names by product or type.
- **below quota**: some quota key of the team has cards left (use < quota).
- **borrowed cards**: cards of a class no quota key of the team matches, plus the most any key is over
  its quota. Idle quota is lent: a team may start jobs beyond its quota on free cards while its borrowed
  cards stay within its `borrowing_limit` (0 = a hard limit; None = no limit).
- **order**: at every step the team to go next is the one below its quota, then with the least weighted
  dominant share (max over GPU types of its cards of the type over the clusters' cards of the type,
  divided by its weight), ties by name; it offers its next job in the policy's own order. Each job a team
  starts raises its share before the next step.

Without teams (`Snapshot.teams` None) the order is the policy's own and every option is allowed: nothing
changes. A job kept back by its team's limit waits with the code `over-quota`.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from config.teams import DEFAULT_TEAM, TeamsConfig
from cpn.decisions import NEVER, Placement, RunningJob, Snapshot, Team, Teams, Waiting
from cpn.gpus import canonical_gpu
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.policies.placement import Option
from cpn.policies.waiting import WaitingExplainer
from cpn.rules import is_sharing, kind_admits

CardClass = tuple[str, str, str]
"""(GPU product label, canonical GPU type, pool) of a card: what quota keys match."""


def card_class(node: Node) -> CardClass:
    """The class of `node`'s cards."""
    return (node.gpu_product, node.gpu_type, node.usage)


@lru_cache(maxsize=4096)
def matches(key: str, cls: CardClass) -> bool:
    """Whether quota `key` (GPU product label, GPU type or pool) names cards of class `cls`."""
    product, gpu_type, pool = cls
    return key in (product, gpu_type, pool) or canonical_gpu(key) == gpu_type


@dataclass
class TeamUse:
    """One team's standing in a decision: its settings, resolved quota and cards in use."""

    team: Team
    quota: dict[str, int]
    """Quota key -> cards (the implicit per-GPU-type quota of a team with none)."""
    cards: Counter = field(default_factory=Counter)
    """CardClass -> cards its running (and this decision's placed) jobs hold."""

    def on(self, key: str) -> int:
        """Cards it holds that quota `key` matches."""
        return sum(n for cls, n in self.cards.items() if matches(key, cls))

    def borrowed(self, extra: Counter | None = None) -> int:
        """Cards beyond its quota (module doc), with `extra` cards added."""
        cards = self.cards + extra if extra else self.cards
        unmatched = sum(n for cls, n in cards.items() if not any(matches(k, cls) for k in self.quota))
        over = max(
            (sum(n for c, n in cards.items() if matches(k, c)) - q for k, q in self.quota.items()), default=0
        )
        return unmatched + max(0, over)

    def below_quota(self) -> bool:
        """Whether some quota key has cards left."""
        return any(self.on(key) < cards for key, cards in self.quota.items())

    def may_take(self, extra: Counter) -> bool:
        """Whether it may hold `extra` cards more: its borrowed cards stay within its borrowing limit."""
        limit = self.team.borrowing_limit
        return limit is None or self.borrowed(extra) <= limit


class Ledger:
    """Every team's use and quota for one decision, and the clusters' cards per GPU type."""

    def __init__(self, snapshot: Snapshot, teams: Teams, active: set[str] | None = None) -> None:
        self.teams = teams
        nodes = {s.node.key: s.node for s in snapshot.nodes}
        self.total: Counter = Counter()
        """Canonical GPU type -> cards the clusters have."""
        for node in nodes.values():
            self.total[node.gpu_type] += node.gpu_count
        self.use = {t.name: TeamUse(t, dict(t.quota)) for t in teams.teams}
        if active is None:  # the teams with work: jobs queued or running
            active = {teams.team_of(j.job_id) for j in snapshot.pending} | {
                teams.team_of(job_id) for job_id in snapshot.running
            }
        self._weight_only(nodes.values(), active)
        for job_id, job in snapshot.running.items():
            mine = self.use.get(teams.team_of(job_id))
            for key, n in job.cards:
                node = nodes.get(key)
                if mine is not None and node is not None:
                    mine.cards[card_class(node)] += n

    def _weight_only(self, nodes: Iterable[Node], active: set[str]) -> None:
        """Give each team with no quota and some work (`active`: jobs queued or running) its weight's share
        of the cards of each GPU type no quota names; a team with no work is entitled to nothing, so idle
        teams (the default team of a lab whose namespaces all belong to teams) do not shrink the others'."""
        free = Counter(self.total)
        types = {n.gpu_type: card_class(n) for n in nodes}
        for use in self.use.values():
            for key, cards in use.quota.items():
                for gpu_type, cls in types.items():
                    if canonical_gpu(key) == gpu_type or key in cls[:2]:
                        free[gpu_type] -= cards
        plain = [u for u in self.use.values() if not u.quota and u.team.name in active]
        weights = sum(u.team.weight for u in plain)
        for use in plain:
            use.quota = {g: int(max(0, n) * use.team.weight / weights) for g, n in free.items()}

    def team(self, job: JobSpec) -> TeamUse:
        """The standing of the job's team."""
        return self.use[self.teams.team_of(job.job_id)]

    def share(self, use: TeamUse) -> float:
        """Weighted dominant share: the most of any GPU type it holds, as a fraction, over its weight."""
        by_type: Counter = Counter()
        for (_, gpu_type, _), n in use.cards.items():
            by_type[gpu_type] += n
        dominant = max((n / self.total[g] for g, n in by_type.items() if self.total[g]), default=0.0)
        return dominant / use.team.weight

    def rank(self, use: TeamUse) -> tuple[bool, float, str]:
        """Sort key of a team's turn: below quota first, then least weighted dominant share, then name."""
        return (not use.below_quota(), self.share(use), use.team.name)


def option_cards(option: Option) -> Counter:
    """The cards an option takes, per card class (a shared card counts none)."""
    if option.card is not None:
        return Counter()
    out: Counter = Counter()
    for room, cards in option.plan:
        out[card_class(room.node)] += cards
    return out


class FairQueue:
    """A policy's queue taken in fair order across teams (module doc); the policy reports each start.

    Iterate it for the next job; `allowed` filters a job's options by its team's limit; `took` books a
    start; `block` ends the turns of a job's team (a policy that does not skip ahead, as FIFO); `waiting`
    gives a job left queued its reason (`over-quota` when its team's limit kept it back).
    """

    def __init__(self, snapshot: Snapshot, jobs: Sequence[JobSpec]) -> None:
        self.snapshot = snapshot
        self.jobs = jobs
        self.ledger = Ledger(snapshot, snapshot.teams) if snapshot.teams is not None else None
        self.refused: dict[str, str] = {}
        """job_id -> why its team may not take the options it had."""
        self._queues: dict[str, deque[JobSpec]] = {}
        self._single: Iterator[JobSpec] | None = None
        self._classes: dict[str, set[CardClass]] = {}
        """Job kind -> the card classes of the nodes that admit it."""
        self._never: dict[tuple[str, str, int], str | None] = {}
        """(team, kind, cards) -> `never`'s detail (None: it may start some day)."""

    def __iter__(self) -> Iterator[JobSpec]:
        if self.ledger is None:
            self._single = iter(self.jobs)
            yield from self._single
            return
        for job in self.jobs:
            self._queues.setdefault(self.ledger.teams.team_of(job.job_id), deque()).append(job)
        heap = [(self.ledger.rank(self.ledger.use[t]), t) for t in self._queues]
        heapq.heapify(heap)
        while heap:
            _, name = heapq.heappop(heap)
            queue = self._queues[name]
            if not queue:
                continue
            yield queue.popleft()
            if queue:
                heapq.heappush(heap, (self.ledger.rank(self.ledger.use[name]), name))

    def allowed(self, job: JobSpec, options: tuple[Option, ...]) -> tuple[Option, ...]:
        """The options the job's team may take; when it had some and may take none, it is recorded as
        refused (`waiting` says `over-quota`)."""
        if self.ledger is None or not options:
            return options
        use = self.ledger.team(job)
        ok = tuple(o for o in options if use.may_take(option_cards(o)))
        if not ok:
            self.refused[job.job_id] = over_quota(use)
        return ok

    def took(self, job: JobSpec, option: Option) -> None:
        """Book a start of `job` on `option` in its team's use."""
        if self.ledger is not None:
            self.ledger.team(job).cards.update(option_cards(option))

    def weight(self, job: JobSpec) -> float:
        """How much an optimiser weighs the job's completion for its team's standing: 1 without teams; with
        them 1 / (1 + the team's weighted dominant share), times 4 (two priority levels, as the MILP weighs
        priority) when the team is below its quota."""
        if self.ledger is None:
            return 1.0
        use = self.ledger.team(job)
        return (4.0 if use.below_quota() else 1.0) / (1.0 + self.ledger.share(use))

    def limit(self, placements: Iterable[Placement]) -> tuple[list[Placement], list[Waiting]]:
        """`placements` in order, less those whose team's limit they would break (each then waits
        `over-quota`): for a policy that places by its own plan (the optimiser) rather than through
        `allowed`."""
        if self.ledger is None:
            return list(placements), []
        nodes = {(s.node.cluster, s.node.name): s.node for s in self.snapshot.nodes}
        kept, over = [], []
        for p in placements:
            use = self.ledger.use[self.ledger.teams.team_of(p.job_id)]
            cards = Counter()
            for name, n in p.nodes:
                cards[card_class(nodes[(p.cluster, name)])] += n
            if use.may_take(cards):
                use.cards.update(cards)
                kept.append(p)
            else:
                over.append(Waiting(p.job_id, "over-quota", over_quota(use)))
        return kept, over

    def block(self, job: JobSpec) -> list[JobSpec]:
        """End the turns of the job's team: the jobs it had left, taken out of the queue."""
        if self.ledger is None:
            return list(self._single or ())
        queue = self._queues.get(self.ledger.teams.team_of(job.job_id), deque())
        rest = list(queue)
        queue.clear()
        return rest

    def rest(self) -> list[JobSpec]:
        """Every job not yet offered, taken out of the queue."""
        if self.ledger is None:
            return list(self._single or ())
        out = [job for queue in self._queues.values() for job in queue]
        for queue in self._queues.values():
            queue.clear()
        return out

    def waiting(self, explainer: WaitingExplainer, job: JobSpec, **kw) -> Waiting:
        """Why `job` waits: `over-quota` when its team's limit kept it back (or its team can borrow no more
        cards at all), else what the explainer says (`kw` as WaitingExplainer.explain takes)."""
        if self.ledger is not None:
            use = self.ledger.team(job)
            if (never := self.never(job)) is not None:
                return never
            detail = self.refused.get(job.job_id)
            if detail is None and use.team.borrowing_limit is not None and not use.below_quota():
                if use.borrowed() >= use.team.borrowing_limit:
                    detail = over_quota(use)
            if detail is not None:
                return Waiting(job.job_id, "over-quota", detail)
        return explainer.explain(job, **kw)

    def never(self, job: JobSpec) -> Waiting | None:
        """`over-quota` for a job its team's limits never let start, whatever else runs: on no class of
        cards its kind may use could the team, holding nothing, take its whole cards within its borrowing
        limit (the detail ends with NEVER); None when it could somewhere, or without teams, for a team with
        no borrowing limit and for a job that shares a card."""
        if self.ledger is None or is_sharing(job):
            return None
        use = self.ledger.team(job)
        if use.team.borrowing_limit is None:
            return None
        key = (use.team.name, job.kind, job.num_gpus)
        if key not in self._never:
            classes = self._classes.get(job.kind)
            if classes is None:
                nodes = self.snapshot.nodes
                classes = self._classes[job.kind] = {
                    card_class(s.node) for s in nodes if kind_admits(s.node, job.kind)
                }
            empty = TeamUse(use.team, use.quota)
            detail = None
            if classes and not any(empty.may_take(Counter({cls: job.num_gpus})) for cls in classes):
                quota, how = _limits(use)
                detail = (
                    f"team {use.team.name} may never hold the {job.num_gpus} cards it needs, whatever else "
                    f"runs (quota {quota}; {how}): {NEVER}"
                )
            self._never[key] = detail
        detail = self._never[key]
        return None if detail is None else Waiting(job.job_id, "over-quota", detail)


def over_quota(use: TeamUse) -> str:
    """The detail of an `over-quota` wait."""
    quota, how = _limits(use)
    return f"team {use.team.name} is at its quota ({quota}) and may borrow no more ({how})"


def _limits(use: TeamUse) -> tuple[str, str]:
    """A team's quota and borrowing limit in words: (`k80=4`, `a hard limit`)."""
    limit = use.team.borrowing_limit
    quota = ", ".join(f"{k}={v}" for k, v in sorted(use.quota.items())) or "none"
    return quota, "a hard limit" if limit == 0 else f"borrowing limit {limit} cards"


def teams_of(config: TeamsConfig) -> Teams:
    """The domain's Teams from a teams file's settings, the default team (weight 1, no quota) added."""
    teams = tuple(
        Team(t.name, t.weight, tuple(sorted(t.quota.items())), t.borrowing_limit, t.checkpoint_interval_s)
        for t in config.teams
    )
    namespaces = {ns: t.name for t in config.teams for ns in t.namespaces}
    return Teams((*teams, Team(DEFAULT_TEAM)), namespaces, DEFAULT_TEAM)


def quota_cards(nodes: Iterable[Node]) -> Counter:
    """Cards the clusters hold per GPU product label, GPU type and pool: what a quota is weighed against
    (config.teams.quota_warnings)."""
    cards: Counter = Counter()
    for node in nodes:
        for key in set(card_class(node)):
            cards[key] += node.gpu_count
    return cards


def standing(
    teams: Teams, nodes: Sequence[Node], placed: Mapping[str, RunningJob], waiting: Counter
) -> list[dict]:
    """Each team's quota, cards in use, borrowed cards and waiting jobs (`cpn teams`): `placed` is job_id ->
    the whole cards of each job on a cluster, `waiting` team -> queued jobs."""
    snapshot = Snapshot(0.0, (), tuple(NodeState(n, n.gpu_count) for n in nodes), running=placed, teams=teams)
    active = {name for name, n in waiting.items() if n} | {teams.team_of(job_id) for job_id in placed}
    ledger = Ledger(snapshot, teams, active)
    return [
        {
            "team": name,
            "weight": use.team.weight,
            "quota": use.quota,
            "borrowing_limit": use.team.borrowing_limit,
            "cards": sum(use.cards.values()),
            "borrowed": use.borrowed(),
            "share": ledger.share(use),
            "waiting": waiting.get(name, 0),
        }
        for name, use in ledger.use.items()
    ]
