"""One scheduling round, the same for live clusters and the simulator.

A round runs in stages, each a public method so that an orchestrator can run, time and retry
them one by one (the Prefect flow does):

1. `collect`: apply the gateway's job events and the migrator's finished copies to the store
   (idempotent: an event the store already reflects, as after a restart, is skipped);
2. `snapshot`: one frozen Snapshot (queued jobs, node states with live load, estimates, now);
3. `decide`: the policy's Decision, with a waiting reason for every job it leaves queued;
4. `assign`: record rejections and assignments, and split placements into those that must first
   migrate and those that can start;
5. `migrate` and `submit`: start the copies, submit the rest through the gateway;
6. `record_waiting`: store why each job still waits and when the plan starts it.

`reconcile` runs once at start-up: it settles jobs a crash left between two transitions against
what the clusters and the migrator say, so a restart loses nothing and submits nothing twice.

Caches keyed by job (estimates, transfer rows, explored specs, waiting reasons written) hold only
queued jobs: a service that has seen 100,000 jobs holds what one with the same queue holds.

A job whose estimates say `explore` (a model the predictor has never seen) runs on
whole cards even if it asked to share one: the policy and the cluster see it without
its `gpu_share`, and its assignment is recorded with `EXCLUSIVE_REASON`, so that
its measured runtime, free of a partner's interference, may train the predictor.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol

from config.settings import DEFAULT_CPU_THRESHOLD
from cpn.adapters.gateway import OOM_REASON, ClusterGateway, JobEvent, SubmitRejected
from cpn.adapters.migrator import MigrationDone, Migrator
from cpn.clock import Clock
from cpn.decisions import Decision, Estimate, Placement, RunningJob, Snapshot, SolverRound, Waiting
from cpn.engine.queue_view import QueueView
from cpn.engine.transfer import TransferTimes
from cpn.inventory import NodeState
from cpn.jobs import IllegalTransition, JobSpec, JobState
from cpn.policies.base import Policy
from cpn.rules import EXCLUSIVE_REASON, is_sharing
from cpn.store import JobStore, UnknownJob

log = logging.getLogger(__name__)

UNEXPLAINED = "the policy gave no reason"
"""Detail of the waiting reason the scheduler records for a job the policy left queued without one."""

RESTART_UNSUBMITTED = "restart: assigned but never submitted; queued again"
RESTART_MIGRATION_LOST = "restart: its migration was interrupted; queued again"

MIGRATION_FAILED = "migration failed"
MAX_MIGRATION_FAILURES = 3
"""A job whose copies failed this many times fails, instead of going back to the queue again."""

NodeLoad = Callable[[tuple[NodeState, ...]], tuple[NodeState, ...]]
"""Adjusts node states by measured load (live GPU memory and CPU in use); see cpn.adapters.metrics."""

_EVENT_STATE = {"running": JobState.RUNNING, "succeeded": JobState.SUCCEEDED, "failed": JobState.FAILED}


def _migrated(m: MigrationDone) -> str:
    """The reason recorded for a finished copy, with what it measured: `migrated to C (N bytes in S s,
    REF@DIGEST)`."""
    measured = []
    if m.bytes is not None and m.seconds is not None:
        measured.append(f"{m.bytes} bytes in {m.seconds:.1f} s" if m.bytes else "already there")
    if m.image:
        measured.append(m.image)
    return f"migrated to {m.cluster}" + (f" ({', '.join(measured)})" if measured else "")


class EstimateSource(Protocol):
    """Where a policy's runtime/memory beliefs come from (oracle, noisy oracle, the predictor)."""

    def estimates(
        self, jobs: tuple[JobSpec, ...], gpu_types: tuple[str, ...]
    ) -> Mapping[str, Mapping[str, Estimate]]:
        """job_id -> GPU type -> estimate for every pending job on every GPU type."""
        ...


