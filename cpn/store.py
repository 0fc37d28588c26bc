"""The durable job store: every accepted job, its current state, and every transition it made.

One SQLite file in WAL mode, so that the HTTP intake, a scheduler and the CLI can
use it at once from separate processes (readers never block the one writer).
Every write is one transaction; times come from the injected Clock, so the
simulator records simulated time and tests record a fake one.

Reports read `transitions_all()` once: a job's completion time (JCT) is its
`succeeded` time minus the time it entered `queued` first, its wait the first
`running` time (`submitted` for a succeeded job whose start was never reported) minus that same
queued time.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal, get_args, get_type_hints

from cpn.clock import Clock, WallClock
from cpn.decisions import Waiting
from cpn.jobs import FINISHED, ON_CLUSTER, Cause, IllegalTransition, JobSpec, JobState, check_transition

SCHEMA_VERSION = 6
"""Stored in SQLite's `user_version`; a store written by a newer schema is refused, an older one upgraded."""

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS jobs (
        seq          INTEGER PRIMARY KEY,  -- acceptance order
        job_id       TEXT NOT NULL UNIQUE,
        spec         TEXT NOT NULL,        -- canonical JSON of the JobSpec, manifest included
        state        TEXT NOT NULL,
        cluster      TEXT,
        node         TEXT,
        location     TEXT,                 -- cluster holding the job's image and data now
        submitted_at REAL NOT NULL,
        updated_at   REAL NOT NULL,
        placement    TEXT,                 -- JSON [[node, cards], ...] of the gang while placed
        wait_code    TEXT,                 -- why it waits (cpn.decisions.WaitCode), latest round
        wait_detail  TEXT,
        predicted_start       REAL,        -- when the latest plan starts it
        first_predicted_start REAL,        -- the first start any plan gave it
        image        TEXT,                 -- the image to run, pinned by digest once migrated
        needs_more_than_gb REAL            -- GPU memory per card it was OOM-killed with
    )""",
    "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, seq)",
    """CREATE TABLE IF NOT EXISTS transitions (
        seq        INTEGER PRIMARY KEY,
        job_id     TEXT NOT NULL REFERENCES jobs (job_id),
        from_state TEXT,                   -- NULL: the job entered the store
        to_state   TEXT NOT NULL,
        time       REAL NOT NULL,
        reason     TEXT NOT NULL,
        cluster    TEXT,
        node       TEXT,
        gpu_mem_gb REAL,                   -- peak GPU memory per card the cluster measured, if any
        log_tail   TEXT NOT NULL DEFAULT '', -- a failed run's last pod log lines, as the gateway bounds them
        cause      TEXT NOT NULL DEFAULT '' -- cpn.jobs.Cause: what the transition counts as (retries)
    )""",
    "CREATE INDEX IF NOT EXISTS transitions_by_job ON transitions (job_id, seq)",
    """CREATE TABLE IF NOT EXISTS scheduler_lease (
        id         INTEGER PRIMARY KEY CHECK (id = 1),  -- one row: the store has one scheduler at a time
        holder     TEXT NOT NULL,          -- hostname:pid:purpose of the process that holds it
        term       INTEGER NOT NULL,       -- +1 whenever another holder takes it over
        expires_at REAL NOT NULL           -- wall-clock (Unix) time; a released lease has 0
    )""",
    # Cancels asked for jobs on a cluster, carried out by the scheduler's next round (Scheduler.cancel).
    """CREATE TABLE IF NOT EXISTS cancel_requests (
        job_id       TEXT PRIMARY KEY REFERENCES jobs (job_id),
        requested_by TEXT NOT NULL,        -- the token's name (cpn.auth.Principal.name)
        requested_at REAL NOT NULL
    )""",
)

_UPGRADES = {
    1: ("ALTER TABLE transitions ADD COLUMN gpu_mem_gb REAL",),
    2: tuple(
        f"ALTER TABLE jobs ADD COLUMN {column}"
        for column in (
            "placement TEXT",
            "wait_code TEXT",
            "wait_detail TEXT",
            "predicted_start REAL",
            "first_predicted_start REAL",
            "image TEXT",
            "needs_more_than_gb REAL",
        )
    ),
    3: ("ALTER TABLE transitions ADD COLUMN log_tail TEXT NOT NULL DEFAULT ''",),
    4: (
        "ALTER TABLE transitions ADD COLUMN cause TEXT NOT NULL DEFAULT ''",
        # Transitions recorded before the column existed said their cause in the reason's first words.
        "UPDATE transitions SET cause = 'oom-killed' WHERE reason LIKE 'OOMKilled%'",
        "UPDATE transitions SET cause = 'migration-failed' WHERE reason LIKE 'migration failed%'",
    ),
    5: (),  # the cancel_requests table, created with the schema
}
"""Statements that bring a store of schema version k to k + 1."""

_JOB_COLUMNS = (
    "spec, state, cluster, node, location, submitted_at, updated_at, placement, "
    "wait_code, wait_detail, predicted_start, first_predicted_start, image, needs_more_than_gb"
)
_TRANSITION_COLUMNS = "job_id, from_state, to_state, time, reason, cluster, node, gpu_mem_gb, log_tail, cause"
_INSERT_TRANSITION = f"INSERT INTO transitions ({_TRANSITION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_IN_CHUNK = 500
"""Ids per `IN (...)` query, well under SQLite's limit on bound parameters."""

