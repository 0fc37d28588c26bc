"""Preemption that keeps the work done (issue #21): reclaim the cards other teams borrowed.

A policy set with `preemption=true` (config.policies) is wrapped in `PreemptingPolicy`: it decides as
it would, then, for each job it leaves queued whose team is below its quota (cpn.policies.teams), looks
for a node the job could run on, of a card class its team has quota left on, whose free cards plus the
cards of running jobs of teams that borrow would hold the job's gang. Those running jobs are its victims,
taken in this order:

1. **borrowed cards only**: a victim's cards are no more than its team holds beyond its quota
   (`TeamUse.borrowed`, counted again after each victim), so a team is never taken below its quota (it
   would reclaim the cards back: hysteresis), and the waiting job's team reclaims only while its quota has
   room for the whole job; a job marked not preemptible (`RunningJob.preemptible`) is never taken, nor one
   that checkpoints and has not trained one checkpoint interval since its run started (never stopped twice
   within its interval);
2. the **lowest priority** first;
3. then the **least work lost**: the GPU-seconds since its last checkpoint (its checkpoint interval, or
   its team's default; a job that never checkpoints loses everything since it started, so it goes last
   among equals, and a job whose start is unknown after all of them).

Of the nodes that would hold the job, the one losing the least work is taken. Each victim becomes a
`Preemption` in the decision (the scheduler deletes it with `GRACE_S` and queues it again with the
progress of its last checkpoint); the job waits with the code `reclaiming`, naming the victims and when
their cards free. The job's team then counts the cards as its own, so one round reclaims no more than
the team's quota. The rule is pure: it reads only the snapshot and the inner decision.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, replace

from cpn.decisions import Decision, Preemption, RunningJob, Snapshot, Waiting
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.policies.base import Policy, by_priority, looked_forward_with
from cpn.policies.placement import memory_need
from cpn.policies.teams import Ledger, TeamUse, card_class, matches
from cpn.rules import is_sharing, job_admission_problem

GRACE_S = 30.0
"""Seconds a preempted job is given to stop (its Kubernetes termination grace period)."""


def lost_gpu_s(job: RunningJob, now: float) -> float:
    """GPU-seconds of work `job` loses if stopped at `now`: since its last checkpoint (its start when it
    never checkpoints); inf when its start is unknown."""
    if job.started is None:
        return math.inf
    elapsed = max(0.0, now - job.started)
    if job.checkpoint_interval_s is not None:
        elapsed %= job.checkpoint_interval_s
    return elapsed * sum(n for _, n in job.cards)


def holds_when_free(snapshot: Snapshot, job: JobSpec, node: Node) -> bool:
    """Whether `node`, its running jobs stopped, could take `job`'s gang on its own: enough cards, the
    node's pool and taints and the job's pins (cpn.rules), and the GPU memory the job needs there."""
    if node.gpu_count < job.num_gpus or job_admission_problem(node, job) is not None:
        return False
    need_gb = memory_need(job, snapshot.estimates.get(job.job_id, {}).get(node.gpu_type))
    return need_gb is None or need_gb <= node.gpu_memory_gb


def victim_key(job: RunningJob, now: float) -> tuple[int, float]:
    """Order victims: the lowest priority first, then the least work lost (module doc)."""
    return (job.priority, lost_gpu_s(job, now))


@dataclass
class _Node:
    state: NodeState
    free: int
    victims: list[tuple[str, RunningJob, int]]
    """(job_id, running job, its cards on this node) of every job that holds whole cards here."""


class PreemptingPolicy:
    """A policy that may preempt: `inner`'s decision, plus the preemptions that reclaim borrowed cards for
    the jobs it leaves queued (module doc)."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.traits = replace(inner.traits, looks_with=looked_forward_with(inner))
        """`inner`'s, but a forward look replays `inner` in its place: the look carries out placements, never
        preemptions, and this policy places exactly as `inner` does, so replaying it would only add the cost
        of `reclaim` at every simulated end."""

    def decide(self, snapshot: Snapshot) -> Decision:
        """`inner`'s decision with `reclaim`'s preemptions and their jobs' `reclaiming` waits."""
        decision = self.inner.decide(snapshot)
        preemptions = reclaim(snapshot, decision)
        if not preemptions:
            return decision
        reclaiming = {job_id: _wait(job_id, ps, snapshot.now) for job_id, ps in _by_job(preemptions).items()}
        waiting = tuple(reclaiming.pop(w.job_id, w) for w in decision.waiting) + tuple(reclaiming.values())
        return replace(decision, preemptions=preemptions, waiting=waiting)


def _by_job(preemptions: tuple[Preemption, ...]) -> dict[str, list[Preemption]]:
    out: dict[str, list[Preemption]] = {}
    for p in preemptions:
        out.setdefault(p.for_job, []).append(p)
    return out


def _wait(job_id: str, preemptions: list[Preemption], now: float) -> Waiting:
    names = ", ".join(p.job_id for p in preemptions)
    ends = now + max(p.grace_s for p in preemptions)
    detail = f"waiting for reclaimed cards: preempting {names} (expected end {ends:.0f})"
    return Waiting(job_id, "reclaiming", detail)


