"""The physical prior: log samples/s as a smooth function of GPU speed, batch size and GPU count.

Throughput in samples/s moves smoothly: with the card's speed (its benchmark scores and specs), with
the batch size (a larger batch keeps the card busier, up to a plateau) and with the GPU count (close
to linear, less what communication costs). In log space each is close to a straight line, so the
prior is a linear model of

    log samples/s = a + b . gpu + c log batch + d log num_gpus

where `gpu` is the card's log geometric-mean score, each score's log deviation from it, and log
memory bandwidth, log FP32 TFLOPS and log memory (missing specs take the training GPUs' mean). Every
workload (a model at one precision: `models.features.workload_key`) gets its own a, b, c and d, and
every model one more set shared by its precisions; ridge regression shrinks them toward the shared
slopes of all workloads (plus a mixed-precision term), so a workload measured on few cards, at one
batch size or at one GPU count borrows how the others scale. This is log-log interpolation and
extrapolation by benchmark scores, fitted per workload: a GPU type never measured is placed by its
scores and specs, an unmeasured batch size or GPU count on the workload's own line, and a model never
measured on the shared one.

The same features and penalty are used for every table (see docs/predictor.md for what was tried).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from sklearn.linear_model import Ridge

ALPHA = 0.1
"""Ridge penalty (on standardised log features; the same for every table)."""
INTERCEPT_SCALE = 3.0
"""Per-workload intercepts are penalised 1/9 as much as the shared slopes: workloads differ most in their
level."""
# GPU slopes (shared and per workload) are fitted only through more GPU types than there are GPU columns
# (`gpu_block`: mean score, each score's deviation, three specs): through fewer, any slope fits exactly
# and extrapolates wildly to a card outside their range (Gavel's 3 types and 7 columns: a new A10 whose
# FP32 TFLOPS are twice the V100's was predicted at 43% of its ResNet-50 speed; with K80 held out, 68%
# MAPE on K80 against 28% without). Then the anchor alone (the benchmarks the model moves like) places
# a new card.
SLOPE_SCALE = 0.5
"""Per-workload slopes are penalised 4x as much as the shared ones: with few cards measured, a workload's
own slope on five GPU columns is poorly determined (leave-one-GPU-type-out: 12.0% -> 11.9% on Lambda's
table, 65% -> 61% on Gavel's)."""


class PhysicalPrior:
    """Hierarchical ridge regression of log samples/s (see module docstring)."""

    def __init__(self) -> None:
        self.workloads: dict[str, int] = {}
        self.models: dict[str, int] = {}
        self._own_gpu_slopes = True
        self._center = np.empty(0)
        self._legacy = False
        self._center_intensity = 0.0
        self._batch_center: dict[str, float] = {}
        """Mean log batch of each workload's training rows: the batch term is the workload's own batch
        relative to its usual one (a model's usual batch says nothing of its speed; a model never measured
        has no batch term)."""
        self._ridge: Ridge | None = None

    def __setstate__(self, state: dict) -> None:
        # Fitted before the model catalog: its ridge knows neither the intensity nor the uncatalogued column,
        # centred batches globally and kept GPU slopes through two cards; it is served as it was fitted.
        state.setdefault("_legacy", "_center_intensity" not in state)
        self.__dict__.update(state)

    @staticmethod
    def gpu_block(log_scores: np.ndarray, specs: np.ndarray) -> np.ndarray:
        """GPU columns: log geometric-mean score, each log score's deviation from it, log specs."""
        mean = log_scores.mean(axis=1, keepdims=True)
        return np.hstack([mean, log_scores - mean, np.log(specs)])

    def _design(
        self,
        gpu: np.ndarray,
        log_batch: np.ndarray,
        log_gpus: np.ndarray,
        precision: Sequence[str],
        workloads: Sequence[str],
        models: Sequence[str],
        intensity: np.ndarray,
    ) -> np.ndarray:
        gpu = np.where(np.isnan(gpu), self._center[: gpu.shape[1]], gpu) - self._center[: gpu.shape[1]]
        if self._legacy:
            lb = log_batch - self._center[-2]
        else:
            centers = self._batch_center
            lb = log_batch - np.array([centers.get(w, b) for w, b in zip(workloads, log_batch, strict=True)])
        ln = log_gpus - self._center[-1]
        half = np.array([p != "fp32" for p in precision], dtype=float)[:, None]
        bf16 = np.array([p == "bf16" for p in precision], dtype=float)[:, None]
        if not self._own_gpu_slopes and not self._legacy:
            # Too few cards to determine any GPU slope (see above): the anchor alone.
            gpu = np.zeros_like(gpu)
        per = np.hstack([gpu, lb[:, None], ln[:, None]])
        width = per.shape[1] + 1
        # Uncatalogued models' levels (their FLOPs unknown) get a shared term of their own, so that they do
        # not move the level a catalogued model never measured gets (the mean over catalogued ones).
        # A step's arithmetic intensity (FLOPs per weight: batch x FLOPs per parameter per sample) tells how
        # near the card's peak a model runs (the roofline): one shared slope, learnt over the models.
        base = np.hstack([per, half, bf16, half * gpu])
        if not self._legacy:
            unknown = np.isnan(intensity)
            ai = np.where(unknown, 0.0, intensity - self._center_intensity)[:, None]
            base = np.hstack([base, INTERCEPT_SCALE * unknown[:, None], ai])
        n = len(log_batch)
        out = np.zeros((n, base.shape[1] + width * (len(self.workloads) + len(self.models))))
        out[:, : base.shape[1]] = base
        own_gpu = per * SLOPE_SCALE
        if not self._own_gpu_slopes:
            own_gpu[:, : gpu.shape[1]] = 0.0
        block = np.hstack([np.full((n, 1), INTERCEPT_SCALE), own_gpu])
        offset = base.shape[1]
        for index, keys in ((self.workloads, workloads), (self.models, models)):
            for i, key in enumerate(keys):
                j = index.get(key)
                if j is not None:
                    start = offset + j * width
                    out[i, start : start + width] = block[i]
            offset += width * len(index)
        return out

    def fit(
        self,
        gpu: np.ndarray,
        log_batch: np.ndarray,
        log_gpus: np.ndarray,
        precision: Sequence[str],
        workloads: Sequence[str],
        models: Sequence[str],
        anchor: np.ndarray,
        intensity: np.ndarray,
        log_samples: np.ndarray,
    ) -> PhysicalPrior:
        """Fit on training rows (one entry per row in every argument); returns self. `anchor` is each row's
        physical expectation of log samples/s on one GPU up to a constant (see `_offset`); `intensity` the
        log FLOPs per parameter of a step, NaN where the model is uncatalogued (models.catalog)."""
        self.workloads = {k: i for i, k in enumerate(sorted(set(workloads)))}
        self._own_gpu_slopes = len(np.unique(np.nan_to_num(gpu), axis=0)) > gpu.shape[1]
        per_model: dict[str, set[str]] = {}
        for m, w in zip(models, workloads, strict=True):
            per_model.setdefault(m, set()).add(w)
        # A model-level block only where the model has several workloads (precisions) to share it.
        self.models = {m: i for i, m in enumerate(sorted(m for m, ws in per_model.items() if len(ws) > 1))}
        with np.errstate(invalid="ignore"):
            center = np.nanmean(gpu, axis=0)
        self._center = np.concatenate([np.nan_to_num(center), [log_batch.mean(), log_gpus.mean()]])
        per_workload: dict[str, list[float]] = {}
        for w, b in zip(workloads, log_batch, strict=True):
            per_workload.setdefault(w, []).append(b)
        self._batch_center = {w: float(np.mean(v)) for w, v in per_workload.items()}
        self._center_intensity = float(np.nanmean(intensity)) if not np.isnan(intensity).all() else 0.0
        X = self._design(gpu, log_batch, log_gpus, precision, workloads, models, intensity)
        self._ridge = Ridge(alpha=ALPHA).fit(X, log_samples - self._offset(anchor, log_gpus))
        return self

    @staticmethod
    def _offset(anchor: np.ndarray, log_gpus: np.ndarray) -> np.ndarray:
        """What the coefficients are deviations from: samples/s proportional to the anchor (the speed of
        the benchmarks the model moves like, over its FLOPs per sample: models.features) and to the GPU
        count (the ridge shrinks toward that, not toward no effect)."""
        return anchor + log_gpus

    def predict(
        self,
        gpu: np.ndarray,
        log_batch: np.ndarray,
        log_gpus: np.ndarray,
        precision: Sequence[str],
        workloads: Sequence[str],
        models: Sequence[str],
        anchor: np.ndarray,
        intensity: np.ndarray,
    ) -> np.ndarray:
        """Predicted log samples/s of each query."""
        if self._ridge is None:
            raise RuntimeError("PhysicalPrior.predict called before fit")
        X = self._design(gpu, log_batch, log_gpus, precision, workloads, models, intensity)
        return self._ridge.predict(X) + self._offset(anchor, log_gpus)


def log_batch_of(batch_size: int | None) -> float:
    """Log of the per-GPU batch; a fixed-batch model (no batch size) counts as batch 1."""
    return math.log(batch_size) if batch_size is not None else 0.0