_FLOAT_FIELDS = frozenset(
    name for name, hint in get_type_hints(JobSpec).items() if hint is float or float in get_args(hint)
)


@dataclass(frozen=True)
class JobRecord:
    """A job as stored: its spec, where it is in its life, and where it runs."""

    spec: JobSpec
    state: JobState
    cluster: str | None
    """Cluster the job is placed on; None while queued or schedule-failed."""
    node: str | None
    """Node the job is placed on; None while unplaced."""
    location: str | None
    """Cluster holding the job's image and data now: its source cluster until a migration moves them."""
    submitted_at: float
    """When the store accepted the job (its entry into `queued`), by the store's clock."""
    updated_at: float
    """Time of the job's latest transition."""
    placement: tuple[tuple[str, int], ...] = ()
    """Every (node, cards) of the job's gang while it is placed; empty otherwise."""
    waiting: Waiting | None = None
    """Why the latest round left it queued, and when that round's plan starts it; None when not queued."""
    first_predicted_start: float | None = None
    """The first start time any plan predicted for it (kept after it starts, to measure predictions)."""
    image: str | None = None
    """The image reference to run instead of the spec's, pinned by digest, once a migration copied it."""
    needs_more_than_gb: float | None = None
    """GPU memory per card of the largest card it was OOM-killed on: it needs more than this."""

    @property
    def job_id(self) -> str:
        """The job's id, `<namespace>/<name>`."""
        return self.spec.job_id

    @property
    def gpus(self) -> int:
        """Cards the job holds over all its nodes (0 when unplaced)."""
        return sum(cards for _, cards in self.placement)


@dataclass(frozen=True)
class Change:
    """A job's state after one recorded transition, for readers that follow the store incrementally."""

    job_id: str
    state: JobState
    order: int
    """The job's acceptance position (queue order)."""
    location: str | None
    """Where the job's image and data are now."""
    image: str | None = None
    """The image to run instead of the spec's (after a migration), None = the spec's."""
    needs_more_than_gb: float | None = None
    """Learned from an OOM kill: the job needs more GPU memory per card than this."""
    submitted_at: float = 0.0
    """When the store accepted the job."""


@dataclass(frozen=True)
class Transition:
    """One recorded state change of one job."""

    job_id: str
    from_state: JobState | None
    """None for the job's entry into the store (to `queued`)."""
    to_state: JobState
    time: float
    reason: str = ""
    cluster: str | None = None
    """Placement after the change (None when unplaced)."""
    node: str | None = None
    gpu_mem_gb: float | None = None
    """Peak GPU memory per card the cluster measured for the run that just ended; None = not measured."""
    log_tail: str = ""
    """On a failed run's end: the last lines of its pod's log, as the gateway bounded them; '' = none."""
    cause: Cause = Cause.NONE
    """What the transition counts as (an OOM kill, a failed migration), as data."""


