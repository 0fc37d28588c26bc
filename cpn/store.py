"""The durable job store: every accepted job, its current state, and every transition it made.

One database, SQLite or PostgreSQL, through SQLAlchemy Core: a SQLite file (WAL mode, so that the HTTP
intake, a scheduler and the CLI can use it at once from separate processes, readers never blocking the
one writer) is the embedded default; a PostgreSQL database (`postgresql://...`) serves several machines.
The schema is kept by Alembic migrations (cpn.migrations), run whenever a store opens. Every write is one
transaction and writes are serialised, so every read-check-write (a transition, a submission, taking the
lease) is atomic on both databases; times come from the injected Clock, so the simulator records
simulated time and tests record a fake one.

Reports read `transitions_all()` once: a job's completion time (JCT) is its
`succeeded` time minus the time it entered `queued` first, its wait the first
`running` time (`submitted` for a succeeded job whose start was never reported) minus that same
queued time.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args, get_type_hints

from sqlalchemy import (
    Connection,
    Engine,
    Row,
    StaticPool,
    bindparam,
    case,
    column,
    create_engine,
    delete,
    false,
    func,
    insert,
    or_,
    select,
    table,
    update,
)
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from cpn import migrations, store_facts
from cpn.clock import Clock, WallClock
from cpn.decisions import Placement, Waiting
from cpn.jobs import FINISHED, ON_CLUSTER, Cause, IllegalTransition, JobSpec, JobState, check_transition
from cpn.store_facts import COPIES, SAVED_PROGRESS, Fact

log = logging.getLogger(__name__)

SCHEMA_VERSION = 7
"""SQLite's `user_version` of a store under Alembic: above 6, the last hand-upgraded schema, so a cpn from
before the migrations refuses the store (it refuses newer versions) instead of writing to it, and a store
with a lower one was written last by such a cpn. The schema itself is the Alembic revision
(cpn.migrations.HEAD)."""

JOBS = table(
    "jobs",
    *map(
        column,
        (
            "seq",  # acceptance order
            "job_id",
            "spec",  # canonical JSON of the JobSpec, manifest included
            "state",
            "cluster",
            "node",
            "location",  # cluster holding the job's image and data now
            "submitted_at",
            "updated_at",
            "placement",  # JSON [[node, cards], ...] of the gang while placed
            "wait_code",  # why it waits (cpn.decisions.WaitCode), latest round
            "wait_detail",
            "predicted_start",  # when the latest plan starts it
            "first_predicted_start",  # the first start any plan gave it
            "image",  # the image to run, pinned by digest once migrated
            "needs_more_than_gb",  # GPU memory per card it was OOM-killed with
            "predicted_end",  # when the latest forward look ends it (inf: a service)
            "start_low",  # the interval its predicted start may fall in
            "start_high",
            "moved",  # why its predicted start last moved (NULL: it has not)
        ),
    ),
)
"""Every accepted job, one row each (columns and their types: cpn/migrations/versions)."""

TRANSITIONS = table(
    "transitions",
    *map(
        column,
        (
            "seq",
            "job_id",
            "from_state",
            "to_state",
            "time",
            "reason",
            "cluster",
            "node",
            "gpu_mem_gb",
            "log_tail",
            "cause",  # cpn.jobs.Cause: what the transition counts as (retries)
            "term",  # the scheduler lease's term an assignment or submission was recorded under
        ),
    ),
)
"""Every state change of every job, in the order recorded; `from_state` NULL for a job's entry."""

CANCEL_REQUESTS = table("cancel_requests", column("job_id"), column("requested_by"), column("requested_at"))
"""Cancels asked for jobs on a cluster, one per job, until the scheduler carries them out."""

LEASE = table("scheduler_lease", column("id"), column("holder"), column("term"), column("expires_at"))
"""The scheduler lease: one row (id 1) once any process took it."""

STORE_META = table("store_meta", column("key"), column("value"))
"""Facts about the store itself, by key (`COPY_IN_PROGRESS`)."""

SIM_JOURNAL = table("sim_journal", column("seq"), column("entry"), column("term"))
"""What simulated clusters were asked to run, one JSON entry a row (cpn.sim.journal), in a server's store."""

CLUSTERS = table("clusters", *map(column, ("seq", "name", "spec", "state", "added_at")))
"""The cluster set (cpn.adapters.clusters.ClusterBook): one row per cluster, in the order they were added."""

CLUSTER_STATES = ("active", "cordoned", "removed")
"""A cluster's states: `active` takes new jobs; `cordoned` takes none while its running jobs go on to their
end; `removed` is gone from the set (its row stays, so a restart can replay what simulated clusters ran)."""

