"""Time slicing for jobs that checkpoint (issue #30): a short waiting job suspends long running ones when
that lowers the mean completion time, at the cost the running jobs' checkpoints and restart make explicit.

A policy set with `time_slicing=true` (config.policies) is wrapped in `SlicingPolicy`: it decides as it
would, then, shortest first, each queued job it leaves waiting (not a service, not on a shared card, not
spread) may suspend running jobs, as Sia and Gavel suspend long jobs so short wide ones pass:

1. **Victims**: running jobs that checkpoint, may be preempted, of the waiting job's team (teams' shares
   are preemption's business, cpn.policies.preemption), that have run at least one checkpoint interval
   since their run started (so a job is never stopped twice within its interval, and loses less than one
   interval of work), and whose predicted remaining time exceeds the waiting job's runtime there
   (shortest remaining time first: a job is never suspended for a longer one).
2. **Where**: for each group the job may run on (cluster, GPU type, pool), one node whose free cards plus
   its victims' would hold the job, or, for a gang wider than any node of the group, the group's nodes
   together; victims are taken least work lost first.
3. **Gain against cost**: the job gains the time it would otherwise wait (its earliest finish by the
   running jobs' predicted ends, `plan.Projection`, against its finish now after the victims' grace
   period); each victim loses its work since its last checkpoint, the restart (`Snapshot.restart_s`) and
   the waiting job's runtime (the most it waits to get its cards back). Only where the gain exceeds the
   sum of the victims' losses does it suspend them; of the groups, the largest net gain.

The short job starts on the freed cards in the same decision (placed by `Capacity.fit`, so every
cluster rule holds); the suspended jobs go back to the queue with the progress of their last checkpoint.
A victim that, delayed so, would end past the makespan's bound (cpn.policies.rebalance.makespan_bound)
is left alone. Without jobs that checkpoint nothing changes. The rule is pure: it reads only the
snapshot and the inner decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from cpn.booking import hold_cards, release_cards
from cpn.decisions import Decision, Placement, Preemption, RunningJob, Snapshot
from cpn.jobs import JobSpec
from cpn.policies.base import Policy, looked_forward_with
from cpn.policies.placement import Capacity, Group, usable_runtimes
from cpn.policies.plan import Projection, releases
from cpn.policies.preemption import GRACE_S, lost_gpu_s
from cpn.policies.rebalance import makespan_bound
from cpn.rules import is_sharing


@dataclass(frozen=True)
class _Victim:
    job_id: str
    running: RunningJob
    lost_s: float
    """Seconds of its work lost: since its last checkpoint."""


class SlicingPolicy:
    """`inner`'s decision plus the suspensions that let short waiting jobs pass long running ones (module
    doc)."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.traits = replace(inner.traits, looks_with=looked_forward_with(inner))
        """`inner`'s; a forward look replays `inner`: the look starts jobs, it never suspends them."""

    def decide(self, snapshot: Snapshot) -> Decision:
        """`inner`'s decision with `suspend`'s preemptions and their jobs' `reclaiming` waits."""
        decision = self.inner.decide(snapshot)
        stops, placed = suspend(snapshot, decision)
        if not stops:
            return decision
        started = {p.job_id for p in placed}
        waiting = tuple(w for w in decision.waiting if w.job_id not in started)
        return replace(
            decision,
            placements=(*decision.placements, *placed),
            preemptions=(*decision.preemptions, *stops),
            waiting=waiting,
        )


def _may_suspend(running: RunningJob, now: float) -> bool:
    """Rule 1 without the length test: checkpoints, preemptible, one interval run since its start."""
    interval = running.checkpoint_interval_s
    if not interval or not running.preemptible or running.started is None or not running.cards:
        return False
    return running.end < math.inf and running.trained_s(now) >= interval


