"""Estimate sources a policy can read before the predictor is plugged in.

`OracleEstimates` knows the simulator's ground truth (measured throughputs and
the memory model); `NoisyOracle` multiplies each runtime by a seeded log-normal error, so
a benchmark can show how a policy degrades with imperfect predictions.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from cpn.decisions import Estimate
from cpn.formats.throughput import ThroughputTable
from cpn.jobs import JobSpec
from cpn.model_names import model_key
from cpn.sim.truth import GroundTruth


class OracleEstimates:
    """Runtimes and memory straight from the simulator's ground truth (perfect knowledge)."""

    def __init__(self, table: ThroughputTable) -> None:
        self.truth = GroundTruth(table)
        self._cache: dict[tuple, Estimate | None] = {}

    def estimate(self, job: JobSpec, gpu_type: str) -> Estimate | None:
        """The job's runtime on `gpu_type` (inf where measured not to run), None where never measured."""
        key = (*self._cache_key(job), gpu_type)
        if key not in self._cache:
            self._cache[key] = self._compute(job, gpu_type)
        return self._cache[key]

    def _cache_key(self, job: JobSpec) -> tuple:
        """Jobs with the same key share estimates (the truth depends only on what runs: the model by its
        key, however the job spells it)."""
        return (
            model_key(job.model),
            job.batch_size,
            job.num_gpus,
            job.total_steps,
            job.data_size_gb,
            job.epochs,
            job.gpu_mem_gb,
            job.precision,
        )

    def _compute(self, job: JobSpec, gpu_type: str) -> Estimate | None:
        timed = self.truth.timing(job, gpu_type, job.num_gpus)
        if isinstance(timed, str):
            return None
        rate, steps = timed
        memory = self.truth.memory_gb(job, job.num_gpus)
        if rate == 0:  # measured not to run there (out of memory): say so through the memory figure
            return Estimate(runtime_s=math.inf, gpu_mem_gb=memory)
        return Estimate(runtime_s=steps / rate, gpu_mem_gb=memory)

    def estimates(
        self, jobs: tuple[JobSpec, ...], gpu_types: tuple[str, ...]
    ) -> Mapping[str, Mapping[str, Estimate]]:
        """job_id -> GPU type -> estimate; GPU types the job cannot run on are left out."""
        out: dict[str, dict[str, Estimate]] = {}
        for job in jobs:
            row = {}
            for gpu in gpu_types:
                est = self.estimate(job, gpu)
                if est is not None:
                    row[gpu] = est
            out[job.job_id] = row
        return out


class NoisyOracle(OracleEstimates):
    """The oracle with a seeded multiplicative log-normal error of `sigma` on each runtime.

    The error of one (job, GPU type) pair is fixed for the whole run, as a real
    predictor's would be.
    """

    def __init__(self, table: ThroughputTable, sigma: float, seed: int = 0) -> None:
        super().__init__(table)
        if sigma < 0:
            raise ValueError(f"sigma must be >= 0, got {sigma}")
        self.sigma = sigma
        self.seed = seed

    def _cache_key(self, job: JobSpec) -> tuple:
        return (job.job_id, *super()._cache_key(job))

    def _compute(self, job: JobSpec, gpu_type: str) -> Estimate | None:
        exact = super()._compute(job, gpu_type)
        if exact is None or math.isinf(exact.runtime_s):
            return exact
        rng = random.Random(f"{self.seed}/{job.job_id}/{gpu_type}")
        factor = math.exp(rng.gauss(0.0, self.sigma))
        return Estimate(
            runtime_s=exact.runtime_s * factor, gpu_mem_gb=exact.gpu_mem_gb, uncertainty=self.sigma
        )
