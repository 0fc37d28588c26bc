"""One scheduling round, the same for live clusters and the simulator.

A round runs in stages, each a public method, in the one order `run_stages` writes down: `round`
runs them in one call, the Prefect flow runs each as a task of its own, to time and retry them:

1. `collect`: apply the gateway's job events and the migrator's finished copies to the store
   (idempotent: an event the store already reflects, as after a restart, is skipped);
   then `cancel`: delete the jobs someone cancelled from their clusters and record them cancelled;
2. `snapshot`: one frozen Snapshot (queued jobs, node states with live load, estimates, now);
3. `decide`: the policy's Decision, with a waiting reason for every job it leaves queued;
4. `assign`: record rejections and assignments, and split placements into those that must first
   migrate and those that can start;
5. `migrate` and `submit`: start the copies, submit the rest through the gateway;
6. `record_waiting`: store why each job still waits and when the plan starts it (in rounds that
   explain, see `explain_every_s`).

A dry run (`run_stages(..., dry_run=True)`) runs only `snapshot` and `decide`: it writes nothing.
A scheduler given a `lease` (cpn.engine.lease, renewed on its own thread; read through a callable, as its
service takes and loses it) checks it before it collects and before it records a decision, and stops with
LeaseLost once it is lost.

`reconcile` runs once at start-up: it settles jobs a crash left between two transitions against
what the clusters and the migrator say, so a restart loses nothing and submits nothing twice.

Every fact a round decides by is in the store, written with the transition that creates it
(cpn.store.facts): a preempted job's saved progress, the copies in flight, and (as the transitions
themselves) the runs deleted on purpose. So a restarted `cpn run`, a `schedule-round` run (a new service
each run) and a standby that takes over decide as the process that wrote them would have: the scheduler
reads them back every round, and keeps in memory only caches of what it can work out again.

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
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Protocol, TypeVar

from config.policies import DEFAULT_CPU_THRESHOLD
from cpn.adapters.gateway import DELETED_REASON, OOM_REASON, ClusterGateway, JobEvent, SubmitRejected
from cpn.adapters.migrator import MigrationDone, Migrator
from cpn.booking import hold_cards
from cpn.clock import Clock
from cpn.decisions import (
    RESTART_S,
    Decision,
    Estimate,
    NoEstimates,
    Placement,
    Rejection,
    RunningJob,
    Snapshot,
    SolverRound,
    Teams,
    Waiting,
)
from cpn.engine.forecast import Forecaster
from cpn.engine.lease import SchedulerLease
from cpn.engine.queue_view import QueueView, seen_spec
from cpn.inventory import Node, NodeState
from cpn.jobs import ON_CLUSTER, Cause, IllegalTransition, JobSpec, JobState
from cpn.policies.base import Policy, looked_forward_with
from cpn.policies.placement import NO_ESTIMATE
from cpn.rules import EXCLUSIVE_REASON, is_sharing
from cpn.store import Copy, JobStore, LeaseLost, UnknownJob
from cpn.store.facts import CopyStarted, SavedProgress
from cpn.times import stamp
from cpn.transfer import TransferTimes

log = logging.getLogger(__name__)

UNEXPLAINED = "the policy gave no reason"
"""Detail of the waiting reason the scheduler records for a job the policy left queued without one."""

RESTART_UNSUBMITTED = "restart: assigned but never submitted; queued again"
RESTART_MIGRATION_LOST = "restart: its migration was interrupted; queued again"
"""A migrating job whose copy the store does not know (a store from before cpn.store.facts, or a service
without a migrator) is queued again at start-up; one whose copy it knows goes on with that copy."""

MIGRATION_FAILED = "migration failed"
MAX_MIGRATION_FAILURES = 3
"""A job whose copies failed this many times fails, instead of going back to the queue again."""

NodeLoad = Callable[[tuple[NodeState, ...]], tuple[NodeState, ...]]
"""Adjusts node states by measured load (live GPU memory and CPU in use); see cpn.adapters.metrics."""

_T = TypeVar("_T")

_EVENT_STATE = {"running": JobState.RUNNING, "succeeded": JobState.SUCCEEDED, "failed": JobState.FAILED}


def _oom_killed(event: JobEvent) -> bool:
    """Whether the cluster reports the run killed for its memory (Kubernetes' reason, as the gateway
    passes it on)."""
    return event.kind == "failed" and event.reason == OOM_REASON


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
        """job_id -> GPU type -> estimate for every pending job on every GPU type; a job the source can
        estimate on no GPU type may map to a `NoEstimates` saying why (its rejection then says so)."""
        ...


@dataclass(frozen=True)
class Reconciled:
    """What start-up reconciliation settled."""

    submitted: tuple[str, ...] = ()
    """Assigned jobs the clusters turned out to hold: recorded as submitted."""
    requeued: tuple[str, ...] = ()
    """Assigned jobs never submitted, and jobs whose migration was lost: queued again."""
    copying: tuple[str, ...] = ()
    """Migrating jobs whose copy, begun by another process (or before a restart), this one goes on with."""


@dataclass(frozen=True)
class RoundResult:
    """What one round did (a dry run: what it decided, having changed nothing)."""

    time: float
    """The snapshot's time."""
    events: int
    """Cluster events collected (none in a dry run)."""
    placed: int
    """Jobs submitted to their cluster."""
    migrating: int
    """Jobs whose copy to their chosen cluster started."""
    rejected: int
    """Jobs the policy rejected as unplaceable (recorded as schedule-failed unless dry)."""
    submit_refused: int
    """Placed jobs a cluster refused at submission."""
    pending_after: int
    """Jobs still queued after the round."""
    solver: SolverRound | None = None
    """How an optimising policy's solve went (solver, status, objective, gap, time); None for others."""
    pending: int = 0
    """Jobs queued when the round took its snapshot."""
    decided: int = 0
    """Placements the policy chose: placed + migrating + submit_refused; in a dry run, what it would place."""
    dry_run: bool = False
    """Whether the round only decided (nothing collected, recorded, copied or submitted)."""
    cancelled: int = 0
    """Jobs on a cluster whose cancel the round carried out (deleted there, recorded cancelled)."""
    stage_s: tuple[tuple[str, float], ...] = field(default=(), compare=False)
    """(stage, wall seconds) of each stage the round ran, in order (cpn.telemetry publishes them)."""


