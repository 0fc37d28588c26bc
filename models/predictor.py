"""The predictor the scheduler uses: runtime, GPU memory, uncertainty and `explore` per (job, GPU type).

Runtime = steps / predicted steps/s. Steps are the job's `total_steps` when it gives
them; otherwise `epochs x ceil(data_size_gb x samples_per_gb / batch_size)`, where
samples_per_gb comes from the benchmarks file's `samples_per_gb` for the model (steps/s
in throughput tables count every worker's steps, so an epoch is samples / per-GPU batch
steps whatever the GPU count). A job with neither (the seed's `model_name`, `data_size`, `epoch`
alone) is estimated by its data size x epochs (models.work: the model's typical batch, or a stated prior
flagged `explore`, then what its completed runs measured); only a job without those either is rejected
with PredictorInputError.

Uncertainty is the estimator's spread (across trees or ensemble members) times a scale, combined
in quadrature with a floor per kind of extrapolation (models.features.EXTRAPOLATION_KINDS: a
measured configuration (floor 0), an unmeasured batch size, GPU count or GPU type, a model never
seen), both calibrated on out-of-fold errors of the training rows (random split and GPU types held
out) so that about 68% of rows of each kind fall within it: raw spreads of tree ensembles are not
calibrated (XGBoost's members agree far more than their errors warrant), and an estimate for a GPU
type never measured is much less sure than the trees' agreement says. A query is always given a
wider spread as an extrapolation than it would get as a measured configuration.

This module does not import MLflow: the simulator can train and use a Predictor
directly; models.registry stores, registers and loads it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.linear_model import QuantileRegressor

from cpn.decisions import Estimate, NoEstimates
from cpn.engine.feedback import CompletedRun
from cpn.formats.throughput import ThroughputRow
from cpn.jobs import JobSpec
from models.benchmarks import BenchmarkCatalog, GpuProfile
from models.estimators import Estimator, Prediction, make_estimator
from models.features import EXTRAPOLATION_KINDS, PredictorInputError, Query, workload_key
from models.folds import out_of_fold
from models.memory import MemoryModel, MemorySample, card_evidence
from models.work import (
    ONE_RUN_SPREAD,
    PRIOR_SPREAD,
    WorkObservation,
    WorkRatios,
    batch_spread,
    derived_steps,
    gb_epochs,
    typical_batch,
)

log = logging.getLogger(__name__)

ANSWER_CACHE_SIZE = 200_000
"""Configurations whose answers a Predictor keeps (`throughput`); beyond it the cache starts afresh. A
queue of thousands of jobs on tens of GPU types fits many times over."""

_UNSCORED_LOGGED: set[str] = set()
"""GPU types already logged as unscored by `Predictor.estimates` (once per process, not every round)."""


class Predictor:
    """A trained throughput estimator plus a GPU memory model, answering in scheduler terms."""

    def __init__(
        self,
        estimator: Estimator,
        memory: MemoryModel | None = None,
        spread_scale: float = 1.0,
        spread_floor: dict[str, float] | None = None,
        work: WorkRatios | None = None,
        spread_slope: dict[str, float] | None = None,
    ) -> None:
        self.estimator = estimator
        self.memory = memory or MemoryModel()
        self.spread_scale = float(spread_scale)
        """Factor from the estimator's raw spread to a calibrated one (see calibrate_spread)."""
        self.spread_floor = {k: 0.0 for k in EXTRAPOLATION_KINDS} | (spread_floor or {})
        """Extra spread (log units) per kind of extrapolation, combined in quadrature; 0 for `seen`."""
        self.spread_slope = {k: 0.0 for k in EXTRAPOLATION_KINDS} | (spread_slope or {})
        """Extra spread per unit of distance from the data (Prediction.distance), per kind: an unseen GPU
        type or model unlike any measured one is less sure than one like them."""
        self.work = work or WorkRatios()
        """What completed runs without steps measured against their work estimates (models.work)."""

    @property
    def catalog(self) -> BenchmarkCatalog:
        """The GPU types (scores and specs) the predictor knows."""
        return self.estimator.features.catalog

    def with_catalog(self, catalog: BenchmarkCatalog) -> Predictor:
        """A copy that also knows the GPU types of `catalog`, scored the same way; no retraining."""
        return Predictor(
            self.estimator.with_catalog(catalog),
            self.memory,
            self.spread_scale,
            self.spread_floor,
            self.work,
            self.spread_slope,
        )

    def __setstate__(self, state: dict) -> None:
        # Predictors pickled before per-kind calibration had one scale and no floors; before work
        # estimates, no ratios learnt.
        state.setdefault("spread_floor", dict.fromkeys(EXTRAPOLATION_KINDS, 0.0))
        state.setdefault("work", WorkRatios())
        state.setdefault("spread_slope", dict.fromkeys(EXTRAPOLATION_KINDS, 0.0))
        self.__dict__.update(state)

    def __getstate__(self) -> dict:
        # The answer cache is rebuilt on use; a stored model does not carry it.
        return {k: v for k, v in self.__dict__.items() if k != "_answers"}

    def throughput(self, queries: Sequence[Query]) -> Prediction:
        """Predicted steps/s, calibrated spread, seen-flag and extrapolation kind of each query.

        A trained Predictor never changes (retraining, `with_catalog` and `learn_work` make new ones), so
        each configuration's answer is computed once and kept: the scheduler asks about the same queue
        every round, and a round's cost is then a look-up per pair whatever the table and the forests
        (ANSWER_CACHE_SIZE)."""
        if not queries:
            raise PredictorInputError("no queries to predict")
        cache: dict[Query, tuple] = self.__dict__.setdefault("_answers", {})
        # Answers found are read once, so that another thread starting the cache afresh loses nothing here.
        found = {q: a for q in dict.fromkeys(queries) if (a := cache.get(q)) is not None}
        missing = [q for q in dict.fromkeys(queries) if q not in found]
        if missing:
            raw = self.estimator.predict(missing)
            spread = served_spread(
                raw.log_spread,
                raw.kind,
                self.spread_scale,
                self.spread_floor,
                raw.distance,
                self.spread_slope,
            )
            fresh = dict(
                zip(
                    missing,
                    zip(raw.log_steps_per_sec, spread, raw.seen, raw.kind, raw.distance, strict=True),
                    strict=True,
                )
            )
            found.update(fresh)
            if len(cache) + len(fresh) > ANSWER_CACHE_SIZE:
                cache.clear()
            cache.update(fresh)
        mean, spread, seen, kind, distance = zip(*(found[q] for q in queries), strict=True)
        return Prediction(
            np.array(mean), np.array(spread), np.array(seen, dtype=bool), np.array(kind), np.array(distance)
        )

    def trained_on(self, queries: Sequence[Query]) -> np.ndarray:
        """True where the query's configuration was among the training rows."""
        return self.estimator.features.kinds(queries) == EXTRAPOLATION_KINDS.index("seen")

    def steps(self, job: JobSpec) -> int | None:
        """Training steps `job` runs: its total_steps, or derived from its data size, epochs, batch size
        and its model's samples per GB; None when those cannot tell (it is estimated by its work, see
        models.work); PredictorInputError for a malformed total_steps or work, and for a service (it runs
        until deleted: no runtime to estimate)."""
        if job.is_service:
            raise PredictorInputError(f"job {job.job_id}: a service runs until deleted; it has no runtime")
        if job.total_steps is not None:
            if (
                isinstance(job.total_steps, bool)
                or not isinstance(job.total_steps, int)
                or job.total_steps < 1
            ):
                raise PredictorInputError(f"job {job.job_id}: total_steps must be a positive integer")
            return job.total_steps
        gb_epochs(job.job_id, job.data_size_gb, job.epochs)
        return derived_steps(
            job.epochs, job.data_size_gb, self.catalog.samples_per_gb(job.model), job.batch_size
        )

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

    def estimates(
        self, jobs: Sequence[JobSpec], gpu_types: Sequence[str]
    ) -> dict[str, Mapping[str, Estimate]]:
        """The scheduler's EstimateSource interface (cpn.engine.scheduler): estimate_many, leaving out what
        cannot be estimated, as the oracle does, so that one such job or card does not fail the round: GPU
        types the benchmarks do not score, and jobs whose steps or configuration cannot be told (an
        inference service without steps); each logged. Such a job's row is a `NoEstimates` carrying
        why, which the scheduler adds to the job's rejection. Policies place those jobs without a runtime
        or say why they wait. A GPU type the benchmarks do not score yet gets `_unscored`'s estimates."""
        known = [g for g in gpu_types if self.catalog.find(g) is not None]
        unscored = [g for g in gpu_types if g not in known]
        if new := sorted(set(unscored) - _UNSCORED_LOGGED):
            _UNSCORED_LOGGED.update(new)
            log.warning("no runtime estimates on GPU types the benchmarks do not score: %s", ", ".join(new))
        out: dict[str, Mapping[str, Estimate]] = {}
        try:
            out.update(self.estimate_many(jobs, known))
        except PredictorInputError:
            for job in jobs:
                try:
                    out.update(self.estimate_many([job], known))
                except PredictorInputError as exc:
                    log.warning("no estimate for job %s: %s", job.job_id, exc)
                    out[job.job_id] = NoEstimates(str(exc))
        if unscored:
            for job in jobs:
                row = out.get(job.job_id, {})
                more = self._unscored(job, dict(row), unscored)
                if more or not isinstance(row, NoEstimates):
                    out[job.job_id] = {**row, **more}
        return out

    def _unscored(
        self, job: JobSpec, row: dict[str, Estimate], unscored: Sequence[str]
    ) -> dict[str, Estimate]:
        """`job`'s estimates on GPU types with no benchmark scores yet (`row`: its estimates on scored
        types): a job to explore (its model unseen, every estimate a guess anyway) may go there, guessed
        as slow as its slowest scored type; any other job has no runtime there until the type's benchmark
        has run (Estimate.pending_benchmark). Nothing for a job that cannot be estimated at all."""
        if not row:
            try:
                row = self.estimate_many([job], self.catalog.gpu_types()).get(job.job_id, {})
            except PredictorInputError:
                return {}
        if not row:
            return {}
        if any(e.explore for e in row.values()):
            slowest = max(row.values(), key=lambda e: e.runtime_s)
            return dict.fromkeys(unscored, slowest)
        memory = next(iter(row.values())).gpu_mem_gb
        return dict.fromkeys(unscored, Estimate(math.inf, memory, pending_benchmark=True))

    def estimate_pairs(self, pairs: Sequence[tuple[JobSpec, str, str | None]]) -> list[Estimate]:
        """Estimates of (job, GPU type, node or None) triples, in order: by steps where the job's steps can
        be told, else by its work (models.work)."""
        if not pairs:
            return []
        steps = [self.steps(job) for job, _, _ in pairs]
        by_steps = [i for i, s in enumerate(steps) if s is not None]
        by_work = [i for i, s in enumerate(steps) if s is None]
        out: list[Estimate | None] = [None] * len(pairs)
        if by_steps:
            # A measured model's job that gives steps but no batch size runs at its typical batch.
            batches = [self.batch_of(pairs[i][0]) or (pairs[i][0].batch_size, 0.0) for i in by_steps]
            queries = [self._query(pairs[i], b) for i, (b, _) in zip(by_steps, batches, strict=True)]
            pred = self.throughput(queries)
            runtime = np.array([steps[i] for i in by_steps], dtype=float) / pred.steps_per_sec
            keys = {gpu: self._gpu_profile(gpu).key for gpu in {pairs[i][1] for i in by_steps}}
            for k, i in enumerate(by_steps):
                spread = math.hypot(pred.log_spread[k], batches[k][1])
                explore = not bool(pred.seen[k])
                out[i] = self._estimate(pairs[i][0], runtime[k], spread, explore, keys[pairs[i][1]])
        if by_work:
            for i, est in zip(by_work, self.work_estimates([pairs[i] for i in by_work]), strict=True):
                out[i] = est
        return out  # type: ignore[return-value]

    def _query(
        self, pair: tuple[JobSpec, str, str | None], batch: int | None, model: str | None = None
    ) -> Query:
        job, gpu, node = pair
        precision = job.precision if model is None else "fp32"
        try:
            return Query(model or job.model, batch, gpu, job.num_gpus, node, precision)
        except PredictorInputError as exc:
            raise PredictorInputError(f"job {job.job_id}: {exc}") from None

    def _estimate(
        self, job: JobSpec, runtime: float, log_spread: float, explore: bool, gpu_key: str | None = None
    ) -> Estimate:
        memory = self.memory.for_job(
            job.model, job.batch_size, job.num_gpus, job.gpu_mem_gb, job.precision, gpu_key
        )
        return Estimate(
            runtime_s=float(runtime),
            gpu_mem_gb=memory,
            uncertainty=float(np.expm1(log_spread)),
            explore=explore,
        )

    def batch_of(self, job: JobSpec) -> tuple[int | None, float] | None:
        """(batch to ask the throughput at, log spread for not knowing the job's batch) of a job whose
        model was measured: its own batch size, else the model's typical one (models.work.typical_batch,
        with the spread of its samples/s over its measured batches); batch None for a model measured at a
        fixed batch (taken to train one sample a step, as Gavel's CycleGAN does). None for a model never
        measured."""
        features = self.estimator.features
        key = workload_key(job.model, job.precision)
        if key not in features.models:
            return None
        if job.batch_size:
            return job.batch_size, 0.0
        measured = features.measured_batches(key)
        if measured is None:
            return None, 0.0
        xs, ys = measured
        return typical_batch(xs), max(batch_spread(xs, ys), self.spread_floor["batch"])

    def references(self) -> list[tuple[str, int, float]]:
        """(model, typical batch, samples per GB) of the models the prior of models.work averages: measured
        at fp32 and at batch sizes, their samples per GB known."""
        features = self.estimator.features
        return [
            (key, typical_batch(measured[0]), spg)
            for key in features.models
            if (measured := features.measured_batches(key)) is not None
            and (spg := self.catalog.samples_per_gb(key)) is not None
        ]

    def work_estimates(
        self, pairs: Sequence[tuple[JobSpec, str, str | None]], learnt: bool = True
    ) -> list[Estimate]:
        """Estimates of jobs whose steps cannot be told, by data size x epochs (models.work). A measured
        model with samples per GB runs at its typical batch; one without trains the reference models'
        steps per GB (geometric mean) at its own throughput, and a model never measured costs the
        reference models' seconds per GB-epoch (`unseen_cost`), both flagged `explore`. With `learnt`,
        each is scaled by what the model's completed runs measured. PredictorInputError naming what a job
        lacks when a reference model is needed and there is none."""
        refs = self.references()
        ref_steps_per_gb = np.log([spg / batch for _, batch, spg in refs])
        queries: list[Query] = []
        plans = []
        for pair in pairs:
            job = pair[0]
            work = gb_epochs(job.job_id, job.data_size_gb, job.epochs)
            batch = self.batch_of(job)
            spg = self.catalog.samples_per_gb(job.model)
            if (batch is None or spg is None) and not refs:
                raise PredictorInputError(
                    f"job {job.job_id}: no total_steps; its steps cannot be derived (need a batch size and "
                    f"samples_per_gb for model {job.model!r} in the benchmarks file), and no measured model "
                    "has samples_per_gb there to take a prior from: add one, or give total_steps"
                )
            plans.append((work, batch, spg, len(queries)))
            if batch is not None:
                queries.append(self._query(pair, batch[0]))
        pred = self.throughput(queries) if queries else None
        unseen: dict[int, tuple[float, float]] = {}
        out = []
        for pair, (work, batch, spg, at) in zip(pairs, plans, strict=True):
            job, gpu, node = pair
            if batch is not None:
                size, spread_b = batch
                if spg is not None:  # its own steps per GB at its (typical) batch
                    log_cost = math.log(spg / (size or 1)) - pred.log_steps_per_sec[at]
                    spread = math.hypot(pred.log_spread[at], spread_b)
                    explore = False
                else:  # the reference models' steps per GB at its own throughput
                    log_cost = float(ref_steps_per_gb.mean()) - pred.log_steps_per_sec[at]
                    spread = float(np.hypot.reduce([ref_steps_per_gb.std(), pred.log_spread[at], spread_b]))
                    spread, explore = max(spread, PRIOR_SPREAD), True
            else:  # never measured: the reference models' seconds per GB-epoch, shaped by GPU speed
                if job.num_gpus not in unseen:
                    unseen[job.num_gpus] = self.unseen_cost(job.num_gpus)
                level, spread = unseen[job.num_gpus]
                log_cost = level - self._gpu_profile(gpu, node).log_speed
                spread, explore = max(spread, PRIOR_SPREAD), True
            key = workload_key(job.model, job.precision)
            gpu_key = self._gpu_profile(gpu, node).key
            correction = self.work.correction(key, gpu_key, job.num_gpus) if learnt else None
            if correction is not None:
                log_cost += correction.log_ratio
                known = correction.spread if correction.spread is not None else ONE_RUN_SPREAD
                spread = math.hypot(known, self.spread_floor[correction.kind])
                explore = False
            out.append(self._estimate(job, work * math.exp(log_cost), spread, explore, gpu_key))
        return out

    def unseen_cost(self, num_gpus: int) -> tuple[float, float]:
        """(level, log spread) of the prior of a model never measured on `num_gpus` cards: its log seconds
        per GB-epoch on a GPU type are `level - log speed` (the type's geometric-mean benchmark score), so
        its ratios between GPU types are the benchmark workloads'. The level is each reference model's
        log cost times speed averaged over the benchmarks' GPU types, then over the references (geometric
        means); the spread is the references' disagreement with their mean prediction spread."""
        refs = self.references()
        gpus = self.catalog.gpu_types()
        pred = self.throughput([Query(m, b, g, num_gpus) for m, b, _ in refs for g in gpus])
        speed = np.array([self.catalog.find(g).log_speed for g in gpus])
        steps = np.log([spg / b for _, b, spg in refs])
        per_gpu = steps[:, None] - pred.log_steps_per_sec.reshape(len(refs), len(gpus)) + speed[None, :]
        costs = per_gpu.mean(axis=1)
        return float(costs.mean()), float(np.hypot(costs.std(), pred.log_spread.mean()))

    def _gpu_profile(self, gpu: str, node: str | None = None) -> GpuProfile:
        profile = self.catalog.find(gpu, node)
        if profile is None:
            raise PredictorInputError(
                f"unknown GPU type {gpu!r}; the benchmarks file knows {list(self.catalog.gpu_types())}"
            )
        return profile

    def learn_work(self, runs: Sequence[CompletedRun]) -> Predictor:
        """A copy that also knows what `runs` (completed runs without steps) measured against their work
        estimates (models.work.WorkRatios); runs on GPU types the benchmarks do not score are left out."""
        pairs, measured = [], []
        for run in runs:
            if self.catalog.find(run.gpu_type) is None:
                log.warning(
                    "run %s: GPU type %s has no benchmark scores; not learnt from", run.job_id, run.gpu_type
                )
                continue
            if not (
                isinstance(run.runtime_s, int | float) and math.isfinite(run.runtime_s) and run.runtime_s > 0
            ):
                raise PredictorInputError(
                    f"run {run.job_id}: runtime_s must be a positive number, got {run.runtime_s!r}"
                )
            job = JobSpec(
                job_id=run.job_id,
                model=run.model,
                batch_size=run.batch_size,
                num_gpus=run.num_gpus,
                epochs=run.epochs,
                data_size_gb=run.data_size_gb,
                precision=run.precision,
            )
            pairs.append((job, run.gpu_type, None))
            measured.append(run.runtime_s)
        observations = [
            WorkObservation(
                workload_key(job.model, job.precision),
                self._gpu_profile(gpu).key,
                job.num_gpus,
                math.log(seconds / est.runtime_s),
            )
            for (job, gpu, _), seconds, est in zip(
                pairs, measured, self.work_estimates(pairs, learnt=False), strict=True
            )
        ]
        return Predictor(
            self.estimator,
            self.memory,
            self.spread_scale,
            self.spread_floor,
            WorkRatios(observations),
            self.spread_slope,
        )