def suspend(snapshot: Snapshot, decision: Decision) -> tuple[tuple[Preemption, ...], tuple[Placement, ...]]:
    """The suspensions of rules 1-3 (module doc) for the jobs `decision` leaves waiting, and each such
    job's placement on the cards they free."""
    now = snapshot.now
    stopping = {p.job_id for p in decision.preemptions}
    candidates = {j: r for j, r in snapshot.running.items() if j not in stopping and _may_suspend(r, now)}
    if not candidates:
        return (), ()
    moving = {p.job_id for p in decision.placements} | {r.job_id for r in decision.rejections}
    moving |= {p.for_job for p in decision.preemptions}
    queued = []
    for job in snapshot.pending:
        if job.job_id in moving or job.is_service or is_sharing(job) or job.spread:
            continue
        runtimes = usable_runtimes(snapshot, job)
        if runtimes:
            queued.append((min(runtimes.values()), job, runtimes))
    if not queued:
        return (), ()
    bound = makespan_bound(snapshot, {job.job_id: runtimes for _, job, runtimes in queued}).end
    by_id = {j.job_id: j for j in snapshot.pending}
    nodes = hold_cards(
        snapshot.nodes, [(by_id[p.job_id], p) for p in decision.placements if p.job_id in by_id]
    )
    on_node: dict[str, list[_Victim]] = {}
    for job_id, r in candidates.items():
        for key, _ in r.cards:
            on_node.setdefault(key, []).append(_Victim(job_id, r, lost_gpu_s(r, now) / _cards(r)))
    released = releases(snapshot)
    free_now = {g.key: g.free for g in Capacity(snapshot).groups()}
    teams = snapshot.teams
    stops: dict[str, Preemption] = {}
    placements: list[Placement] = []
    for _, job, runtimes in sorted(queued, key=lambda q: q[0]):
        team = None if teams is None else teams.team_of(job.job_id)
        mine = {
            k: [v for v in vs if v.job_id not in stops and (team is None or teams.team_of(v.job_id) == team)]
            for k, vs in on_node.items()
        }
        capacity = Capacity(replace(snapshot, nodes=nodes))
        transfer = snapshot.transfer_s.get(job.job_id, {})
        groups = [
            g
            for g in capacity.groups(job.kind)
            if g.gpu_type in runtimes and g.admits_ever(job, capacity.memory(job, g.gpu_type))
        ]
        waited = Projection(now, free_now, released.groups).best(
            ((g.key, transfer.get(g.cluster, 0.0) + runtimes[g.gpu_type]) for g in groups), job.num_gpus, now
        )
        finish_waiting = math.inf if waited is None else waited[1] + waited[2]
        best: tuple[float, Group, list[_Victim]] | None = None
        for group in groups:
            duration = transfer.get(group.cluster, 0.0) + runtimes[group.gpu_type]
            victims = _victims(snapshot, job, group, duration, mine, bound)
            if victims is None:
                continue
            gain = finish_waiting - (now + GRACE_S + duration)
            cost = sum(duration + v.lost_s + snapshot.restart_s + GRACE_S for v in victims)
            if gain > cost and (best is None or gain - cost > best[0]):
                best = (gain - cost, group, victims)
        if best is None:
            continue
        _, group, victims = best
        chosen = {
            v.job_id: Preemption(
                v.job_id,
                job.job_id,
                f"time slicing: {job.job_id} ({runtimes[group.gpu_type]:.0f} s) runs before the rest of "
                f"{v.job_id} ({v.running.end - now:.0f} s left)",
                v.running.cards,
                lost_gpu_s(v.running, now) / 3600,
                GRACE_S,
            )
            for v in victims
        }
        freed = release_cards(nodes, chosen, snapshot.running)
        option = next(
            (
                o
                for o in Capacity(replace(snapshot, nodes=freed)).fit(job, {group.gpu_type}).options
                if o.group.key == group.key
            ),
            None,
        )
        if option is None:
            continue  # the freed cards would not hold it after all (CPU, a split gang)
        placement = option.placement
        placements.append(placement)
        stops.update(chosen)
        nodes = hold_cards(freed, [(job, placement)])
    return tuple(stops.values()), tuple(placements)


def _victims(
    snapshot: Snapshot,
    job: JobSpec,
    group: Group,
    duration: float,
    on_node: dict[str, list[_Victim]],
    bound: float,
) -> list[_Victim] | None:
    """The victims that free room for `job` on one node of `group` (or over the group, for a gang wider
    than its nodes), least work lost first; the fewest, then losing least; None if none would, or if the
    cards are free already (the inner policy's business). A victim must outlast `job` there (`duration`)
    and, delayed by it, still end by the makespan's `bound`."""
    now = snapshot.now
    n = job.num_gpus
    slots = group.admits.get(job.kind, ())
    if not slots:
        return None
    nodes = [s for s in slots if s.node.gpu_count >= n] or (
        list(slots) if n > max(s.node.gpu_count for s in slots) else []
    )
    whole_group = bool(nodes) and all(s.node.gpu_count < n for s in nodes)
    pools = [nodes] if whole_group else [[s] for s in nodes]
    best: tuple[float, list[_Victim]] | None = None
    for pool in pools:
        keys = {s.node.key for s in pool}
        free = sum(s.free for s in pool)
        if free >= n:
            return None
        chosen: list[_Victim] = []
        seen: set[str] = set()
        for v in sorted((v for key in sorted(keys) for v in on_node.get(key, ())), key=lambda v: v.lost_s):
            if free >= n:
                break
            if v.job_id in seen or v.running.end - now <= duration:
                continue
            if v.running.end + duration + v.lost_s + snapshot.restart_s + GRACE_S > bound:
                continue  # delayed, it would end past the makespan's bound
            seen.add(v.job_id)
            chosen.append(v)
            free += sum(c for key, c in v.running.cards if key in keys)
        if free < n:
            continue
        lost = sum(v.lost_s for v in chosen)
        if best is None or (len(chosen), lost) < (len(best[1]), best[0]):
            best = (lost, chosen)
    return None if best is None else best[1]


def _cards(running: RunningJob) -> int:
    return max(1, sum(n for _, n in running.cards))
