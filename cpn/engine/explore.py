"""Closing the learning loop on a model the predictor has never seen.

The demo starts its predictor on the throughput table less one model of its queue (`held_out_model`,
`table_without`), so that model's jobs are estimated `explore`; once they ran, `runtime_checks` compares
what a predictor said with what the clusters measured, before and after retraining on those runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cpn.engine.feedback import CompletedRun
from cpn.engine.scheduler import EstimateSource
from cpn.formats.throughput import ThroughputTable
from cpn.jobs import JobSpec
from cpn.model_names import model_key

LEAST_FREQUENT = "least-frequent"
"""Choose the queue's least frequent model (ties: the first by name)."""


def held_out_model(jobs: Sequence[JobSpec], choice: str) -> str:
    """The model to leave out of the starting predictor: `choice` itself, or the least frequent model of
    `jobs` when `choice` is LEAST_FREQUENT (as its first job spells it). Models are counted by key
    (cpn.model_names.model_key). ValueError when no job of `jobs` runs the model named."""
    spelt: dict[str, str] = {}
    for job in jobs:
        spelt.setdefault(model_key(job.model), job.model)
    counts = Counter(model_key(job.model) for job in jobs)
    if not counts:
        raise ValueError("held-out model: the queue is empty")
    if choice == LEAST_FREQUENT:
        return spelt[min(counts, key=lambda key: (counts[key], key))]
    if model_key(choice) not in counts:
        raise ValueError(
            f"held-out model {choice!r}: no job of the queue runs it; the queue has {sorted(spelt.values())} "
            f"(or use {LEAST_FREQUENT!r})"
        )
    return choice


def table_without(table: ThroughputTable, model: str) -> ThroughputTable:
    """The table less every row of `model`, however spelt (what a predictor that never saw it trains on)."""
    key = model_key(model)
    return ThroughputTable([r for r in table.rows if model_key(r.model) != key], table.precision)


@dataclass(frozen=True)
class RuntimeCheck:
    """One completed job: the runtime a predictor estimated on the GPU type it ran on, and what it took."""

    job_id: str
    gpu_type: str
    num_gpus: int
    predicted_s: float
    measured_s: float
    explore: bool
    """Whether the predictor flagged the job `explore` (its model unseen)."""

    @property
    def error(self) -> float:
        """|predicted - measured| / measured."""
        return abs(self.predicted_s - self.measured_s) / self.measured_s


def runtime_checks(
    source: EstimateSource, runs: Sequence[CompletedRun], jobs: Mapping[str, JobSpec]
) -> list[RuntimeCheck]:
    """What `source` estimates for each completed run's job on the GPU type it ran on, next to the
    measured run time; `jobs` maps job id -> spec (runs of jobs not in it are skipped)."""
    checks = []
    for run in runs:
        job = jobs.get(run.job_id)
        if job is None:
            continue
        estimate = source.estimates((job,), (run.gpu_type,))[job.job_id][run.gpu_type]
        checks.append(
            RuntimeCheck(
                run.job_id, run.gpu_type, run.num_gpus, estimate.runtime_s, run.runtime_s, estimate.explore
            )
        )
    return checks