CALIBRATION_SPLITS = ("random", "leave_gpu_out")
"""Out-of-fold predictions the spread is calibrated on: the random split gives unmeasured batch sizes and
GPU counts, leave-one-GPU-type-out gives GPU types never measured."""
CALIBRATION_FOLDS = 5
"""At most this many folds per calibration split (several GPU types held out per fold beyond 5): the
cost of calibrating stays ten fits whatever the number of GPU types."""
MIN_CALIBRATION_ROWS = 5
"""Fewer out-of-fold rows of a kind than this: the kind takes the floor of all rows pooled."""


def log_errors(rows: Sequence[ThroughputRow], pred: Prediction) -> np.ndarray:
    """|log error| of each prediction of the rows."""
    return np.abs(np.log([r.steps_per_sec for r in rows]) - pred.log_steps_per_sec)


def served_spread(
    raw: np.ndarray,
    kinds: np.ndarray,
    scale: float,
    floor: dict[str, float],
    distance: np.ndarray | None = None,
    slope: dict[str, float] | None = None,
) -> np.ndarray:
    """The stated spread: the raw spread times `scale`, and the kind's floor plus its slope times the
    query's distance from the data, in quadrature."""
    floors = np.array([floor[k] for k in EXTRAPOLATION_KINDS])[kinds]
    if distance is not None and slope is not None:
        floors = floors + np.array([slope.get(k, 0.0) for k in EXTRAPOLATION_KINDS])[kinds] * distance
    return np.hypot(raw * scale, floors)