@dataclass(frozen=True)
class Reconciled:
    """What start-up reconciliation settled."""

    submitted: tuple[str, ...] = ()
    """Assigned jobs the clusters turned out to hold: recorded as submitted."""
    requeued: tuple[str, ...] = ()
    """Assigned jobs never submitted, and jobs whose migration was lost: queued again."""


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
    solver: SolverRound | None = None
    """How an optimising policy's solve went (solver, status, objective, gap, time); None for others."""


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
        cpu_threshold: float = DEFAULT_CPU_THRESHOLD,
        estimator: EstimateSource | None = None,
        transfers: TransferTimes | None = None,
        migrator: Migrator | None = None,
        node_load: NodeLoad | None = None,
        oom_retries: int = 1,
        explain_every_s: float = 0.0,
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
        self.node_load = node_load
        self.oom_retries = oom_retries
        """How many times an OOM-killed job is queued again before it fails (0: never)."""
        self.explain_every_s = explain_every_s
        """Ask the policy why jobs wait at most once per this many seconds of wall time (0: every round).
        Explaining costs time in proportion to the queue; a replay throttles it, the live service does not."""
        self._explained_at = -math.inf
        self._running: dict[str, RunningJob] = {}
        """job_id -> predicted end and cards of each running job (bounded by the jobs running)."""
        self._card_gb: dict[tuple[str, str], float] = {}
        """(cluster, node) -> GB per card, from the latest inventory (bounded by the node count)."""
        self.queue = QueueView(store)
        self._estimates: dict[str, Mapping[str, Estimate]] = {}
        self._exclusive: dict[str, JobSpec] = {}
        """job_id -> the whole-card spec of a sharing job the estimates say to explore."""
        self._estimated_types: tuple[str, ...] = ()
        self._transfer_rows: dict[str, Mapping[str, float]] = {}
        self._transfer_from: dict[str, str] = {}
        self._waiting_written: dict[str, Waiting] = {}
        """job_id -> the waiting reason last written to the store, so unchanged ones are not rewritten."""

    def _move(self, job_id: str, state: JobState, **kw: object) -> bool:
        """Record a reported transition; False (nothing written) when the store already reflects it or
        has moved past it, as when a restarted gateway reports again what happened before."""
        try:
            self.store.transition(job_id, state, **kw)
        except (IllegalTransition, UnknownJob) as exc:
            log.debug("skipped a reported transition: %s", exc)
            return False
        return True

    def apply_events(self, events: list[JobEvent]) -> None:
        """Move jobs along as the clusters report them (running, succeeded, failed); an OOM kill
        re-plans the job (see `_replan_oom`)."""
        for event in events:
            if event.kind == "failed" and event.reason == OOM_REASON and self._replan_oom(event):
                continue
            self._move(
                event.job_id,
                _EVENT_STATE[event.kind],
                reason=event.reason,
                at=event.time,
                gpu_mem_gb=event.gpu_mem_gb,
                log_tail=event.log_tail,
            )

    def _replan_oom(self, event: JobEvent) -> bool:
        """Queue an OOM-killed job again, needing more GPU memory per card than the card it died on,
        unless it was killed `oom_retries` times already; returns whether it was queued again."""
        try:
            record = self.store.get(event.job_id)
        except UnknownJob:
            return False
        if record.state not in (JobState.SUBMITTED, JobState.RUNNING):
            return False  # already reflected (a restarted gateway reporting again)
        kills = sum(t.reason.startswith(OOM_REASON) for t in self.store.history(event.job_id))
        if kills >= self.oom_retries:
            return False
        card_gb = self._card_gb.get((record.cluster or "", record.node or ""))
        sharing = is_sharing(self._exclusive.get(event.job_id, record.spec))
        learned = None if sharing or card_gb is None else card_gb
        where = f"{record.cluster}/{record.node}" + (f" ({card_gb:g} GB cards)" if card_gb else "")
        self.store.transition(
            event.job_id,
            JobState.QUEUED,
            reason=f"{OOM_REASON} on {where}: queued again"
            + (f", for cards of more than {learned:g} GB" if learned else ""),
            at=event.time,
            needs_more_than_gb=learned,
            log_tail=event.log_tail,
        )
        return True

    def apply_migrations(self, done: list[MigrationDone]) -> None:
        """Finished copies queue their job again where its payload now is; failed copies queue it again
        where it was, with the reason (the policy may pick another cluster or retry), until the
        `MAX_MIGRATION_FAILURES`th failure fails the job."""
        for m in done:
            if m.ok:
                self._move(
                    m.job_id,
                    JobState.QUEUED,
                    reason=_migrated(m),
                    location=m.cluster,
                    image=m.image or None,
                    at=m.time,
                )
            else:
                reason = f"{MIGRATION_FAILED} to {m.cluster}: {m.reason}"
                failures = sum(t.reason.startswith(MIGRATION_FAILED) for t in self.store.history(m.job_id))
                state = JobState.FAILED if failures + 1 >= MAX_MIGRATION_FAILURES else JobState.QUEUED
                self._move(m.job_id, state, reason=reason, at=m.time)

    def collect(self) -> int:
        """Stage 1: apply the clusters' events and finished migrations; returns how many events."""
        events = self.gateway.poll_events()
        self.apply_events(events)
        if self.migrator is not None:
            self.apply_migrations(self.migrator.poll())
        return len(events)

    def reconcile(self, held: frozenset[str], migrating: frozenset[str] = frozenset()) -> Reconciled:
        """Settle, at start-up, jobs a stop left between two transitions.

        `held`: the ids of jobs the clusters hold for cpn (submitted, running or finished but not yet
        reported); `migrating`: copies the migrator is still making. An assigned job the clusters hold
        was submitted before the stop: it is recorded as such; one they do not hold was never submitted
        and is queued again. A migrating job whose copy is not going on is queued again (the copy
        starts over if the policy still picks that cluster). Events the clusters report afterwards
        move the rest along as usual.
        """
        submitted, requeued = [], []
        for record in self.store.jobs([JobState.ASSIGNED, JobState.MIGRATING]):
            job_id = record.job_id
            if record.state == JobState.ASSIGNED and job_id in held:
                self.store.transition(job_id, JobState.SUBMITTED, reason="restart: found on the cluster")
                submitted.append(job_id)
            elif record.state == JobState.ASSIGNED:
                self.store.transition(job_id, JobState.QUEUED, reason=RESTART_UNSUBMITTED)
                requeued.append(job_id)
            elif job_id not in migrating:
                self.store.transition(job_id, JobState.QUEUED, reason=RESTART_MIGRATION_LOST)
                requeued.append(job_id)
        return Reconciled(tuple(submitted), tuple(requeued))

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
        self._prune()
        nodes = self.gateway.inventory()
        for state in nodes:
            self._card_gb[(state.node.cluster, state.node.name)] = state.node.gpu_memory_gb
        if self.node_load is not None:
            nodes = self.node_load(nodes)
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
            explain=self._explain_now(),
            running=self._running_jobs(nodes),
        )

    def _running_jobs(self, nodes: tuple[NodeState, ...]) -> Mapping[str, RunningJob]:
        """Predicted end and whole cards of each job running on `nodes`, worked out once per job from
        the store (when it started, where) and the estimate source (how long it runs there)."""
        if self.estimator is None:
            return MappingProxyType({})
        running = {job_id for state in nodes for job_id in state.running}
        for job_id in [j for j in self._running if j not in running]:
            del self._running[job_id]
        new = running.difference(self._running)
        if new:
            gpu_of = {(s.node.cluster, s.node.name): s.node.gpu_type for s in nodes}
            for job_id in new:
                self._running[job_id] = self._predict_run(job_id, gpu_of)
        return MappingProxyType(self._running)

    def _predict_run(self, job_id: str, gpu_of: Mapping[tuple[str, str], str]) -> RunningJob:
        try:
            record = self.store.get(job_id)
        except UnknownJob:  # not cpn's job: its cards free at no known time
            return RunningJob(math.inf)
        spec = self._exclusive.get(job_id, record.spec)
        gpu = gpu_of.get((record.cluster or "", record.node or ""))
        estimate = self._estimates.get(job_id, {}).get(gpu)  # what the policy placed it by, while cached
        if estimate is None and gpu:  # pruned since, or started before a restart
            estimate = self.estimator.estimates((spec,), (gpu,)).get(job_id, {}).get(gpu)
        started = record.updated_at if record.state == JobState.RUNNING else self.clock.now()
        end = started + estimate.runtime_s if estimate is not None else math.inf
        cards = () if is_sharing(spec) else tuple((f"{record.cluster}/{n}", c) for n, c in record.placement)
        return RunningJob(end, cards)

    def _explain_now(self) -> bool:
        wall = time.monotonic()
        if wall - self._explained_at < self.explain_every_s:
            return False
        self._explained_at = wall
        return True

    def _prune(self) -> None:
        """Forget what is cached for jobs no longer queued (amortised: only once the caches outgrow the
        queue), so memory follows the queue, not the service's history."""
        queued = self.queue.size()
        for cache in (
            self._estimates,
            self._transfer_rows,
            self._transfer_from,
            self._exclusive,
            self._waiting_written,
        ):
            if len(cache) > 2 * queued + 64:
                for job_id in [j for j in cache if not self.queue.holds(j)]:
                    del cache[job_id]

    def decide(self, snapshot: Snapshot) -> Decision:
        """Stage 3: the policy's decision, with a waiting reason for every queued job it does not start."""
        if not snapshot.pending:
            return Decision()
        decision = self.policy.decide(snapshot)
        if not snapshot.explain:
            return decision
        moving = {p.job_id for p in decision.placements} | {r.job_id for r in decision.rejections}
        explained = {w.job_id for w in decision.waiting}
        missing = tuple(
            Waiting(job.job_id, "queue-order", UNEXPLAINED)
            for job in snapshot.pending
            if job.job_id not in moving and job.job_id not in explained
        )
        return replace(decision, waiting=decision.waiting + missing) if missing else decision

    def assign(self, decision: Decision) -> tuple[list[Placement], list[Placement]]:
        """Stage 4: record rejections and assignments; returns (placements that must first migrate their
        job's image and data, placements that can be submitted now)."""
        for rejection in decision.rejections:
            self.store.transition(rejection.job_id, JobState.SCHEDULE_FAILED, reason=rejection.reason)
        to_migrate, to_submit = [], []
        for placement in decision.placements:
            self.store.transition(
                placement.job_id,
                JobState.ASSIGNED,
                reason=EXCLUSIVE_REASON if placement.job_id in self._exclusive else "",
                cluster=placement.cluster,
                node=placement.node,
                placement=placement.nodes,
            )
            location = self.queue.location(placement.job_id)
            if self.migrator is not None and location is not None and location != placement.cluster:
                to_migrate.append(placement)
            else:
                to_submit.append(placement)
        return to_migrate, to_submit

    def migrate(self, placements: list[Placement]) -> int:
        """Stage 5a: start copying each job's image and data to its chosen cluster; returns how many."""
        for placement in placements:
            location = self.queue.location(placement.job_id)
            self.store.transition(
                placement.job_id, JobState.MIGRATING, reason=f"{location} -> {placement.cluster}"
            )
            assert self.migrator is not None, "placements to migrate come only with a migrator"
            self.migrator.start(self._spec(placement.job_id), location or "", placement.cluster)
        return len(placements)

    def submit(self, placements: list[Placement]) -> tuple[int, int]:
        """Stage 5b: submit each placed job through the gateway; returns (submitted, refused).

        The job is `assigned` in the store before the gateway is called and `submitted` after, so a
        crash in between is settled by `reconcile` against what the cluster holds. A transient refusal
        queues the job again with the cluster's reason; a final one (the API server refuses the
        manifest) fails it with that reason.
        """
        placed = refused = 0
        for placement in placements:
            try:
                self.gateway.submit(self._spec(placement.job_id), placement)
            except SubmitRejected as exc:
                state = JobState.QUEUED if exc.transient else JobState.FAILED
                self.store.transition(placement.job_id, state, reason=f"submit refused: {exc}")
                refused += 1
                continue
            self.store.transition(placement.job_id, JobState.SUBMITTED)
            placed += 1
        return placed, refused

    def execute(self, snapshot: Snapshot, decision: Decision) -> tuple[int, int, int]:
        """Stages 4-6 at once; returns (submitted, migrating, refused by the cluster)."""
        to_migrate, to_submit = self.assign(decision)
        migrating = self.migrate(to_migrate)
        placed, refused = self.submit(to_submit)
        if snapshot.explain:
            self.record_waiting(decision)
        return placed, migrating, refused

    def record_waiting(self, decision: Decision) -> int:
        """Stage 6: store the waiting reasons that changed since last written; returns how many."""
        changed = [w for w in decision.waiting if self._waiting_written.get(w.job_id) != w]
        self.store.set_waiting(changed)
        for w in changed:
            self._waiting_written[w.job_id] = w
        return len(changed)

    def round(self) -> RoundResult:
        """Every stage once: collect, snapshot, decide, assign, migrate, submit, record waiting."""
        events = self.collect()
        snapshot = self.snapshot()
        decision = self.decide(snapshot)
        placed, migrating, refused = self.execute(snapshot, decision)
        return RoundResult(
            time=snapshot.now,
            events=events,
            placed=placed,
            migrating=migrating,
            rejected=len(decision.rejections),
            submit_refused=refused,
            pending_after=len(snapshot.pending) - placed - migrating - len(decision.rejections),
            solver=decision.solver,
        )
