"""Retraining on the benchmark table plus every completed job's measured runtime.

The job store hands completed jobs over as `CompletedRun` records (cpn.engine.feedback, the
one record of a finished run); each whose steps are known (total_steps, or derived from its data size,
epochs, batch size and its model's samples per GB) becomes a throughput row (steps/s = steps /
runtime_s); the others teach the predictor the model's seconds per GB of data and epoch (models.work);
and, when the job's peak GPU memory was measured, each becomes a memory sample. `retrain`
trains, logs and registers like `cpn predictor train`, so the champion rule decides whether
the scheduler gets the new model. `RetrainSchedule` says when to run it: on a timer and
after N new completions.
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
from models.work import derived_steps, gb_epochs


def run_steps(run: CompletedRun, catalog: BenchmarkCatalog) -> int | None:
    """The run's steps: its total_steps, else derived from its work and batch size where the benchmarks
    give its model's samples per GB (models.work.derived_steps); None when they cannot be told."""
    if run.total_steps is not None:
        return run.total_steps
    gb_epochs(run.job_id, run.data_size_gb, run.epochs)
    return derived_steps(run.epochs, run.data_size_gb, catalog.samples_per_gb(run.model), run.batch_size)


def training_row(run: CompletedRun, steps: int | None = None) -> ThroughputRow:
    """The run as a throughput-table row (steps/s = steps / runtime_s, one node: consolidated) of
    the run's precision, its steps its total_steps unless given; PredictorInputError naming the field the
    predictor cannot learn from."""
    query = Query(run.model, run.batch_size, run.gpu_type, run.num_gpus, precision=run.precision)
    steps = run.total_steps if steps is None else steps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise PredictorInputError(f"{run.model}: total_steps must be a positive integer, got {steps!r}")
    if not (isinstance(run.runtime_s, int | float) and math.isfinite(run.runtime_s) and run.runtime_s > 0):
        raise PredictorInputError(f"{run.model}: runtime_s must be a positive number, got {run.runtime_s!r}")
    return ThroughputRow(
        run.model,
        run.batch_size,
        canonical_gpu(run.gpu_type),
        run.num_gpus,
        steps / run.runtime_s,
        precision=query.precision,
    )


def memory_sample(run: CompletedRun) -> MemorySample | None:
    """The run's measured peak GPU memory per card as a memory sample; None if it was not measured."""
    if run.gpu_mem_gb is None:
        return None
    return MemorySample(run.model, run.batch_size, run.gpu_mem_gb, run.num_gpus, run.precision)


def retrain(
    runs: Sequence[CompletedRun],
    table: ThroughputTable | Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    tracking_uri: str = DEFAULT_TRACKING_URI,
    data_source: str = "table",
    **options: Any,
) -> list[RunResult]:
    """Train on `table` plus the completed `runs`, log and register each estimator, apply the champion rule.

    Runs whose steps are known are throughput rows; the others are work runs (models.work).

    The latest completion time among the runs (job store clock) is recorded on the MLflow runs
    (`COMPLETIONS_UNTIL_TAG`), so that the next retraining can count the completions that came after.
    `options` go to models.registry.train_and_register (estimators, params, experiment, ...).
    """
    steps = [run_steps(r, catalog) for r in runs]
    rows = training_rows(table) + [
        training_row(r, s) for r, s in zip(runs, steps, strict=True) if s is not None
    ]
    work = [r for r, s in zip(runs, steps, strict=True) if s is None]
    memory = [s for s in (memory_sample(r) for r in runs) if s is not None]
    source = f"{data_source} + {len(runs)} completed jobs"
    until = max((r.finished_at for r in runs), default=None)
    tags = {} if until is None else {COMPLETIONS_UNTIL_TAG: repr(float(until))}
    return train_and_register(
        rows,
        catalog,
        memory_samples=memory,
        work_runs=work,
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
