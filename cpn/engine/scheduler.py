"""One scheduling round, the same for live clusters and the simulator.

A round applies the gateway's job events to the store, builds one frozen
Snapshot (queued jobs, node states, estimates, now), asks the policy for a
Decision, and carries it out: rejected jobs go to `schedule-failed`, placed
jobs are assigned and submitted through the gateway.

A job whose estimates say `explore` (a model the predictor has never seen) runs on
whole cards even if it asked to share one: the policy and the cluster see it without
its `gpu_share`, and its assignment is recorded with `EXCLUSIVE_REASON`, so that
its measured runtime, free of a partner's interference, may train the predictor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

from cpn.adapters.gateway import ClusterGateway, JobEvent, SubmitRejected
from cpn.adapters.migrator import MigrationDone, Migrator
from cpn.clock import Clock
from cpn.decisions import Decision, Estimate, Snapshot
from cpn.engine.queue_view import QueueView
from cpn.engine.transfer import TransferTimes
from cpn.inventory import NodeState
from cpn.jobs import JobSpec, JobState
from cpn.policies.base import Policy
from cpn.rules import EXCLUSIVE_REASON, is_sharing
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
    migrating: int
    rejected: int
    submit_refused: int
    pending_after: int


class Scheduler:
    """Runs rounds of one policy against one gateway, recording every transition in the store.

    With `transfers` and `migrator`, a job placed on a cluster other than the one
    holding its image and data first migrates there (holding no GPU meanwhile) and
    is queued again at the destination; without them, location is ignored.
    """

    def __init__(
        self,
        store: JobStore,
        gateway: ClusterGateway,
        policy: Policy,
        clock: Clock,
        cpu_threshold: float = 0.7,
        estimator: EstimateSource | None = None,
        transfers: TransferTimes | None = None,
        migrator: Migrator | None = None,
    ) -> None:
        if (transfers is None) != (migrator is None):
            raise ValueError("give both transfers and migrator, or neither")
        self.store = store
        self.gateway = gateway
        self.policy = policy
        self.clock = clock
        self.cpu_threshold = cpu_threshold
        self.estimator = estimator
        self.transfers = transfers
        self.migrator = migrator
        self.queue = QueueView(store)
        self._estimates: dict[str, Mapping[str, Estimate]] = {}
        self._exclusive: dict[str, JobSpec] = {}
        """job_id -> the whole-card spec of a sharing job the estimates say to explore."""
        self._estimated_types: tuple[str, ...] = ()
        self._transfer_rows: dict[str, Mapping[str, float]] = {}
        self._transfer_from: dict[str, str] = {}

    def apply_events(self, events: list[JobEvent]) -> None:
        """Move jobs along as the clusters report them (running, succeeded, failed)."""
        for event in events:
            self.store.transition(
                event.job_id,
                _EVENT_STATE[event.kind],
                reason=event.reason,
                at=event.time,
                gpu_mem_gb=event.gpu_mem_gb,
            )

    def apply_migrations(self, done: list[MigrationDone]) -> None:
        """Finished copies queue their job again where its payload now is; failed copies fail it."""
        for m in done:
            if m.ok:
                self.store.transition(
                    m.job_id,
                    JobState.QUEUED,
                    reason=f"migrated to {m.cluster}",
                    location=m.cluster,
                    at=m.time,
                )
            else:
                self.store.transition(
                    m.job_id,
                    JobState.FAILED,
                    reason=f"migration to {m.cluster} failed: {m.reason}",
                    at=m.time,
                )

    def _update_estimates(self, entering: tuple[JobSpec, ...], nodes: tuple[NodeState, ...]) -> None:
        if self.estimator is None:
            return
        gpu_types = tuple(sorted({n.node.gpu_type for n in nodes}))
        if gpu_types != self._estimated_types:
            self._estimates.clear()
            self._estimated_types = gpu_types
            entering = self.queue.pending()
        new = tuple(job for job in entering if job.job_id not in self._estimates)
        if new:
            self._estimates.update(self.estimator.estimates(new, gpu_types))
            for job in new:
                if is_sharing(job) and any(e.explore for e in self._estimates.get(job.job_id, {}).values()):
                    self._exclusive[job.job_id] = replace(job, gpu_share=None)

    def _spec(self, job_id: str) -> JobSpec:
        """The spec to place and submit: whole cards for a job to explore, else as submitted."""
        return self._exclusive.get(job_id) or self.queue.spec(job_id)

    def _update_transfers(self, entering: tuple[JobSpec, ...]) -> None:
        if self.transfers is None:
            return
        for job in entering:
            location = self.queue.location(job.job_id)
            if location is None:
                self._transfer_rows.pop(job.job_id, None)
            elif self._transfer_from.get(job.job_id) != location:
                self._transfer_from[job.job_id] = location
                self._transfer_rows[job.job_id] = self.transfers.row(job, location)

    def snapshot(self) -> Snapshot:
        """The frozen view the policy decides on.

        Estimates and transfer times are computed once per job (and location), when
        it enters the queue, and cached; the snapshot's mappings may hold entries of
        jobs no longer pending.
        """
        entering = self.queue.refresh()
        nodes = self.gateway.inventory()
        self._update_estimates(entering, nodes)
        self._update_transfers(entering)
        pending = self.queue.pending()
        if self._exclusive:
            pending = tuple(self._exclusive.get(job.job_id, job) for job in pending)
        return Snapshot(
            now=self.clock.now(),
            pending=pending,
            nodes=nodes,
            estimates=MappingProxyType(self._estimates),
            transfer_s=MappingProxyType(self._transfer_rows),
            cpu_threshold=self.cpu_threshold,
            shapes=self.queue.shapes(),
        )

    def execute(self, snapshot: Snapshot, decision: Decision) -> tuple[int, int, int]:
        """Carry out a decision; returns (submitted, migrating, refused by the cluster)."""
        for rejection in decision.rejections:
            self.store.transition(rejection.job_id, JobState.SCHEDULE_FAILED, reason=rejection.reason)
        placed = migrating = refused = 0
        for placement in decision.placements:
            self.store.transition(
                placement.job_id,
                JobState.ASSIGNED,
                reason=EXCLUSIVE_REASON if placement.job_id in self._exclusive else "",
                cluster=placement.cluster,
                node=placement.node,
            )
            location = self.queue.location(placement.job_id)
            if self.migrator is not None and location is not None and location != placement.cluster:
                self.store.transition(
                    placement.job_id, JobState.MIGRATING, reason=f"{location} -> {placement.cluster}"
                )
                self.migrator.start(self._spec(placement.job_id), location, placement.cluster)
                migrating += 1
                continue
            try:
                self.gateway.submit(self._spec(placement.job_id), placement)
            except SubmitRejected as exc:
                self.store.transition(placement.job_id, JobState.QUEUED, reason=f"submit refused: {exc}")
                refused += 1
                continue
            self.store.transition(placement.job_id, JobState.SUBMITTED)
            placed += 1
        return placed, migrating, refused

    def round(self) -> RoundResult:
        """Apply events, decide, execute."""
        events = self.gateway.poll_events()
        self.apply_events(events)
        if self.migrator is not None:
            self.apply_migrations(self.migrator.poll())
        snapshot = self.snapshot()
        decision = self.policy.decide(snapshot) if snapshot.pending else Decision()
        placed, migrating, refused = self.execute(snapshot, decision)
        return RoundResult(
            time=snapshot.now,
            events=len(events),
            placed=placed,
            migrating=migrating,
            rejected=len(decision.rejections),
            submit_refused=refused,
            pending_after=len(snapshot.pending) - placed - migrating - len(decision.rejections),
        )
