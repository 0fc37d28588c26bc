"""One scheduling round, the same for live clusters and the simulator.

A round applies the gateway's job events to the store, builds one frozen
Snapshot (queued jobs, node states, estimates, now), asks the policy for a
Decision, and carries it out: rejected jobs go to `schedule-failed`, placed
jobs are assigned and submitted through the gateway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from cpn.adapters.gateway import ClusterGateway, JobEvent, SubmitRejected
from cpn.clock import Clock
from cpn.jobs import JobSpec, JobState
from cpn.policies.base import Decision, Estimate, Policy, Snapshot
from cpn.store import JobStore

_EVENT_STATE = {"running": JobState.RUNNING, "succeeded": JobState.SUCCEEDED, "failed": JobState.FAILED}


class EstimateSource(Protocol):
    """Where a policy's runtime/memory beliefs come from (oracle, noisy oracle, the predictor)."""

    def estimates(
        self, jobs: tuple[JobSpec, ...], gpu_types: tuple[str, ...]
    ) -> Mapping[str, Mapping[str, Estimate]]:
        """job_id -> GPU type -> estimate for every pending job on every GPU type."""
        ...


@dataclass(frozen=True)
class RoundResult:
    """What one round did."""

    time: float
    events: int
    placed: int
    rejected: int
    submit_refused: int
    pending_after: int


class Scheduler:
    """Runs rounds of one policy against one gateway, recording every transition in the store."""

    def __init__(
        self,
        store: JobStore,
        gateway: ClusterGateway,
        policy: Policy,
        clock: Clock,
        cpu_threshold: float = 0.7,
        estimator: EstimateSource | None = None,
    ) -> None:
        self.store = store
        self.gateway = gateway
        self.policy = policy
        self.clock = clock
        self.cpu_threshold = cpu_threshold
        self.estimator = estimator

    def apply_events(self, events: list[JobEvent]) -> None:
        """Move jobs along as the clusters report them (running, succeeded, failed)."""
        for event in events:
            self.store.transition(event.job_id, _EVENT_STATE[event.kind], reason=event.reason)

    def snapshot(self) -> Snapshot:
        """The frozen view the policy decides on."""
        pending = tuple(r.spec for r in self.store.jobs([JobState.QUEUED]))
        nodes = self.gateway.inventory()
        estimates: Mapping[str, Mapping[str, Estimate]] = {}
        if self.estimator is not None and pending:
            gpu_types = tuple(sorted({n.node.gpu_type for n in nodes}))
            estimates = self.estimator.estimates(pending, gpu_types)
        return Snapshot(
            now=self.clock.now(),
            pending=pending,
            nodes=nodes,
            estimates=estimates,
            cpu_threshold=self.cpu_threshold,
        )

    def execute(self, snapshot: Snapshot, decision: Decision) -> tuple[int, int]:
        """Carry out a decision; returns (placed, refused by the cluster)."""
        specs = {job.job_id: job for job in snapshot.pending}
        for rejection in decision.rejections:
            self.store.transition(rejection.job_id, JobState.SCHEDULE_FAILED, reason=rejection.reason)
        placed = refused = 0
        for placement in decision.placements:
            self.store.transition(
                placement.job_id, JobState.ASSIGNED, cluster=placement.cluster, node=placement.node
            )
            try:
                self.gateway.submit(specs[placement.job_id], placement)
            except SubmitRejected as exc:
                self.store.transition(placement.job_id, JobState.QUEUED, reason=f"submit refused: {exc}")
                refused += 1
                continue
            self.store.transition(placement.job_id, JobState.SUBMITTED)
            placed += 1
        return placed, refused

    def round(self) -> RoundResult:
        """Apply events, decide, execute."""
        events = self.gateway.poll_events()
        self.apply_events(events)
        snapshot = self.snapshot()
        decision = self.policy.decide(snapshot) if snapshot.pending else Decision()
        placed, refused = self.execute(snapshot, decision)
        return RoundResult(
            time=snapshot.now,
            events=len(events),
            placed=placed,
            rejected=len(decision.rejections),
            submit_refused=refused,
            pending_after=len(snapshot.pending) - placed - len(decision.rejections),
        )
