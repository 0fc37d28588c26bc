"""Features and targets of the throughput predictor.

A query is one (model, batch size, GPU type, GPU count) configuration, the inputs a
job's annotations give (`model_name`, batch size, GPU count) plus the GPU type it might
run on. The predictor learns log steps/s *relative to an analytical prior*:

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
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cpn.throughput import ThroughputRow, ThroughputTable
from models.benchmarks import BenchmarkCatalog, GpuProfile


class PredictorInputError(ValueError):
    """A query or a training row the predictor cannot use; the message says which and why."""


def model_key(name: str) -> str:
    """Key of a model name: lower case, letters and digits only (`ResNet-50` -> `resnet50`)."""
    if not isinstance(name, str):
        raise PredictorInputError(f"model name must be a string, got {name!r}")
    key = "".join(ch for ch in name.lower() if ch.isalnum())
    if not key:
        raise PredictorInputError(f"model name {name!r} has no letters or digits")
    return key


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

    def __post_init__(self) -> None:
        model_key(self.model)
        if self.batch_size is not None:
            _positive_int(self.batch_size, f"{self.model}: batch_size")
        _positive_int(self.num_gpus, f"{self.model}: num_gpus")
        if not isinstance(self.gpu_type, str) or not self.gpu_type.strip():
            raise PredictorInputError(
                f"{self.model}: gpu_type must be a non-empty string, got {self.gpu_type!r}"
            )


def query_of(row: ThroughputRow) -> Query:
    """The query a measured row answers."""
    return Query(row.model, row.batch_size, row.gpu_type, row.num_gpus)


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
    """Shape (n, len(feature_names)), float64; NaN only for the batch size of fixed-batch models."""
    prior: np.ndarray
    """Analytical prior of log steps/s per query (see module docstring)."""
    log_speed: np.ndarray
    """Log of the GPU's geometric-mean benchmark score per query."""
    seen: np.ndarray
    """True where the query's model is in the training data."""


class FeatureBuilder:
    """Learns per-model references from training rows, then turns queries into features."""

    def __init__(self, catalog: BenchmarkCatalog) -> None:
        self.catalog = catalog
        self.models: tuple[str, ...] = ()
        self._refs: dict[tuple[str, int | None], float] = {}
        self._batches: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._fixed_batch: set[str] = set()
        self._default_ref = 0.0
        self.unseen_spread = 0.0
        """Spread of the model references (log space): how wrong the median is for a model never seen."""

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
        """Learn model references from rows with steps_per_sec > 0; returns self."""
        if not rows:
            raise PredictorInputError("no training rows")
        sums: dict[tuple[str, int | None], list[float]] = defaultdict(list)
        for row in rows:
            if not row.steps_per_sec > 0 or not math.isfinite(row.steps_per_sec):
                raise PredictorInputError(f"training row {row}: steps_per_sec must be positive and finite")
            q = query_of(row)
            profile = self._profile(q)
            sums[(model_key(q.model), q.batch_size)].append(
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
        return self

    def _profile(self, q: Query) -> GpuProfile:
        profile = self.catalog.find(q.gpu_type, q.node)
        if profile is None:
            raise PredictorInputError(
                f"unknown GPU type {q.gpu_type!r}; the benchmarks file knows "
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
        lb = math.log(batch)
        if lb < xs[0]:
            return float(ys[0] - (lb - xs[0]))
        if lb > xs[-1]:
            return float(ys[-1] - (lb - xs[-1]))
        return float(np.interp(lb, xs, ys))

    def transform(self, queries: Sequence[Query]) -> Features:
        """Features of `queries`; PredictorInputError for an unknown GPU type or a batch size mismatch."""
        if not self.models:
            raise PredictorInputError("FeatureBuilder.transform called before fit")
        n_gpu = 3 + len(self.catalog.workloads)
        X = np.zeros((len(queries), 3 + n_gpu + len(self.models)))
        prior = np.empty(len(queries))
        log_speed = np.empty(len(queries))
        seen = np.empty(len(queries), dtype=bool)
        column = {m: 3 + n_gpu + i for i, m in enumerate(self.models)}
        gpu_cache: dict[tuple[str, str | None], tuple[GpuProfile, list[float]]] = {}
        for i, q in enumerate(queries):
            key = model_key(q.model)
            cached = gpu_cache.get((q.gpu_type, q.node))
            if cached is None:
                p = self._profile(q)
                vec = [
                    *(math.log(s) for s in p.scores),
                    math.log(p.mem_bw_gbps),
                    math.log(p.fp32_tflops),
                    p.memory_gb,
                ]
                cached = gpu_cache[(q.gpu_type, q.node)] = (p, vec)
            profile, gpu_vec = cached
            ref = self._ref(key, q.batch_size)
            X[i, 0] = math.log(q.batch_size) if q.batch_size is not None else np.nan
            X[i, 1] = math.log(q.num_gpus)
            X[i, 2 : 2 + n_gpu] = gpu_vec
            X[i, 2 + n_gpu] = ref
            seen[i] = key in column
            if seen[i]:
                X[i, column[key]] = 1.0
            log_speed[i] = profile.log_speed
            prior[i] = ref + profile.log_speed + math.log(q.num_gpus)
        return Features(X, prior, log_speed, seen)

    def with_catalog(self, catalog: BenchmarkCatalog) -> FeatureBuilder:
        """A copy that reads GPU types from `catalog` (which must score the same workloads the same way)."""
        if not self.catalog.same_scoring(catalog):
            raise PredictorInputError(
                "the new benchmarks file scores other workloads or by another method than the one the "
                "model was trained with; retrain instead"
            )
        clone = copy.copy(self)
        clone.catalog = catalog
        return clone
