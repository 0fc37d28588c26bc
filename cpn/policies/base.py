"""The one interface every scheduling policy implements: `decide(snapshot) -> Decision`.

Policies are pure: they see one frozen Snapshot (pending jobs, node states,
estimates, the time) and return one Decision. The live loop and the simulator
call the very same policy objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from cpn.inventory import NodeState
from cpn.jobs import JobSpec


@dataclass(frozen=True)
class Estimate:
    """What the scheduler believes about one job on one GPU type."""

    runtime_s: float
    """Predicted run time on the GPU type, transfer excluded."""
    gpu_mem_gb: float | None = None
    """Predicted GPU memory per card; None = unknown."""
    uncertainty: float = 0.0
    """Relative spread of the runtime estimate (0.1 = +-10%)."""
    explore: bool = False
    """The predictor has never seen this model: give its first run clean, exclusive resources."""


def _frozen_empty() -> Mapping:
    return MappingProxyType({})


@dataclass(frozen=True)
class Snapshot:
    """Everything a policy may look at for one decision."""

    now: float
    """Seconds; simulated or wall-clock."""
    pending: tuple[JobSpec, ...]
    """Queued jobs in arrival order."""
    nodes: tuple[NodeState, ...]
    """Every node of every cluster with what is free on it."""
    estimates: Mapping[str, Mapping[str, Estimate]] = field(default_factory=_frozen_empty)
    """job_id -> canonical GPU type -> estimate. May be empty (FIFO needs none)."""
    transfer_s: Mapping[str, Mapping[str, float]] = field(default_factory=_frozen_empty)
    """job_id -> cluster -> seconds to move the job's image and data there."""
    cpu_threshold: float = 0.7
    """Nodes whose CPU load is above this take no more jobs."""
    shapes: tuple[JobSpec, ...] | None = None
    """One pending job of each shape (`shape_of`); None = not given. Lets a policy stop scanning
    a long queue once no shape that waits could start on what is left."""


def shape_of(job: JobSpec) -> tuple:
    """What decides whether a job can start on given free capacity, bar memory and estimates."""
    return (job.kind, job.num_gpus, job.gpu_share is not None, job.cpu)


@dataclass(frozen=True)
class Placement:
    """Run `job_id` as one gang: `num_gpus` cards of `node`, plus the cards of any `extra_nodes`.

    A job spans nodes only when it is wider than any node it may use; all its nodes are in one
    cluster and have one GPU type. A one-card job with a `gpu_share` shares a card of `node` (which
    one, the cluster decides: cpn.policies.rules.pick_shared_card).
    """

    job_id: str
    cluster: str
    node: str
    num_gpus: int
    """Cards on `node`."""
    extra_nodes: tuple[tuple[str, int], ...] = ()
    """More nodes of the same cluster, with the cards the gang takes on each."""

    @property
    def nodes(self) -> tuple[tuple[str, int], ...]:
        """Every (node, cards) of the gang, `node` first."""
        return ((self.node, self.num_gpus), *self.extra_nodes)

    @property
    def total_gpus(self) -> int:
        """Cards the gang holds over all its nodes."""
        return self.num_gpus + sum(n for _, n in self.extra_nodes)


@dataclass(frozen=True)
class Rejection:
    """A job no placement can ever satisfy, and why (it goes to schedule-failed)."""

    job_id: str
    reason: str


@dataclass(frozen=True)
class Decision:
    """One round's outcome: jobs to start now and jobs to give up on; the rest keep waiting."""

    placements: tuple[Placement, ...] = ()
    rejections: tuple[Rejection, ...] = ()


class Policy(Protocol):
    """A scheduling policy."""

    name: str
    """Name on the command line and in reports."""

    def decide(self, snapshot: Snapshot) -> Decision:
        """Choose placements for this round; must not mutate anything."""
        ...
