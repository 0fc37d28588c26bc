"""GPU memory per card, learnt from what completed jobs actually used.

Throughput tables carry no memory figures, so this model starts empty and learns from
completed jobs' measured peak memory per GPU (DCGM framebuffer used). Per model, over
the samples measured at the query's GPU count when there are any (a data-parallel gang
keeps gradient buckets and communication buffers a one-card run does not), else over
all its samples (an upper bound for a count never measured):
- a batch size seen before: the largest memory measured at it;
- two or more batch sizes seen: a least-squares line over batch size (weights and
  workspace are the intercept, activations the slope), never below the smallest
  measurement;
- one batch size seen: that measurement, scaled up in proportion for a larger batch (an
  upper bound: only activations grow with the batch) and kept as is for a smaller one;
- a model never seen: None, and the job's declared `gpu_mem_gb` is all the scheduler has.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from models.features import PredictorInputError, model_key


@dataclass(frozen=True)
class MemorySample:
    """Peak GPU memory per card measured for one run of `model` at `batch_size`."""

    model: str
    batch_size: int | None
    gpu_mem_gb: float
    num_gpus: int | None = None
    """Cards of the run; None = unknown (the sample then counts for every GPU count)."""

    def __post_init__(self) -> None:
        if not (
            isinstance(self.gpu_mem_gb, int | float)
            and math.isfinite(self.gpu_mem_gb)
            and self.gpu_mem_gb > 0
        ):
            raise PredictorInputError(
                f"{self.model}: gpu_mem_gb must be a positive number, got {self.gpu_mem_gb!r}"
            )


class MemoryModel:
    """Predicts GPU memory per card by model and batch size from measured samples."""

    def __init__(self, samples: Sequence[MemorySample] = ()) -> None:
        peaks: dict[str, dict[int | None, float]] = defaultdict(dict)
        by_count: dict[tuple[str, int], dict[int | None, float]] = defaultdict(dict)
        for s in samples:
            key = model_key(s.model)
            tables = [peaks[key]] + ([by_count[(key, s.num_gpus)]] if s.num_gpus is not None else [])
            for by_batch in tables:
                by_batch[s.batch_size] = max(by_batch.get(s.batch_size, 0.0), float(s.gpu_mem_gb))
        self._peaks = dict(peaks)
        self._by_count = dict(by_count)

    def __setstate__(self, state: dict) -> None:
        # Models pickled before GPU counts were recorded pool every sample.
        state.setdefault("_by_count", {})
        self.__dict__.update(state)

    def models(self) -> list[str]:
        """Model keys with at least one measurement."""
        return sorted(self._peaks)

    def predict(self, model: str, batch_size: int | None, num_gpus: int | None = None) -> float | None:
        """GPU memory per card in GB on `num_gpus` cards (None = any count), or None if the model was
        never measured."""
        key = model_key(model)
        by_batch = self._by_count.get((key, num_gpus)) or self._peaks.get(key)
        if not by_batch:
            return None
        if batch_size in by_batch:
            return by_batch[batch_size]
        sized = {b: m for b, m in by_batch.items() if b is not None}
        if batch_size is None or not sized:
            return max(by_batch.values())
        if len(sized) == 1:
            ((b0, m0),) = sized.items()
            return m0 * max(1.0, batch_size / b0)
        slope, intercept = np.polyfit(list(sized), list(sized.values()), 1)
        return max(float(intercept + slope * batch_size), min(sized.values()))