class RoundStages(Protocol):
    """The stages of a round, as `Scheduler` has them; an orchestrator may wrap each (the Prefect flow
    runs each as a task) and hand the wrapper to `run_stages`."""

    def collect(self) -> list[JobEvent]:
        """Stage 1: apply the clusters' events and finished migrations; returns the events."""
        ...

    def cancel(self) -> int:
        """Stage 1b: carry out the cancels asked for; returns how many jobs were cancelled."""
        ...

    def snapshot(self) -> Snapshot:
        """Stage 2: the frozen view the policy decides on."""
        ...

    def decide(self, snapshot: Snapshot) -> Decision:
        """Stage 3: the policy's decision."""
        ...

    def assign(self, decision: Decision) -> tuple[list[Placement], list[Placement]]:
        """Stage 4: record the decision; returns (placements to migrate first, to submit now)."""
        ...

    def migrate(self, placements: list[Placement]) -> int:
        """Stage 5a: start the copies; returns how many."""
        ...

    def submit(self, placements: list[Placement]) -> tuple[int, int]:
        """Stage 5b: submit; returns (submitted, refused)."""
        ...

    def record_waiting(self, decision: Decision) -> int:
        """Stage 6: store why jobs wait; returns how many reasons changed."""
        ...


def run_stages(stages: RoundStages, dry_run: bool = False) -> RoundResult:
    """One round: every stage once, in order, each result handed to the next. A dry run takes the
    snapshot and decides, and stops there: it collects no event and records nothing."""
    timings: list[tuple[str, float]] = []

    def timed(name: str, stage: Callable[..., _T], *args: object) -> _T:
        start = time.perf_counter()
        out = stage(*args)
        timings.append((name, time.perf_counter() - start))
        return out

    events = [] if dry_run else timed("collect", stages.collect)
    cancelled = 0 if dry_run else timed("cancel", stages.cancel)
    snapshot = timed("snapshot", stages.snapshot)
    decision = timed("decide", stages.decide, snapshot)
    placed = migrating = refused = 0
    if not dry_run:
        to_migrate, to_submit = timed("assign", stages.assign, decision)
        migrating = timed("migrate", stages.migrate, to_migrate)
        placed, refused = timed("submit", stages.submit, to_submit)
        if snapshot.explain:
            timed("record_waiting", stages.record_waiting, decision)
    rejected = len(decision.rejections)
    return RoundResult(
        time=snapshot.now,
        events=len(events),
        placed=placed,
        migrating=migrating,
        rejected=rejected,
        submit_refused=refused,
        pending_after=len(snapshot.pending) - (0 if dry_run else placed + migrating + rejected),
        solver=decision.solver,
        pending=len(snapshot.pending),
        decided=len(decision.placements),
        dry_run=dry_run,
        cancelled=cancelled,
        stage_s=tuple(timings),
    )


