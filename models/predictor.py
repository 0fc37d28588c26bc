"""The predictor the scheduler uses: runtime, GPU memory, uncertainty and `explore` per (job, GPU type).

Runtime = steps / predicted steps/s. Steps are the job's `total_steps` when it gives
them; otherwise `epochs x ceil(data_size_gb x samples_per_gb / batch_size)`, where
samples_per_gb comes from the benchmarks file's `samples_per_gb` for the model (steps/s
in throughput tables count every worker's steps, so an epoch is samples / per-GPU batch
steps whatever the GPU count). A job with neither is rejected with PredictorInputError.

Uncertainty is the estimator's spread (across trees or ensemble members) times a scale
calibrated, per kind of extrapolation (models.features.EXTRAPOLATION_KINDS: a measured
configuration, an unmeasured batch size, GPU count or GPU type, a model never seen), on
out-of-fold errors of the training rows (random split and leave-one-GPU-type-out), so that
about 68% of rows of each kind fall within it: raw spreads of tree ensembles are not
calibrated (XGBoost's members agree far more than their errors warrant), and an estimate for a
GPU type never measured is much less sure than one for a batch size between two measured ones.
A measured configuration gets the smallest scale of any kind (out-of-fold errors never see one).

This module does not import MLflow: the simulator can train and use a Predictor
directly; models.registry stores, registers and loads it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from cpn.decisions import Estimate
from cpn.formats.throughput import ThroughputRow
from cpn.jobs import JobSpec
from models.benchmarks import BenchmarkCatalog
from models.estimators import Estimator, Prediction, make_estimator
from models.evaluation import out_of_fold
from models.features import EXTRAPOLATION_KINDS, PredictorInputError, Query, model_key
from models.memory import MemoryModel, MemorySample

log = logging.getLogger(__name__)


class Predictor:
    """A trained throughput estimator plus a GPU memory model, answering in scheduler terms."""

    def __init__(
        self,
        estimator: Estimator,
        memory: MemoryModel | None = None,
        spread_scale: float | dict[str, float] = 1.0,
    ) -> None:
        self.estimator = estimator
        self.memory = memory or MemoryModel()
        if not isinstance(spread_scale, dict):
            spread_scale = dict.fromkeys(EXTRAPOLATION_KINDS, float(spread_scale))
        self.spread_scale = spread_scale
        """Factor from the estimator's raw spread to a calibrated one, per kind of extrapolation."""
        samples = estimator.features.catalog.config.samples_per_gb
        self._samples_per_gb = {model_key(name): v for name, v in samples.items()}

    @property
    def catalog(self) -> BenchmarkCatalog:
        """The GPU types (scores and specs) the predictor knows."""
        return self.estimator.features.catalog

    def with_catalog(self, catalog: BenchmarkCatalog) -> Predictor:
        """A copy that also knows the GPU types of `catalog`, scored the same way; no retraining."""
        return Predictor(self.estimator.with_catalog(catalog), self.memory, self.spread_scale)

    def __setstate__(self, state: dict) -> None:
        # Predictors pickled before per-kind calibration had one scale for every kind.
        if not isinstance(state.get("spread_scale", 1.0), dict):
            state["spread_scale"] = dict.fromkeys(EXTRAPOLATION_KINDS, float(state.get("spread_scale", 1.0)))
        self.__dict__.update(state)

    def throughput(self, queries: Sequence[Query]) -> Prediction:
        """Predicted steps/s, calibrated spread, seen-flag and extrapolation kind of each query."""
        raw = self.estimator.predict(queries)
        scale = np.array([self.spread_scale[k] for k in EXTRAPOLATION_KINDS])[raw.kind]
        return Prediction(raw.log_steps_per_sec, raw.log_spread * scale, raw.seen, raw.kind)

    def trained_on(self, queries: Sequence[Query]) -> np.ndarray:
        """True where the query's configuration was among the training rows."""
        return self.estimator.features.kinds(queries) == EXTRAPOLATION_KINDS.index("seen")

    def steps(self, job: JobSpec) -> int:
        """Training steps `job` runs; PredictorInputError if it gives too little to tell."""
        if job.total_steps is not None:
            if (
                isinstance(job.total_steps, bool)
                or not isinstance(job.total_steps, int)
                or job.total_steps < 1
            ):
                raise PredictorInputError(f"job {job.job_id}: total_steps must be a positive integer")
            return job.total_steps
        spg = self._samples_per_gb.get(model_key(job.model))
        why = []
        if spg is None:
            why.append(f"samples_per_gb for model {job.model!r} in the benchmarks file")
        if not job.batch_size:
            why.append("a batch size")
        if isinstance(job.epochs, bool) or not isinstance(job.epochs, int) or job.epochs < 1:
            why.append(f"epochs a positive integer (got {job.epochs!r})")
        size = job.data_size_gb
        if isinstance(size, bool) or not isinstance(size, int | float) or not (0 < size < math.inf):
            why.append(f"data_size_gb a positive number (got {size!r})")
        if why:
            raise PredictorInputError(
                f"job {job.job_id}: no total_steps, and steps cannot be derived: need {'; '.join(why)}"
            )
        return job.epochs * math.ceil(size * spg / job.batch_size)

    def estimate(self, job: JobSpec, gpu_type: str, node: str | None = None) -> Estimate:
        """Runtime, memory, uncertainty and explore flag of `job` on `gpu_type` (optionally one node)."""
        return self.estimate_pairs([(job, gpu_type, node)])[0]

    def estimate_many(
        self, jobs: Sequence[JobSpec], gpu_types: Sequence[str]
    ) -> dict[str, dict[str, Estimate]]:
        """Every job on every GPU type, in one vectorised call: job_id -> GPU type -> Estimate."""
        pairs = [(job, gpu, None) for job in jobs for gpu in gpu_types]
        out: dict[str, dict[str, Estimate]] = {}
        for (job, gpu, _), est in zip(pairs, self.estimate_pairs(pairs), strict=True):
            out.setdefault(job.job_id, {})[gpu] = est
        return out

    def estimates(self, jobs: Sequence[JobSpec], gpu_types: Sequence[str]) -> dict[str, dict[str, Estimate]]:
        """The scheduler's EstimateSource interface (cpn.engine.scheduler): same as estimate_many."""
        return self.estimate_many(jobs, gpu_types)

    def estimate_pairs(self, pairs: Sequence[tuple[JobSpec, str, str | None]]) -> list[Estimate]:
        """Estimates of (job, GPU type, node or None) triples, in order."""
        if not pairs:
            return []
        queries = []
        for job, gpu, node in pairs:
            try:
                queries.append(Query(job.model, job.batch_size, gpu, job.num_gpus, node))
            except PredictorInputError as exc:
                raise PredictorInputError(f"job {job.job_id}: {exc}") from None
        steps = np.array([self.steps(job) for job, _, _ in pairs], dtype=float)
        pred = self.throughput(queries)
        runtime = steps / pred.steps_per_sec
        uncertainty = np.expm1(pred.log_spread)
        return [
            Estimate(
                runtime_s=float(runtime[i]),
                gpu_mem_gb=self.memory.predict(job.model, job.batch_size, job.num_gpus),
                uncertainty=float(uncertainty[i]),
                explore=not bool(pred.seen[i]),
            )
            for i, (job, _, _) in enumerate(pairs)
        ]


