"""The job store's one database: a SQLite file or a PostgreSQL database, its schema migrated on opening,
every write one serialised transaction, and the errors of a store that cannot be used.

One database, SQLite or PostgreSQL, through SQLAlchemy Core: a SQLite file (WAL mode, so that the HTTP
intake, a scheduler and the CLI can use it at once from separate processes, readers never blocking the
one writer) is the embedded default; a PostgreSQL database (`postgresql://...`) serves several machines.
The schema is kept by Alembic migrations (cpn.migrations), run whenever a store opens: the Alembic revision
is the store's one schema number. Every write is one transaction and writes are serialised, so every
read-check-write (a transition, a submission, taking the lease) is atomic on both databases.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Executable, Row, StaticPool, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from cpn import migrations

log = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The store cannot be used (not a cpn store, written by a newer cpn, unreadable, unreachable)."""


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
        self._driver_error: type[Exception] = self._engine.dialect.loaded_dbapi.Error
        """The driver's base error class (sqlite3's or psycopg's): what statements sent to it raise."""
        dialect = self._engine.dialect
        self._named = type(dialect)(paramstyle="named") if self.dialect == "sqlite" else dialect
        """The dialect `sql` compiles for: parameters by name (SQLite's `:name`, psycopg's `%(name)s`)."""
        self._compiled: dict[Executable, str] = {}
        self._begin = (
            "BEGIN IMMEDIATE"
            if self.dialect == "sqlite"
            else f"BEGIN; SELECT pg_advisory_xact_lock({_WRITE_LOCK})"  # one round trip
        )
        """What starts a write transaction and takes the database's write lock."""
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
            migrations.upgrade(conn)  # a new store, or one from before the migrations: every one runs
        log.info("%s: job store schema %s brought to %s", self.path, revision or "(none)", migrations.HEAD)

    def _revision(self) -> str | None:
        """The store's Alembic revision: None for a new store and for one a cpn from before the migrations
        wrote (no revision recorded); StoreError if a newer cpn wrote it."""
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

        The database's own failures (disk full, read-only, busy, unreachable) become StoreUnavailable. The
        transaction's own statements go straight to the driver, as `run` does.
        """
        with self._lock:
            raw = None
            try:
                raw = self.driver_connection
                cursor = raw.cursor()
                cursor.execute(self._begin)
                try:
                    yield self._conn
                    cursor.execute("COMMIT")
                except BaseException:
                    self._rollback(raw)
                    raise
            except DBAPIError as exc:
                raise self._unavailable(exc) from None
            except self._driver_error as exc:
                raise self._unavailable(self._wrapped(exc, raw)) from None

    def run(self, statement: Executable, params: dict[str, Any] | None = None) -> list[tuple]:
        """Run `statement` inside `write()` on the driver's own cursor, compiled once (`sql`); its rows.

        For the hottest path, a submission: SQLAlchemy's work on every execution (about a tenth of a
        millisecond) is several times the statement's own on a small write.
        """
        cursor = self.driver_connection.cursor()
        cursor.execute(self.sql(statement), params or {})
        return cursor.fetchall() if cursor.description else []

    def changed(self, statement: Executable, params: dict[str, Any]) -> int:
        """Run a write `statement` as `run` does; how many rows it changed."""
        cursor = self.driver_connection.cursor()
        cursor.execute(self.sql(statement), params)
        return cursor.rowcount

    def run_many(self, statement: Executable, rows: Sequence[dict[str, Any]]) -> None:
        """Run `statement` inside `write()` once for each of `rows`, as `run` does (one executemany)."""
        cursor = self.driver_connection.cursor()
        if len(rows) == 1:  # psycopg's executemany sets up a pipeline, a round trip more for one row
            cursor.execute(self.sql(statement), rows[0])
        else:
            cursor.executemany(self.sql(statement), rows)

    def sql(self, statement: Executable) -> str:
        """`statement` in this database's own SQL, its parameters by name, compiled on first use only."""
        text = self._compiled.get(statement)
        if text is None:
            text = self._compiled[statement] = str(statement.compile(dialect=self._named))
        return text

    def _wrapped(self, exc: Exception, raw: Any) -> DBAPIError:
        """A driver's own error as SQLAlchemy would have wrapped it; a connection it broke is invalidated, so
        that the next statement reconnects."""
        broken = self._conn.invalidated or (
            self.dialect == "postgresql" and raw is not None and (raw.closed or raw.broken)
        )
        if broken and not self._conn.invalidated:
            self._conn.invalidate()
        return DBAPIError.instance(None, None, exc, self._driver_error, connection_invalidated=broken)

    def _rollback(self, raw: Any) -> None:
        """End a failed write transaction, if the database has not ended it already (SQLite: disk full)."""
        if self._conn.invalidated:
            return  # the connection is gone: the server has ended the transaction
        open_ = raw.in_transaction if self.dialect == "sqlite" else raw.info.transaction_status.name != "IDLE"
        if open_:
            try:
                raw.cursor().execute("ROLLBACK")
            except self._driver_error:
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