@dataclass(frozen=True)
class CancelOutcome:
    """What `JobStore.cancel` did with one job."""

    job_id: str
    status: Literal["cancelled", "requested", "finished"]
    """`cancelled`: it was not on a cluster and is cancelled now; `requested`: it is on a cluster, and the
    scheduler's next round deletes it there and records it cancelled; `finished`: it had ended already
    (`state` says how) and nothing changed."""
    state: JobState
    """The job's state after the call."""


@dataclass(frozen=True)
class CancelRequest:
    """A cancel the scheduler has yet to carry out."""

    job_id: str
    requested_by: str
    requested_at: float


@dataclass(frozen=True)
class SubmitOutcome:
    """What `submit` did with one job."""

    job_id: str
    status: Literal["created", "already_exists"]
    """`created`: newly queued; `already_exists`: an identical job was stored before (nothing changed)."""


class StoreError(RuntimeError):
    """The store file cannot be used (not a cpn store, written by a newer cpn, unreadable)."""


class StoreLeased(StoreError):
    """Another process holds this store's scheduler lease: a second scheduler would fight it over the jobs."""

    def __init__(self, holder: str, expires_at: float) -> None:
        self.holder = holder
        self.expires_at = expires_at
        until = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(expires_at))
        super().__init__(
            f"another scheduler holds the job store: {holder}, its lease renewed until {until}; "
            "stop that process first (a process that died frees the store when its lease expires)"
        )


@dataclass(frozen=True)
class Lease:
    """Who may schedule from the store: the holder's lease holds until `expires_at` (wall clock)."""

    holder: str
    """`hostname:pid:purpose` of the process that took it."""
    term: int
    """Grows by one whenever a different holder takes the lease, so an older holder's term is stale."""
    expires_at: float
    """Unix time after which another process may take it over; 0 once released."""


class StoreUnavailable(StoreError):
    """A read or write failed for a reason outside cpn; nothing of the failed write was kept.

    `kind` says which: `disk-full`, `read-only`, `busy` (locked by another process too
    long), or `io` (any other I/O or database error). The caller may retry later.
    """

    def __init__(self, path: str, kind: str, detail: str) -> None:
        self.kind = kind
        advice = {
            "disk-full": "free disk space",
            "read-only": "make the store file and its folder writable",
            "busy": "retry when the other writer is done",
        }.get(kind, "check the disk and the store file")
        super().__init__(f"{path}: the job store is unavailable ({kind}: {detail}); {advice}")


_ERROR_KINDS = {
    "SQLITE_FULL": "disk-full",
    "SQLITE_READONLY": "read-only",
    "SQLITE_BUSY": "busy",
    "SQLITE_LOCKED": "busy",
}
"""SQLite's primary error names, mapped to StoreUnavailable kinds (all others are `io`)."""


def _unavailable(path: str, exc: sqlite3.Error) -> StoreUnavailable:
    name = getattr(exc, "sqlite_errorname", "") or ""
    kind = next((k for prefix, k in _ERROR_KINDS.items() if name.startswith(prefix)), "io")
    return StoreUnavailable(path, kind, str(exc))


class JobConflict(ValueError):
    """A submitted job reuses the id of a stored job with different content; nothing was stored."""

    def __init__(self, job_id: str, differing: Sequence[str]) -> None:
        self.job_id = job_id
        self.differing = tuple(differing)
        super().__init__(
            f"job {job_id} already exists with different content ({', '.join(self.differing)} differ); "
            "nothing from this submission was stored. Resubmit the identical job, or give the changed "
            "one a new name"
        )