CALIBRATION_SPLITS = ("random", "leave_gpu_out")
"""Out-of-fold predictions the spread is calibrated on: the random split gives unmeasured batch sizes and
GPU counts, leave-one-GPU-type-out gives GPU types never measured."""
CALIBRATION_FOLDS = 5
"""At most this many folds per calibration split (several GPU types held out per fold beyond 5): the
cost of calibrating stays ten fits whatever the number of GPU types."""
MIN_CALIBRATION_ROWS = 5
"""Fewer out-of-fold rows of a kind than this: the kind takes the scale of all rows pooled."""


def spread_ratios(rows: Sequence[ThroughputRow], pred: Prediction) -> np.ndarray:
    """|log error| / raw spread of each out-of-fold prediction (what a calibrated scale must cover)."""
    errors = np.abs(np.log([r.steps_per_sec for r in rows]) - pred.log_steps_per_sec)
    return errors / np.maximum(pred.log_spread, 1e-6)


def scales_from(ratios: np.ndarray, kinds: np.ndarray) -> dict[str, float]:
    """Per kind, the 68% quantile of the ratios (pooled where a kind has too few); `seen` the smallest."""
    if not len(ratios):
        return dict.fromkeys(EXTRAPOLATION_KINDS, 1.0)
    pooled = max(float(np.quantile(ratios, 0.68)), 1e-3)
    out = {}
    for i, kind in enumerate(EXTRAPOLATION_KINDS[1:], start=1):
        mine = ratios[kinds == i]
        out[kind] = max(float(np.quantile(mine, 0.68)), 1e-3) if len(mine) >= MIN_CALIBRATION_ROWS else pooled
    return {"seen": min(out.values()), **out}


def calibrate_spread(
    rows: Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    estimator: str,
    seed: int = 0,
    params: dict[str, Any] | None = None,
) -> dict[str, float]:
    """Scale per extrapolation kind that makes 68% of out-of-fold errors of that kind fall within the
    spread (1.0 everywhere if the rows support no split)."""
    ratios, kinds = [], []
    for split in CALIBRATION_SPLITS:
        log.info("%s: calibrating the spread on %s out-of-fold errors", estimator, split)
        pred = out_of_fold(rows, catalog, estimator, split, seed, params, max_folds=CALIBRATION_FOLDS)
        if pred is not None:
            ratios.append(spread_ratios(rows, pred))
            kinds.append(pred.kind)
    if not ratios:
        return dict.fromkeys(EXTRAPOLATION_KINDS, 1.0)
    return scales_from(np.concatenate(ratios), np.concatenate(kinds))


def fit_predictor(
    rows: Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    estimator: str = "rf",
    memory_samples: Sequence[MemorySample] = (),
    calibrate: bool = True,
    seed: int = 0,
    **params: Any,
) -> Predictor:
    """Train a Predictor on measured rows (see models.features.training_rows) and memory samples.

    With `calibrate`, more fits on the rows (5 folds plus one per GPU type) set the spread scales
    (calibrate_spread).
    """
    scale = calibrate_spread(rows, catalog, estimator, seed, params) if calibrate else 1.0
    fitted = make_estimator(estimator, catalog, seed, **params).fit(rows)
    return Predictor(fitted, MemoryModel(memory_samples), scale)
