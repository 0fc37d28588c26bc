"""Steps/s of any GPU count: the measured figure where the table has one, the scaling rule beyond it.

Gavel's table measures 1, 2, 4 and 8 GPUs; the Philly-derived traces also ask for 12 to 64. For a count
`n` the table does not measure, take the largest measured count `m` below it and the measured count `k`
below that, and scale as the last measured step did, never better than linearly:

    efficiency = min(1, sps(m) / (sps(k) * m / k))          (8 vs 4 GPUs for Gavel: sps(8) / 2 sps(4))
    sps(n)     = sps(m) * (n / m) * efficiency ** log2(n / m)

so every further doubling loses what the last measured doubling lost. A configuration measured at one
count `m` below `n` only (Gavel's A3C, CycleGAN and Recommendation: one GPU) has no step of its own, so it
borrows one: it scales from `m` to `n` as the median of the other configurations measured at two or more
counts on the same GPU type (by the rule above, between the same counts), else on any GPU type, never
better than linearly; with no such configuration in the table it is not extrapolated (None). A
configuration measured not to run at `m` (0 steps/s) does not run wider either.

A job spread over several nodes (`consolidated=False`) scales from the table's `unconsolidated` rows,
each count falling back to the consolidated figure where the table has no unconsolidated one.

A batch size of 1 also matches models measured at one fixed batch (A3C and CycleGAN have none in the
table; the peer traces write them as batch 1).
"""

from __future__ import annotations

import math

import numpy as np

from cpn.formats.throughput import ThroughputTable
from cpn.gpus import canonical_gpu
from cpn.model_names import model_key

Config = tuple[str, int | None]
"""A (model, batch size) configuration as the table keys it: the model's key (cpn.model_names.model_key),
batch or None."""


class ScaledThroughput:
    """A throughput table with the scaling rule above for the GPU counts it does not measure."""

    def __init__(self, table: ThroughputTable) -> None:
        self.table = table
        counts: dict[tuple[str, int | None, str], set[int]] = {}
        for r in table:
            counts.setdefault((model_key(r.model), r.batch_size, r.gpu_type), set()).add(r.num_gpus)
        self._counts = {key: tuple(sorted(c)) for key, c in counts.items()}
        self._configs = {(model, batch) for model, batch, _ in counts}
        self._ratios: dict[tuple[str, int, int, bool], float | None] = {}

    def config(self, model: str, batch_size: int | None) -> Config:
        """The table's key for a job's model and batch (batch 1 = the fixed batch where there is no 1)."""
        name = model_key(model)
        if (name, batch_size) not in self._configs and batch_size == 1 and (name, None) in self._configs:
            return (name, None)
        return (name, batch_size)

    def steps_per_sec(
        self, model: str, batch_size: int | None, gpu_type: str, num_gpus: int, consolidated: bool = True
    ) -> float | None:
        """Measured or scaled steps/s; None when the table has no figure and nothing to scale from."""
        name, batch = self.config(model, batch_size)
        gpu = canonical_gpu(gpu_type)
        measured = self.table.steps_per_sec(name, batch, gpu, num_gpus, consolidated)
        if measured is not None:
            return measured
        below = [c for c in self._counts.get((name, batch, gpu), ()) if c < num_gpus]
        if not below:
            return None
        if len(below) == 1:
            own = self.table.steps_per_sec(name, batch, gpu, below[0], consolidated)
            ratio = self._borrowed_ratio(gpu, below[0], num_gpus, consolidated)
            return None if own is None or ratio is None else own * ratio
        return self._own_step(name, batch, gpu, num_gpus, consolidated)

    def _own_step(
        self, name: str, batch: int | None, gpu: str, num_gpus: int, consolidated: bool
    ) -> float | None:
        """Steps/s at an unmeasured `num_gpus` from the configuration's own last two measured counts."""
        below = [c for c in self._counts.get((name, batch, gpu), ()) if c < num_gpus]
        if len(below) < 2:
            return None
        k, m = below[-2:]
        top = self.table.steps_per_sec(name, batch, gpu, m, consolidated)
        low = self.table.steps_per_sec(name, batch, gpu, k, consolidated)
        if top is None or low is None:
            return None
        if top == 0:
            return 0.0
        efficiency = min(1.0, top / (low * m / k)) if low > 0 else 1.0
        return top * (num_gpus / m) * efficiency ** math.log2(num_gpus / m)

    def _borrowed_ratio(self, gpu: str, m: int, n: int, consolidated: bool) -> float | None:
        """sps(n) / sps(m) of a configuration with no step of its own: the median over configurations
        measured at two or more counts on `gpu` (else on any GPU type), at most linear (n / m)."""
        key = (gpu, m, n, consolidated)
        if key not in self._ratios:
            ratios = self._ratios_between(m, n, consolidated, only_gpu=gpu) or self._ratios_between(
                m, n, consolidated
            )
            self._ratios[key] = min(n / m, float(np.median(ratios))) if ratios else None
        return self._ratios[key]

    def _ratios_between(self, m: int, n: int, consolidated: bool, only_gpu: str | None = None) -> list[float]:
        ratios = []
        for (name, batch, gpu), counts in self._counts.items():
            if len(counts) < 2 or (only_gpu is not None and gpu != only_gpu):
                continue
            rates = [self._measured_or_own(name, batch, gpu, c, consolidated) for c in (m, n)]
            if all(r is not None and r > 0 for r in rates):
                ratios.append(rates[1] / rates[0])
        return ratios

    def _measured_or_own(
        self, name: str, batch: int | None, gpu: str, num_gpus: int, consolidated: bool
    ) -> float | None:
        measured = self.table.steps_per_sec(name, batch, gpu, num_gpus, consolidated)
        return measured if measured is not None else self._own_step(name, batch, gpu, num_gpus, consolidated)
