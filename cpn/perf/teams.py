"""Per-team figures of a replay (`cpn bench policies --teams FILE`): shares, waits, and the fairness error.

- `share_entitled`: the team's weight over the weights of the teams with jobs in the trace;
- `share_used`: its share of the GPU-hours used while every team with jobs had work waiting (some job
  arrived and not yet started); None when there was no such time;
- `p50_wait_s`, `p99_wait_s`: its jobs' waits from arrival to first start (jobs that started);
- `share_fair`: its max-min fair share over the same time: at each moment the cards in use are divided
  by weight, no team counted for more than it asked (its running jobs' cards plus those of its jobs
  waiting to start), the rest shared by the others (weighted water-filling); equal to `share_entitled`
  while every team asks for more than its weighted share;
- `fairness_error`: the largest |share_used - share_fair| over the teams (None without contention): a
  team that asks for less than its weight's share and gets it is treated fairly;
  `fairness_error_by_weight`: the largest |share_used - share_entitled|, which counts such a team short;

`work_figures`, reported for every replay, with or without teams:

- `gpu_hours`: work done: GPU-hours of runs that succeeded, plus those of stopped runs up to their last
  checkpoint (kept by their next run);
- `preemptions_per_job` (over the jobs that ran), `max_preemptions_of_a_job`, `lost_fraction` (GPU-hours
  lost over those done and lost);
- `preemptions`, `lost_gpu_hours`: runs stopped, to reclaim cards (cpn.policies.preemption) or to move or make
  room (cpn.policies.rebalance), and the GPU-hours they lost: the work since their last checkpoint and the
  restart cost (cpn.sim.gateway.Stopped).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from cpn.decisions import Teams
from cpn.perf.report import JobTimeline
from cpn.sim.gateway import Execution, Stopped

Interval = tuple[float, float]


def _union(spans: Iterable[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def _overlap(span: Interval, window: list[Interval]) -> float:
    return sum(max(0.0, min(span[1], e) - max(span[0], s)) for s, e in window)


def _quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def team_figures(
    teams: Teams,
    timelines: Sequence[JobTimeline],
    executions: Sequence[Execution],
) -> dict:
    """`{"teams": {name: figures}, "fairness_error"}` of one replay (module doc)."""
    by_team: dict[str, list[JobTimeline]] = {}
    for line in timelines:
        by_team.setdefault(teams.team_of(line.job_id), []).append(line)
    weights = {t.name: t.weight for t in teams.teams if t.name in by_team}
    total_weight = sum(weights.values())
    window: list[Interval] | None = None
    for lines in by_team.values():
        waiting = _union(
            (t.queued_at, t.started_at if t.started_at is not None else (t.ended_at or t.queued_at))
            for t in lines
        )
        window = waiting if window is None else _intersect(window, waiting)
    window = window or []
    used = dict.fromkeys(by_team, 0.0)
    for e in executions:
        cards = len(e.gpus) * e.share
        team = teams.team_of(e.job_id)
        if team in used:
            used[team] += cards * _overlap((e.start, e.end), window)
    contended = sum(used.values())
    fair = _fair_use(teams, weights, timelines, executions, window)
    fair_total = sum(fair.values())
    out: dict = {}
    for name, lines in sorted(by_team.items()):
        waits = [t.started_at - t.queued_at for t in lines if t.started_at is not None]
        out[name] = {
            "share_entitled": weights[name] / total_weight,
            "share_used": used[name] / contended if contended else None,
            "share_fair": fair[name] / fair_total if fair_total else None,
            "p50_wait_s": _quantile(waits, 0.5),
            "p99_wait_s": _quantile(waits, 0.99),
            "jobs": len(lines),
        }
    by_weight = [
        abs(f["share_used"] - f["share_entitled"]) for f in out.values() if f["share_used"] is not None
    ]
    errors = [
        abs(f["share_used"] - f["share_fair"])
        for f in out.values()
        if f["share_used"] is not None and f["share_fair"] is not None
    ]
    return {
        "teams": out,
        "fairness_error": max(errors) if errors else None,
        "fairness_error_by_weight": max(by_weight) if by_weight else None,
    }


def water_fill(total: float, weights: dict[str, float], asks: dict[str, float]) -> dict[str, float]:
    """Weighted max-min fair split of `total` cards: each team gets `total` x its weight share, none more
    than it asks; what a team leaves is split again among the others by weight."""
    out = dict.fromkeys(weights, 0.0)
    left, open_ = total, {t for t in weights if asks.get(t, 0.0) > 0}
    while left > 1e-9 and open_:
        weight = sum(weights[t] for t in open_)
        capped = {t for t in open_ if asks[t] - out[t] <= left * weights[t] / weight}
        if not capped:
            for t in open_:
                out[t] += left * weights[t] / weight
            break
        for t in capped:
            left -= asks[t] - out[t]
            out[t] = asks[t]
        open_ -= capped
    return out


def _fair_use(
    teams: Teams,
    weights: dict[str, float],
    timelines: Sequence[JobTimeline],
    executions: Sequence[Execution],
    window: list[Interval],
) -> dict[str, float]:
    """Card-seconds each team's max-min fair share (`water_fill` of the cards in use, by what each team
    asks: its running cards plus the cards of its jobs waiting to start) comes to over `window`."""
    changes: list[tuple[float, str, float, float]] = []  # (time, team, d running cards, d waiting cards)
    for e in executions:
        team = teams.team_of(e.job_id)
        if team in weights:
            changes += [
                (e.start, team, len(e.gpus) * e.share, 0.0),
                (e.end, team, -len(e.gpus) * e.share, 0.0),
            ]
    for t in timelines:
        team = teams.team_of(t.job_id)
        end = t.started_at if t.started_at is not None else (t.ended_at or t.queued_at)
        if team in weights and end > t.queued_at:
            changes += [(t.queued_at, team, 0.0, t.num_gpus), (end, team, 0.0, -t.num_gpus)]
    changes.sort(key=lambda c: c[0])
    running, waiting = dict.fromkeys(weights, 0.0), dict.fromkeys(weights, 0.0)
    out = dict.fromkeys(weights, 0.0)
    for i, (when, team, run, wait) in enumerate(changes):
        running[team] += run
        waiting[team] += wait
        until = changes[i + 1][0] if i + 1 < len(changes) else when
        span = _overlap((when, until), window)
        if span <= 0:
            continue
        asks = {t: running[t] + waiting[t] for t in weights}
        for t, cards in water_fill(sum(running.values()), weights, asks).items():
            out[t] += cards * span
    return out


def work_figures(executions: Sequence[Execution], stopped: Sequence[Stopped] = ()) -> dict:
    """`{"gpu_hours", "preemptions", "lost_gpu_hours"}` of one replay (module doc); `stopped`: the runs the
    simulator stopped (SimulatedGateway.preempted)."""
    done = sum(len(e.gpus) * e.share * (e.end - e.start) for e in executions if e.outcome == "succeeded")
    gpu_hours = (done + sum(s.kept_gpu_s for s in stopped)) / 3600
    lost = sum(s.lost_gpu_s for s in stopped) / 3600
    ran = {e.job_id for e in executions}
    per_job = Counter(s.job_id for s in stopped)
    return {
        "gpu_hours": gpu_hours,
        "preemptions": len(stopped),
        "lost_gpu_hours": lost,
        "lost_fraction": lost / (gpu_hours + lost) if gpu_hours + lost > 0 else 0.0,
        "preemptions_per_job": len(stopped) / len(ran) if ran else 0.0,
        "max_preemptions_of_a_job": max(per_job.values(), default=0),
    }
