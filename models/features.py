"""Features and targets of the throughput predictor.

A query is one (model, batch size, GPU type, GPU count) configuration, the inputs a
job's annotations give (`model_name`, batch size, GPU count) plus the GPU type it might
run on. Models are told apart by the domain's key (cpn.model_names.model_key: `ResNet-50`,
`resnet50` and `resnet_50` are one model), as the simulator and the oracle tell them. The
predictor learns log steps/s *relative to an analytical prior*:

    prior = ref(model, batch) + log speed(GPU) + log num_gpus

where speed(GPU) is the geometric mean of the GPU's benchmark scores and ref is the
model's measured throughput with GPU speed and GPU count divided out (mean over its
training rows). For a batch size the model was not measured at, ref is interpolated
log-log between the nearest measured batch sizes; beyond them it assumes constant
samples/s (steps/s proportional to 1/batch). A model never seen gets the median ref
and is flagged unseen (the scheduler explores it); the estimators widen its spread by
the spread of the refs. Tree models cannot extrapolate to a
GPU faster than any they were trained on; predicting the residual of a prior that
already scales with the benchmark scores lets them generalise to new GPU types.

Features: log batch size (NaN for models measured at a fixed batch), log GPU count,
log score per workload, log memory bandwidth, log FP32 TFLOPS, memory GB, ref, and a
one-hot of the model. Inputs are validated; nothing malformed becomes a zero.

Neighbour features (`NEIGHBOUR_FEATURES`): a throughput table is close to additive in log
space over (model, batch) x (GPU type, GPU count), so a missing cell is estimated from
measured cells around it: "rectangles" y(m,b,g',n') + y(m,b',g,n) - y(m,b',g',n') over
the same model's other batch sizes b' (weighted by exp(-|log b'/b| - |log2 n'/n|)), the
same configuration on another GPU type shifted by the model's own ratio between the two
GPU types (or, failing that, other models' ratio), the count scaling of the model's other
precisions on the same GPU type, and so on. Each is an estimate of log steps/s; their
combination is the *local prior* (NaN where no neighbour exists: a GPU type or model never
measured, where the analytical prior above is all there is): a weighted mean of the
neighbour estimates and the physical prior, each weighted by 1 / its squared typical error
on the training rows (`FeatureBuilder.local_weights`). Every
neighbour feature of a query leaves out the query's own configuration, for training
rows too: a row's own measurement never enters its features, so a model trained on
them sees what it will see for a configuration it has not measured.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.jobs import normalise_precision
from cpn.model_names import ModelNameError, model_key
from models.benchmarks import BenchmarkCatalog, GpuProfile
from models.catalog import FAMILY_DISTANCE, ModelCatalog, profile_distance, shipped_catalog
from models.physical import PhysicalPrior, log_batch_of

NEIGHBOUR_FEATURES = (
    "nb_rect_count",
    "nb_rect_gpu",
    "nb_rect_both",
    "nb_batch",
    "nb_count",
    "nb_gpu",
    "nb_other_models",
    "nb_speed",
    "nb_rect_precision",
)
"""Neighbour estimates of log steps/s (see module docstring), in `Features.neighbours` column order:
rectangles over another batch size of the model with the same GPU type (other count), the same count
(other GPU type) or both different; the same GPU type and count at other batch sizes, shifted by the
model's references; the same batch and GPU type at other counts, shifted by log count ratio; the same
batch and count on other GPU types, shifted by the model's own ratio between them; the same, shifted by
other models' ratio at that count; the same configuration on the GPU types just slower and just faster
than the query's (by benchmark speed), interpolated log-log at the query's speed (never extrapolated);
rectangles over the model's other precisions on the same GPU type (their count scaling to the query's
count, from a count the query's configuration was measured at: the same machine, the same model)."""

EXTRAPOLATION_KINDS = ("seen", "batch", "count", "gpu", "model")
UNCATALOGUED_DISTANCE = FAMILY_DISTANCE + 1.0
"""Distance from the data (FeatureBuilder.distances) of a model never measured that the catalog lacks, or
with no catalogued model measured: as far as a model of another family a decade of FLOPs per parameter
away (models.catalog.profile_distance), since nothing says it is nearer."""
"""How far a query is from what the predictor trained on: its configuration was measured (`seen`); its
workload was measured on that GPU type at that count but not at that batch size (`batch`); on that GPU
type but not at that count (`count`); not on that GPU type (`gpu`); never (`model`). Spreads are
calibrated per kind (models.predictor)."""

