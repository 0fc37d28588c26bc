"""The cluster-gateway port: inventory, submit, delete, and job events.

Implemented by the simulated clusters (cpn.sim) and, later, by the Kubernetes
adapter. One contract test suite runs against every implementation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from cpn.decisions import Placement
from cpn.inventory import NodeState
from cpn.jobs import JobSpec

EventKind = Literal["running", "succeeded", "failed"]

OOM_REASON = "OOMKilled"
"""The failure reason of a job killed for exceeding GPU memory, as Kubernetes reports it."""

DELETED_REASON = "deleted"
"""The reason on the end event of a job `ClusterGateway.delete` removed: a service ends `succeeded` so (it
runs until deleted), a training job `failed` (it did not finish its steps)."""


@dataclass(frozen=True)
class JobEvent:
    """Something that happened to a submitted job on a cluster."""

    job_id: str
    kind: EventKind
    time: float
    reason: str = ""
    """Why it failed (`OOMKilled`, ...) or other detail."""
    gpu_mem_gb: float | None = None
    """On a run's end: the peak GPU memory per card it used (DCGM's framebuffer in use); None = unknown."""
    log_tail: str = ""
    """On a failed end: the last lines of the failing pod's log, bounded by the gateway (lines and bytes);
    '' on every other event, and where the cluster has no log (the simulated clusters have none)."""


class NoLog(LookupError):
    """The clusters hold no log of the job: it never ran there, or its pods (or the simulator's record of
    it) are gone. A finished job's stored `log_tail` is what remains of it then."""


class SubmitRejected(RuntimeError):
    """The cluster refused the job (no such node, not enough free GPUs, invalid manifest).

    `transient` says whether trying again later may work (capacity taken meanwhile, an API server
    that stayed unavailable): such a job is queued again; otherwise (a manifest the API server
    refuses) the job fails with the cluster's message.
    """

    transient: bool = True


class ClusterGateway(Protocol):
    """What cpn needs from a set of clusters."""

    def inventory(self) -> tuple[NodeState, ...]:
        """Every node with its current free capacity."""
        ...

    def submit(self, job: JobSpec, placement: Placement) -> None:
        """Start `job` as placed; raise SubmitRejected if the cluster refuses it."""
        ...

    def delete(self, job_id: str, grace_s: float | None = None) -> None:
        """Remove a submitted job from its cluster and free its cards at once; its end follows from
        `poll_events` (reason DELETED_REASON). A job the clusters do not hold is left alone (deleting is
        idempotent). `grace_s`: seconds its pods get to stop (a preemption's grace period); None = the
        cluster's default."""
        ...

    def poll_events(self) -> list[JobEvent]:
        """Events since the last call, oldest first."""
        ...

    def logs(self, job_id: str, tail_lines: int) -> str:
        """The last `tail_lines` lines of the job's log as the cluster has it now (a running job's so far, a
        finished one's while its pod is kept); raise NoLog when the clusters have none of it."""
        ...

    def held_jobs(self) -> frozenset[str]:
        """Ids of the cpn jobs the clusters hold now (submitted and not yet reported finished), for
        start-up reconciliation (cpn.engine.scheduler.Scheduler.reconcile)."""
        ...
