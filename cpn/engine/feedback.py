"""Completion feedback: what finished jobs measured, for the predictor's training data."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cpn.inventory import Node
from cpn.jobs import JobState
from cpn.rules import EXCLUSIVE_REASON, is_sharing
from cpn.store import JobStore


@dataclass(frozen=True)
class CompletedRun:
    """One succeeded job: what ran where, and how long it really took (queueing and transfer excluded).

    The one record of a finished run: the explore loop reads it, and the predictor retrains on it
    (models.retrain turns it into a throughput row when its steps are known, else into a measure of the
    model's seconds per GB of data and epoch, and a memory sample)."""

    job_id: str
    model: str
    batch_size: int | None
    gpu_type: str
    num_gpus: int
    total_steps: int | None
    """The job's total_steps; None when it gave its work as data size and epochs only."""
    runtime_s: float
    finished_at: float
    gpu_mem_gb: float | None = None
    """Peak GPU memory per card the cluster measured; None = not measured."""
    precision: str = "fp32"
    """The job's training precision (`JobSpec.precision`)."""
    data_size_gb: float = 0.0
    """The job's `data_size` (GB)."""
    epochs: int = 1
    """The job's `epoch`."""


def completed_runs(
    store: JobStore, nodes: Sequence[Node], since: float = float("-inf")
) -> list[CompletedRun]:
    """Succeeded training jobs that finished after `since` on a node in `nodes`, with a known step count
    or a work (data size and epochs) to learn seconds per GB-epoch from.

    The run time is the time from the job's last `running` transition to `succeeded`. A job that
    shared its card is left out (a partner's interference is in its run time) unless its last
    assignment gave it whole cards to explore (`EXCLUSIVE_REASON`).
    """
    gpu_of = {(n.cluster, n.name): n.gpu_type for n in nodes}
    history: dict[str, list] = {}
    for t in store.transitions_all():
        history.setdefault(t.job_id, []).append(t)
    runs = []
    for record in store.jobs([JobState.SUCCEEDED]):
        spec = record.spec
        moves = history[record.job_id]
        end = moves[-1]
        started = next((t for t in reversed(moves) if t.to_state == JobState.RUNNING), None)
        gpu_type = gpu_of.get((record.cluster, record.node))
        no_work = spec.total_steps is None and not (spec.data_size_gb > 0 and spec.epochs >= 1)
        if spec.is_service or no_work or started is None or gpu_type is None or end.time <= since:
            continue
        if end.time <= started.time:
            continue
        assigned = next((t for t in reversed(moves) if t.to_state == JobState.ASSIGNED), None)
        if is_sharing(spec) and (assigned is None or assigned.reason != EXCLUSIVE_REASON):
            continue
        runs.append(
            CompletedRun(
                job_id=record.job_id,
                model=spec.model,
                batch_size=spec.batch_size,
                gpu_type=gpu_type,
                num_gpus=spec.num_gpus,
                total_steps=spec.total_steps,
                runtime_s=end.time - started.time,
                finished_at=end.time,
                gpu_mem_gb=end.gpu_mem_gb,
                precision=spec.precision,
                data_size_gb=spec.data_size_gb,
                epochs=spec.epochs,
            )
        )
    return runs
