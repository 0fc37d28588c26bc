"""Retraining on the benchmark table plus every completed job's measured runtime.

The job store hands completed jobs over as plain `Observation` records; each becomes a
throughput row (steps/s = total_steps / runtime_s) and, when the job's peak GPU memory
was measured, a memory sample. `retrain` trains, logs and registers like
`cpn predictor train`, so the champion rule decides whether the scheduler gets the new
model. `RetrainSchedule` says when to run it: on a timer and after N new completions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cpn.engine.feedback import CompletedRun
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.gpus import canonical_gpu
from models.benchmarks import BenchmarkCatalog
from models.features import PredictorInputError, Query, training_rows
from models.memory import MemorySample
from models.registry import (
    COMPLETIONS_UNTIL_TAG,
    DEFAULT_TRACKING_URI,
    LastTraining,
    RunResult,
    train_and_register,
)


@dataclass(frozen=True)
class Observation:
    """One completed job as the predictor learns from it."""

    model: str
    batch_size: int | None
    gpu_type: str
    num_gpus: int
    total_steps: int
    runtime_s: float
    """Measured run time, transfer and queueing excluded."""
    gpu_mem_gb: float | None = None
    """Measured peak GPU memory per card, if the metrics had it."""
    precision: str = "fp32"
    """The job's training precision (`JobSpec.precision`): the row teaches that precision's workload."""

    def __post_init__(self) -> None:
        query = Query(self.model, self.batch_size, self.gpu_type, self.num_gpus, precision=self.precision)
        object.__setattr__(self, "precision", query.precision)
        if (
            isinstance(self.total_steps, bool)
            or not isinstance(self.total_steps, int)
            or self.total_steps < 1
        ):
            raise PredictorInputError(
                f"{self.model}: total_steps must be a positive integer, got {self.total_steps!r}"
            )
        if not (
            isinstance(self.runtime_s, int | float) and math.isfinite(self.runtime_s) and self.runtime_s > 0
        ):
            raise PredictorInputError(
                f"{self.model}: runtime_s must be a positive number, got {self.runtime_s!r}"
            )

    def row(self) -> ThroughputRow:
        """The measurement as a throughput-table row (one node: consolidated)."""
        return ThroughputRow(
            self.model,
            self.batch_size,
            canonical_gpu(self.gpu_type),
            self.num_gpus,
            self.total_steps / self.runtime_s,
            precision=self.precision,
        )

    def memory_sample(self) -> MemorySample | None:
        """The measured GPU memory, if any."""
        if self.gpu_mem_gb is None:
            return None
        return MemorySample(self.model, self.batch_size, self.gpu_mem_gb, self.num_gpus, self.precision)


def retrain(
    observations: Sequence[Observation],
    table: ThroughputTable | Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    tracking_uri: str = DEFAULT_TRACKING_URI,
    completions_until: float | None = None,
    data_source: str = "table",
    **options: Any,
) -> list[RunResult]:
    """Train on `table` plus `observations`, log and register each estimator, apply the champion rule.

    `completions_until` (the latest completion time among the observations, job store clock) is
    recorded on the runs, so that the next retraining can count the completions that came after.
    `options` go to models.registry.train_and_register (estimators, params, experiment, ...).
    """
    rows = training_rows(table) + [o.row() for o in observations]
    memory = [s for s in (o.memory_sample() for o in observations) if s is not None]
    source = f"{data_source} + {len(observations)} completed jobs"
    tags = {} if completions_until is None else {COMPLETIONS_UNTIL_TAG: repr(float(completions_until))}
    return train_and_register(
        rows,
        catalog,
        memory_samples=memory,
        tracking_uri=tracking_uri,
        data_source=source,
        tags=tags,
        **{"session": "retrain", **options},
    )


@dataclass(frozen=True)
class RetrainSchedule:
    """When to retrain: every `every_s` seconds, and as soon as `every_completions` jobs completed."""

    every_completions: int = 50
    every_s: float = 24 * 3600.0

    def __post_init__(self) -> None:
        if self.every_completions < 1 or not self.every_s > 0:
            raise ValueError("every_completions must be >= 1 and every_s > 0")

    def due(self, completions_since_last: int, seconds_since_last: float) -> bool:
        """True if enough jobs completed or enough time passed since the last retraining."""
        return completions_since_last >= self.every_completions or seconds_since_last >= self.every_s

    def decide(
        self, last: LastTraining | None, finished_at: Sequence[float], now_s: float
    ) -> tuple[bool, str]:
        """(due, why) given the last training run (None: never trained), the completion times of every
        finished job (job store clock) and the wall-clock time now."""
        if last is None:
            return True, "no model trained yet"
        after = last.completions_until
        new = sum(1 for t in finished_at if after is None or t > after)
        age = now_s - last.started_s
        why = (
            f"{new} new completions (retrain at {self.every_completions}), "
            f"last training {age / 3600:.1f} h ago (retrain every {self.every_s / 3600:g} h)"
        )
        return self.due(new, age), why


def observations_from_runs(runs: Sequence[CompletedRun]) -> list[Observation]:
    """The predictor's view of completed jobs from the job store (cpn.engine.feedback)."""
    return [
        Observation(
            r.model,
            r.batch_size,
            r.gpu_type,
            r.num_gpus,
            r.total_steps,
            r.runtime_s,
            r.gpu_mem_gb,
            r.precision,
        )
        for r in runs
    ]