CLUSTERS_VERSION = "clusters_version"
"""STORE_META key counting the cluster set's changes: the leader reads it each round, the set on a change."""

FENCED = frozenset({JobState.ASSIGNED, JobState.MIGRATING, JobState.SUBMITTED})
"""The moves a scheduler makes only as the leader: under a fence (`JobStore.fence`) each is refused unless
the store's lease is still in the fence's term."""

COPY_IN_PROGRESS = "copy_in_progress"
"""STORE_META key present while `cpn store copy` fills the store; its value names the source."""

COPY_SOURCE = select(STORE_META.c.value).where(STORE_META.c.key == COPY_IN_PROGRESS)
"""The source a store is being copied from: one row while a copy into it is unfinished, else none."""

_JOB_COLUMNS = [c for c in JOBS.c if c.name not in ("seq", "job_id")]
"""The columns `_record` reads: all but the position (the id is in the spec)."""
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
_INSERT_JOB = insert(JOBS)
_INSERT_TRANSITION = insert(TRANSITIONS)
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
_LEASE_ROW = select(LEASE.c.holder, LEASE.c.term, LEASE.c.expires_at).where(LEASE.c.id == 1)

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
    """Why the latest round left it queued, and that round's prediction (start, its interval, end); its
    `moved` is why the start last moved, in any round while queued. None when not queued."""
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
class Copy:
    """A copy in flight of a job's image and data, as the store has it (cpn.store_facts.CopyStarted)."""

    record: JobRecord
    """The migrating job (see `whole_cards`)."""
    placement: Placement
    """The cards it was assigned, held until the copy ends; `placement.cluster` is where the copy goes."""
    source: str
    """The cluster the copy is from."""
    started_at: float
    """When the copy began (the store's clock)."""
    whole_cards: bool
    """Whether the job runs on whole cards though its spec asks to share one (a model to explore)."""


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
    """The store cannot be used (not a cpn store, written by a newer cpn, unreadable, unreachable)."""


class StoreCopyUnfinished(StoreError):
    """The store is the destination of a `cpn store copy` that has not finished: its jobs are incomplete."""

    def __init__(self, path: str, source: str) -> None:
        self.source = source
        super().__init__(
            f"{path}: a copy of the job store {source} into this store did not finish, so it lacks jobs; "
            f"finish it first: cpn store copy {source} {path}"
        )


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


class LeaseLost(StoreError):
    """Another process took the store's scheduler lease over: this one must stop scheduling at once."""


class StaleTerm(LeaseLost):
    """A leader's write under a term the store's lease has left: refused, nothing written (fencing)."""

    def __init__(self, path: str, term: int, lease: Lease | None) -> None:
        self.term = term
        now = "no lease" if lease is None else f"term {lease.term}, held by {lease.holder}"
        super().__init__(
            f"{path}: a write of scheduler term {term} was refused: the store's lease is in {now} now; "
            "this process no longer leads and stops scheduling"
        )


class StoreUnavailable(StoreError):
    """A read or write failed for a reason outside cpn; nothing of the failed write was kept.

    `kind` says which: `disk-full`, `read-only`, `busy` (locked by another process too
    long), `unreachable` (the database server cannot be reached), or `io` (any other I/O or
    database error). The caller may retry later.
    """

    def __init__(self, path: str, kind: str, detail: str) -> None:
        self.kind = kind
        advice = {
            "disk-full": "free disk space",
            "read-only": "make the store writable",
            "busy": "retry when the other writer is done",
            "unreachable": "check that the database server runs and can be reached",
        }.get(kind, "check the disk and the store")
        super().__init__(f"{path}: the job store is unavailable ({kind}: {detail}); {advice}")


_SQLITE_KINDS = {
    "SQLITE_FULL": "disk-full",
    "SQLITE_READONLY": "read-only",
    "SQLITE_BUSY": "busy",
    "SQLITE_LOCKED": "busy",
}
"""SQLite's primary error names, mapped to StoreUnavailable kinds (all others are `io`)."""

_POSTGRES_KINDS = {
    "53100": "disk-full",  # disk_full
    "25006": "read-only",  # read_only_sql_transaction
    "55P03": "busy",  # lock_not_available: waited lock_timeout for the write lock
    "40P01": "busy",  # deadlock_detected
    "08": "unreachable",  # connection_exception and its subclasses
    "57P": "unreachable",  # the server is shutting down, or was told to end this connection
}
"""PostgreSQL's SQLSTATE codes (or classes, by prefix), mapped to StoreUnavailable kinds."""

_BUSY_TIMEOUT_S = 30
"""How long a write waits for another process's write to finish before it fails as `busy`."""

_WRITE_LOCK = 0x63706E_53544F5245  # "cpn" "STORE" in ASCII
"""PostgreSQL advisory lock key every write transaction takes: writes are serialised as SQLite's are."""