class UnknownJob(KeyError):
    """No job with this id is in the store."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(job_id)

    def __str__(self) -> str:
        return f"no job {self.job_id} in the store"


class JobStore:
    """Jobs and their transitions in one SQLite file (or `":memory:"`).

    Safe to share between threads (one connection behind a lock) and between
    processes (SQLite's own locking; writes take the write lock up front, so a
    read-check-write such as `transition` is atomic). Open one JobStore per process.
    `read_only` opens an existing store file so that SQLite refuses every write (StoreUnavailable,
    kind `read-only`): a dry run looks at a live store without touching it.
    """

    def __init__(self, path: str | Path, clock: Clock | None = None, *, read_only: bool = False) -> None:
        self.path = str(path)
        self.read_only = read_only
        self._clock = clock or WallClock()
        self._lock = threading.RLock()
        self._listeners: list[Callable[[], None]] = []
        target = self.path
        if read_only:
            if self.path == ":memory:":
                raise ValueError("read_only needs a store file, not ':memory:'")
            target = f"{Path(self.path).resolve().as_uri()}?mode=ro"
        try:
            self._db = sqlite3.connect(
                target, timeout=30, isolation_level=None, check_same_thread=False, uri=read_only
            )
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open the job store ({exc}); check the path") from None
        try:
            self._prepare()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(
                f"{self.path}: cannot use as a job store ({exc}); point --store or CPN_STORE at another file"
            ) from None
        except StoreError:
            self._db.close()
            raise

    def _prepare(self) -> None:
        """WAL mode, and the schema, created on first use (a read-only store must be current already)."""
        if not self.read_only:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: job store schema {version} is newer than this cpn's "
                f"({SCHEMA_VERSION}); upgrade cpn or use another store file"
            )
        if self.read_only:
            if version < SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: job store schema {version} is older than this cpn's ({SCHEMA_VERSION}) "
                    "and cannot be upgraded read-only; open it once for writing (e.g. `cpn run`)"
                )
            return
        with self._write() as db:
            if version:
                for old in range(version, SCHEMA_VERSION):
                    for statement in _UPGRADES[old]:
                        db.execute(statement)
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the database connection; the store is unusable afterwards."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, holding SQLite's write lock from the start; rolled back on any error.

        SQLite's own failures (disk full, read-only, I/O) become StoreUnavailable.
        """
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:  # SQLite may have rolled back already (disk full)
                        self._db.execute("ROLLBACK")
                    raise
            except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                raise _unavailable(self.path, exc) from None

    def _read(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
                raise _unavailable(self.path, exc) from None

    def submit(self, specs: Sequence[JobSpec]) -> list[SubmitOutcome]:
        """Queue new jobs, all or none, in the given order; one outcome per spec.

        A job whose id is stored already with identical content is reported as
        `already_exists` and left alone, so resubmitting a file is harmless. One
        whose content differs raises JobConflict, and nothing from the call is stored.
        """
        encoded = [(spec.job_id, _encode(spec), spec) for spec in specs]
        now = self._clock.now()
        outcomes: list[SubmitOutcome] = []
        new_jobs: list[tuple] = []
        with self._write() as db:
            known = _stored_specs(db, [job_id for job_id, _, _ in encoded])
            for job_id, text, spec in encoded:
                stored = known.get(job_id)
                if stored is None:
                    known[job_id] = text
                    new_jobs.append((job_id, text, JobState.QUEUED.value, spec.source_cluster, now, now))
                    outcomes.append(SubmitOutcome(job_id, "created"))
                elif stored == text:
                    outcomes.append(SubmitOutcome(job_id, "already_exists"))
                else:
                    raise JobConflict(job_id, _differing_fields(stored, text))
            db.executemany(
                "INSERT INTO jobs (job_id, spec, state, location, submitted_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                new_jobs,
            )
            db.executemany(
                _INSERT_TRANSITION,
                [
                    (job_id, None, JobState.QUEUED.value, now, "accepted", None, None, None, "", "")
                    for job_id, *_ in new_jobs
                ],
            )
        if new_jobs:
            for listener in self._listeners:
                listener()
        return outcomes

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
        `queued` clears the job's waiting reason. `image` is the reference to run from now on (a
        migration's copy, pinned by digest). `needs_more_than_gb` records an OOM kill's lesson: the job
        needs more GPU memory per card than this (the largest such lesson is kept). `cause` is what the
        move counts as (cpn.jobs.Cause), stored with it. `only_from` refuses the move (IllegalTransition)
        unless the job is in one of those states now.
        """
        new_state = JobState(new_state)
        now = self._clock.now() if at is None else at
        with self._write() as db:
            row = db.execute(
                "SELECT state, cluster, node, placement FROM jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is None:
                raise UnknownJob(job_id)
            old_state = JobState(row[0])
            check_transition(job_id, old_state, new_state)
            if only_from is not None and old_state not in only_from:
                raise IllegalTransition(f"job {job_id} is {old_state}, not {', '.join(sorted(only_from))}")
            gang = None if placement is None else json.dumps([[n, c] for n, c in placement])
            if new_state in (JobState.QUEUED, JobState.SCHEDULE_FAILED):
                cluster, node, gang = None, None, None
            else:
                cluster = row[1] if cluster is None else cluster
                node = row[2] if node is None else node
                gang = row[3] if gang is None else gang
            db.execute(
                "UPDATE jobs SET state = ?, cluster = ?, node = ?, location = COALESCE(?, location), "
                "image = COALESCE(?, image), "
                "needs_more_than_gb = MAX(COALESCE(needs_more_than_gb, 0), COALESCE(?, 0)), "
                "updated_at = ?, placement = ?, wait_code = CASE WHEN ? THEN wait_code END, "
                "wait_detail = CASE WHEN ? THEN wait_detail END WHERE job_id = ?",
                (
                    new_state.value,
                    cluster,
                    node,
                    location,
                    image,
                    needs_more_than_gb,
                    now,
                    gang,
                    new_state == JobState.QUEUED,
                    new_state == JobState.QUEUED,
                    job_id,
                ),
            )
            db.execute(
                _INSERT_TRANSITION,
                (
                    job_id,
                    old_state.value,
                    new_state.value,
                    now,
                    reason,
                    cluster,
                    node,
                    gpu_mem_gb,
                    log_tail,
                    Cause(cause).value,
                ),
            )

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
            with self._write() as db:
                (state,) = db.execute("SELECT state FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
                state = JobState(state)
                if state in FINISHED:
                    return CancelOutcome(job_id, "finished", state)
                if state in ON_CLUSTER:
                    db.execute(
                        "INSERT OR IGNORE INTO cancel_requests (job_id, requested_by, requested_at) "
                        "VALUES (?, ?, ?)",
                        (job_id, by, self._clock.now()),
                    )
                    return CancelOutcome(job_id, "requested", state)
            # queued again between the two transactions (a requeue by the scheduler): cancel it now

    def cancel_requests(self) -> list[CancelRequest]:
        """Cancel requests of jobs that have not ended yet, oldest first (what the scheduler has to do)."""
        finished = [s.value for s in FINISHED]
        rows = self._read(
            "SELECT r.job_id, r.requested_by, r.requested_at FROM cancel_requests r "
            f"JOIN jobs j ON j.job_id = r.job_id WHERE j.state NOT IN ({', '.join('?' * len(finished))}) "
            "ORDER BY r.requested_at, r.job_id",
            finished,
        )
        return [CancelRequest(*row) for row in rows]

    def set_waiting(self, waiting: Sequence[Waiting]) -> None:
        """Record why each of these queued jobs waits, and its predicted start, in one transaction.

        Not a transition: nothing is added to the history. A job that has left `queued` meanwhile
        is left alone. The first predicted start a job gets is kept for good.
        """
        if not waiting:
            return
        rows = [
            (w.code, w.detail, w.predicted_start, w.predicted_start, w.job_id, JobState.QUEUED.value)
            for w in waiting
        ]
        with self._write() as db:
            db.executemany(
                "UPDATE jobs SET wait_code = ?, wait_detail = ?, predicted_start = ?, "
                "first_predicted_start = COALESCE(first_predicted_start, ?) WHERE job_id = ? AND state = ?",
                rows,
            )

    def acquire_lease(self, holder: str, ttl_s: float) -> int:
        """Take the scheduler lease for `ttl_s` seconds and return its term.

        Raises StoreLeased while another holder's lease is unexpired. Taking one's own lease
        again renews it and keeps its term; taking over another's (expired or released) lease
        starts a new term.
        """
        _check_ttl(ttl_s)
        now = time.time()
        with self._write() as db:
            row = db.execute("SELECT holder, term, expires_at FROM scheduler_lease WHERE id = 1").fetchone()
            if row is not None and row[0] != holder and row[2] > now:
                raise StoreLeased(row[0], row[2])
            term = 1 if row is None else row[1] if row[0] == holder else row[1] + 1
            db.execute(
                "INSERT OR REPLACE INTO scheduler_lease (id, holder, term, expires_at) VALUES (1, ?, ?, ?)",
                (holder, term, now + ttl_s),
            )
        return term

    def renew_lease(self, holder: str, term: int, ttl_s: float) -> bool:
        """Extend the lease to `ttl_s` seconds from now; False if `holder` no longer holds it in `term`."""
        _check_ttl(ttl_s)
        with self._write() as db:
            renewed = db.execute(
                "UPDATE scheduler_lease SET expires_at = ? WHERE id = 1 AND holder = ? AND term = ?",
                (time.time() + ttl_s, holder, term),
            ).rowcount
        return renewed == 1

    def release_lease(self, holder: str, term: int) -> None:
        """Give the lease up now if `holder` still holds it in `term`; the next holder gets a new term."""
        with self._write() as db:
            db.execute(
                "UPDATE scheduler_lease SET expires_at = 0 WHERE id = 1 AND holder = ? AND term = ?",
                (holder, term),
            )

    def lease(self) -> Lease | None:
        """The latest scheduler lease, expired or not; None if no process ever took one."""
        rows = self._read("SELECT holder, term, expires_at FROM scheduler_lease WHERE id = 1")
        return Lease(*rows[0]) if rows else None

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` after every committed `submit` that queued a new job (e.g. to wake a loop)."""
        self._listeners.append(listener)

    def get(self, job_id: str) -> JobRecord:
        """The job with this id; UnknownJob if there is none."""
        rows = self._read(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,))
        if not rows:
            raise UnknownJob(job_id)
        return _record(rows[0])

    def jobs(self, states: Iterable[JobState] | JobState | None = None) -> list[JobRecord]:
        """Jobs in acceptance order, all of them or only those in `states` (one state or several)."""
        if states is None:
            rows = self._read(f"SELECT {_JOB_COLUMNS} FROM jobs ORDER BY seq")
        else:
            wanted = [JobState(s).value for s in ([states] if isinstance(states, str) else states)]
            marks = ", ".join("?" * len(wanted))
            rows = self._read(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state IN ({marks}) ORDER BY seq", wanted
            )
        return [_record(row) for row in rows]

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
        where, params = ["seq > ?"], [after]
        if states is not None:
            wanted = [JobState(s).value for s in states]
            where.append(f"state IN ({', '.join('?' * len(wanted))})")
            params += wanted
        if namespaces is not None:
            prefixes = [f"{ns}/" for ns in namespaces]
            where.append(f"({' OR '.join('substr(job_id, 1, ?) = ?' for _ in prefixes) or '0'})")
            for prefix in prefixes:
                params += [len(prefix), prefix]
        rows = self._read(
            f"SELECT seq, {_JOB_COLUMNS} FROM jobs WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?",
            [*params, limit + 1],
        )
        records = [_record(row[1:]) for row in rows[:limit]]
        return records, (rows[limit - 1][0] if len(rows) > limit else None)

    def history(self, job_id: str) -> list[Transition]:
        """The job's transitions, oldest first (the first is its entry into `queued`); UnknownJob if none."""
        rows = self._read(
            f"SELECT {_TRANSITION_COLUMNS} FROM transitions WHERE job_id = ? ORDER BY seq", (job_id,)
        )
        if not rows:
            raise UnknownJob(job_id)
        return [_transition(row) for row in rows]

    def transitions_all(self) -> list[Transition]:
        """Every transition of every job, in the order they were recorded (for reports)."""
        return [
            _transition(row)
            for row in self._read(f"SELECT {_TRANSITION_COLUMNS} FROM transitions ORDER BY seq")
        ]

    def changes_since(self, after: int = 0) -> tuple[int, list[Change]]:
        """Transitions recorded after position `after`, oldest first, and the position to pass next time.

        Lets a scheduler keep its view of the queue current in time proportional
        to what changed, instead of re-reading every queued job each round.
        """
        rows = self._read(
            "SELECT t.seq, t.job_id, t.to_state, j.seq, j.location, j.image, j.needs_more_than_gb, "
            "j.submitted_at "
            "FROM transitions t "
            "JOIN jobs j ON j.job_id = t.job_id WHERE t.seq > ? ORDER BY t.seq",
            (after,),
        )
        if not rows:
            return after, []
        return rows[-1][0], [
            Change(job_id, JobState(state), order, loc, image, floor or None, accepted)
            for _, job_id, state, order, loc, image, floor, accepted in rows
        ]

    def specs(self, job_ids: Sequence[str]) -> dict[str, JobSpec]:
        """The specs of those of `job_ids` that exist."""
        with self._lock:
            return {job_id: _decode(text) for job_id, text in _raw_specs(self._db, job_ids).items()}

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state; every state is present, zero included."""
        counts = dict.fromkeys(JobState, 0)
        for state, n in self._read("SELECT state, COUNT(*) FROM jobs GROUP BY state"):
            counts[JobState(state)] = n
        return counts

    def tally(self) -> list[tuple[JobState, str, str, int]]:
        """How many jobs are in each (state, namespace, waiting reason code; '' for none), in one GROUP BY:
        what cpn's own metrics publish (cpn.telemetry), cheap whatever the store's size."""
        rows = self._read(
            "SELECT state, substr(job_id, 1, instr(job_id, '/') - 1), COALESCE(wait_code, ''), COUNT(*) "
            "FROM jobs GROUP BY 1, 2, 3"
        )
        return [(JobState(state), namespace, code, n) for state, namespace, code, n in rows]


def _check_ttl(ttl_s: float) -> None:
    if not ttl_s > 0:
        raise ValueError(f"ttl_s must be a positive number of seconds, not {ttl_s!r}")


def _encode(spec: JobSpec) -> str:
    """Canonical JSON of a spec: sorted keys, whole numbers in float fields written as floats.

    Two specs with the same content encode to the same text, which is what makes
    resubmission idempotent.
    """
    data = {f.name: getattr(spec, f.name) for f in fields(JobSpec)}
    for name in _FLOAT_FIELDS:
        value = data[name]
        if isinstance(value, int) and not isinstance(value, bool):
            data[name] = float(value)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _decode(text: str) -> JobSpec:
    return JobSpec(**json.loads(text))


def _raw_specs(db: sqlite3.Connection, job_ids: Sequence[str]) -> dict[str, str]:
    """Stored spec JSON of those of `job_ids` that exist."""
    found: dict[str, str] = {}
    unique = list(dict.fromkeys(job_ids))
    for start in range(0, len(unique), _IN_CHUNK):
        chunk = unique[start : start + _IN_CHUNK]
        marks = ", ".join("?" * len(chunk))
        found.update(db.execute(f"SELECT job_id, spec FROM jobs WHERE job_id IN ({marks})", chunk))
    return found


def _stored_specs(db: sqlite3.Connection, job_ids: list[str]) -> dict[str, str]:
    """Stored canonical specs of those of `job_ids` that exist, re-encoded by the current JobSpec."""
    return {job_id: _encode(_decode(text)) for job_id, text in _raw_specs(db, job_ids).items()}


def _differing_fields(stored: str, new: str) -> list[str]:
    old_data, new_data = json.loads(stored), json.loads(new)
    return sorted(k for k in old_data.keys() | new_data.keys() if old_data.get(k) != new_data.get(k))


def _record(row: tuple) -> JobRecord:
    (
        spec,
        state,
        cluster,
        node,
        location,
        submitted_at,
        updated_at,
        gang,
        code,
        detail,
        start,
        first,
        image,
        floor,
    ) = row
    job = _decode(spec)
    return JobRecord(
        job,
        JobState(state),
        cluster,
        node,
        location,
        submitted_at,
        updated_at,
        placement=tuple((n, c) for n, c in json.loads(gang)) if gang else (),
        waiting=Waiting(job.job_id, code, detail or "", start) if code else None,
        first_predicted_start=first,
        image=image,
        needs_more_than_gb=floor or None,
    )


def _transition(row: tuple) -> Transition:
    job_id, from_state, to_state, time, reason, cluster, node, gpu_mem_gb, log_tail, cause = row
    return Transition(
        job_id,
        JobState(from_state) if from_state else None,
        JobState(to_state),
        time,
        reason,
        cluster,
        node,
        gpu_mem_gb,
        log_tail,
        Cause(cause),
    )
