"""Figures of a run: completion times, waits, makespan, GPU utilisation.

Computed from the job store's recorded transitions (the same store the live
service writes), so a simulated run and a real one are measured the same way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cpn.engine.scheduler import EstimateSource
from cpn.inventory import Node
from cpn.jobs import Cause, JobState
from cpn.perf.bound import lower_bound
from cpn.perf.last_job import idle_faster
from cpn.perf.plots import Execution, gantt
from cpn.sim.replay import STUCK_REASON
from cpn.store import JobStore

LARGE_JOB_GPUS = 4
"""Jobs with at least this many GPUs count as large for the starvation figure."""


@dataclass(frozen=True)
class JobTimeline:
    """When one job arrived, first ran and ended, and how."""

    job_id: str
    num_gpus: int
    queued_at: float
    started_at: float | None
    ended_at: float | None
    state: JobState
    reason: str = ""
    oom_kills: int = 0
    """Runs of the job killed for exceeding GPU memory (a killed job may be queued again and succeed)."""
    copies: tuple[str, ...] = ()
    """Clusters its image and data were copied to, in order (one `migrating` transition each)."""


@dataclass(frozen=True)
class Busy:
    """GPUs held by a job from `start` to `end` (an execution, successful or not)."""

    num_gpus: float
    """Cards held; fractional when the job shares a card."""
    start: float
    end: float


def busy_of(executions: Iterable[Execution]) -> list[Busy]:
    """GPU time held by executions; a shared card counts for the share the job holds."""
    return [Busy(len(e.gpus) * e.share, e.start, e.end) for e in executions]


def timelines(store: JobStore) -> list[JobTimeline]:
    """One timeline per job in the store, from its recorded transitions."""
    history: dict[str, list] = {}
    for t in store.transitions_all():
        history.setdefault(t.job_id, []).append(t)
    out = []
    for record in store.jobs():
        moves = history[record.job_id]
        queued = next(t.time for t in moves if t.to_state == JobState.QUEUED)
        started = next((t.time for t in moves if t.to_state == JobState.RUNNING), None)
        if started is None and record.state == JobState.SUCCEEDED:  # its start was never reported
            started = next((t.time for t in moves if t.to_state == JobState.SUBMITTED), None)
        ended = moves[-1].time if record.state in (JobState.SUCCEEDED, JobState.FAILED) else None
        out.append(
            JobTimeline(
                job_id=record.job_id,
                num_gpus=record.spec.num_gpus,
                queued_at=queued,
                started_at=started,
                ended_at=ended,
                state=record.state,
                reason=moves[-1].reason,
                oom_kills=sum(t.cause == Cause.OOM_KILLED for t in moves),
                copies=tuple(t.cluster or "" for t in moves if t.to_state == JobState.MIGRATING),
            )
        )
    return out


def copies_per_job(lines: Sequence[JobTimeline]) -> dict[str, float | int | None]:
    """How often jobs' images were copied: mean and max copies per job copied at least once, how many
    jobs were, and how many copies went to a cluster the job's image had been copied to before."""
    copied = [line.copies for line in lines if line.copies]
    return {
        "copied_jobs": len(copied),
        "copies_per_copied_job_mean": sum(map(len, copied)) / len(copied) if copied else None,
        "copies_per_copied_job_max": max(map(len, copied), default=None),
        "copies_to_a_cluster_again": sum(len(c) - len(set(c)) for c in copied),
    }


OUTCOMES = ("succeeded", "failed", "rejected", "stuck", "unfinished")
"""How a job ended a run, the same classes for every policy."""