def calibration_from(
    errors: np.ndarray, raw: np.ndarray, kinds: np.ndarray, distance: np.ndarray | None = None
) -> tuple[float, dict[str, float], dict[str, float]]:
    """(scale, floor per kind, slope per kind) such that 68% of the errors of each kind lie within
    `served_spread`.

    The scale is the smallest over kinds of the 68% quantile of error / raw spread (what a measured
    configuration gets); each kind's floor is the 68% quantile of what its errors need beyond that, or,
    where its rows lie at different distances from the data, a floor plus a slope on the distance: the 68%
    quantile regression of the need on the distance (scikit-learn's QuantileRegressor, a linear programme),
    kept where the slope comes out positive (farther is never surer). A kind with fewer than
    MIN_CALIBRATION_ROWS rows takes what all rows pooled need.
    """
    no_slope = dict.fromkeys(EXTRAPOLATION_KINDS, 0.0)
    if not len(errors):
        return 1.0, dict(no_slope), no_slope
    ratios = errors / np.maximum(raw, 1e-6)
    groups = {
        kind: (kinds == i) if (kinds == i).sum() >= MIN_CALIBRATION_ROWS else np.ones(len(errors), bool)
        for i, kind in enumerate(EXTRAPOLATION_KINDS[1:], start=1)
    }
    scale = max(min(float(np.quantile(ratios[g], 0.68)) for g in groups.values()), 1e-3)
    need = np.sqrt(np.maximum(errors**2 - (raw * scale) ** 2, 0.0))
    floor = {"seen": 0.0}
    slope = dict(no_slope)
    for kind, g in groups.items():
        floor[kind] = float(np.quantile(need[g], 0.68))
        if distance is not None and np.ptp(distance[g]) > 0:
            fit = QuantileRegressor(quantile=0.68, alpha=0.0, solver="highs").fit(distance[g, None], need[g])
            if fit.coef_[0] > 0 and fit.intercept_ >= 0:
                floor[kind], slope[kind] = float(fit.intercept_), float(fit.coef_[0])
    return scale, floor, slope