NEIGHBOUR_CACHE = 100_000
"""Neighbour estimates kept per builder: every measured configuration's, and up to this many queries'
(the scheduler asks about the same queued jobs every round)."""

LOCAL_KINDS = ("none", "count_line", "other_models", "speed_line", "same_model_line", "rectangle")
"""The closest neighbour family a query has (`Features.local_kind` indexes this; see
`FeatureBuilder.local_kind_of`)."""

LOCAL_WEIGHT_MIN_ROWS = 5
"""An estimate (neighbour family or physical prior) with fewer training rows than this gets no weight in
the local prior: its typical error cannot be told."""
MIN_TYPICAL_ERROR = 1e-6
"""Floor of an estimate's typical error (log units) when weighting it, so an exact family gets a finite
weight."""


class PredictorInputError(ValueError):
    """A query or a training row the predictor cannot use; the message says which and why."""


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise PredictorInputError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Query:
    """One configuration to predict: `model` at `batch_size` on `num_gpus` cards of `gpu_type`."""

    model: str
    batch_size: int | None
    """Per-GPU batch size; None for models measured at a fixed batch (A3C, CycleGAN)."""
    gpu_type: str
    num_gpus: int
    node: str | None = None
    """Node whose own benchmark scores to use, if it has some."""
    precision: str = "fp32"
    """Training precision (`fp32`, `fp16`, `bf16`; other spellings as the throughput table reads them)."""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "precision", normalise_precision(self.precision))
        except ValueError as exc:
            raise PredictorInputError(f"{self.model}: {exc}") from None
        workload_key(self.model, self.precision)
        if self.batch_size is not None:
            _positive_int(self.batch_size, f"{self.model}: batch_size")
        _positive_int(self.num_gpus, f"{self.model}: num_gpus")
        if not isinstance(self.gpu_type, str) or not self.gpu_type.strip():
            raise PredictorInputError(
                f"{self.model}: gpu_type must be a non-empty string, got {self.gpu_type!r}"
            )


def query_of(row: ThroughputRow) -> Query:
    """The query a measured row answers."""
    return Query(row.model, row.batch_size, row.gpu_type, row.num_gpus, precision=row.precision)


@lru_cache(maxsize=4096)
def workload_key(model: str, precision: str = "fp32") -> str:
    """What the predictor learns one throughput curve for: the model (cpn.model_names.model_key), and its
    precision unless fp32 (`resnet50`, `resnet50@fp16`): mixed precision changes how a model's speed moves
    with the card. PredictorInputError for a name that names no model."""
    try:
        key = model_key(model)
    except ModelNameError as exc:
        raise PredictorInputError(str(exc)) from None
    return key if precision == "fp32" else f"{key}@{precision}"


def training_rows(table: ThroughputTable | Sequence[ThroughputRow]) -> list[ThroughputRow]:
    """Rows the predictor learns from: consolidated placements that ran.

    cpn places a job on one node, so spread-out (`unconsolidated`) measurements are left
    out; rows with 0 steps/s (measured not to run) have no log and no percentage error.
    """
    return [r for r in table if r.consolidated and r.steps_per_sec > 0]


@dataclass(frozen=True)
class Features:
    """Feature matrix of a list of queries, with the prior each prediction is relative to."""

    X: np.ndarray
    """Shape (n, len(feature_names)), float64; NaN for the batch size of fixed-batch models and for the
    specs (bandwidth, TFLOPS, memory) of a GPU type whose specs nobody gave; never a made-up zero."""
    prior: np.ndarray
    """Analytical prior of log steps/s per query (see module docstring)."""
    log_speed: np.ndarray
    """Log of the GPU's geometric-mean benchmark score per query."""
    seen: np.ndarray
    """True where the query's model is in the training data."""
    neighbours: np.ndarray
    """Shape (n, len(NEIGHBOUR_FEATURES)): neighbour estimates of log steps/s, NaN where none exists."""
    local_prior: np.ndarray
    """Weighted mean of the neighbour estimates and the prior (see `FeatureBuilder.local_prior`); NaN
    where no neighbour estimate exists."""
    local_kind: np.ndarray
    """Index into LOCAL_KINDS of what the local prior came from (0: none)."""

    @property
    def has_local(self) -> np.ndarray:
        """True where the query has a local prior."""
        return ~np.isnan(self.local_prior)

    def local_X(self) -> np.ndarray:
        """Design matrix of the local model: X, neighbour estimates relative to the local prior, kind."""
        rel = self.neighbours - self.local_prior[:, None]
        prior_rel = (self.prior - self.local_prior)[:, None]
        return np.hstack([self.X, rel, prior_rel, self.local_kind[:, None].astype(float)])


