"""A policy wrapper the benchmark replays with: it passes every decision through unchanged and keeps what
the figures need that the job store does not hold: each job's first predicted start, and the solver's
per-round figures."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from cpn.bench.report import JobTimeline
from cpn.decisions import Decision, Snapshot, SolverRound
from cpn.policies.base import Policy


@dataclass
class RecordingPolicy:
    """`policy`, recording the first predicted start of each job (and when it was made) and each round's
    solve."""

    policy: Policy
    first_predicted: dict[str, float] = field(default_factory=dict)
    """job id -> the first `Waiting.predicted_start` any decision gave it."""
    solver_rounds: list[SolverRound] = field(default_factory=list)
    decide_s: list[float] = field(default_factory=list)
    """Wall time of each decision."""

    @property
    def name(self) -> str:
        """The wrapped policy's name."""
        return self.policy.name

    def decide(self, snapshot: Snapshot) -> Decision:
        """The wrapped policy's decision, unchanged."""
        started = time.perf_counter()
        decision = self.policy.decide(snapshot)
        self.decide_s.append(time.perf_counter() - started)
        for waiting in decision.waiting:
            if waiting.predicted_start is not None and waiting.job_id not in self.first_predicted:
                self.first_predicted[waiting.job_id] = waiting.predicted_start
        if decision.solver is not None:
            self.solver_rounds.append(decision.solver)
        return decision


def predicted_start_error(
    first_predicted: dict[str, float], lines: Sequence[JobTimeline]
) -> tuple[float | None, int]:
    """Median over jobs that waited and started of |first predicted start - actual start| / actual wait,
    and how many jobs it covers (None when none)."""
    errors = []
    for line in lines:
        predicted = first_predicted.get(line.job_id)
        if predicted is None or line.started_at is None:
            continue
        wait = line.started_at - line.queued_at
        if wait > 0:
            errors.append(abs(predicted - line.started_at) / wait)
    return (statistics.median(errors) if errors else None), len(errors)


def solver_summary(rounds: Sequence[SolverRound]) -> dict[str, float | int | str | None]:
    """Rounds solved, median and max solve time, fallbacks to greedy's plan, and statuses by count."""
    if not rounds:
        return {}
    times = [r.solve_s for r in rounds]
    statuses: dict[str, int] = {}
    for r in rounds:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    gaps = [r.gap for r in rounds if r.gap is not None]
    return {
        "solver": rounds[0].solver,
        "solver_rounds": len(rounds),
        "solve_s_median": statistics.median(times),
        "solve_s_max": max(times),
        "solver_fallbacks": sum(1 for r in rounds if r.fallback is not None),
        "solver_gap_max": max(gaps) if gaps else None,
        "solver_statuses": ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())),
    }
