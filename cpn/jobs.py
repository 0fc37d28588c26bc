"""Jobs as the scheduler sees them, and the state machine every job walks through."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

JobKind = Literal["training", "inference"]

PRECISIONS = {
    "fp32": "fp32",
    "tf32": "fp32",
    "float32": "fp32",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "amp": "fp16",
    "mixed": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
}
"""Spellings of a training precision (annotation, trace or throughput column) -> precision (empty: fp32)."""


def normalise_precision(value: str | None) -> str:
    """`fp32`, `fp16` or `bf16` from any spelling in PRECISIONS (empty: fp32); ValueError otherwise."""
    text = (value or "").strip().lower()
    if not text:
        return "fp32"
    if text not in PRECISIONS:
        raise ValueError(f"column precision: {value!r} is not one of {', '.join(PRECISIONS)} (or empty)")
    return PRECISIONS[text]


def workload_text(key: str) -> str:
    """A JobSpec.workload key as messages write it: `kubeflow.org/v1/PyTorchJob` -> `PyTorchJob
    (kubeflow.org/v1)`."""
    api_version, _, kind = key.rpartition("/")
    return f"{kind} ({api_version})"


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
    """Dataset size (GB) it trains on, moved with the job when it runs away from its source cluster."""
    total_steps: int | None = None
    """Training steps to run; None: its work is `data_size_gb` x `epochs` (the predictor estimates it by that,
    models/work.py; the simulator trains that much of the model's dataset, cpn/sim/work.py)."""
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
    normalise_precision spells them; the predictor and the simulator's ground truth
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
    hami: bool = False
    """Its pods ask for HAMi's slice resources (`nvidia.com/gpumem`, `gpumem-percentage`, `gpucores`): only
    nodes that run HAMi's device plugin (Node.hami) can start them."""
    device_classes: tuple[str, ...] = ()
    """DRA device classes its pods' resource claims ask for (`gpu.nvidia.com`, `mig.nvidia.com`): only
    nodes offering every one (Node.device_classes) take it; empty = none asked."""
    workload: str = ""
    """`<apiVersion>/<kind>` of its workload when a CRD defines it (cpn.workloads.custom_kind:
    `kubeflow.org/v1/PyTorchJob`): only clusters serving that kind (Node.workloads) take it; empty for
    built-in kinds and trace rows, which every cluster runs."""
    spread: bool = False
    """Its pods must run on distinct nodes (the manifest's required pod anti-affinity or topology spread
    over `kubernetes.io/hostname`); False = they may share a node (packed)."""
    duration_s: float | None = None
    """How long a service (an inference job) runs before it is deleted, as a trace gives it (the simulator
    deletes it then); None = until someone deletes it. Training jobs end by themselves and have none."""
    checkpoint_interval_s: float | None = None
    """How often the job checkpoints (seconds; a trace's `checkpoint_interval_s` column); None = it does not
    say. Read by preemption (issue #21): a job that never checkpoints loses all its work when stopped."""
    preemptible: bool = True
    """False when it is marked not preemptible (the `preemptible: "false"` annotation): preemption never
    stops it, whatever its team borrows."""
    generation: int = 0
    """How many times the job was preempted before this run: never the user's, the scheduler sets it from
    the job's history (its `preempted` transitions) when it submits, so that a resubmission runs under a
    new object name (cpn.adapters.kubernetes.labels.object_name) and nothing of a stopped run is reused."""
    manifest: str = field(default="", compare=False, repr=False)
    """The Kubernetes documents the job was accepted from (YAML): the workload, then the objects submitted
    with it (the Service of a Deployment); submitted unchanged but for placement."""

    @property
    def is_service(self) -> bool:
        """Whether the job is a service (an inference Deployment): it runs until deleted or scaled down, so
        it needs no runtime estimate to be placed and its cards have no predicted end."""
        return self.kind == "inference"

    def __post_init__(self) -> None:
        # Stored specs come back from JSON with lists; keep the spec hashable and equal to the original.
        for name in ("gpu_products", "node_pools", "pod_gpus", "device_classes"):
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
    CANCELLED = "cancelled"
    """Someone cancelled it (`DELETE /jobs/{ns}/{name}`, `cpn job cancel`): it left the queue, or the
    scheduler deleted it from its cluster; its end is never a completed run."""


TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.ASSIGNED, JobState.SCHEDULE_FAILED, JobState.CANCELLED}),
    JobState.ASSIGNED: frozenset(
        {JobState.MIGRATING, JobState.SUBMITTED, JobState.QUEUED, JobState.FAILED, JobState.CANCELLED}
    ),
    JobState.MIGRATING: frozenset({JobState.SUBMITTED, JobState.QUEUED, JobState.FAILED, JobState.CANCELLED}),
    JobState.SUBMITTED: frozenset(
        {JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.QUEUED, JobState.CANCELLED}
    ),
    # A run killed for its memory goes back to the queue, to a card with more (re-planning).
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.QUEUED, JobState.CANCELLED}),
    # A job no placement could satisfy may be retried once capacity changes.
    JobState.SCHEDULE_FAILED: frozenset({JobState.QUEUED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}
"""Allowed moves. Anything else is a bug and the job store refuses it."""


FINISHED = frozenset(state for state, moves in TRANSITIONS.items() if not moves)
"""The terminal states: a job in one has ended for good (cancelling it changes nothing)."""
ON_CLUSTER = frozenset({JobState.ASSIGNED, JobState.MIGRATING, JobState.SUBMITTED, JobState.RUNNING})
"""States in which a job is, or is being put, on a cluster: cancelling it takes the scheduler, which
deletes it there (cpn.engine.scheduler.Scheduler.cancel)."""


class Cause(StrEnum):
    """Why a transition happened, as data stored with it: what is counted (a job's retries) is counted
    from this code, never from the wording of the transition's reason, which is written for people."""

    NONE = ""
    """Nothing counted: the reason says what happened."""
    OOM_KILLED = "oom-killed"
    """The run was killed for exceeding its GPU memory (queued again on larger cards, or failed)."""
    MIGRATION_FAILED = "migration-failed"
    """A copy of the job's image and data to another cluster failed (queued again, or failed)."""
    PREEMPTED = "preempted"
    """The run was stopped to reclaim its cards (cpn.policies.preemption) and queued again with the progress
    of its last checkpoint."""


class IllegalTransition(ValueError):
    """A state change the state machine does not allow."""


def check_transition(job_id: str, old: JobState, new: JobState) -> None:
    """Raise IllegalTransition unless `old -> new` is allowed."""
    if new not in TRANSITIONS[old]:
        allowed = ", ".join(sorted(TRANSITIONS[old])) or "none (terminal)"
        raise IllegalTransition(f"job {job_id}: cannot go from {old} to {new}; allowed: {allowed}")