class Scheduler:
    """Runs rounds of one policy against one gateway, recording every transition in the store.

    With `transfers` and `migrator`, a job placed on a cluster other than the one
    holding its image and data first migrates there (holding no GPU meanwhile) and
    is queued again at the destination; without them, location is ignored.

    Everything it works with is given at construction, as the composition root (cpn.bootstrap) builds it:
    ports already wrapped, `on_decision` and `cluster_book` among them; nothing is set on it afterwards.
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
        lease: Callable[[], SchedulerLease | None] | None = None,
        forecast: bool = True,
        forecast_share: float | None = None,
        teams: Teams | None = None,
        on_decision: Callable[[Snapshot, Decision], None] | None = None,
        cluster_book: Callable[[], bool] | None = None,
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
        """Ask the policy why jobs wait at most once per this many seconds of wall time, as the clock's
        `monotonic` reads it (0: every round).
        Explaining costs time in proportion to the queue; a replay throttles it, the live service does not."""
        self._lease = lease
        self.forecaster: Forecaster | None = (
            Forecaster(looked_forward_with(policy), max_share=forecast_share) if forecast else None
        )
        """Looks forward each round to predict when every waiting job starts (cpn.engine.forecast), taking at
        most `forecast_share` of the wall time when given (the live service); None: only the policy's own
        plan predicts starts."""
        self.teams = teams
        """Teams, quotas and weights the policy orders and limits by (Snapshot.teams); None = no teams."""
        self.on_decision = on_decision
        """Called with each round's snapshot and final decision (a benchmark records the predictions)."""
        self.cluster_book = cluster_book
        """Called first in every round: brings the cluster set up to the store's (cpn.adapters.clusters
        ClusterBook.refresh); True if it changed (transfer times are worked out anew). None: a fixed set."""
        self._explained_at = -math.inf
        self._running: dict[str, RunningJob] = {}
        """job_id -> predicted end and cards of each running job (bounded by the jobs running)."""
        self.restart_s = RESTART_S
        """Seconds a resumed run restores its checkpoint before training (RESTART_S)."""
        self._left: Mapping[str, float] = {}
        """job_id -> fraction of its work left at the checkpoint it was preempted at, for each preempted job
        not ended, as the store had it at the latest snapshot (JobStore.saved_progress): its estimates while
        queued, and its run's end, count only that."""
        self._card_gb: dict[tuple[str, str], float] = {}
        """(cluster, node) -> GB per card, from the latest inventory (bounded by the node count)."""
        self.queue = QueueView(store)
        self._estimates: dict[str, Mapping[str, Estimate]] = {}
        self._exclusive: set[str] = set()
        """Sharing jobs the estimates say to explore: they run on whole cards (`seen_spec`)."""
        self._estimated_types: tuple[str, ...] = ()
        self._transfer_rows: dict[str, Mapping[str, float]] = {}
        self._transfer_from: dict[str, frozenset[str]] = {}
        """job_id -> the clusters holding its payload that its cached transfer row was worked out from."""
        self._copying: dict[str, Copy] = {}
        """job_id -> each copy in flight, as the store had them at the latest snapshot or collect
        (JobStore.copies): the cards it is to run on, held in the snapshot until the copy ends and the job is
        submitted to them."""
        self._facts_at = -1
        """The store position (QueueView.seen) `_left` and `_copying` were read at."""
        self._copies_here: set[str] = set()
        """Jobs whose copy this process's migrator makes (started or gone on with, and not reported done):
        a copy the store has and this set lacks is gone on with when the scheduler settles (`reconcile`)."""
        self._copies_done: list[MigrationDone] = []
        """Finished copies reported by the migrator and not applied yet (kept across a failed round)."""
        self._unsettled = False
        """Whether a round failed part-way: it may have left jobs `assigned` (or `migrating`) that it never
        submitted; the next round settles them first (`collect`), as a restart would (`reconcile`)."""
        self._waiting_written: dict[str, Waiting] = {}
        """job_id -> the waiting reason last written to the store, so unchanged ones are not rewritten;
        forgotten when the job leaves the queue (which clears the stored reason), so it gets one again
        in the round it comes back (a migration's end, a refused submission, an OOM kill)."""
        self._unvetted: dict[str, None] | None = None
        """Queued jobs no recorded decision has seen yet (Snapshot.fresh), in arrival order; None = all
        of them (at start, and after the nodes changed). Emptied when a decision is recorded (`assign`),
        so a dry run's decision vets nothing for good."""
        self._node_set: tuple[Node, ...] = ()
        """The nodes of the latest inventory, to tell when they changed."""

    @property
    def lease(self) -> SchedulerLease | None:
        """The store's scheduler lease it acts under now, as `lease` (given to it) reads it: its service's,
        which a standby takes later and a leader that lost it lets go; None where no other process schedules
        the store."""
        return None if self._lease is None else self._lease()

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
            if self._deleted_on_purpose(event):  # the run it stopped, not the job: queued or running again
                continue
            if _oom_killed(event) and self._replan_oom(event):
                continue
            self._move(
                event.job_id,
                _EVENT_STATE[event.kind],
                reason=event.reason,
                at=event.time,
                gpu_mem_gb=event.gpu_mem_gb,
                log_tail=event.log_tail,
                cause=Cause.OOM_KILLED if _oom_killed(event) else Cause.NONE,
            )

    def _deleted_on_purpose(self, event: JobEvent) -> bool:
        """Whether `event` ends a run cpn deleted (reason DELETED_REASON) after recording what that meant
        for the job: a move off its cluster (queued again by a preemption or a lost cluster, or cancelled)
        at or after the event's time, as the store's history has it. That end is not the job's, which may
        run again by now; a restarted simulator, replaying its journal, reports it again, and it is the
        same. A deleted run whose move was never recorded (a stop between the two) ends the job."""
        if event.reason != DELETED_REASON:
            return False
        try:
            history = self.store.history(event.job_id)
        except UnknownJob:
            return False
        off = (JobState.QUEUED, JobState.CANCELLED)
        return any(t.from_state in ON_CLUSTER and t.to_state in off and t.time >= event.time for t in history)

    def _retries(self, job_id: str, cause: Cause) -> int:
        """How many of the job's recorded transitions were for `cause` (OOM kills, failed copies), counted
        from the cause stored with each transition; 0 for a job the store does not know."""
        try:
            return sum(t.cause == cause for t in self.store.history(job_id))
        except UnknownJob:
            return 0

    def _replan_oom(self, event: JobEvent) -> bool:
        """Queue an OOM-killed job again, needing more GPU memory per card than the card it died on,
        unless it was killed `oom_retries` times already; returns whether it was queued again."""
        try:
            record = self.store.get(event.job_id)
        except UnknownJob:
            return False
        if record.state not in (JobState.SUBMITTED, JobState.RUNNING):
            return False  # already reflected (a restarted gateway reporting again)
        if self._retries(event.job_id, Cause.OOM_KILLED) >= self.oom_retries:
            return False
        card_gb = self._card_gb.get((record.cluster or "", record.node or ""))
        sharing = is_sharing(seen_spec(record.spec, whole_cards=event.job_id in self._exclusive))
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
            cause=Cause.OOM_KILLED,
        )
        return True

    def apply_migrations(self, done: list[MigrationDone]) -> None:
        """A finished copy submits its job where the copy went, on the cards its assignment held meanwhile
        (see `_hold_copying`), running the copied image, so a job goes where its image went; a refusal
        queues it again there (`submit`), its payload now held there as well as where it was. A failed
        copy queues the job again where it was, with the reason (the policy may pick another cluster or
        retry), until the `MAX_MIGRATION_FAILURES`th failure fails the job. A copy whose job is no longer
        migrating (cancelled, or settled by a restart meanwhile) changes nothing."""
        for m in done:
            copying = self._copying.get(m.job_id)
            self._running.pop(m.job_id, None)  # its held cards' predicted end: worked out again once it runs
            if self._state(m.job_id) != JobState.MIGRATING:
                pass  # settled meanwhile: nothing to apply
            elif m.ok and copying is not None:
                if copying.placement.cluster == m.cluster:
                    spec = self._copied_spec(copying)
                    spec = replace(spec, image=m.image) if m.image else spec
                    self._submit_one(spec, copying.placement, copied=m)
            elif m.ok:
                # a copy the store has no record of (a store from before its copies were kept): the job
                # chooses again
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
                failures = self._retries(m.job_id, Cause.MIGRATION_FAILED)
                state = JobState.FAILED if failures + 1 >= MAX_MIGRATION_FAILURES else JobState.QUEUED
                self._move(m.job_id, state, reason=reason, at=m.time, cause=Cause.MIGRATION_FAILED)
            # settled: a round that failed before these lines sees it again
            self._copying.pop(m.job_id, None)
            self._copies_here.discard(m.job_id)

    def _state(self, job_id: str) -> JobState | None:
        """The job's state in the store; None for a job it does not know."""
        try:
            return self.store.get(job_id).state
        except UnknownJob:
            return None

    def collect(self) -> list[JobEvent]:
        """Stage 1: apply the clusters' events and finished migrations; returns the events."""
        if self.lease is not None:
            self.lease.check()
        if self._unsettled:  # before anything else: what the failed round left between two transitions
            self.reconcile(self.gateway.held_jobs())
            self._unsettled = False
        if self.cluster_book is not None and self.cluster_book():
            self._transfer_from.clear()
            self._update_transfers(self.queue.pending())
        events = self.gateway.poll_events()
        self.apply_events(events)
        if self.migrator is not None:
            # Copies the migrator reported stay here until applied: a round that fails half-way (the
            # store unreachable) applies the rest next round instead of losing them.
            self._copies_done.extend(self.migrator.poll())
            if self._copies_done:  # the copies as the store has them now: the spec and cards of each
                self._copying = {c.placement.job_id: c for c in self.store.copies()}
            while self._copies_done:
                self.apply_migrations(self._copies_done[:1])
                del self._copies_done[0]
        return events

    def cancel(self) -> int:
        """Stage 1b: carry out the cancels asked for jobs on a cluster (cpn.store.JobStore.cancel): delete
        each from its cluster through the gateway, then record it cancelled, saying who asked and when;
        returns how many. Its end, which the gateway reports next, is then no transition of the job's, so
        a cancelled run never counts as a completed one.

        It runs before the snapshot, so a job queued again meanwhile (an OOM kill, a finished copy, a
        refused submission) is cancelled before a policy can place it; a job assigned in the round its
        cancel came in is submitted in that round and deleted by the next. A delete the cluster refuses
        is logged and tried again next round.
        """
        cancelled = 0
        for request in self.store.cancel_requests():
            try:
                self.gateway.delete(request.job_id)
            except Exception:  # one cluster's failure must not hold up the others' cancels
                log.exception("could not delete cancelled job %s; retrying next round", request.job_id)
                continue
            cancelled += self._move(
                request.job_id,
                JobState.CANCELLED,
                reason=f"cancelled by {request.requested_by} (asked at {stamp(request.requested_at)})",
            )
        return cancelled

    def reconcile(self, held: frozenset[str]) -> Reconciled:
        """Settle, at start-up and after a failed round, jobs a stop left between two transitions.

        `held`: the ids of jobs the clusters hold for cpn (submitted, running or finished but not yet
        reported). An assigned job the clusters hold was submitted before the stop: it is recorded as such;
        one they do not hold was never submitted and is queued again. A migrating job the clusters hold was
        submitted as its copy ended. One whose copy the store has (cpn.store.facts.CopyStarted) and this
        process's migrator is not making is gone on with from when it began: it ends when it would have, on
        the cards held for it, and nothing is copied twice. One whose copy the store lacks is queued again
        (the copy starts over if the policy still picks that cluster). Events the clusters report
        afterwards move the rest along as usual.
        """
        submitted, requeued, resumed = [], [], []
        copies = {c.placement.job_id: c for c in self.store.copies()}
        for record in self.store.jobs([JobState.ASSIGNED, JobState.MIGRATING]):
            job_id = record.job_id
            if job_id in held:  # assigned, or copied, and submitted just before the stop
                self.store.transition(job_id, JobState.SUBMITTED, reason="restart: found on the cluster")
                submitted.append(job_id)
            elif record.state == JobState.ASSIGNED:
                self.store.transition(job_id, JobState.QUEUED, reason=RESTART_UNSUBMITTED)
                requeued.append(job_id)
            elif job_id in self._copies_here:
                continue
            elif job_id in copies and self.migrator is not None:
                copy = copies[job_id]
                self.migrator.start(
                    self._copied_spec(copy), copy.source, copy.placement.cluster, started_at=copy.started_at
                )
                self._copies_here.add(job_id)
                resumed.append(job_id)
            else:
                self.store.transition(job_id, JobState.QUEUED, reason=RESTART_MIGRATION_LOST)
                requeued.append(job_id)
        return Reconciled(tuple(submitted), tuple(requeued), tuple(resumed))

    def forget_estimates(self) -> None:
        """Estimate every queued job again at the next snapshot (a job's estimates are otherwise kept from
        when it entered the queue): the estimate source serves a new model, a champion that moved."""
        self._estimated_types = ()

    def _update_estimates(self, entering: tuple[JobSpec, ...], nodes: tuple[NodeState, ...]) -> None:
        if self.estimator is None:
            return
        gpu_types = tuple(sorted({n.node.gpu_type for n in nodes}))
        if gpu_types != self._estimated_types:
            self._estimates.clear()
            self._estimated_types = gpu_types
            entering = self.queue.pending()
        # A service runs until deleted: it has no runtime to estimate, and is placed without one.
        new = tuple(job for job in entering if job.job_id not in self._estimates and not job.is_service)
        if new:
            self._estimates.update(self.estimator.estimates(new, gpu_types))
            for job in new:
                if is_sharing(job) and any(e.explore for e in self._estimates.get(job.job_id, {}).values()):
                    self._exclusive.add(job.job_id)

    def _spec(self, job_id: str) -> JobSpec:
        """The spec to place and submit (`seen_spec`): as queued (a job moved while running: as stored), on
        whole cards for a job to explore, with its team's checkpoint interval."""
        spec = self.queue.spec(job_id) if self.queue.holds(job_id) else self.store.get(job_id).spec
        return seen_spec(spec, whole_cards=job_id in self._exclusive, teams=self.teams)

    def _copied_spec(self, copy: Copy) -> JobSpec:
        """The spec a job whose copy is in flight was placed by, and is submitted with once it ends (`_spec`
        as it was when the copy began: the store keeps whether it runs on whole cards)."""
        return seen_spec(copy.record.spec, copy.record, copy.whole_cards, self.teams)

    def _holders(self, job_id: str) -> frozenset[str]:
        """Clusters holding a queued job's image and data: where they are now (its `location`) and its
        source cluster (a copy leaves them there too); none for a job with no location. Copies before
        the latest are not counted: a copy is followed by the job's submission where it went, so a job
        is copied again only after a refusal or a failed run there."""
        if self.queue.holds(job_id):
            location, source = self.queue.location(job_id), self.queue.spec(job_id).source_cluster
        else:  # moved while running (cpn.policies.rebalance): its payload is where it ran
            record = self.store.get(job_id)
            location, source = record.location or record.cluster, record.spec.source_cluster
        if location is None:
            return frozenset()
        return frozenset(c for c in (location, source) if c)

    def _update_transfers(self, entering: tuple[JobSpec, ...]) -> None:
        if self.transfers is None:
            return
        for job in entering:
            holders = self._holders(job.job_id)
            if not holders:
                self._transfer_rows.pop(job.job_id, None)
            elif self._transfer_from.get(job.job_id) != holders:
                self._transfer_from[job.job_id] = holders
                self._transfer_rows[job.job_id] = self.transfers.row(job, *holders)

    def snapshot(self) -> Snapshot:
        """The frozen view the policy decides on.

        Estimates and transfer times are computed once per job (and location), when
        it enters the queue, and cached; the snapshot's mappings may hold entries of
        jobs no longer pending.
        """
        entering = self.queue.refresh()
        self._prune()
        if self.queue.seen != self._facts_at:  # facts change only with transitions
            self._left = self.store.saved_progress()
            self._copying = {c.placement.job_id: c for c in self.store.copies()}
            self._facts_at = self.queue.seen
        nodes = self.gateway.inventory()
        node_set = tuple(state.node for state in nodes)
        if node_set != self._node_set:
            self._node_set, self._unvetted = node_set, None
        elif self._unvetted is not None:
            self._unvetted.update(dict.fromkeys(job.job_id for job in entering))
        for state in nodes:
            self._card_gb[(state.node.cluster, state.node.name)] = state.node.gpu_memory_gb
        if self.node_load is not None:
            nodes = self.node_load(nodes)
        nodes = self._hold_copying(nodes)
        self._update_estimates(entering, nodes)
        self._update_transfers(entering)
        pending = self.queue.pending()
        if self._exclusive:
            pending = tuple(seen_spec(job, whole_cards=job.job_id in self._exclusive) for job in pending)
        return Snapshot(
            now=self.clock.now(),
            pending=pending,
            nodes=nodes,
            estimates=self._queued_estimates(),
            transfer_s=MappingProxyType(self._transfer_rows),
            cpu_threshold=self.cpu_threshold,
            restart_s=self.restart_s,
            shapes=self.queue.shapes(),
            lines=self.queue.lines(),
            explain=self._explain_now(),
            running=self._running_jobs(nodes),
            teams=self.teams,
            fresh=None
            if self._unvetted is None
            else tuple(self._spec(j) for j in self._unvetted if self.queue.holds(j)),
        )

    def _queued_estimates(self) -> Mapping[str, Mapping[str, Estimate]]:
        """The cached estimates, a preempted job's counting only the work its checkpoint left (`_left`) and
        the restart: what its next run takes."""
        resumed = {
            job_id: {
                gpu: replace(e, runtime_s=self.restart_s + left * e.runtime_s)
                for gpu, e in self._estimates[job_id].items()
            }
            for job_id, left in self._left.items()
            if job_id in self._estimates and self.queue.holds(job_id)
        }
        return MappingProxyType(ChainMap(resumed, self._estimates) if resumed else self._estimates)

    def _hold_copying(self, nodes: tuple[NodeState, ...]) -> tuple[NodeState, ...]:
        """`nodes` with the cards and CPU of the jobs being copied to them taken, as if those jobs ran
        there: no other job takes them meanwhile, and the job is submitted to them when its copy ends.
        A sharing job's card is not held (the cluster picks which card it shares when it is submitted)."""
        held = [(self._copied_spec(c), c.placement) for c in self._copying.values()]
        return hold_cards(nodes, [(spec, p) for spec, p in held if not is_sharing(spec)])

    def _running_jobs(self, nodes: tuple[NodeState, ...]) -> Mapping[str, RunningJob]:
        """Predicted end and whole cards of each job running on `nodes`, worked out once per job from
        the store (when it started, where) and the estimates (how long it runs there): the only record
        of running jobs a policy gets, so every running job is in it. A service's end is infinite."""
        running = dict.fromkeys(job_id for state in nodes for job_id in state.running)
        for job_id in [j for j in self._running if j not in running]:
            del self._running[job_id]
        new = [job_id for job_id in running if job_id not in self._running]  # inventory order: replays repeat
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
        spec = seen_spec(record.spec, whole_cards=job_id in self._exclusive, teams=self.teams)
        cards = () if is_sharing(spec) else tuple((f"{record.cluster}/{n}", c) for n, c in record.placement)
        started = record.updated_at if record.state == JobState.RUNNING else self.clock.now()
        known = {
            "started": started,
            "priority": spec.priority,
            "checkpoint_interval_s": spec.checkpoint_interval_s,
            "preemptible": spec.preemptible,
        }
        gpu = gpu_of.get((record.cluster or "", record.node or ""))
        if spec.is_service:  # runs until deleted: its cards do not come back
            return RunningJob(math.inf, cards, gpu_type=gpu, **known)
        left = self._left.get(job_id, 1.0)
        restart = self.restart_s if left < 1.0 else 0.0
        estimates = self._whole_estimates(spec, gpu, self._estimated_types)
        estimate = estimates.get(gpu) if gpu else None
        end = started + restart + left * estimate.runtime_s if estimate is not None else math.inf
        if not self.rebalances:
            return RunningJob(end, cards, left=left, restart_s=restart, gpu_type=gpu, **known)
        transfer = {}
        if self.transfers is not None and record.cluster:
            transfer = self.transfers.row(spec, record.location or record.cluster)
        return RunningJob(
            end,
            cards,
            left=left,
            restart_s=restart,
            estimates=estimates,
            gpu_type=gpu,
            spec=spec,
            transfer_s=transfer,
            **known,
        )

    def _whole_estimates(
        self, spec: JobSpec, gpu: str | None, gpu_types: tuple[str, ...]
    ) -> Mapping[str, Estimate]:
        """GPU type -> estimate of the whole job: those the policy placed it by while cached, else asked
        again (pruned since, or started before a restart) for its own type, or for every type when the policy
        moves running jobs."""
        cached = self._estimates.get(spec.job_id)
        if cached is not None and (gpu is None or gpu in cached):
            return cached
        if self.estimator is None or gpu is None:
            return cached or {}
        asked = gpu_types if self.rebalances else (gpu,)
        return self.estimator.estimates((spec,), asked).get(spec.job_id, {})

    @property
    def rebalances(self) -> bool:
        """Whether the policy moves running jobs (cpn.policies.base.Traits.rebalances)."""
        return self.policy.traits.rebalances

    def _explain_now(self) -> bool:
        wall = self.clock.monotonic()
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
            self._waiting_written,
        ):
            if len(cache) > 2 * queued + 64:
                for job_id in [j for j in cache if not self.queue.holds(j)]:
                    del cache[job_id]
        if len(self._exclusive) > 2 * queued + 64:
            self._exclusive = {j for j in self._exclusive if self.queue.holds(j)}

    def decide(self, snapshot: Snapshot) -> Decision:
        """Stage 3: the policy's decision, with a waiting reason for every queued job it does not start (in
        rounds that explain) and, with a `forecaster`, a predicted start for each (cpn.engine.forecast)."""
        if not snapshot.pending and not (snapshot.running and self.rebalances):
            return Decision()
        decision = self.policy.decide(snapshot)
        if snapshot.explain:
            moving = {p.job_id for p in decision.placements} | {r.job_id for r in decision.rejections}
            explained = {w.job_id for w in decision.waiting}
            missing = tuple(
                Waiting(job.job_id, "queue-order", UNEXPLAINED)
                for job in snapshot.pending
                if job.job_id not in moving and job.job_id not in explained
            )
            if missing:
                decision = replace(decision, waiting=decision.waiting + missing)
        if self.forecaster is not None:
            decision = self.forecaster.apply(snapshot, decision)
        if self.on_decision is not None:
            self.on_decision(snapshot, decision)
        return decision

    def assign(self, decision: Decision) -> tuple[list[Placement], list[Placement]]:
        """Stage 4: record rejections and assignments; returns (placements that must first migrate their
        job's image and data, placements that can be submitted now)."""
        if self.lease is not None:  # the decide stage may have outlasted it
            self.lease.check()
        self._unvetted = {}
        self.preempt(decision)
        for job_id in [*(r.job_id for r in decision.rejections), *(p.job_id for p in decision.placements)]:
            self._waiting_written.pop(job_id, None)
        # A job cancelled since the snapshot (cpn.store.JobStore.cancel) is neither rejected nor placed.
        for rejection in decision.rejections:
            self._move(rejection.job_id, JobState.SCHEDULE_FAILED, reason=self._rejection_reason(rejection))
        to_migrate, to_submit = [], []
        for placement in decision.placements:
            if not self._move(
                placement.job_id,
                JobState.ASSIGNED,
                reason=EXCLUSIVE_REASON if placement.job_id in self._exclusive else "",
                cluster=placement.cluster,
                node=placement.node,
                placement=placement.nodes,
            ):
                continue
            holders = self._holders(placement.job_id)
            if self.migrator is not None and holders and placement.cluster not in holders:
                to_migrate.append(placement)
            else:
                to_submit.append(placement)
        return to_migrate, to_submit

    def preempt(self, decision: Decision) -> int:
        """Carry out the decision's preemptions (cpn.policies.preemption): delete each job through the
        gateway with its grace period, then queue it again, recording the reason, the cards reclaimed and
        the GPU-hours lost (cause `preempted`). The cluster keeps the progress of its last checkpoint, and
        the gateway gives its next run a new name generation, so nothing runs twice; the fraction of its
        work that checkpoint left is stored with the move (cpn.store.facts.SavedProgress). A job that ended
        meanwhile, or whose delete the cluster refuses, is left as it is; returns how many were stopped."""
        stopped = 0
        for p in decision.preemptions:
            if self._state(p.job_id) not in (JobState.SUBMITTED, JobState.RUNNING):
                continue
            try:
                self.gateway.delete(p.job_id, grace_s=p.grace_s)
            except Exception:  # one cluster's failure must not hold up the round
                log.exception("could not preempt %s; it keeps running", p.job_id)
                continue
            left = self._left_at_checkpoint(p.job_id)
            cards = ", ".join(f"{key} x{n}" for key, n in p.cards)
            stopped += self._move(
                p.job_id,
                JobState.QUEUED,
                reason=f"preempted for {p.for_job}: {p.reason}; cards {cards}; "
                f"{p.lost_gpu_hours:.3f} GPU-hours lost since its last checkpoint",
                cause=Cause.PREEMPTED,
                fact=None if left is None else SavedProgress(left),
            )
            self._running.pop(p.job_id, None)
        return stopped

    def _rejection_reason(self, rejection: Rejection) -> str:
        """The policy's reason; for a job rejected for want of estimates that its source could not make,
        NO_ESTIMATE followed by the source's why (so the owner learns what to fix, and rejections still
        count by the NO_ESTIMATE prefix)."""
        row = self._estimates.get(rejection.job_id)
        if rejection.reason == NO_ESTIMATE and isinstance(row, NoEstimates):
            return f"{NO_ESTIMATE}: {row.reason}"
        return rejection.reason

    def _left_at_checkpoint(self, job_id: str) -> float | None:
        """The fraction of a job's work its run, stopped now, leaves at its last checkpoint, which its next
        run starts from; None when unknown (no checkpoints: the progress saved before, if any, stands)."""
        running = self._running.get(job_id)
        if running is None or running.gpu_type is None or not running.checkpoint_interval_s:
            return None
        if running.gpu_type not in running.estimates:
            whole = self._whole_estimates(self._spec(job_id), running.gpu_type, (running.gpu_type,))
            running = replace(running, estimates=whole)
        return running.left_at_checkpoint(self.clock.now(), running.gpu_type)

    def migrate(self, placements: list[Placement]) -> int:
        """Stage 5a: start copying each job's image and data to its chosen cluster, from the cluster
        holding them that copies soonest; returns how many. The job's cards are held until the copy ends
        (`_hold_copying`), and then it is submitted to them (`apply_migrations`)."""
        for placement in placements:
            holders = self._holders(placement.job_id)
            spec = self._spec(placement.job_id)
            src = self._copy_source(spec, holders, placement.cluster)
            self.store.transition(
                placement.job_id,
                JobState.MIGRATING,
                reason=f"{src} -> {placement.cluster}",
                fact=CopyStarted(src, whole_cards=placement.job_id in self._exclusive),
            )
            assert self.migrator is not None, "placements to migrate come only with a migrator"
            self._copies_here.add(placement.job_id)
            self.migrator.start(spec, src, placement.cluster)
        return len(placements)

    def _copy_source(self, spec: JobSpec, holders: frozenset[str], dst: str) -> str:
        """The cluster among `holders` to copy `spec`'s payload from to `dst`: the soonest by the transfer
        estimate, else where it is now."""
        if self.transfers is not None:
            src, _ = self.transfers.nearest(spec, holders, dst)
            if src is not None:
                return src
        return self.queue.location(spec.job_id) or ""

    def submit(self, placements: list[Placement]) -> tuple[int, int]:
        """Stage 5b: submit each placed job through the gateway; returns (submitted, refused).

        The job is `assigned` in the store before the gateway is called and `submitted` after, so a
        crash in between is settled by `reconcile` against what the cluster holds. A transient refusal
        queues the job again with the cluster's reason; a final one (the API server refuses the
        manifest) fails it with that reason.
        """
        placed = refused = 0
        for placement in placements:
            if self._submit_one(self._spec(placement.job_id), placement):
                placed += 1
            else:
                refused += 1
        return placed, refused

    def _submit_one(self, spec: JobSpec, placement: Placement, copied: MigrationDone | None = None) -> bool:
        """Submit one job as placed and record it submitted; a transient refusal queues it again with the
        cluster's reason, a final one fails it. `copied`: the copy that just brought its payload to the
        placement's cluster, recorded with the outcome (where the payload is, the image pinned there).
        Returns whether the cluster took it."""
        learned: dict = {}
        head = ""
        if copied is not None:
            learned = {"location": copied.cluster, "image": copied.image or None}
            head = _migrated(copied)
        generation = self._retries(spec.job_id, Cause.PREEMPTED)  # from the history: survives a restart
        if generation:
            spec = replace(spec, generation=generation)
        try:
            self.gateway.submit(spec, placement)
        except SubmitRejected as exc:
            state = JobState.QUEUED if exc.transient else JobState.FAILED
            reason = f"{head}; submit refused: {exc}" if head else f"submit refused: {exc}"
            self.store.transition(placement.job_id, state, reason=reason, **learned)
            if exc.transient:
                self._record([Waiting(placement.job_id, "refused", f"the cluster refused it: {exc}")])
            return False
        self.store.transition(placement.job_id, JobState.SUBMITTED, reason=head, **learned)
        return True

    def record_waiting(self, decision: Decision) -> int:
        """Stage 6: store the waiting reasons that changed since last written; returns how many."""
        return self._record(decision.waiting)

    def _record(self, waiting: Sequence[Waiting]) -> int:
        """Store the waiting reasons among `waiting` that changed since last written; returns how many."""
        changed = [w for w in waiting if self._waiting_written.get(w.job_id) != w]
        self.store.set_waiting(changed)
        for w in changed:
            self._waiting_written[w.job_id] = w
        return len(changed)

    def round(self) -> RoundResult:
        """Every stage once (`run_stages`): collect, cancel, snapshot, decide, assign, migrate, submit,
        record. A round that raises, but for LeaseLost (this process schedules no more), leaves the next
        one to settle the jobs it assigned and did not submit (`_unsettled`)."""
        try:
            return run_stages(self)
        except LeaseLost:
            raise
        except BaseException:
            self._unsettled = True
            raise