def reclaim(snapshot: Snapshot, decision: Decision) -> tuple[Preemption, ...]:
    """The preemptions that give waiting jobs of teams below their quota the cards other teams borrowed
    (module doc); none without teams or running jobs."""
    teams = snapshot.teams
    if teams is None or not snapshot.running:
        return ()
    ledger = Ledger(snapshot, teams)
    nodes = {s.node.key: _Node(s, s.free_gpus, []) for s in snapshot.nodes}
    for job_id, job in snapshot.running.items():
        for key, cards in job.cards:
            if key in nodes:
                nodes[key].victims.append((job_id, job, cards))
    moving = {p.job_id for p in decision.placements} | {r.job_id for r in decision.rejections}
    for p in decision.placements:
        team = ledger.use[teams.team_of(p.job_id)]
        for name, cards in p.nodes:
            node = nodes.get(f"{p.cluster}/{name}")
            if node is not None:
                node.free -= cards
                team.cards[card_class(node.state.node)] += cards
    taken: set[str] = set()
    stuck: set[str] = set()
    out: list[Preemption] = []
    for job in by_priority(snapshot.pending):
        team_name = teams.team_of(job.job_id)
        if job.job_id in moving or team_name in stuck or is_sharing(job):
            continue
        use = ledger.use[team_name]
        if not use.below_quota():
            stuck.add(team_name)  # at its quota: it reclaims nothing more this round
            continue
        best = _cheapest(snapshot, ledger, use, job, nodes.values(), taken)
        if best is None:
            stuck.add(team_name)  # its other jobs find no more to reclaim this round
            continue
        node, victims = best
        for job_id, victim, cards in victims:
            taken.add(job_id)
            owner = ledger.use[teams.team_of(job_id)]
            owner.cards.subtract(_classes(victim, nodes))
            node.free += cards
            out.append(
                Preemption(
                    job_id,
                    job.job_id,
                    f"team {team_name} is below its quota: reclaiming cards team {owner.team.name} borrowed",
                    victim.cards,
                    lost_gpu_s(victim, snapshot.now) / 3600 if victim.started is not None else 0.0,
                    GRACE_S,
                )
            )
        node.free -= job.num_gpus
        use.cards[card_class(node.state.node)] += job.num_gpus
    return tuple(out)


def _too_soon(victim: RunningJob, now: float) -> bool:
    """Whether a job that checkpoints has not yet trained one checkpoint interval since its run started:
    it is never stopped twice within its interval (and one just resumed keeps its restart's worth)."""
    interval = victim.checkpoint_interval_s
    return bool(interval) and victim.started is not None and victim.trained_s(now) < interval


def _classes(job: RunningJob, nodes: dict[str, _Node]) -> Counter:
    """The cards `job` holds, per card class."""
    out: Counter = Counter()
    for key, cards in job.cards:
        if key in nodes:
            out[card_class(nodes[key].state.node)] += cards
    return out


def _cheapest(
    snapshot: Snapshot,
    ledger: Ledger,
    use: TeamUse,
    job: JobSpec,
    nodes,
    taken: set[str],
) -> tuple[_Node, list[tuple[str, RunningJob, int]]] | None:
    """The node (and its victims) that would hold `job` losing the least work, or None: a node with
    enough free cards already means the job needs no preemption (the policy starts it when its turn
    comes)."""
    best: tuple[float, _Node, list] | None = None
    for node in nodes:
        info = node.state.node
        cls = card_class(info)
        if not holds_when_free(snapshot, job, info):
            continue
        if not any(
            use.on(key) + job.num_gpus <= cards and matches(key, cls) for key, cards in use.quota.items()
        ):
            continue  # hysteresis: reclaiming would take the team past its quota
        estimates = snapshot.estimates.get(job.job_id)
        if estimates is not None and info.gpu_type not in estimates:
            continue  # no estimate there: the policy would not place it there
        if node.free >= job.num_gpus:
            return None
        victims = _victims(snapshot, ledger, use, node, job.num_gpus, taken)
        if victims is None:
            continue
        cost = sum(lost_gpu_s(v, snapshot.now) for _, v, _ in victims)
        if best is None or cost < best[0]:
            best = (cost, node, victims)
    return None if best is None else (best[1], best[2])


def _victims(
    snapshot: Snapshot, ledger: Ledger, use: TeamUse, node: _Node, need: int, taken: set[str]
) -> list[tuple[str, RunningJob, int]] | None:
    """The running jobs of `node` to stop, in victim order, until `need` cards are free; None if the
    borrowed cards there are not enough."""
    free = node.free
    borrowed: dict[str, int] = {}
    chosen = []
    for job_id, victim, cards in sorted(node.victims, key=lambda v: victim_key(v[1], snapshot.now)):
        if free >= need:
            break
        owner = ledger.use[ledger.teams.team_of(job_id)]
        if job_id in taken or owner is use or not victim.preemptible or _too_soon(victim, snapshot.now):
            continue
        left = borrowed.setdefault(owner.team.name, owner.borrowed())
        if sum(n for _, n in victim.cards) > left:
            continue  # hysteresis: its team would fall below its quota and reclaim the cards back
        borrowed[owner.team.name] = left - sum(n for _, n in victim.cards)
        chosen.append((job_id, victim, cards))
        free += cards
    return chosen if free >= need else None
