"""What really happens when a job runs on simulated cards: how long it takes, or why it fails.

Durations come from measured throughput (`total_steps / steps_per_sec`), GPU memory from the
memory model (cpn.sim.memory). Jobs that cannot run fail the way they fail on a real cluster:
after LOAD_S seconds of pulling, loading data and building the model, at the first step.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpn.inventory import Node
from cpn.jobs import JobSpec
from cpn.sim.memory import gpu_memory_gb
from cpn.throughput import ThroughputTable

LOAD_S = 60.0
"""Seconds from start to a job's first training step; jobs that cannot run fail then."""

OOM_REASON = "OOMKilled"
"""Failure reason of a job that needs more GPU memory than its cards have: exactly what Kubernetes reports."""


@dataclass(frozen=True)
class RunOutcome:
    """How one run ends: after `duration_s`, successfully or with `reason`."""

    duration_s: float
    succeeded: bool
    reason: str = ""


class GroundTruth:
    """The simulator's oracle of run time and memory, from a throughput table and the memory model."""

    def __init__(self, table: ThroughputTable, load_s: float = LOAD_S) -> None:
        self.table = table
        self.load_s = load_s

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

    def steps_per_sec(self, job: JobSpec, gpu_type: str, num_gpus: int) -> float | None:
        """Measured steps/s; a batch size of 1 also matches models measured at one fixed batch (A3C)."""
        sps = self.table.steps_per_sec(job.model, job.batch_size, gpu_type, num_gpus)
        if sps is None and job.batch_size == 1:
            sps = self.table.steps_per_sec(job.model, None, gpu_type, num_gpus)
        return sps

    def outcome(self, job: JobSpec, node: Node, num_gpus: int) -> RunOutcome:
        """How `job` ends on `num_gpus` cards of `node`: OOM first, then unmeasured or not running."""
        mem = self.memory_gb(job, num_gpus)
        if mem is not None and mem > node.gpu_memory_gb:
            return RunOutcome(self.load_s, False, OOM_REASON)
        config = f"{job.model} batch {job.batch_size} on {num_gpus}x {node.gpu_type}"
        if job.total_steps is None:
            return RunOutcome(self.load_s, False, "job has no total_steps; the simulator cannot time it")
        sps = self.steps_per_sec(job, node.gpu_type, num_gpus)
        if sps is None:
            return RunOutcome(self.load_s, False, f"no measured throughput for {config}")
        if sps <= 0:
            return RunOutcome(self.load_s, False, f"{config} was measured not to run (0 steps/s)")
        return RunOutcome(job.total_steps / sps, True)
