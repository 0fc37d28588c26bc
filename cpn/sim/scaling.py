"""Steps/s of any GPU count: the measured figure where the table has one, the scaling rule beyond it.

Gavel's table measures 1, 2, 4 and 8 GPUs; the Philly-derived traces also ask for 12 to 64. For a count
`n` the table does not measure, take the largest measured count `m` below it and the measured count `k`
below that, and scale as the last measured step did, never better than linearly:

    efficiency = min(1, sps(m) / (sps(k) * m / k))          (8 vs 4 GPUs for Gavel: sps(8) / 2 sps(4))
    sps(n)     = sps(m) * (n / m) * efficiency ** log2(n / m)

so every further doubling loses what the last measured doubling lost. A configuration measured at one
count only (A3C, CycleGAN, Recommendation: one GPU) is not extrapolated: with no measured step there is
nothing to scale by. A configuration measured not to run at `m` (0 steps/s) does not run wider either.

A job spread over several nodes (`consolidated=False`) scales from the table's `unconsolidated` rows,
each count falling back to the consolidated figure where the table has no unconsolidated one.

A batch size of 1 also matches models measured at one fixed batch (A3C and CycleGAN have none in the
table; the peer traces write them as batch 1).
"""

from __future__ import annotations

import math

from cpn.formats.throughput import ThroughputTable
from cpn.gpus import canonical_gpu

Config = tuple[str, int | None]
"""A (model, batch size) configuration as the table keys it: lower-case model, batch or None."""


class ScaledThroughput:
    """A throughput table with the scaling rule above for the GPU counts it does not measure."""

    def __init__(self, table: ThroughputTable) -> None:
        self.table = table
        counts: dict[tuple[str, int | None, str], set[int]] = {}
        for r in table:
            counts.setdefault((r.model.lower(), r.batch_size, r.gpu_type), set()).add(r.num_gpus)
        self._counts = {key: tuple(sorted(c)) for key, c in counts.items()}
        self._configs = {(model, batch) for model, batch, _ in counts}

    def config(self, model: str, batch_size: int | None) -> Config:
        """The table's key for a job's model and batch (batch 1 = the fixed batch where there is no 1)."""
        key = (model.lower(), batch_size)
        if key not in self._configs and batch_size == 1 and (model.lower(), None) in self._configs:
            return (model.lower(), None)
        return key

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
