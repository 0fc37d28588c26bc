"""A policy wrapper the benchmark replays with: it passes every decision through unchanged and keeps what
the figures need that the job store does not hold: each job's predicted starts over its wait, a naive
estimate of its start made in the same run, and the solver's per-round figures.

The naive estimate is what a scheduler with no plan could say when a job arrives: its position in the
queue times the mean runtime of the jobs seen so far, over the cards it can use (those of the GPU types
it has a runtime on, in a pool its kind may use). A predicted start is worth showing only if it beats it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from cpn.decisions import Decision, Estimate, Snapshot, SolverRound
from cpn.jobs import JobSpec
from cpn.perf.report import JobTimeline
from cpn.policies.base import Policy, Traits, looked_forward_with
from cpn.rules import POOLS_FOR_KIND


@dataclass
class RecordingPolicy:
    """`policy`, recording a naive estimate of each job's start when first seen and each round's solve;
    and, given each round's final decision (`observe`), each job's predicted starts (when they changed,
    and when said)."""

    policy: Policy
    predictions: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """job id -> (time said, predicted start) each time a decision gave the job a new predicted start."""
    naive: dict[str, float] = field(default_factory=dict)
    """job id -> the naive estimate of its start, made the first round it was seen queued."""
    solver_rounds: list[SolverRound] = field(default_factory=list)
    decide_s: list[float] = field(default_factory=list)
    """Wall time of each decision."""
    _runtime_sum: float = 0.0
    _runtime_jobs: int = 0
    _cards: dict[tuple[str, tuple[str, ...]], int] = field(default_factory=dict)
    _prioritised: bool = False
    """Whether any job seen so far had a priority: until one has, no queued job has, and the queue is
    not scanned for one each round."""

    @property
    def name(self) -> str:
        """The wrapped policy's name."""
        return self.policy.name

    @property
    def traits(self) -> Traits:
        """The wrapped policy's, the forward look replaying what that policy looks with: the look's simulated
        rounds are no rounds of the run, and the recorder records none of them."""
        return replace(self.policy.traits, looks_with=looked_forward_with(self.policy))

    def decide(self, snapshot: Snapshot) -> Decision:
        """The wrapped policy's decision, unchanged."""
        self._estimate_naively(snapshot)
        started = time.perf_counter()
        decision = self.policy.decide(snapshot)
        self.decide_s.append(time.perf_counter() - started)
        if decision.solver is not None:
            self.solver_rounds.append(decision.solver)
        return decision

    def observe(self, snapshot: Snapshot, decision: Decision) -> None:
        """Record the predicted starts of a round's final decision (the scheduler's `on_decision`: after
        its forward look, cpn.engine.forecast), each job's when it changed."""
        for waiting in decision.waiting:
            if waiting.predicted_start is None:
                continue
            said = self.predictions.setdefault(waiting.job_id, [])
            if not said or said[-1][1] != waiting.predicted_start:
                said.append((snapshot.now, waiting.predicted_start))

    def _estimate_naively(self, snapshot: Snapshot) -> None:
        """The naive estimate of every job seen queued for the first time this round.

        New arrivals join the end of the queue, so the scan walks back from the end to the first job
        seen before; with priorities a job's position counts the queued jobs of at least its priority.
        """
        new: list[tuple[int, JobSpec]] = []
        for pos in range(len(snapshot.pending) - 1, -1, -1):
            job = snapshot.pending[pos]
            if job.job_id in self.naive:
                break
            new.append((pos, job))
        if not new:
            return
        self._prioritised = self._prioritised or any(job.priority for _, job in new)
        prioritised = self._prioritised and any(job.priority for job in snapshot.pending)
        for pos, job in reversed(new):
            runtimes = _runtimes(snapshot.estimates.get(job.job_id, {}))
            if runtimes:
                self._runtime_sum += min(runtimes.values())
                self._runtime_jobs += 1
            cards = self._usable_cards(snapshot, job, tuple(sorted(runtimes)))
            if not cards or not self._runtime_jobs:
                self.naive[job.job_id] = math.inf
                continue
            ahead = pos
            if prioritised:
                ahead = sum(1 for other in snapshot.pending if other.priority >= job.priority) - 1
            mean = self._runtime_sum / self._runtime_jobs
            self.naive[job.job_id] = snapshot.now + ahead * mean * job.num_gpus / cards

    def _usable_cards(self, snapshot: Snapshot, job: JobSpec, gpu_types: tuple[str, ...]) -> int:
        key = (job.kind, gpu_types)
        if key not in self._cards:
            pools = POOLS_FOR_KIND[job.kind]
            self._cards[key] = sum(
                s.node.gpu_count
                for s in snapshot.nodes
                if s.node.gpu_type in gpu_types and s.node.usage in pools
            )
        return self._cards[key]


def _runtimes(estimates: Mapping[str, Estimate]) -> dict[str, float]:
    """GPU type -> finite runtime estimate."""
    return {g: e.runtime_s for g, e in estimates.items() if e.runtime_s < math.inf}


@dataclass(frozen=True)
class StartErrors:
    """How far predicted starts were from the actual ones, as a fraction of the actual wait: median and
    p90 over the jobs that waited and started, for the prediction first made, the one in force at half
    the job's wait, and the naive estimate made when the job arrived."""

    median: float | None = None
    p90: float | None = None
    jobs: int = 0
    """Jobs that waited, started and had a prediction."""
    half_wait_median: float | None = None
    half_wait_p90: float | None = None
    naive_median: float | None = None
    naive_p90: float | None = None
    never_waited: int = 0
    """Jobs that started the moment they arrived: left out of every figure."""

    def as_summary(self) -> dict[str, float | int | None]:
        """The figures under the names `cpn bench policies` prints and writes."""
        return {
            "predicted_start_median_error": self.median,
            "predicted_start_p90_error": self.p90,
            "predicted_start_jobs": self.jobs,
            "predicted_start_half_wait_median_error": self.half_wait_median,
            "predicted_start_half_wait_p90_error": self.half_wait_p90,
            "predicted_start_median_error_naive": self.naive_median,
            "predicted_start_p90_error_naive": self.naive_p90,
            "predicted_start_never_waited": self.never_waited,
        }


def _median_p90(errors: Sequence[float]) -> tuple[float | None, float | None]:
    if not errors:
        return None, None
    ordered = sorted(errors)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def start_errors(recorder: RecordingPolicy, lines: Sequence[JobTimeline]) -> StartErrors:
    """|predicted start - actual start| / actual wait of every job that waited and started (see
    StartErrors); the naive estimate over the same jobs as the first predictions when any policy
    prediction exists, else over every job that waited."""
    first, half, naive, never = [], [], [], 0
    for line in lines:
        if line.started_at is None:
            continue
        wait = line.started_at - line.queued_at
        if wait <= 0:
            never += 1
            continue
        said = recorder.predictions.get(line.job_id)
        if said:
            first.append(abs(said[0][1] - line.started_at) / wait)
            at_half = [p for when, p in said if when <= line.queued_at + wait / 2]
            if at_half:
                half.append(abs(at_half[-1] - line.started_at) / wait)
        guess = recorder.naive.get(line.job_id)
        if guess is not None and (said or not recorder.predictions):
            naive.append(abs(guess - line.started_at) / wait if guess < math.inf else math.inf)
    median, p90 = _median_p90(first)
    half_median, half_p90 = _median_p90(half)
    naive_median, naive_p90 = _median_p90(naive)
    return StartErrors(median, p90, len(first), half_median, half_p90, naive_median, naive_p90, never)


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