class FeatureBuilder:
    """Learns per-model references from training rows, then turns queries into features."""

    def __init__(self, catalog: BenchmarkCatalog, models: ModelCatalog | None = None) -> None:
        self.catalog = catalog
        self.model_catalog = models if models is not None else shipped_catalog()
        """What each model computes (models.catalog): the physical prior's anchor."""
        self._mean_log_flops = 0.0
        """Mean log training FLOPs per sample of the catalogued training models: an uncatalogued one's."""
        self._anchors: dict[tuple[str, str], float] = {}
        self._score_center = np.zeros(len(catalog.workloads))
        """Mean log score of each workload over the GPU types of the catalog trained with: an anchor
        compares speeds across benchmarks relative to it (scores of different workloads are in different
        units), and a later catalog (`with_catalog`) keeps it."""
        self.models: tuple[str, ...] = ()
        self._refs: dict[tuple[str, int | None], float] = {}
        self._batches: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._fixed_batch: set[str] = set()
        self._default_ref = 0.0
        self._measured_nb: dict[tuple[str, int | None, str, int], tuple[list[float], int]] = {}
        """Neighbour estimates of each measured configuration (they leave that configuration out, so a
        query for it gets the same as its training rows) and of queries asked before: computed once."""
        self.unseen_spread = 0.0
        """Spread of the model references (log space): how wrong the median is for a model never seen."""
        self.local_weights: np.ndarray | None = None
        """Weight of each neighbour family (NEIGHBOUR_FEATURES order) and, last, of the physical prior in
        the local prior: 1 / (typical |error| on the training rows)^2, the typical error being the
        median absolute error x 1.4826 (the standard deviation of a normal error, robust to the odd
        irregular measurement); 0 where fewer than LOCAL_WEIGHT_MIN_ROWS rows have the estimate. None
        before fit: no local prior."""

    def __setstate__(self, state: dict) -> None:
        # Builders pickled before neighbour features existed load with no measurements (global model only).
        state.setdefault("_measured", {})
        state.setdefault("_by_model", {})
        state.setdefault("_cell_ratio", {})
        state.setdefault("_gpus", ())
        state.setdefault("_ref_parts", {})
        state.setdefault("_ref_parts_total", {})
        state.setdefault("_siblings", {})
        # Pickled before the model catalog: anchored on the mean benchmark speed alone, as then.
        state.setdefault("model_catalog", ModelCatalog({}))
        state.setdefault("_mean_log_flops", 0.0)
        state.setdefault("_anchors", {})
        state.setdefault("_score_center", np.zeros(len(state["catalog"].workloads)))
        if "local_weights" not in state:
            # Pickled before the weighted local prior: its local model was trained on other columns, so
            # the global model answers every query (no local prior), and cached neighbours are recomputed.
            state["local_weights"] = None
            state["_measured_nb"] = {}
        state.setdefault("_measured_nb", {})
        self.__dict__.update(state)

    @property
    def local_feature_names(self) -> list[str]:
        """Column names of `Features.local_X()`."""
        return [*self.feature_names, *(f"{n}_rel" for n in NEIGHBOUR_FEATURES), "prior_rel", "local_kind"]

    @property
    def feature_names(self) -> list[str]:
        """Column names of `Features.X`."""
        return [
            "log_batch_size",
            "log_num_gpus",
            *(f"log_score_{w}" for w in self.catalog.workloads),
            "log_mem_bw",
            "log_fp32_tflops",
            "memory_gb",
            "model_ref",
            *(f"model={m}" for m in self.models),
        ]

    def fit(self, rows: Sequence[ThroughputRow]) -> FeatureBuilder:
        """Learn model references, the neighbour index and the local-prior weights from rows with
        steps_per_sec > 0; returns self."""
        if not rows:
            raise PredictorInputError("no training rows")
        sums: dict[tuple[str, int | None], list[float]] = defaultdict(list)
        for row in rows:
            if not row.steps_per_sec > 0 or not math.isfinite(row.steps_per_sec):
                raise PredictorInputError(f"training row {row}: steps_per_sec must be positive and finite")
            q = query_of(row)
            profile = self._profile(q.gpu_type)
            sums[(workload_key(q.model, q.precision), q.batch_size)].append(
                math.log(row.steps_per_sec) - profile.log_speed - math.log(q.num_gpus)
            )
        self._refs = {k: float(np.mean(v)) for k, v in sums.items()}
        self._default_ref = float(np.median(list(self._refs.values())))
        self.unseen_spread = float(np.std(list(self._refs.values())))
        by_model: dict[str, list[tuple[float, float]]] = defaultdict(list)
        self._fixed_batch = set()
        for (m, b), ref in self._refs.items():
            if b is None:
                self._fixed_batch.add(m)
            else:
                by_model[m].append((math.log(b), ref))
        self._batches = {
            m: tuple(np.array(c) for c in zip(*sorted(v), strict=True)) for m, v in by_model.items()
        }
        self.models = tuple(sorted({m for m, _ in self._refs}))
        self._fit_neighbours(rows)
        queries = [query_of(r) for r in rows]
        flops = [self.model_catalog.find(m) for m in {q.model for q in queries}]
        known = [math.log(p.train_gflops) for p in flops if p is not None]
        self._mean_log_flops = float(np.mean(known)) if known else 0.0
        self._anchors = {}
        scores = [self._profile(g).scores for g in self.catalog.gpu_types()]
        self._score_center = np.log(scores).mean(axis=0)
        inputs = self._physical_inputs(queries, [self._profile(q.gpu_type) for q in queries])
        log_samples = np.log([r.steps_per_sec for r in rows]) + inputs[1]
        self.physical = PhysicalPrior().fit(*inputs, log_samples)
        self.local_weights = None
        feats = self.transform(queries)
        estimates = np.hstack([feats.neighbours, feats.prior[:, None]])
        self.local_weights = self.weights_of(estimates, np.log([r.steps_per_sec for r in rows]))
        return self

    @staticmethod
    def weights_of(estimates: np.ndarray, log_y: np.ndarray) -> np.ndarray:
        """Weight of each column of `estimates` (NaN where missing) in the local prior: 1 / its typical
        error against `log_y` squared (see `local_weights`)."""
        weights = np.zeros(estimates.shape[1])
        for j, column in enumerate(estimates.T):
            have = ~np.isnan(column)
            if have.sum() >= LOCAL_WEIGHT_MIN_ROWS:
                typical = 1.4826 * float(np.median(np.abs(column[have] - log_y[have])))
                weights[j] = 1.0 / max(typical, MIN_TYPICAL_ERROR) ** 2
        return weights

    def local_prior(self, neighbours: np.ndarray, prior: np.ndarray) -> np.ndarray:
        """The local prior of each query: the mean of its neighbour estimates and its physical prior,
        weighted by `local_weights`; NaN where no neighbour estimate exists (or before fit)."""
        if self.local_weights is None:
            return np.full(len(prior), np.nan)
        estimates = np.hstack([neighbours, prior[:, None]])
        weights = np.where(np.isnan(estimates), 0.0, self.local_weights)
        total = weights.sum(axis=1)
        combined = (np.nan_to_num(estimates) * weights).sum(axis=1) / np.where(total > 0, total, 1.0)
        return np.where((total > 0) & ~np.isnan(neighbours).all(axis=1), combined, np.nan)

    def _physical_inputs(self, queries: Sequence[Query], profiles: Sequence[GpuProfile]) -> tuple:
        """Arguments of PhysicalPrior.fit/predict for `queries` on their GPUs' `profiles` (the last being
        each query's `anchor` and a step's log FLOPs per parameter, NaN where uncatalogued)."""
        log_scores = np.log([p.scores for p in profiles])
        specs = np.array([(p.mem_bw_gbps, p.fp32_tflops, p.memory_gb) for p in profiles], dtype=float)
        return (
            PhysicalPrior.gpu_block(log_scores, specs),
            np.array([log_batch_of(q.batch_size) for q in queries]),
            np.log([q.num_gpus for q in queries]),
            [q.precision for q in queries],
            [workload_key(q.model, q.precision) for q in queries],
            [model_key(q.model) for q in queries],
            np.array([self._anchor(q.model, p) for q, p in zip(queries, profiles, strict=True)]),
            np.array([self._intensity(q.model) + log_batch_of(q.batch_size) for q in queries]),
        )

    def _intensity(self, model: str) -> float:
        """Log FLOPs per parameter per sample of `model` (models.catalog); NaN if uncatalogued. Cached with
        the anchors."""
        value = self._anchors.get((model, ""))
        if value is None:
            found = self.model_catalog.find(model)
            value = math.log(found.train_gflops * 1e3 / found.params_m) if found is not None else math.nan
            self._anchors[(model, "")] = value
        return value

    def _anchor(self, model: str, profile: GpuProfile) -> float:
        """Physical expectation of log samples/s of `model` on one GPU of `profile`, up to a constant: the
        log speed of the benchmarks the model moves like (`ModelCatalog.affinity`; all alike, the mean,
        when it is uncatalogued) less its log training FLOPs per sample (the catalogued training models'
        mean when it is uncatalogued)."""
        cached = self._anchors.get((model, profile.key))
        if cached is not None:
            return cached
        weights = self.model_catalog.affinity(model, self.catalog.reference_models())
        relative = np.log(profile.scores) - self._score_center
        speed = float(relative.mean() if weights is None else np.dot(weights, relative))
        found = self.model_catalog.find(model)
        flops = math.log(found.train_gflops) if found is not None else self._mean_log_flops
        value = self._anchors[(model, profile.key)] = speed - flops
        return value

    def _fit_neighbours(self, rows: Sequence[ThroughputRow]) -> None:
        """Index the measured log steps/s by configuration for the neighbour features."""
        values: dict[tuple[str, int | None, str, int], list[float]] = defaultdict(list)
        parts: dict[tuple[str, int | None], dict[tuple[str, int], list[float]]] = defaultdict(dict)
        for row in rows:
            q = query_of(row)
            profile = self._profile(q.gpu_type)
            key = workload_key(q.model, q.precision)
            values[(key, q.batch_size, profile.key, q.num_gpus)].append(math.log(row.steps_per_sec))
            part = parts[(key, q.batch_size)].setdefault((profile.key, q.num_gpus), [0.0, 0])
            part[0] += math.log(row.steps_per_sec) - profile.log_speed - math.log(q.num_gpus)
            part[1] += 1
        # Per (model, batch): each configuration's share of the reference, so that it can be left out.
        self._ref_parts = {k: {c: (p[0], p[1]) for c, p in v.items()} for k, v in parts.items()}
        self._ref_parts_total = {
            k: (sum(p[0] for p in v.values()), sum(p[1] for p in v.values())) for k, v in parts.items()
        }
        self._measured = {k: float(np.mean(v)) for k, v in values.items()}
        self._measured_nb = {}
        self._distance_cache: dict = {}
        self._gpus_of: dict[str, np.ndarray] | None = None
        by_model: dict[str, list[tuple[tuple[str, int | None, str, int], float]]] = defaultdict(list)
        for k, v in self._measured.items():
            by_model[k[0]].append((k, v))
        self._by_model = dict(by_model)
        # The same model's workloads at other precisions (`resnet50` for `resnet50@fp16`).
        family: dict[str, list[str]] = defaultdict(list)
        for k in self._by_model:
            family[k.split("@")[0]].append(k)
        self._siblings = {k: [o for o in family[k.split("@")[0]] if o != k] for k in self._by_model}
        self._gpus = tuple(sorted({k[2] for k in self._measured}))
        # Sum and count of y(m,b,g,n) - y(m,b,g2,n) over configurations measured on both GPU types, in
        # total and per model (so that one model's own configurations can be left out of its estimate).
        ratio: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for (m, b, g, n), v in self._measured.items():
            for g2 in self._gpus:
                other = self._measured.get((m, b, g2, n)) if g2 != g else None
                if other is not None:
                    for k in ((g, g2, n), (g, g2, n, m), ("own", m, g, g2)):
                        ratio[k][0] += v - other
                        ratio[k][1] += 1
        self._cell_ratio = dict(ratio)

    def _neighbours(self, key: str, batch: int | None, gpu: str, n: int) -> list[float]:
        """Neighbour estimates of log steps/s of (key, batch, gpu, n), never using that configuration."""
        d = self._measured
        sums, weights = [0.0] * len(NEIGHBOUR_FEATURES), [0.0] * len(NEIGHBOUR_FEATURES)
        lb = math.log(batch) if batch is not None else 0.0
        ref_here: float | None = None
        for (_, b2, g2, n2), v2 in self._by_model.get(key, ()):
            if (b2, g2, n2) == (batch, gpu, n):
                continue
            if b2 == batch:
                if g2 == gpu:
                    w = math.exp(-abs(math.log2(n2 / n)))
                    sums[4] += w * (v2 + math.log(n / n2))
                    weights[4] += w
                continue
            if b2 is None or batch is None:
                continue
            db = abs(math.log(b2) - lb)
            if g2 == gpu and n2 == n:
                if ref_here is None:
                    ref_here = self._ref_without(key, batch, gpu, n)
                # Both references leave the cell (gpu, n) out, so that they average the same cells.
                ref_there = self._ref_without(key, b2, gpu, n)
                if not math.isnan(ref_here) and not math.isnan(ref_there):
                    w = math.exp(-db)
                    sums[3] += w * (v2 + ref_here - ref_there)
                    weights[3] += w
                continue
            y1, y2 = d.get((key, batch, g2, n2)), d.get((key, b2, gpu, n))
            if y1 is None or y2 is None:
                continue
            w = math.exp(-db - abs(math.log2(n2 / n)))
            f = 0 if g2 == gpu else 1 if n2 == n else 2
            sums[f] += w * (y1 + y2 - v2)
            weights[f] += w
        # The model's other precisions on the same GPU type: their count scaling n2 -> n carried over to the
        # query's configuration measured at n2.
        for sibling in self._siblings.get(key, ()):
            for (_, b2, g2, n2), v2 in self._by_model[sibling]:
                if g2 != gpu or n2 == n:
                    continue
                y_here, y_there = d.get((key, batch, gpu, n2)), d.get((sibling, b2, gpu, n))
                if y_here is not None and y_there is not None:
                    w = math.exp(-abs(math.log2(n2 / n)))
                    sums[8] += w * (y_here + y_there - v2)
                    weights[8] += w
        line: dict[float, list[float]] = defaultdict(list)
        for g3 in self._gpus:
            y1 = d.get((key, batch, g3, n)) if g3 != gpu else None
            if y1 is None:
                continue
            line[self._profile(g3).log_speed].append(y1)
            # The model's own ratio between the two GPU types over its other configurations.
            s, c = self._cell_ratio.get(("own", key, gpu, g3), (0.0, 0.0))
            here = d.get((key, batch, gpu, n))
            if here is not None:
                s, c = s - (here - y1), c - 1
            if c:
                sums[5] += y1 + s / c
                weights[5] += 1
            total = self._cell_ratio.get((gpu, g3, n), (0.0, 0.0))
            mine = self._cell_ratio.get((gpu, g3, n, key), (0.0, 0.0))
            if total[1] > mine[1]:
                sums[6] += y1 + (total[0] - mine[0]) / (total[1] - mine[1])
                weights[6] += 1
        speed = self._profile(gpu).log_speed
        if line and min(line) < speed < max(line):
            xs = sorted(line)
            sums[7], weights[7] = float(np.interp(speed, xs, [sum(line[x]) / len(line[x]) for x in xs])), 1.0
        return [s / w if w else math.nan for s, w in zip(sums, weights, strict=True)]

    @staticmethod
    def local_kind_of(nb: Sequence[float]) -> int:
        """Index into LOCAL_KINDS of the closest family among neighbour estimates `nb`: a rectangle (over
        batch sizes or precisions), else the same model's GPU-type or batch line, else the configuration
        interpolated between GPU speeds, else the other models' GPU-type ratio, else the count line (which
        assumes linear scaling), else none."""
        for kind, cols in ((5, (0, 1, 2, 8)), (4, (5, 3)), (3, (7,)), (2, (6,)), (1, (4,))):
            if any(not math.isnan(nb[c]) for c in cols):
                return kind
        return 0

    def kinds(self, queries: Sequence[Query]) -> np.ndarray:
        """Index into EXTRAPOLATION_KINDS of each query (see there)."""
        at_count = {(k[0], k[2], k[3]) for k in self._measured}
        on_gpu = {(k[0], k[2]) for k in self._measured}
        out = np.empty(len(queries), dtype=np.int64)
        for i, q in enumerate(queries):
            key, gpu = workload_key(q.model, q.precision), self._profile(q.gpu_type, q.node).key
            if (key, q.batch_size, gpu, q.num_gpus) in self._measured:
                out[i] = 0
            elif (key, gpu, q.num_gpus) in at_count:
                out[i] = 1
            elif (key, gpu) in on_gpu:
                out[i] = 2
            else:
                out[i] = 3 if key in self._by_model else 4
        return out

    def distances(self, queries: Sequence[Query], kinds: np.ndarray) -> np.ndarray:
        """How far each query lies from the training data, by its kind (EXTRAPOLATION_KINDS): for a GPU type
        its workload was never measured on, the root-mean-square difference of log benchmark scores to the
        nearest type it was measured on; for a model never measured, the model catalog's distance
        (models.catalog.profile_distance) to the nearest measured one (UNCATALOGUED_DISTANCE where either
        is uncatalogued); 0 for the other kinds. The stated spread widens with it
        (models.predictor.served_spread)."""
        out = np.zeros(len(queries))
        gpu_kind, model_kind = EXTRAPOLATION_KINDS.index("gpu"), EXTRAPOLATION_KINDS.index("model")
        far = np.flatnonzero((kinds == gpu_kind) | (kinds == model_kind))
        for i in far:
            q = queries[i]
            if kinds[i] == gpu_kind:
                out[i] = self._gpu_distance(
                    workload_key(q.model, q.precision), self._profile(q.gpu_type, q.node)
                )
            else:
                out[i] = self._model_distance(model_key(q.model))
        return out

    def _gpu_distance(self, key: str, profile: GpuProfile) -> float:
        """RMS log-score distance from `profile` to the nearest GPU type `key` was measured on (cached per
        fit: the scheduler asks about the same pairs every round)."""
        cache = self.__dict__.setdefault("_distance_cache", {})
        if (key, profile) not in cache:
            if getattr(self, "_gpus_of", None) is None:
                gpus_of: dict[str, set[str]] = defaultdict(set)
                for k in self._measured:
                    gpus_of[k[0]].add(k[2])
                self._gpus_of = {
                    k: np.log([self.catalog.find(g).scores for g in v]) for k, v in gpus_of.items()
                }
            theirs = self._gpus_of.get(key)
            mine = np.log(profile.scores)
            cache[(key, profile)] = (
                UNCATALOGUED_DISTANCE
                if theirs is None
                else float(np.sqrt(((theirs - mine) ** 2).mean(axis=1)).min())
            )
        return cache[(key, profile)]

    def _model_distance(self, model: str) -> float:
        """Catalog distance from `model` to the nearest measured model (UNCATALOGUED_DISTANCE where either
        side is uncatalogued), cached per fit."""
        cache = self.__dict__.setdefault("_distance_cache", {})
        if model not in cache:
            mine = self.model_catalog.find(model)
            theirs = [
                p for k in self._by_model if (p := self.model_catalog.find(k.split("@")[0])) is not None
            ]
            cache[model] = (
                UNCATALOGUED_DISTANCE
                if mine is None or not theirs
                else min(profile_distance(mine, p) for p in theirs)
            )
        return cache[model]

    def measured_batches(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(log batch sizes, log steps/s references) the workload `key` was measured at, by batch; None for a
        workload measured at a fixed batch, or never."""
        return self._batches.get(key)

    def _profile(self, gpu_type: str, node: str | None = None) -> GpuProfile:
        profile = self.catalog.find(gpu_type, node)
        if profile is None:
            raise PredictorInputError(
                f"unknown GPU type {gpu_type!r}; the benchmarks file knows "
                f"{list(self.catalog.gpu_types())}; add the product's scores (and specs) to it"
            )
        return profile

    def _ref(self, key: str, batch: int | None) -> float:
        if key not in self._batches and key not in self._fixed_batch:
            return self._default_ref
        if (key, batch) in self._refs:
            return self._refs[(key, batch)]
        if batch is None:
            measured = sorted(round(math.exp(x)) for x in self._batches[key][0])
            raise PredictorInputError(f"model {key!r} needs a batch size: it was measured at {measured}")
        if key not in self._batches:
            raise PredictorInputError(f"model {key!r} runs at a fixed batch; give no batch size, not {batch}")
        xs, ys = self._batches[key]
        return self._interpolate(xs, ys, math.log(batch))

    @staticmethod
    def _interpolate(xs: np.ndarray, ys: np.ndarray, lb: float) -> float:
        """Reference at log batch `lb`: log-log interpolation, constant samples/s beyond the ends."""
        if lb < xs[0]:
            return float(ys[0] - (lb - xs[0]))
        if lb > xs[-1]:
            return float(ys[-1] - (lb - xs[-1]))
        return float(np.interp(lb, xs, ys))

    def _ref_without(self, key: str, batch: int, gpu: str, n: int) -> float:
        """The model's reference at `batch` computed without configuration (key, batch, gpu, n); NaN if
        nothing else is left to compute it from."""
        parts = self._ref_parts.get((key, batch))
        if parts is not None:
            own = parts.get((gpu, n), (0.0, 0))
            total = self._ref_parts_total[(key, batch)]
            if total[1] > own[1]:
                return (total[0] - own[0]) / (total[1] - own[1])
        xs, ys = self._batches.get(key, (np.empty(0), np.empty(0)))
        keep = ~np.isclose(xs, math.log(batch))
        if not keep.any():
            return math.nan
        return self._interpolate(xs[keep], ys[keep], math.log(batch))

    def transform(self, queries: Sequence[Query], with_neighbours: bool = True) -> Features:
        """Features of `queries`; PredictorInputError for an unknown GPU type or a batch size mismatch.

        With `with_neighbours=False` the neighbour estimates are left NaN (no local prior), which saves
        their cost for estimators that do not use them.
        """
        if not self.models:
            raise PredictorInputError("FeatureBuilder.transform called before fit")
        n_gpu = 3 + len(self.catalog.workloads)
        X = np.zeros((len(queries), 3 + n_gpu + len(self.models)))
        log_speed = np.empty(len(queries))
        seen = np.empty(len(queries), dtype=bool)
        neighbours = np.empty((len(queries), len(NEIGHBOUR_FEATURES)))
        local_kind = np.zeros(len(queries), dtype=np.int64)
        nb_cache = self._measured_nb
        no_neighbours = ([math.nan] * len(NEIGHBOUR_FEATURES), 0)
        column = {m: 3 + n_gpu + i for i, m in enumerate(self.models)}
        gpu_cache: dict[tuple[str, str | None], tuple[GpuProfile, list[float]]] = {}
        profiles = []
        for i, q in enumerate(queries):
            key = workload_key(q.model, q.precision)
            cached = gpu_cache.get((q.gpu_type, q.node))
            if cached is None:
                p = self._profile(q.gpu_type, q.node)
                vec = [
                    *(math.log(s) for s in p.scores),
                    math.log(p.mem_bw_gbps),
                    math.log(p.fp32_tflops),
                    p.memory_gb,
                ]
                cached = gpu_cache[(q.gpu_type, q.node)] = (p, vec)
            profile, gpu_vec = cached
            profiles.append(profile)
            ref = self._ref(key, q.batch_size)
            X[i, 0] = math.log(q.batch_size) if q.batch_size is not None else np.nan
            X[i, 1] = math.log(q.num_gpus)
            X[i, 2 : 2 + n_gpu] = gpu_vec
            X[i, 2 + n_gpu] = ref
            seen[i] = key in column
            if seen[i]:
                X[i, column[key]] = 1.0
            log_speed[i] = profile.log_speed
            nb_key = (key, q.batch_size, profile.key, q.num_gpus)
            cached_nb = nb_cache.get(nb_key) if with_neighbours else no_neighbours
            if cached_nb is None:
                nb = self._neighbours(*nb_key)
                cached_nb = (nb, self.local_kind_of(nb))
                if nb_key in self._measured or len(nb_cache) < NEIGHBOUR_CACHE:
                    nb_cache[nb_key] = cached_nb
            neighbours[i], local_kind[i] = cached_nb
        inputs = self._physical_inputs(queries, profiles)
        prior = self.physical.predict(*inputs) - inputs[1]
        local_prior = self.local_prior(neighbours, prior)
        return Features(X, prior, log_speed, seen, neighbours, local_prior, local_kind)

    def with_catalog(self, catalog: BenchmarkCatalog) -> FeatureBuilder:
        """A copy that reads GPU types from `catalog` (which must score the same workloads the same way)."""
        if not self.catalog.same_scoring(catalog):
            raise PredictorInputError(
                "the new benchmarks file scores other workloads or by another method than the one the "
                "model was trained with; retrain instead"
            )
        clone = copy.copy(self)
        clone.catalog = catalog
        clone._measured_nb = {}
        clone._distance_cache, clone._gpus_of = {}, None
        clone._anchors = {}
        return clone
