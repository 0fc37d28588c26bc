"""Jobs as the scheduler sees them, and the state machine every job walks through."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

JobKind = Literal["training", "inference"]


@dataclass(frozen=True)
class JobSpec:
    """One accepted job: what it runs, what it needs, and the manifest it came in.

    Parsed from a Kubernetes manifest's annotations (see cpn.intake) or from a
    trace row (see cpn.formats.trace_csv); immutable once accepted.
    """

    job_id: str
    """Unique id, `<namespace>/<name>` of the manifest."""
    model: str
    """Model name (`model_name` annotation), e.g. ResNet-50."""
    kind: JobKind = "training"
    batch_size: int | None = None
    num_gpus: int = 1
    epochs: int = 1
    data_size_gb: float = 0.0
    """Dataset size to move with the job when it runs away from its source cluster."""
    total_steps: int | None = None
    """Training steps to run; the simulator's ground truth needs it."""
    gpu_mem_gb: float | None = None
    """Declared GPU memory per GPU; None when the user did not say (the predictor estimates it)."""
    cpu: float = 1.0
    """CPU cores requested."""
    image: str = ""
    image_size_gb: float = 0.0
    priority: int = 0
    source_cluster: str | None = None
    """Where the job's image and data live now; elsewhere costs a transfer."""
    gpu_share: float | None = None
    """Fraction of a card the job accepts to share (HAMi/MPS style); None = exclusive cards."""
    precision: str = "fp32"
    """Training precision (`precision` annotation): `fp32`, `fp16` (mixed precision, AMP) or `bf16`, as
    cpn.formats.throughput.normalise_precision spells them; the predictor and the simulator's ground truth
    read the throughput of that precision."""
    arrival_s: float = 0.0
    """Arrival time: in a trace, seconds from its start; in the queue policies see, when the store accepted
    the job (cpn.engine.queue_view), live or replayed."""
    gpu_products: tuple[str, ...] = ()
    """GPU products (`nvidia.com/gpu.product` values) the job may run on, as its manifest's required node
    affinity, nodeSelector or product tolerations say; empty = any."""
    node_pools: tuple[str, ...] = ()
    """Pools (`<domain>/node.usage`) its required node affinity allows; empty = those of its kind."""
    gpu_memory_min_gb: float | None = None
    """Least card memory its required node affinity asks (`nvidia.com/gpu.memory` Gt/In); None = any."""
    pod_gpus: tuple[int, ...] = ()
    """Cards of each GPU-holding pod (replicas multiplied out: a Volcano Job of 3 one-GPU workers is
    (1, 1, 1)); empty = one pod of `num_gpus` cards."""
    manifest: str = field(default="", compare=False, repr=False)
    """The Kubernetes documents the job was accepted from (YAML): the workload, then the objects submitted
    with it (the Service of a Deployment); submitted unchanged but for placement."""

    def __post_init__(self) -> None:
        # Stored specs come back from JSON with lists; keep the spec hashable and equal to the original.
        for name in ("gpu_products", "node_pools", "pod_gpus"):
            value = getattr(self, name)
            if not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))


class JobState(StrEnum):
    """Where a job is in its life. Every change is a recorded transition."""

    QUEUED = "queued"
    ASSIGNED = "assigned"
    MIGRATING = "migrating"
    SUBMITTED = "submitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SCHEDULE_FAILED = "schedule-failed"


TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.ASSIGNED, JobState.SCHEDULE_FAILED}),
    JobState.ASSIGNED: frozenset({JobState.MIGRATING, JobState.SUBMITTED, JobState.QUEUED, JobState.FAILED}),
    JobState.MIGRATING: frozenset({JobState.SUBMITTED, JobState.QUEUED, JobState.FAILED}),
    JobState.SUBMITTED: frozenset({JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.QUEUED}),
    # A run killed for its memory goes back to the queue, to a card with more (re-planning).
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.QUEUED}),
    # A job no placement could satisfy may be retried once capacity changes.
    JobState.SCHEDULE_FAILED: frozenset({JobState.QUEUED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
}
"""Allowed moves. Anything else is a bug and the job store refuses it."""


class IllegalTransition(ValueError):
    """A state change the state machine does not allow."""


def check_transition(job_id: str, old: JobState, new: JobState) -> None:
    """Raise IllegalTransition unless `old -> new` is allowed."""
    if new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(TRANSITIONS[old])) or "none (terminal)"
        raise IllegalTransition(f"job {job_id}: cannot go from {old} to {new}; allowed: {allowed}")
