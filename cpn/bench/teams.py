"""Per-team figures of a replay (`cpn bench policies --teams FILE`): shares, waits, and the fairness error.

- `share_entitled`: the team's weight over the weights of the teams with jobs in the trace;
- `share_used`: its share of the GPU-hours used while every team with jobs had work waiting (some job
  arrived and not yet started); None when there was no such time;
- `p50_wait_s`, `p99_wait_s`: its jobs' waits from arrival to first start (jobs that started);
- `fairness_error`: the largest |share_used - share_entitled| over the teams (None without contention);

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

from cpn.bench.report import JobTimeline
from cpn.decisions import Teams
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
    out: dict = {}
    for name, lines in sorted(by_team.items()):
        waits = [t.started_at - t.queued_at for t in lines if t.started_at is not None]
        out[name] = {
            "share_entitled": weights[name] / total_weight,
            "share_used": used[name] / contended if contended else None,
            "p50_wait_s": _quantile(waits, 0.5),
            "p99_wait_s": _quantile(waits, 0.99),
            "jobs": len(lines),
        }
    errors = [abs(f["share_used"] - f["share_entitled"]) for f in out.values() if f["share_used"] is not None]
    return {"teams": out, "fairness_error": max(errors) if errors else None}


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
