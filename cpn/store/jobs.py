"""Jobs and their transitions in the store: submissions, moves through the state machine (with the
scheduler's facts they create or end, cpn.store.facts), cancels, waiting reasons, and every read of them.

Times come from the injected Clock, so the simulator records simulated time and tests record a fake one.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Executable,
    bindparam,
    case,
    false,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from cpn.clock import Clock
from cpn.decisions import Placement, Waiting
from cpn.jobs import FINISHED, ON_CLUSTER, Cause, IllegalTransition, JobSpec, JobState, check_transition
from cpn.store import facts
from cpn.store.database import StoreDatabase
from cpn.store.facts import COPIES, SAVED_PROGRESS, Fact
from cpn.store.lease import FENCED, Fence
from cpn.store.records import (
    CancelOutcome,
    CancelRequest,
    Change,
    Copy,
    JobConflict,
    JobRecord,
    SubmitOutcome,
    Transition,
    UnknownJob,
    decode,
    differing_fields,
    encode,
    record,
    transition,
    transition_row,
)
from cpn.store.schema import CANCEL_REQUESTS, JOBS, TRANSITIONS

_JOB_COLUMNS = [c for c in JOBS.c if c.name not in ("seq", "job_id")]
"""The columns `records.record` reads: all but the position (the id is in the spec)."""
_TRANSITION_COLUMNS = [c for c in TRANSITIONS.c if c.name not in ("seq", "term")]
_IN_CHUNK = 500
"""Ids per `IN (...)` query, well under SQLite's limit on bound parameters."""

_SPECS_OF = select(JOBS.c.job_id, JOBS.c.spec).where(JOBS.c.job_id.in_(bindparam("ids", expanding=True)))
_SPEC_OF = select(JOBS.c.job_id, JOBS.c.spec).where(JOBS.c.job_id == bindparam("job_id"))
"""One job's spec: a submission of one job (a client posting one at a time) skips expanding an IN list."""
_PREDICTED = ("predicted_start", "predicted_end", "start_low", "start_high", "moved")
"""A waiting job's latest prediction: kept while it stays queued, cleared when it leaves the queue."""
_JOB = select(*_JOB_COLUMNS).where(JOBS.c.job_id == bindparam("job_id"))
_PLACED = select(
    JOBS.c.state,
    JOBS.c.cluster,
    JOBS.c.node,
    JOBS.c.placement,
    JOBS.c.location,
    JOBS.c.image,
    JOBS.c.needs_more_than_gb,
    JOBS.c.wait_code,
    JOBS.c.wait_detail,
    *(JOBS.c[name] for name in _PREDICTED),
).where(JOBS.c.job_id == bindparam("job_id"))
_MOVE = (
    update(JOBS)
    .where(JOBS.c.job_id == bindparam("m_job"))
    .values(
        {
            name: bindparam(f"m_{name}")
            for name in (
                "state",
                "cluster",
                "node",
                "location",
                "image",
                "needs_more_than_gb",
                "updated_at",
                "placement",
                "wait_code",
                "wait_detail",
                *_PREDICTED,
            )
        }
    )
)
_NEW_JOB = ("job_id", "spec", "state", "location", "submitted_at", "updated_at")
"""The columns a submission writes of a new job (the rest start NULL)."""
_NEW_ROW = {name: bindparam(name) for name in _NEW_JOB}
_INSERT_JOB = insert(JOBS).values(_NEW_ROW)
_INSERT_TRANSITION = insert(TRANSITIONS).values(
    {c.name: bindparam(c.name) for c in TRANSITIONS.c if c.name != "seq"}
)
"""Both run on the driver (StoreDatabase.run), with every parameter given."""
_HISTORY = (
    select(*_TRANSITION_COLUMNS)
    .where(TRANSITIONS.c.job_id == bindparam("job_id"))
    .order_by(TRANSITIONS.c.seq)
)
_CHANGES = (
    select(
        TRANSITIONS.c.seq,
        TRANSITIONS.c.job_id,
        TRANSITIONS.c.to_state,
        JOBS.c.seq,
        JOBS.c.location,
        JOBS.c.image,
        JOBS.c.needs_more_than_gb,
        JOBS.c.submitted_at,
    )
    .select_from(TRANSITIONS.join(JOBS, TRANSITIONS.c.job_id == JOBS.c.job_id))
    .where(TRANSITIONS.c.seq > bindparam("after"))
    .order_by(TRANSITIONS.c.seq)
)
_SET_WAITING = (
    update(JOBS)
    .where(JOBS.c.job_id == bindparam("w_job"), JOBS.c.state == JobState.QUEUED.value)
    .values(
        wait_code=bindparam("w_code"),
        wait_detail=bindparam("w_detail"),
        predicted_start=bindparam("w_start"),
        first_predicted_start=func.coalesce(JOBS.c.first_predicted_start, bindparam("w_start")),
        predicted_end=bindparam("w_end"),
        start_low=bindparam("w_low"),
        start_high=bindparam("w_high"),
        moved=func.coalesce(func.nullif(bindparam("w_moved"), ""), JOBS.c.moved),
    )
)
_STATE = select(JOBS.c.state).where(JOBS.c.job_id == bindparam("job_id"))
_REQUESTED = select(CANCEL_REQUESTS.c.job_id).where(CANCEL_REQUESTS.c.job_id == bindparam("job_id"))