def store_file(target: str | Path) -> Path | None:
    """The SQLite file a store target (a path or a `sqlite:///` URL) names; None: `:memory:` or a server."""
    text = str(target)
    if "://" in text and not isinstance(target, Path):
        url = make_url(text)
        if url.get_backend_name() != "sqlite":
            return None
        text = url.database or ":memory:"
    return None if text == ":memory:" else Path(text)


class StoreDatabase:
    """One connection to a job store's database, its schema migrated to this cpn's on opening.

    `target` is a SQLite file path, `":memory:"`, or a URL: `sqlite:///FILE` or `postgresql://USER@HOST/DB`
    (connected with psycopg 3). Safe to share between threads (one connection behind a lock) and between
    processes: every write transaction (`write()`) first takes the database's one write lock (SQLite's
    `BEGIN IMMEDIATE`; a transaction-level advisory lock on PostgreSQL), so writers run one at a time and
    commit in the order they began, while reads (`read()`) never wait for writes. `read_only` opens a
    store whose schema is current so that the database refuses every write. JobStore and `cpn store copy`
    use it; everything else uses JobStore.
    """

    def __init__(self, target: str | Path, *, read_only: bool = False) -> None:
        self.read_only = read_only
        self._lock = threading.RLock()
        url = self._url(target)
        self.path = str(target) if url is None else make_url(str(target)).render_as_string(hide_password=True)
        """The store's file or URL as given, any password hidden: for messages."""
        self.dialect = "sqlite" if url is None else "postgresql"
        """`sqlite` or `postgresql`."""
        try:
            if url is None:
                self._engine = self._sqlite_engine(str(target) if isinstance(target, Path) else target)
            else:
                self._engine = self._postgres_engine(url)
            self._conn = self._engine.connect()
        except DBAPIError as exc:
            raise StoreError(
                f"{self.path}: cannot open the job store ({exc.orig}); check the path or URL"
            ) from None
        try:
            self._prepare()
        except DBAPIError as exc:
            self.close()
            raise StoreError(
                f"{self.path}: cannot use as a job store ({exc.orig}); "
                "point --store or CPN_STORE at another one"
            ) from None
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _url(target: str | Path) -> URL | None:
        """The server URL of `target`, None for a SQLite one."""
        if isinstance(target, Path) or "://" not in target:
            return None
        try:
            url = make_url(target)
        except (ArgumentError, ValueError):  # not repeated: it may hold a password
            raise StoreError(
                "--store/CPN_STORE: cannot read the database URL; write it as "
                "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE or sqlite:///FILE"
            ) from None
        backend = url.get_backend_name()
        if backend == "sqlite":
            return None
        if backend != "postgresql":
            raise StoreError(
                f"--store/CPN_STORE: a {backend} URL cannot hold a job store; give a file path, "
                "sqlite:///FILE or postgresql://USER@HOST/DATABASE"
            )
        return url.set(drivername="postgresql+psycopg")

    def _sqlite_engine(self, target: str) -> Engine:
        file = store_file(target)
        if self.read_only and file is None:
            raise ValueError("read_only needs a store file or server, not ':memory:'")
        name = ":memory:" if file is None else str(file)
        if self.read_only:
            name = f"{file.resolve().as_uri()}?mode=ro"
        elif file is not None:  # a new store file's folder is made with it
            file.parent.mkdir(parents=True, exist_ok=True)
        return create_engine(
            "sqlite://",
            creator=lambda: sqlite3.connect(
                name,
                timeout=_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
                uri=self.read_only,
            ),
            poolclass=StaticPool,
            isolation_level="AUTOCOMMIT",
        )

    def _postgres_engine(self, url: URL) -> Engine:
        options = f"-c lock_timeout={_BUSY_TIMEOUT_S * 1000}"
        if self.read_only:
            options += " -c default_transaction_read_only=on"
        return create_engine(
            url,
            isolation_level="AUTOCOMMIT",
            pool_size=1,
            connect_args={"options": options, "connect_timeout": 10},
        )

    def _prepare(self) -> None:
        """WAL mode on SQLite, and the schema brought to this cpn's (a read-only store must be current)."""
        if self.dialect == "sqlite" and not self.read_only:
            self._conn.exec_driver_sql("PRAGMA journal_mode=WAL")
            self._conn.exec_driver_sql("PRAGMA synchronous=NORMAL")
        revision = self._revision()
        if revision == migrations.HEAD:
            return
        if self.read_only:
            raise StoreError(
                f"{self.path}: the job store's schema ({revision or 'none yet'}) is older than this cpn's "
                f"({migrations.HEAD}) and cannot be upgraded read-only; open it once for writing "
                "(e.g. `cpn run`)"
            )
        with self.write() as conn:
            if self._revision() is None:  # new, or from before the migrations: run them all
                migrations.forget(conn)
            migrations.upgrade(conn)
            if self.dialect == "sqlite":
                conn.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")
        log.info("%s: job store schema %s brought to %s", self.path, revision or "(none)", migrations.HEAD)

    def _revision(self) -> str | None:
        """The store's Alembic revision: None for a new store and for one a cpn from before the migrations
        wrote last (SQLite's `user_version` below SCHEMA_VERSION); StoreError if a newer cpn wrote it."""
        if self.dialect == "sqlite":
            version = self._conn.exec_driver_sql("PRAGMA user_version").scalar()
            if version > SCHEMA_VERSION:
                raise self._newer(str(version))
            if 0 < version < SCHEMA_VERSION:
                return None
        revision = migrations.current(self._conn)
        if revision is not None and not migrations.known(revision):
            raise self._newer(revision)
        return revision

    def _newer(self, version: str) -> StoreError:
        return StoreError(
            f"{self.path}: job store schema {version} is newer than this cpn's ({migrations.HEAD}); "
            "upgrade cpn or use another store"
        )

    @property
    def driver_connection(self) -> Any:
        """The database driver's own connection under this one (sqlite3 or psycopg), for driver-level
        statements such as SQLite's pragmas."""
        return self._conn.connection.dbapi_connection

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction, holding the database's write lock from the start; rolled back on any error.

        The database's own failures (disk full, read-only, busy, unreachable) become StoreUnavailable.
        """
        with self._lock:
            try:
                self._conn.exec_driver_sql("BEGIN IMMEDIATE" if self.dialect == "sqlite" else "BEGIN")
                try:
                    if self.dialect == "postgresql":
                        self._conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_WRITE_LOCK})")
                    yield self._conn
                    self._conn.exec_driver_sql("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
            except DBAPIError as exc:
                raise self._unavailable(exc) from None

    def _rollback(self) -> None:
        """End a failed write transaction, if the database has not ended it already (SQLite: disk full)."""
        if self._conn.invalidated:
            return  # the connection is gone: the server has ended the transaction
        raw = self.driver_connection
        open_ = raw.in_transaction if self.dialect == "sqlite" else raw.info.transaction_status.name != "IDLE"
        if open_:
            try:
                self._conn.exec_driver_sql("ROLLBACK")
            except DBAPIError:
                pass  # the connection is gone: the server has ended the transaction

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """The connection for queries outside any transaction (each sees every write committed before it)."""
        with self._lock:
            try:
                yield self._conn
            except DBAPIError as exc:
                raise self._unavailable(exc) from None

    def read(self, statement: Any, params: dict[str, Any] | None = None) -> Sequence[Row]:
        """The rows of one query, outside any transaction."""
        with self.reading() as db:
            return db.execute(statement, params).all()

    def _unavailable(self, exc: DBAPIError) -> StoreUnavailable:
        if exc.connection_invalidated:  # the connection broke: the next statement reconnects
            self._conn.rollback()
            kind = "unreachable"
        elif self.dialect == "sqlite":
            name = getattr(exc.orig, "sqlite_errorname", "") or ""
            kind = next((k for prefix, k in _SQLITE_KINDS.items() if name.startswith(prefix)), "io")
        else:
            state = getattr(exc.orig, "sqlstate", None) or ""
            kind = next((k for code, k in _POSTGRES_KINDS.items() if state.startswith(code)), "io")
            if not state and isinstance(exc, OperationalError):  # no server answered: a refused connection
                kind = "unreachable"
        return StoreUnavailable(self.path, kind, str(exc.orig).strip())

    def close(self) -> None:
        """Close the connection; the database is unusable afterwards."""
        with self._lock:
            self._conn.close()
            self._engine.dispose()

    def __enter__(self) -> StoreDatabase:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True)
class ClusterRow:
    """One cluster of the stored cluster set."""

    name: str
    spec: dict[str, Any]
    """The cluster's config as config.settings.Cluster reads it, plus `wan_gbps`: its links (Gbit/s) to
    the clusters added before it."""
    state: str
    """One of CLUSTER_STATES."""
    added_at: float
    """When it was added (unix time)."""


class ClusterRefused(ValueError):
    """A change to the cluster set that cannot be made (unknown cluster, the last one, one with jobs on
    it); nothing was changed."""


class UnknownCluster(ClusterRefused):
    """No cluster of that name is in the set."""


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
    """Jobs and their transitions in one database: a SQLite file, `":memory:"`, or a database URL.

    Safe to share between threads and between processes (see StoreDatabase: writes are serialised, so
    a read-check-write such as `transition` is atomic). Open one JobStore per process.
    `read_only` opens an existing store so that the database refuses every write (StoreUnavailable,
    kind `read-only`): a dry run looks at a live store without touching it. A store that an unfinished
    `cpn store copy` is filling is refused (StoreCopyUnfinished, naming the command that finishes it).
    """

    def __init__(self, path: str | Path, clock: Clock | None = None, *, read_only: bool = False) -> None:
        self._database = StoreDatabase(path, read_only=read_only)
        self.path = self._database.path
        """The store's file or URL, any password hidden."""
        self.on_server = self._database.dialect != "sqlite"
        """Whether the store is on a database server (PostgreSQL), which replicas on many machines share."""
        self.read_only = read_only
        self._clock = clock or WallClock()
        self._listeners: list[Callable[[], None]] = []
        self._term: int | None = None
        copying = self._database.read(COPY_SOURCE)
        if copying:
            self.close()
            raise StoreCopyUnfinished(self.path, copying[0][0])

    def fence(self, term: int | None) -> None:
        """Make every later FENCED move, and every journal entry, through this store carry scheduler term
        `term` and be refused (StaleTerm, nothing written) once the lease has moved to another term; the
        check runs in the write's own transaction, so a leader paused past its lease can never assign
        or submit. None lifts the fence (a process that leads no more)."""
        self._term = term

    def _check_term(self, db: Connection) -> None:
        """Raise StaleTerm in transaction `db` if a fence is set and the lease has left its term."""
        if self._term is None:
            return
        row = db.execute(_LEASE_ROW).first()
        if row is None or row.term != self._term:
            raise StaleTerm(self.path, self._term, None if row is None else Lease(*row))

    def append_journal(self, entry: str) -> None:
        """Append one simulated-cluster journal entry (JSON text), fenced like a submission."""
        with self._database.write() as db:
            self._check_term(db)
            db.execute(insert(SIM_JOURNAL).values(entry=entry, term=self._term))

    def journal(self) -> list[str]:
        """Every simulated-cluster journal entry, oldest first."""
        rows = self._database.read(select(SIM_JOURNAL.c.entry).order_by(SIM_JOURNAL.c.seq))
        return [entry for (entry,) in rows]

    def meta(self, key: str) -> str | None:
        """The store fact kept under `key` (STORE_META), None if none is."""
        rows = self._database.read(select(STORE_META.c.value).where(STORE_META.c.key == key))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        """Keep `value` under `key` in STORE_META, replacing what was there."""
        with self._database.write() as db:
            db.execute(delete(STORE_META).where(STORE_META.c.key == key))
            db.execute(insert(STORE_META).values(key=key, value=value))

    def clusters(self, *, removed: bool = False) -> list[ClusterRow]:
        """The stored cluster set in the order the clusters were added; `removed` ones too if asked."""
        query = select(CLUSTERS.c.name, CLUSTERS.c.spec, CLUSTERS.c.state, CLUSTERS.c.added_at)
        if not removed:
            query = query.where(CLUSTERS.c.state != "removed")
        rows = self._database.read(query.order_by(CLUSTERS.c.seq))
        return [ClusterRow(name, json.loads(spec), state, added_at) for name, spec, state, added_at in rows]

    def clusters_version(self) -> int:
        """How many times the cluster set changed: one cheap read a round tells the leader whether to look."""
        return int(self.meta(CLUSTERS_VERSION) or 0)

    def seed_clusters(self, specs: Sequence[tuple[str, dict[str, Any]]]) -> bool:
        """Store `specs` (name, spec) as the cluster set, all active, if the store holds none yet (a
        service's first start on the store); returns whether it did. Atomic: of two replicas starting at
        once, one seeds."""
        with self._database.write() as db:
            if db.execute(select(func.count()).select_from(CLUSTERS)).scalar_one():
                return False
            now = time.time()
            for name, spec in specs:
                db.execute(
                    insert(CLUSTERS).values(name=name, spec=json.dumps(spec), state="active", added_at=now)
                )
            self._bump_clusters(db)
        return True

    def add_cluster(self, name: str, spec: dict[str, Any]) -> None:
        """Add cluster `name`, active; a removed one of that name comes back with `spec`. ClusterRefused if
        the set has it already. `spec` is checked by the caller (cpn.adapters.clusters.cluster_to_add)."""
        with self._database.write() as db:
            state = db.execute(select(CLUSTERS.c.state).where(CLUSTERS.c.name == name)).scalar()
            values = {"spec": json.dumps(spec), "state": "active", "added_at": time.time()}
            if state is None:
                db.execute(insert(CLUSTERS).values(name=name, **values))
            elif state == "removed":
                db.execute(delete(CLUSTERS).where(CLUSTERS.c.name == name))
                db.execute(insert(CLUSTERS).values(name=name, **values))  # last in the order, as added now
            else:
                raise ClusterRefused(f"cluster {name!r} exists already ({state}); nothing was changed")
            self._bump_clusters(db)

    def set_cluster_state(self, name: str, state: Literal["active", "cordoned"]) -> bool:
        """Cordon (`cordoned`) or uncordon (`active`) cluster `name`; returns whether its state changed.
        ClusterRefused for a cluster the set does not have."""
        with self._database.write() as db:
            now = self._cluster_state(db, name)
            if now == state:
                return False
            db.execute(update(CLUSTERS).where(CLUSTERS.c.name == name).values(state=state))
            self._bump_clusters(db)
        return True

    def remove_cluster(self, name: str, *, force: bool = False) -> int:
        """Remove cluster `name` from the set; returns how many jobs are on it (assigned to it, migrating to
        it, submitted or running there), which the leader's next round deletes there and queues again,
        marked lost. ClusterRefused, nothing changed: an unknown cluster, the last one, or one with jobs on
        it without `force` (cordon it and let them end first)."""
        with self._database.write() as db:
            self._cluster_state(db, name)
            left = db.execute(
                select(func.count()).select_from(CLUSTERS).where(CLUSTERS.c.state != "removed")
            ).scalar_one()
            if left <= 1:
                raise ClusterRefused(
                    f"cluster {name!r} is the last one: cpn needs at least one; add another first"
                )
            jobs = self._jobs_on(db, name)
            if jobs and not force:
                raise ClusterRefused(
                    f"cluster {name!r} has {len(jobs)} job(s) on it (assigned, copying, submitted, running); "
                    f"cordon it (cpn cluster cordon {name}) and remove it once they end, or remove it with "
                    "--force to mark them lost and queue them again"
                )
            db.execute(update(CLUSTERS).where(CLUSTERS.c.name == name).values(state="removed"))
            self._bump_clusters(db)
        return len(jobs)

    def jobs_on(self, cluster: str) -> list[str]:
        """Ids of the jobs on `cluster` (assigned to it, migrating to it, submitted or running there)."""
        with self._database.reading() as db:
            return self._jobs_on(db, cluster)

    @staticmethod
    def _jobs_on(db: Connection, cluster: str) -> list[str]:
        query = select(JOBS.c.job_id).where(
            JOBS.c.cluster == cluster, JOBS.c.state.in_([s.value for s in ON_CLUSTER])
        )
        return list(db.execute(query.order_by(JOBS.c.seq)).scalars())

    @staticmethod
    def _cluster_state(db: Connection, name: str) -> str:
        """The state of cluster `name` in transaction `db`; ClusterRefused if the set does not have it."""
        state = db.execute(select(CLUSTERS.c.state).where(CLUSTERS.c.name == name)).scalar()
        if state is None or state == "removed":
            known = db.execute(
                select(CLUSTERS.c.name).where(CLUSTERS.c.state != "removed").order_by(CLUSTERS.c.seq)
            ).scalars()
            raise UnknownCluster(f"no cluster {name!r}; known: {', '.join(known)}")
        return state

    @staticmethod
    def _bump_clusters(db: Connection) -> None:
        """Count one more change of the cluster set (CLUSTERS_VERSION), in the change's own transaction."""
        version = db.execute(select(STORE_META.c.value).where(STORE_META.c.key == CLUSTERS_VERSION)).scalar()
        db.execute(delete(STORE_META).where(STORE_META.c.key == CLUSTERS_VERSION))
        db.execute(insert(STORE_META).values(key=CLUSTERS_VERSION, value=str(int(version or 0) + 1)))

    @property
    def _db(self) -> Any:
        """The database driver's own connection (tests set SQLite pragmas on it)."""
        return self._database.driver_connection

    def close(self) -> None:
        """Close the database connection; the store is unusable afterwards."""
        self._database.close()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def submit(self, specs: Sequence[JobSpec]) -> list[SubmitOutcome]:
        """Queue new jobs, all or none, in the given order; one outcome per spec.

        A job whose id is stored already with identical content is reported as
        `already_exists` and left alone, so resubmitting a file is harmless. One
        whose content differs raises JobConflict, and nothing from the call is stored.
        """
        encoded = [(spec.job_id, _encode(spec), spec) for spec in specs]
        now = self._clock.now()
        outcomes: list[SubmitOutcome] = []
        new_jobs: list[dict] = []
        with self._database.write() as db:
            known = _stored_specs(db, [job_id for job_id, _, _ in encoded])
            for job_id, text, spec in encoded:
                stored = known.get(job_id)
                if stored is None:
                    known[job_id] = text
                    new_jobs.append(
                        {
                            "job_id": job_id,
                            "spec": text,
                            "state": JobState.QUEUED.value,
                            "location": spec.source_cluster,
                            "submitted_at": now,
                            "updated_at": now,
                        }
                    )
                    outcomes.append(SubmitOutcome(job_id, "created"))
                elif stored == text:
                    outcomes.append(SubmitOutcome(job_id, "already_exists"))
                else:
                    raise JobConflict(job_id, _differing_fields(stored, text))
            if new_jobs:
                db.execute(_INSERT_JOB, new_jobs)
                db.execute(
                    _INSERT_TRANSITION,
                    [
                        _transition_row(job["job_id"], None, JobState.QUEUED, now, "accepted")
                        for job in new_jobs
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
        (cpn.store_facts: a preemption's saved progress, a migration's copy), written in the same transaction,
        which also removes the facts the move ends.
        """
        new_state = JobState(new_state)
        store_facts.check(fact, new_state)
        now = self._clock.now() if at is None else at
        with self._database.write() as db:
            row = db.execute(_PLACED, {"job_id": job_id}).first()
            if row is None:
                raise UnknownJob(job_id)
            old_state = JobState(row.state)
            check_transition(job_id, old_state, new_state)
            if only_from is not None and old_state not in only_from:
                raise IllegalTransition(f"job {job_id} is {old_state}, not {', '.join(sorted(only_from))}")
            fenced = new_state in FENCED and self._term is not None
            if fenced:
                self._check_term(db)
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
            db.execute(
                _INSERT_TRANSITION,
                _transition_row(
                    job_id, old_state, new_state, now, reason, cluster, node, gpu_mem_gb, log_tail, cause
                )
                | {"term": self._term if fenced else None},
            )
            store_facts.record(db, job_id, old_state, new_state, now, fact)

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

    def acquire_lease(self, holder: str, ttl_s: float) -> int:
        """Take the scheduler lease for `ttl_s` seconds and return its term.

        Raises StoreLeased while another holder's lease is unexpired. Taking one's own lease
        again renews it and keeps its term; taking over another's (expired or released) lease
        starts a new term. Atomic: two processes taking it at once get two answers, one of them a refusal.
        """
        _check_ttl(ttl_s)
        now = time.time()
        with self._database.write() as db:
            row = db.execute(_LEASE_ROW).first()
            if row is not None and row.holder != holder and row.expires_at > now:
                raise StoreLeased(row.holder, row.expires_at)
            term = 1 if row is None else row.term if row.holder == holder else row.term + 1
            values = {"holder": holder, "term": term, "expires_at": now + ttl_s}
            if row is None:
                db.execute(insert(LEASE).values(id=1, **values))
            else:
                db.execute(update(LEASE).where(LEASE.c.id == 1).values(**values))
        return term

    def renew_lease(self, holder: str, term: int, ttl_s: float) -> bool:
        """Extend the lease to `ttl_s` seconds from now; False if `holder` no longer holds it in `term`."""
        _check_ttl(ttl_s)
        with self._database.write() as db:
            renewed = db.execute(
                update(LEASE)
                .where(LEASE.c.id == 1, LEASE.c.holder == holder, LEASE.c.term == term)
                .values(expires_at=time.time() + ttl_s)
            ).rowcount
        return renewed == 1

    def release_lease(self, holder: str, term: int) -> None:
        """Give the lease up now if `holder` still holds it in `term`; the next holder gets a new term."""
        with self._database.write() as db:
            db.execute(
                update(LEASE)
                .where(LEASE.c.id == 1, LEASE.c.holder == holder, LEASE.c.term == term)
                .values(expires_at=0.0)
            )

    def lease(self) -> Lease | None:
        """The latest scheduler lease, expired or not; None if no process ever took one."""
        rows = self._database.read(_LEASE_ROW)
        return Lease(*rows[0]) if rows else None

    def saved_progress(self) -> dict[str, float]:
        """job_id -> the fraction of its work left at the checkpoint it was last preempted at, for every
        preempted job that has not ended (cpn.store_facts.SavedProgress)."""
        return dict(self._database.read(select(SAVED_PROGRESS.c.job_id, SAVED_PROGRESS.c.work_left)))

    def copies(self) -> list[Copy]:
        """The copies in flight: every migrating job's, with its spec and the cards it was assigned, oldest
        first (cpn.store_facts.CopyStarted)."""
        c = COPIES.c
        rows = self._database.read(
            select(*_JOB_COLUMNS, c.source, c.started_at, c.whole_cards)
            .select_from(COPIES.join(JOBS, c.job_id == JOBS.c.job_id))
            .order_by(c.started_at, JOBS.c.seq)
        )
        out = []
        for row in rows:
            record = _record(row[: len(_JOB_COLUMNS)])
            source, started_at, whole = row[len(_JOB_COLUMNS) :]
            (node, cards), *extra = record.placement
            placement = Placement(record.job_id, record.cluster or "", node, cards, tuple(extra))
            out.append(Copy(record, placement, source, started_at, bool(whole)))
        return out

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener()` after every committed `submit` that queued a new job (e.g. to wake a loop)."""
        self._listeners.append(listener)

    def get(self, job_id: str) -> JobRecord:
        """The job with this id; UnknownJob if there is none."""
        rows = self._database.read(_JOB, {"job_id": job_id})
        if not rows:
            raise UnknownJob(job_id)
        return _record(rows[0])

    def jobs(self, states: Iterable[JobState] | JobState | None = None) -> list[JobRecord]:
        """Jobs in acceptance order, all of them or only those in `states` (one state or several)."""
        query = select(*_JOB_COLUMNS).order_by(JOBS.c.seq)
        if states is not None:
            wanted = [JobState(s).value for s in ([states] if isinstance(states, str) else states)]
            query = query.where(JOBS.c.state.in_(wanted))
        return [_record(row) for row in self._database.read(query)]

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
        records = [_record(row[1:]) for row in rows[:limit]]
        return records, (rows[limit - 1][0] if len(rows) > limit else None)

    def history(self, job_id: str) -> list[Transition]:
        """The job's transitions, oldest first (the first is its entry into `queued`); UnknownJob if none."""
        rows = self._database.read(_HISTORY, {"job_id": job_id})
        if not rows:
            raise UnknownJob(job_id)
        return [_transition(row) for row in rows]

    def transitions_all(self) -> list[Transition]:
        """Every transition of every job, in the order they were recorded (for reports)."""
        rows = self._database.read(select(*_TRANSITION_COLUMNS).order_by(TRANSITIONS.c.seq))
        return [_transition(row) for row in rows]

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

    def specs(self, job_ids: Sequence[str]) -> dict[str, JobSpec]:
        """The specs of those of `job_ids` that exist."""
        with self._database.reading() as db:
            return {job_id: _decode(text) for job_id, text in _raw_specs(db, job_ids).items()}

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


def _raw_specs(db: Connection, job_ids: Sequence[str]) -> dict[str, str]:
    """Stored spec JSON of those of `job_ids` that exist."""
    found: dict[str, str] = {}
    unique = list(dict.fromkeys(job_ids))
    if len(unique) == 1:
        return dict(db.execute(_SPEC_OF, {"job_id": unique[0]}).all())
    for start in range(0, len(unique), _IN_CHUNK):
        found.update(db.execute(_SPECS_OF, {"ids": unique[start : start + _IN_CHUNK]}).all())
    return found


def _stored_specs(db: Connection, job_ids: list[str]) -> dict[str, str]:
    """Stored canonical specs of those of `job_ids` that exist, re-encoded by the current JobSpec."""
    return {job_id: _encode(_decode(text)) for job_id, text in _raw_specs(db, job_ids).items()}


def _differing_fields(stored: str, new: str) -> list[str]:
    old_data, new_data = json.loads(stored), json.loads(new)
    return sorted(k for k in old_data.keys() | new_data.keys() if old_data.get(k) != new_data.get(k))


def _transition_row(
    job_id: str,
    from_state: JobState | None,
    to_state: JobState,
    time_: float,
    reason: str,
    cluster: str | None = None,
    node: str | None = None,
    gpu_mem_gb: float | None = None,
    log_tail: str = "",
    cause: Cause = Cause.NONE,
) -> dict:
    return {
        "job_id": job_id,
        "from_state": None if from_state is None else from_state.value,
        "to_state": to_state.value,
        "time": time_,
        "reason": reason,
        "cluster": cluster,
        "node": node,
        "gpu_mem_gb": gpu_mem_gb,
        "log_tail": log_tail,
        "cause": Cause(cause).value,
    }


def _record(row: Sequence) -> JobRecord:
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
        end,
        low,
        high,
        moved,
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
        waiting=Waiting(job.job_id, code, detail or "", start, end, low, high, moved or "") if code else None,
        first_predicted_start=first,
        image=image,
        needs_more_than_gb=floor or None,
    )


def _transition(row: Sequence) -> Transition:
    job_id, from_state, to_state, time_, reason, cluster, node, gpu_mem_gb, log_tail, cause = row
    return Transition(
        job_id,
        JobState(from_state) if from_state else None,
        JobState(to_state),
        time_,
        reason,
        cluster,
        node,
        gpu_mem_gb,
        log_tail,
        Cause(cause),
    )
