"""Simulated clusters behind the ClusterGateway port: a deterministic discrete-event executor.

Submitting a job holds specific cards of one node from now until the job ends; the end is an
event on a heap ordered by (time, sequence number), so equal times resolve in submission order and
the same inputs always give the same event sequence. Nothing reads the wall clock and nothing is
random. Time moves only through `advance`, which processes every due event and moves the clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from cpn.adapters.gateway import JobEvent, SubmitRejected
from cpn.clock import SimClock
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.policies.base import Placement
from cpn.sim.truth import GroundTruth, RunOutcome

__all__ = ["Execution", "GroundTruth", "SimulatedGateway"]


@dataclass(frozen=True)
class Execution:
    """One finished run of a job on cards of a node, for Gantt charts and utilisation."""

    job_id: str
    cluster: str
    node: str
    gpus: tuple[int, ...]
    """Indices of the cards held, 0-based on the node."""
    start: float
    end: float
    outcome: Literal["succeeded", "failed"]
    reason: str = ""


@dataclass(frozen=True)
class _Run:
    job: JobSpec
    node: Node
    gpus: tuple[int, ...]
    start: float
    outcome: RunOutcome


@dataclass
class _NodeUse:
    free: list[int]
    """Free card indices, ascending."""
    running: dict[str, float]
    """job_id -> CPU cores, in start order."""


class SimulatedGateway:
    """Simulated clusters: `inventory`, `submit`, `poll_events` of the port, plus time controls.

    Every run ends in exactly one `succeeded` or `failed` event; finished runs are kept in
    `executions` in the order they ended.
    """

    def __init__(self, nodes: Sequence[Node], truth: GroundTruth, clock: SimClock) -> None:
        self.truth = truth
        self.clock = clock
        self._nodes: dict[tuple[str, str], Node] = {}
        for node in nodes:
            if (node.cluster, node.name) in self._nodes:
                raise ValueError(f"node {node.key} is listed twice")
            self._nodes[(node.cluster, node.name)] = node
        self._use = {
            key: _NodeUse(free=list(range(n.gpu_count)), running={}) for key, n in self._nodes.items()
        }
        self._states = {key: self._state(key) for key in self._nodes}
        self._runs: dict[str, _Run] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0
        self._events: list[JobEvent] = []
        self.executions: list[Execution] = []

    def _state(self, key: tuple[str, str]) -> NodeState:
        use = self._use[key]
        return NodeState(
            node=self._nodes[key],
            free_gpus=len(use.free),
            cpu_used=sum(use.running.values()),
            running=tuple(use.running),
        )

    def inventory(self) -> tuple[NodeState, ...]:
        """Every node, in the order given, with its free cards, CPU in use and running jobs."""
        return tuple(self._states.values())

    def submit(self, job: JobSpec, placement: Placement) -> None:
        """Start `job` on the lowest free cards of the placed node; emit `running` now.

        Raises SubmitRejected when the node does not exist, has too few free cards or CPU,
        the job is already running, or the placement names another job.
        """
        key = (placement.cluster, placement.node)
        if placement.job_id != job.job_id:
            raise SubmitRejected(f"placement is for {placement.job_id}, not {job.job_id}")
        if job.job_id in self._runs:
            raise SubmitRejected(f"job {job.job_id} is already running")
        if key not in self._nodes:
            raise SubmitRejected(f"no node {placement.cluster}/{placement.node}")
        node, use = self._nodes[key], self._use[key]
        if not 1 <= placement.num_gpus <= len(use.free):
            raise SubmitRejected(
                f"node {node.key} has {len(use.free)} free GPUs; "
                f"job {job.job_id} asks for {placement.num_gpus}"
            )
        cpu_used = sum(use.running.values())
        if cpu_used + job.cpu > node.cpu_cores:
            raise SubmitRejected(
                f"node {node.key} has {node.cpu_cores - cpu_used:g} free CPU cores; "
                f"job {job.job_id} asks for {job.cpu:g}"
            )
        now = self.clock.now()
        gpus = tuple(use.free[: placement.num_gpus])
        del use.free[: placement.num_gpus]
        use.running[job.job_id] = job.cpu
        self._states[key] = self._state(key)
        outcome = self.truth.outcome(job, node, placement.num_gpus)
        self._runs[job.job_id] = _Run(job, node, gpus, now, outcome)
        heapq.heappush(self._heap, (now + outcome.duration_s, self._seq, job.job_id))
        self._seq += 1
        self._events.append(JobEvent(job.job_id, "running", now))

    def poll_events(self) -> list[JobEvent]:
        """Events since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def next_event_time(self) -> float | None:
        """When the next job ends, or None when nothing is running."""
        return self._heap[0][0] if self._heap else None

    def advance(self, until: float) -> None:
        """End every job due at or before `until`, in (time, submission) order; then set the clock to it."""
        while self._heap and self._heap[0][0] <= until:
            end, _, job_id = heapq.heappop(self._heap)
            self.clock.advance_to(end)
            self._finish(self._runs.pop(job_id), end)
        self.clock.advance_to(until)

    def _finish(self, run: _Run, end: float) -> None:
        key = (run.node.cluster, run.node.name)
        use = self._use[key]
        use.free = sorted(use.free + list(run.gpus))
        del use.running[run.job.job_id]
        self._states[key] = self._state(key)
        kind = "succeeded" if run.outcome.succeeded else "failed"
        self._events.append(JobEvent(run.job.job_id, kind, end, run.outcome.reason))
        self.executions.append(
            Execution(
                job_id=run.job.job_id,
                cluster=run.node.cluster,
                node=run.node.name,
                gpus=run.gpus,
                start=run.start,
                end=end,
                outcome=kind,
                reason=run.outcome.reason,
            )
        )

    def running_jobs(self) -> tuple[str, ...]:
        """Ids of the jobs running now, in start order."""
        return tuple(self._runs)
