"""What really happens when a job runs on simulated cards: how fast it trains, or why it fails.

Rates come from measured throughput (cpn.sim.scaling: measured, or scaled beyond the table; spread
gangs use the unconsolidated figures), slowed by card partners (cpn.sim.colocation); GPU memory comes
from the memory model (cpn.sim.memory). A job that gives no total_steps trains the samples its data size
and epochs say, at the table's rate or one scaled from it by compute per sample (cpn.sim.work). Jobs that
cannot run fail the way they fail on a real cluster: after LOAD_S seconds of pulling, loading data and
building the model, at the first step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from cpn.adapters.gateway import DELETED_REASON, OOM_REASON
from cpn.formats.throughput import ThroughputTable
from cpn.jobs import JobSpec
from cpn.model_names import model_key
from cpn.sim.colocation import ColocationTable
from cpn.sim.memory import gpu_memory_gb
from cpn.sim.scaling import ScaledThroughput
from cpn.sim.work import REFERENCE, TRUTH_MODELS, work_of

LOAD_S = 60.0
"""Seconds from start to a job's first training step; jobs that cannot run fail then."""


@dataclass(frozen=True)
class RunOutcome:
    """How one run goes: it trains at `steps_per_sec` alone, or fails after `duration_s` with `reason`."""

    duration_s: float
    """Run time alone on its cards (a shared card's partners stretch a training run's; see
    SimulatedGateway); a service's lifetime, infinite when it runs until deleted."""
    succeeded: bool
    reason: str = ""
    steps_per_sec: float = 0.0
    """Training rate alone on its cards; 0 for a failed run and a service."""
    steps: float = 0.0
    """Steps the run trains: the job's total_steps, or what its data size and epochs make (cpn.sim.work);
    0 for a failed run and a service."""


class GroundTruth:
    """The simulator's oracle of rates and memory: throughput tables and the memory model, each looking a
    job's model up by its key (cpn.model_names.model_key), so every spelling of a model runs alike.

    `colocation` holds the measured slowdowns of jobs sharing a card; none = every pair unmeasured.
    """

    def __init__(
        self, table: ThroughputTable, load_s: float = LOAD_S, colocation: ColocationTable | None = None
    ) -> None:
        self.table = table
        self.load_s = load_s
        self.rates = ScaledThroughput(table.at_precision("fp32"))
        """fp32 rates; other precisions' in `_rates`, built when a job first asks."""
        self._rates: dict[str, ScaledThroughput | None] = {"fp32": self.rates}
        self.colocation = colocation if colocation is not None else ColocationTable({})

    def memory_gb(self, job: JobSpec, num_gpus: int) -> float | None:
        """GB per card the job really uses: the larger of declared and modelled (None if neither is known).

        A job that declares more than the model says is taken at its word (frameworks that reserve
        what they are told to, or a model the memory model underrates); one that declares less still
        allocates what its model needs.
        """
        known = [
            m for m in (job.gpu_mem_gb, gpu_memory_gb(job.model, job.batch_size, num_gpus)) if m is not None
        ]
        return max(known) if known else None

    def steps_per_sec(
        self, job: JobSpec, gpu_type: str, num_gpus: int, consolidated: bool = True
    ) -> float | None:
        """Steps/s alone on `num_gpus` cards, measured or scaled (cpn.sim.scaling); None if unknown.

        A job at another precision than fp32 (`JobSpec.precision`) trains at that precision's rate where
        the table measures its configuration at that precision (or scales from one), else at the fp32 rate:
        a table without fp16 rows says nothing about how much faster fp16 would be.
        """
        args = (job.model, job.batch_size, gpu_type, num_gpus, consolidated)
        if job.precision != "fp32":
            if job.precision not in self._rates:
                own = self.table.at_precision(job.precision)
                self._rates[job.precision] = ScaledThroughput(own) if own.rows else None
            rates = self._rates[job.precision]
            measured = None if rates is None else rates.steps_per_sec(*args)
            if measured is not None:
                return measured
        return self.rates.steps_per_sec(*args)

    def outcome(
        self,
        job: JobSpec,
        gpu_type: str,
        num_gpus: int,
        free_memory_gb: float,
        consolidated: bool = True,
    ) -> RunOutcome:
        """How `job` goes on `num_gpus` cards of `gpu_type` with `free_memory_gb` free on each.

        OOM first; then a service serves for its lifetime (`JobSpec.duration_s`, for ever without one)
        and ends deleted; a training job trains as `timing` says, or fails after the load time why not.
        """
        mem = self.memory_gb(job, num_gpus)
        if mem is not None and mem > free_memory_gb:
            return RunOutcome(self.load_s, False, OOM_REASON)
        if job.is_service:
            lifetime = job.duration_s if job.duration_s is not None else math.inf
            return RunOutcome(lifetime, True, DELETED_REASON)
        timed = self.timing(job, gpu_type, num_gpus, consolidated)
        if isinstance(timed, str):
            return RunOutcome(self.load_s, False, timed)
        sps, steps = timed
        if sps <= 0:
            config = f"{job.model} batch {job.batch_size} on {num_gpus}x {gpu_type}"
            return RunOutcome(self.load_s, False, f"{config} was measured not to run (0 steps/s)")
        return RunOutcome(steps / sps, True, steps_per_sec=sps, steps=steps)

    def timing(
        self, job: JobSpec, gpu_type: str, num_gpus: int, consolidated: bool = True
    ) -> tuple[float, float] | str:
        """(steps/s alone, steps) of a training job on `num_gpus` cards of `gpu_type` (0 steps/s: measured
        not to run), or why it cannot be timed there: no total_steps and no work the simulated world knows
        (cpn.sim.work), or unmeasured. Without total_steps, a model the table does not measure at the batch
        trains at REFERENCE's samples/s scaled by compute per sample."""
        steps: float | None = job.total_steps
        if steps is None:
            work = work_of(job.model, job.batch_size, job.data_size_gb, job.epochs)
            if isinstance(work, str):
                return work
            job, steps = replace(job, batch_size=work.batch_size), work.steps
            sps = self.steps_per_sec(job, gpu_type, num_gpus, consolidated)
            if sps is None and work.gflops_per_sample is not None:
                model, batch = REFERENCE
                reference = JobSpec(job_id="reference", model=model, batch_size=batch)
                ref = self.steps_per_sec(reference, gpu_type, num_gpus, consolidated)
                if ref is not None:
                    ratio = TRUTH_MODELS[model_key(model)].gflops_per_sample / work.gflops_per_sample
                    sps = ref * batch * ratio / (work.batch_size or 1)
        else:
            sps = self.steps_per_sec(job, gpu_type, num_gpus, consolidated)
        if sps is None:
            return f"no measured throughput for {job.model} batch {job.batch_size} on {num_gpus}x {gpu_type}"
        return sps, float(steps)

    def shared_factor(self, job: JobSpec, gpu_type: str, partners: Iterable[JobSpec]) -> float:
        """How fast `job` trains sharing a card with `partners`, relative to alone (cpn.sim.colocation)."""
        own = self.rates.config(job.model, job.batch_size)
        return math.prod(
            self.colocation.factor(gpu_type, own, self.rates.config(p.model, p.batch_size)) for p in partners
        )