def outcome_of(job: JobTimeline) -> str:
    """The job's outcome class (OUTCOMES)."""
    if job.state == JobState.SUCCEEDED:
        return "succeeded"
    if job.state == JobState.FAILED:
        return "failed"
    if job.state == JobState.SCHEDULE_FAILED:
        return "stuck" if job.reason == STUCK_REASON else "rejected"
    return "unfinished"


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def summarize(
    jobs: Sequence[JobTimeline], busy: Iterable[Busy], total_gpus: int, transfer_s_total: float = 0.0
) -> dict:
    """The run's figures; time figures in seconds, `None` where no job qualifies.

    JCT counts succeeded jobs (end - arrival); waits count jobs that started
    (first start - arrival); utilisation is GPU-seconds held by any execution
    over total GPUs x makespan; `oom` counts OOM kills (a re-planned job may still succeed). Every job
    is in one outcome class (`OUTCOMES`): succeeded, failed, rejected (schedule-failed: no placement
    could ever satisfy it), stuck (left queued with nothing running or arriving) or unfinished;
    `outcomes` counts each class's jobs by their last reason.
    """
    succeeded = [j for j in jobs if j.state == JobState.SUCCEEDED]
    failed = [j for j in jobs if j.state == JobState.FAILED]
    jct = [j.ended_at - j.queued_at for j in succeeded]
    started = [j for j in jobs if j.started_at is not None]
    waits = [j.started_at - j.queued_at for j in started]
    waits_large = [j.started_at - j.queued_at for j in started if j.num_gpus >= LARGE_JOB_GPUS]
    waits_small = [j.started_at - j.queued_at for j in started if j.num_gpus == 1]
    start = min((j.queued_at for j in jobs), default=0.0)
    end = max((j.ended_at for j in jobs if j.ended_at is not None), default=start)
    makespan = end - start
    gpu_seconds = sum(b.num_gpus * (b.end - b.start) for b in busy)
    outcomes: dict[str, dict[str, int]] = {name: {} for name in OUTCOMES}
    for j in jobs:
        reasons = outcomes[outcome_of(j)]
        reasons[j.reason] = reasons.get(j.reason, 0) + 1
    counts = {name: sum(reasons.values()) for name, reasons in outcomes.items()}
    return {
        "jobs": len(jobs),
        "succeeded": len(succeeded),
        "failed": len(failed),
        "oom": sum(j.oom_kills for j in jobs),
        "rejected": counts["rejected"],
        "stuck": counts["stuck"],
        "unfinished": counts["unfinished"],
        "outcomes": outcomes,
        "makespan_s": makespan,
        "mean_jct_s": _mean(jct),
        "p50_jct_s": _pct(jct, 50),
        "p99_jct_s": _pct(jct, 99),
        "mean_wait_s": _mean(waits),
        "p99_wait_s": _pct(waits, 99),
        "p99_wait_s_large": _pct(waits_large, 99),
        "p99_wait_s_small": _pct(waits_small, 99),
        "gpu_utilization": gpu_seconds / (total_gpus * makespan) if makespan > 0 and total_gpus else 0.0,
        "transfer_s_total": transfer_s_total,
    }


def format_summary(summary: dict[str, float | int | None], title: str = "") -> str:
    """A plain-text table of a summary, times in hours where they read better."""
    lines = [title] if title else []
    for key, value in summary.items():
        if key == "last_job_idle_faster":
            shown = (
                "passed: no faster card it fits stood free long enough to end it sooner"
                if value is None
                else f"FAILED: {value}"
            )
        elif value is None:
            shown = "-"
        elif key.endswith("_s") or "_s_" in key:
            shown = f"{value:,.0f} s ({value / 3600:.2f} h)"
        elif isinstance(value, dict):
            parts = [f"{name}: {reasons}" for name, reasons in value.items() if reasons]
            shown = "; ".join(parts) or "-"
        elif isinstance(value, float):
            shown = f"{value:.3f}"
        else:
            shown = f"{value:,}"
        lines.append(f"  {key:<20} {shown}")
    return "\n".join(lines)


def write_run_report(
    store: JobStore,
    executions: Sequence[Execution],
    nodes: Sequence[Node],
    out_dir: Path | str,
    title: str = "",
    transfer_s_total: float = 0.0,
    oracle: EstimateSource | None = None,
) -> dict[str, float | int | None]:
    """Write `summary.json` (`summarize`'s figures and `copies_per_job`'s) and `gantt.png` to `out_dir`;
    return the summary. With `oracle` (the ground truth's runtimes) also the makespan's lower bound
    (`makespan_lower_bound_s`, cpn.perf.bound.lower_bound) and the last job's check
    (`last_job_idle_faster`: None when no faster card it fits stood free long enough to end it sooner,
    cpn.perf.last_job)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    total_gpus = sum(n.gpu_count for n in nodes)
    lines = timelines(store)
    summary = summarize(lines, busy_of(executions), total_gpus, transfer_s_total)
    if oracle is not None:
        jobs = {r.job_id: r.spec for r in store.jobs()}
        summary["makespan_lower_bound_s"] = lower_bound(list(jobs.values()), nodes, oracle).makespan_s
        found = idle_faster(jobs, executions, nodes, oracle)
        summary["last_job_idle_faster"] = None if found is None else found.as_dict()
    summary.update(copies_per_job(lines))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    gantt(executions, nodes, out / "gantt.png", title=title)
    return summary