def calibrate_spread(
    rows: Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    estimator: str,
    seed: int = 0,
    params: dict[str, Any] | None = None,
) -> tuple[float, dict[str, float], dict[str, float]]:
    """(scale, floor and slope per extrapolation kind) from out-of-fold errors of the rows
    (calibration_from); no scaling, floors or slopes if the rows support no split."""
    errors, raw, kinds, distance = [], [], [], []
    for split in CALIBRATION_SPLITS:
        log.info("%s: calibrating the spread on %s out-of-fold errors", estimator, split)
        pred = out_of_fold(rows, catalog, estimator, split, seed, params, max_folds=CALIBRATION_FOLDS)
        if pred is not None:
            errors.append(log_errors(rows, pred))
            raw.append(pred.log_spread)
            kinds.append(pred.kind)
            distance.append(pred.distance)
    if not errors:
        return 1.0, dict.fromkeys(EXTRAPOLATION_KINDS, 0.0), dict.fromkeys(EXTRAPOLATION_KINDS, 0.0)
    return calibration_from(*(np.concatenate(x) for x in (errors, raw, kinds, distance)))


def fit_predictor(
    rows: Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    estimator: str = "rf",
    memory_samples: Sequence[MemorySample] = (),
    calibrate: bool = True,
    seed: int = 0,
    memory_rows: Sequence[ThroughputRow] | None = None,
    work_runs: Sequence[CompletedRun] = (),
    **params: Any,
) -> Predictor:
    """Train a Predictor on measured rows (see models.features.training_rows) and memory samples; GPU
    memory is learnt from the samples and from which cards the rows ran on (models.memory), or the rows of
    `memory_rows` when given: a whole table, with its rows measured not to run (0 steps/s), which
    training rows leave out. `work_runs`, completed runs whose steps cannot be told, teach the model's
    seconds per GB-epoch (Predictor.learn_work).

    With `calibrate`, more fits on the rows (5 folds plus one per GPU type) set the spread scales
    (calibrate_spread).
    """
    scale, floor, slope = (
        calibrate_spread(rows, catalog, estimator, seed, params) if calibrate else (1.0, None, None)
    )
    fitted = make_estimator(estimator, catalog, seed, **params).fit(rows)
    evidence = card_evidence(rows if memory_rows is None else memory_rows, catalog)
    predictor = Predictor(fitted, MemoryModel(memory_samples, evidence), scale, floor, spread_slope=slope)
    return predictor.learn_work(work_runs) if work_runs else predictor