class JobTable:
    """The jobs and transitions of one store, with the store's clock and fence."""

    def __init__(self, database: StoreDatabase, clock: Clock, fence: Fence) -> None:
        self._database = database
        self._clock = clock
        self._fence = fence
        self._listeners: list[Callable[[], None]] = []
        self._insert_if_new = _insert_if_new(database.dialect)
        """A new job's row, left out if its id is stored already: one statement, no read before it; on
        PostgreSQL its entry into the queue too (one round trip), which `_with_entry` says."""
        self._with_entry = database.dialect == "postgresql"

    def submit(self, specs: Sequence[JobSpec]) -> list[SubmitOutcome]:
        """Queue new jobs, all or none, in the given order; one outcome per spec.

        A job whose id is stored already with identical content is reported as
        `already_exists` and left alone, so resubmitting a file is harmless. One
        whose content differs raises JobConflict, and nothing from the call is stored.
        """
        encoded = [(spec.job_id, encode(spec), spec) for spec in specs]
        now = self._clock.now()
        with self._database.write() as db:
            one = _new_job(*encoded[0], now) if len(encoded) == 1 else None
            entry = None if one is None else _entry(one["job_id"], now)
            if one is not None and self._database.changed(self._insert_if_new, one | _prefixed(entry)):
                new_jobs, outcomes = [one], [SubmitOutcome(one["job_id"], "created")]  # one new job: no read
                entered = self._with_entry
            else:
                new_jobs, outcomes = self._sort_out(db, encoded, now)
                entered = False
                if new_jobs:
                    self._database.run_many(_INSERT_JOB, new_jobs)
            if new_jobs and not entered:
                self._database.run_many(_INSERT_TRANSITION, [_entry(job["job_id"], now) for job in new_jobs])
        if new_jobs:
            for listener in self._listeners:
                listener()
        return outcomes

    def _sort_out(
        self, db: Connection, encoded: list[tuple[str, str, JobSpec]], now: float
    ) -> tuple[list[dict], list[SubmitOutcome]]:
        """The rows of the new jobs among `encoded` (id, canonical JSON, spec) and every one's outcome, in
        write transaction `db`; JobConflict for a stored id with different content."""
        known = self._stored_specs(db, [job_id for job_id, _, _ in encoded])
        new_jobs: list[dict] = []
        outcomes: list[SubmitOutcome] = []
        for job_id, text, spec in encoded:
            stored = known.get(job_id)
            if stored is None:
                known[job_id] = text
                new_jobs.append(_new_job(job_id, text, spec, now))
                outcomes.append(SubmitOutcome(job_id, "created"))
            elif stored == text:
                outcomes.append(SubmitOutcome(job_id, "already_exists"))
            else:
                raise JobConflict(job_id, differing_fields(stored, text))
        return new_jobs, outcomes

    def transition(
        self,
        job_id: str,
        new_state: JobState,
        *,
        reason: str = "",
        cluster: str | None = None,
        node: str | None = None,
        location: str | None = None,
        at: float | None = None,
        gpu_mem_gb: float | None = None,
        log_tail: str = "",
        placement: Sequence[tuple[str, int]] | None = None,
        image: str | None = None,
        needs_more_than_gb: float | None = None,
        cause: Cause = Cause.NONE,
        only_from: frozenset[JobState] | None = None,
        fact: Fact | None = None,
    ) -> None:
        """Move a job to `new_state` and record the move, atomically.

        Raises UnknownJob for an unknown id and cpn.jobs.IllegalTransition for a
        move the state machine forbids (nothing is written then). `cluster` and
        `node` set the job's placement; left out, the placement is kept, except
        that going back to `queued` (or to `schedule-failed`) clears it. `location`
        records that the job's image and data now sit in that cluster (after a migration).
        `at` is when it happened, for events reported after the fact (default: now).
        `gpu_mem_gb` is the peak GPU memory per card the cluster measured, on a run's end; `log_tail` the
        last lines of a failed run's pod log.
        `placement` is every (node, cards) of the gang (kept like `cluster`; cleared with it). Leaving
        `queued` clears the job's waiting reason and prediction. `image` is the reference to run from now
        on (a migration's copy, pinned by digest). `needs_more_than_gb` records an OOM kill's lesson: the job
        needs more GPU memory per card than this (the largest such lesson is kept). `cause` is what the
        move counts as (cpn.jobs.Cause), stored with it. `only_from` refuses the move (IllegalTransition)
        unless the job is in one of those states now. `fact` is a scheduler fact the move creates
        (cpn.store.facts: a preemption's saved progress, a migration's copy), written in the same transaction,
        which also removes the facts the move ends.
        """
        new_state = JobState(new_state)
        facts.check(fact, new_state)
        now = self._clock.now() if at is None else at
        with self._database.write() as db:
            row = db.execute(_PLACED, {"job_id": job_id}).first()
            if row is None:
                raise UnknownJob(job_id)
            old_state = JobState(row.state)
            check_transition(job_id, old_state, new_state)
            if only_from is not None and old_state not in only_from:
                raise IllegalTransition(f"job {job_id} is {old_state}, not {', '.join(sorted(only_from))}")
            fenced = new_state in FENCED and self._fence.term is not None
            if fenced:
                self._fence.check(db)
            gang = None if placement is None else json.dumps([[n, c] for n, c in placement])
            if new_state in (JobState.QUEUED, JobState.SCHEDULE_FAILED):
                cluster, node, gang = None, None, None
            else:
                cluster = row.cluster if cluster is None else cluster
                node = row.node if node is None else node
                gang = row.placement if gang is None else gang
            queued = new_state == JobState.QUEUED
            moved = {
                "state": new_state.value,
                "cluster": cluster,
                "node": node,
                "location": row.location if location is None else location,
                "image": row.image if image is None else image,
                "needs_more_than_gb": max(row.needs_more_than_gb or 0.0, needs_more_than_gb or 0.0),
                "updated_at": now,
                "placement": gang,
                "wait_code": row.wait_code if queued else None,
                "wait_detail": row.wait_detail if queued else None,
            } | {name: getattr(row, name) if queued else None for name in _PREDICTED}
            db.execute(_MOVE, {f"m_{name}": value for name, value in moved.items()} | {"m_job": job_id})
            self._database.run(
                _INSERT_TRANSITION,
                transition_row(
                    job_id, old_state, new_state, now, reason, cluster, node, gpu_mem_gb, log_tail, cause
                )
                | {"term": self._fence.term if fenced else None},
            )
            facts.record(db, job_id, old_state, new_state, now, fact)

    def _stored_specs(self, db: Connection, job_ids: list[str]) -> dict[str, str]:
        """Stored canonical specs of those of `job_ids` that exist, re-encoded by the current JobSpec, in
        write transaction `db` (one id, a client posting one job at a time: on the driver)."""
        if len(set(job_ids)) == 1:
            found = dict(self._database.run(_SPEC_OF, {"job_id": job_ids[0]}))
        else:
            found = _raw_specs(db, job_ids)
        return {job_id: encode(decode(text)) for job_id, text in found.items()}

    def cancel(self, job_id: str, by: str) -> CancelOutcome:
        """Cancel a job on behalf of `by` (who is recorded), atomically; UnknownJob for an unknown id.

        A job that is not on a cluster (queued, schedule-failed) is cancelled at once. One on a cluster
        (cpn.jobs.ON_CLUSTER) gets a cancel request, kept with the first requester and time, which the
        scheduler carries out (`cancel_requests`). A finished job is left as it is. Calling it again is
        harmless: the same outcome, nothing written twice.
        """
        off_cluster = frozenset(JobState) - FINISHED - ON_CLUSTER
        while True:
            try:
                self.transition(
                    job_id, JobState.CANCELLED, reason=f"cancelled by {by}", only_from=off_cluster
                )
                return CancelOutcome(job_id, "cancelled", JobState.CANCELLED)
            except IllegalTransition:
                pass  # finished, or on a cluster
            with self._database.write() as db:
                state = JobState(db.execute(_STATE, {"job_id": job_id}).scalar_one())
                if state in FINISHED:
                    return CancelOutcome(job_id, "finished", state)
                if state in ON_CLUSTER:
                    if db.execute(_REQUESTED, {"job_id": job_id}).first() is None:
                        db.execute(
                            insert(CANCEL_REQUESTS).values(
                                job_id=job_id, requested_by=by, requested_at=self._clock.now()
                            )
                        )
                    return CancelOutcome(job_id, "requested", state)
            # queued again between the two transactions (a requeue by the scheduler): cancel it now

    def cancel_requests(self) -> list[CancelRequest]:
        """Cancel requests of jobs that have not ended yet, oldest first (what the scheduler has to do)."""
        r = CANCEL_REQUESTS.c
        rows = self._database.read(
            select(r.job_id, r.requested_by, r.requested_at)
            .select_from(CANCEL_REQUESTS.join(JOBS, r.job_id == JOBS.c.job_id))
            .where(JOBS.c.state.not_in([s.value for s in FINISHED]))
            .order_by(r.requested_at, r.job_id)
        )
        return [CancelRequest(*row) for row in rows]

    def set_waiting(self, waiting: Sequence[Waiting]) -> None:
        """Record why each of these queued jobs waits, and its prediction, in one transaction.

        Not a transition: nothing is added to the history. A job that has left `queued` meanwhile
        is left alone. The first predicted start a job gets is kept for good; why its start moved is kept
        until it moves again (a Waiting whose `moved` is empty leaves the last reason).
        """
        if not waiting:
            return
        rows = [
            {
                "w_code": w.code,
                "w_detail": w.detail,
                "w_start": w.predicted_start,
                "w_end": w.predicted_end,
                "w_low": w.start_low,
                "w_high": w.start_high,
                "w_moved": w.moved,
                "w_job": w.job_id,
            }
            for w in waiting
        ]
        with self._database.write() as db:
            db.execute(_SET_WAITING, rows)

    def saved_progress(self) -> dict[str, float]:
        """job_id -> the fraction of its work left at the checkpoint it was last preempted at, for every
        preempted job that has not ended (cpn.facts.SavedProgress)."""
        return dict(self._database.read(select(SAVED_PROGRESS.c.job_id, SAVED_PROGRESS.c.work_left)))

    def copies(self) -> list[Copy]:
        """The copies in flight: every migrating job's, with its spec and the cards it was assigned, oldest
        first (cpn.facts.CopyStarted)."""
        c = COPIES.c
        rows = self._database.read(
            select(*_JOB_COLUMNS, c.source, c.started_at, c.whole_cards)
            .select_from(COPIES.join(JOBS, c.job_id == JOBS.c.job_id))
            .order_by(c.started_at, JOBS.c.seq)
        )
        out = []
        for row in rows:
            job = record(row[: len(_JOB_COLUMNS)])
            source, started_at, whole = row[len(_JOB_COLUMNS) :]
            (node, cards), *extra = job.placement
            placement = Placement(job.job_id, job.cluster or "", node, cards, tuple(extra))
            out.append(Copy(job, placement, source, started_at, bool(whole)))
        return out

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` after every committed `submit` that queued a new job (e.g. to wake a loop)."""
        self._listeners.append(listener)

    def get(self, job_id: str) -> JobRecord:
        """The job with this id; UnknownJob if there is none."""
        rows = self._database.read(_JOB, {"job_id": job_id})
        if not rows:
            raise UnknownJob(job_id)
        return record(rows[0])

    def jobs(self, states: Iterable[JobState] | JobState | None = None) -> list[JobRecord]:
        """Jobs in acceptance order, all of them or only those in `states` (one state or several)."""
        query = select(*_JOB_COLUMNS).order_by(JOBS.c.seq)
        if states is not None:
            wanted = [JobState(s).value for s in ([states] if isinstance(states, str) else states)]
            query = query.where(JOBS.c.state.in_(wanted))
        return [record(row) for row in self._database.read(query)]

    def page(
        self,
        *,
        states: Iterable[JobState] | None = None,
        namespaces: Iterable[str] | None = None,
        after: int = 0,
        limit: int = 100,
    ) -> tuple[list[JobRecord], int | None]:
        """At most `limit` jobs accepted after position `after`, in acceptance order, and the next position.

        `states` and `namespaces` (None: all) filter the jobs; the next position is
        None when no job is left. Lets the API list a large store in bounded pages.
        """
        query = select(JOBS.c.seq, *_JOB_COLUMNS).where(JOBS.c.seq > after)
        if states is not None:
            query = query.where(JOBS.c.state.in_([JobState(s).value for s in states]))
        if namespaces is not None:
            prefixes = [f"{ns}/" for ns in namespaces]
            query = query.where(or_(false(), *(func.substr(JOBS.c.job_id, 1, len(p)) == p for p in prefixes)))
        rows = self._database.read(query.order_by(JOBS.c.seq).limit(limit + 1))
        records = [record(row[1:]) for row in rows[:limit]]
        return records, (rows[limit - 1][0] if len(rows) > limit else None)

    def history(self, job_id: str) -> list[Transition]:
        """The job's transitions, oldest first (the first is its entry into `queued`); UnknownJob if none."""
        rows = self._database.read(_HISTORY, {"job_id": job_id})
        if not rows:
            raise UnknownJob(job_id)
        return [transition(row) for row in rows]

    def transitions_all(self) -> list[Transition]:
        """Every transition of every job, in the order they were recorded (for reports)."""
        rows = self._database.read(select(*_TRANSITION_COLUMNS).order_by(TRANSITIONS.c.seq))
        return [transition(row) for row in rows]

    def changes_since(self, after: int = 0) -> tuple[int, list[Change]]:
        """Transitions recorded after position `after`, oldest first, and the position to pass next time.

        Lets a scheduler keep its view of the queue current in time proportional
        to what changed, instead of re-reading every queued job each round.
        """
        rows = self._database.read(_CHANGES, {"after": after})
        if not rows:
            return after, []
        return rows[-1][0], [
            Change(job_id, JobState(state), order, loc, image, floor or None, accepted)
            for _, job_id, state, order, loc, image, floor, accepted in rows
        ]

    def terms(self) -> set[int]:
        """The scheduler terms assignments and submissions were recorded under (one per leader that wrote):
        what a test of takeovers counts."""
        term = TRANSITIONS.c.term
        return {t for (t,) in self._database.read(select(term).where(term.is_not(None)).distinct())}

    def jobs_on(self, cluster: str) -> list[str]:
        """Ids of the jobs on `cluster` (assigned to it, migrating to it, submitted or running there)."""
        with self._database.reading() as db:
            return on_cluster(db, cluster)

    def specs(self, job_ids: Sequence[str]) -> dict[str, JobSpec]:
        """The specs of those of `job_ids` that exist."""
        with self._database.reading() as db:
            return {job_id: decode(text) for job_id, text in _raw_specs(db, job_ids).items()}

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state; every state is present, zero included."""
        counts = dict.fromkeys(JobState, 0)
        for state, n in self._database.read(select(JOBS.c.state, func.count()).group_by(JOBS.c.state)):
            counts[JobState(state)] = n
        return counts

    def tally(self) -> list[tuple[JobState, str, str, int]]:
        """How many jobs are in each (state, namespace, waiting reason code; '' for none), in one GROUP BY:
        what cpn's own metrics publish (cpn.telemetry), cheap whatever the store's size."""
        slash = (func.instr if self._database.dialect == "sqlite" else func.strpos)(JOBS.c.job_id, "/")
        namespace = case((slash > 0, func.substr(JOBS.c.job_id, 1, slash - 1)), else_="").label("namespace")
        code = func.coalesce(JOBS.c.wait_code, "").label("code")
        rows = self._database.read(
            select(JOBS.c.state, namespace, code, func.count()).group_by(JOBS.c.state, "namespace", "code")
        )
        return [(JobState(state), namespace, code, n) for state, namespace, code, n in rows]


_ENTRY = ("to_state", "time", "reason", "log_tail", "cause")
"""The columns of a job's entry into the queue that are not NULL."""


def _insert_if_new(dialect: str) -> Executable:
    """The statement that writes one new job unless its id is stored already (parameters: its _NEW_JOB
    columns and its entry's, `e_`-prefixed). On PostgreSQL it writes the job's entry too (a data-modifying
    CTE; SQLite has none), so that its rowcount, 1 or 0, says whether the job was new on either database."""
    if dialect == "sqlite":
        return sqlite_insert(JOBS).values(_NEW_ROW).on_conflict_do_nothing(index_elements=["job_id"])
    job = (
        postgresql_insert(JOBS)
        .values(_NEW_ROW)
        .on_conflict_do_nothing(index_elements=["job_id"])
        .returning(JOBS.c.job_id)
        .cte("job")
    )
    entry = select(job.c.job_id, *(bindparam(f"e_{name}") for name in _ENTRY))
    return insert(TRANSITIONS).from_select(["job_id", *_ENTRY], entry)


def _entry(job_id: str, now: float) -> dict[str, Any]:
    """A job's entry into the queue at `now`, as a TRANSITIONS row."""
    return transition_row(job_id, None, JobState.QUEUED, now, "accepted")


def _prefixed(entry: dict[str, Any]) -> dict[str, Any]:
    """The `_insert_if_new` parameters of `entry`."""
    return {f"e_{name}": entry[name] for name in _ENTRY}


def _new_job(job_id: str, text: str, spec: JobSpec, now: float) -> dict[str, Any]:
    """A new job's row (_NEW_JOB), queued at `now`."""
    return {
        "job_id": job_id,
        "spec": text,
        "state": JobState.QUEUED.value,
        "location": spec.source_cluster,
        "submitted_at": now,
        "updated_at": now,
    }


def on_cluster(db: Connection, cluster: str) -> list[str]:
    """Ids of the jobs on `cluster` (assigned to it, migrating to it, submitted or running there), in
    transaction (or connection) `db`, in acceptance order."""
    on = JOBS.c.state.in_([s.value for s in ON_CLUSTER])
    query = select(JOBS.c.job_id).where(JOBS.c.cluster == cluster, on)
    return list(db.execute(query.order_by(JOBS.c.seq)).scalars())


def _raw_specs(db: Connection, job_ids: Sequence[str]) -> dict[str, str]:
    """Stored spec JSON of those of `job_ids` that exist."""
    found: dict[str, str] = {}
    unique = list(dict.fromkeys(job_ids))
    if len(unique) == 1:
        return dict(db.execute(_SPEC_OF, {"job_id": unique[0]}).all())
    for start in range(0, len(unique), _IN_CHUNK):
        found.update(db.execute(_SPECS_OF, {"ids": unique[start : start + _IN_CHUNK]}).all())
    return found
