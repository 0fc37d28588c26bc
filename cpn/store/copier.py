"""Copy a job store into a new database (`cpn store copy`), e.g. a SQLite file into PostgreSQL.

Every job (spec, state, placement, waiting reason, predicted starts) and every transition is copied
with its position, so the copy lists, pages and follows exactly as the source did, and so are the
pending cancel requests and the scheduler's facts (cpn.store.facts: saved progress, copies in flight), so a
scheduler on the copy decides as one on the source would; the scheduler lease is not (the first scheduler on
the copy takes a new one).
The source is brought to this cpn's schema first, as any cpn that opens it would; the destination must
be empty.

Rows go over in batches, each batch one transaction, and the destination is marked `copy_in_progress`
(naming the source) from the first batch until the end: every cpn that opens a store so marked refuses
it (cpn.store.meta.StoreCopyUnfinished, naming the command that finishes the copy), and that command carries
on after the last batch that committed. The cancel requests and the facts go over with the last
transaction, which counts the jobs per state, the transitions, the cancel requests and the facts on both
sides and removes the mark only when they agree.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, func, insert, select
from sqlalchemy.sql.expression import TableClause

from cpn.store.database import StoreDatabase, StoreError
from cpn.store.facts import COPIES, SAVED_PROGRESS
from cpn.store.lease import StoreLeased
from cpn.store.meta import COPY_IN_PROGRESS, COPY_SOURCE
from cpn.store.schema import CANCEL_REQUESTS, JOBS, LEASE, STORE_META, TRANSITIONS

BATCH = 2000
"""Rows per transaction: a batch is lost at most when the copy is interrupted."""

Progress = Callable[[str, int, int], None]
"""Called after every batch with the table's name, rows copied so far and rows in all."""


@dataclass(frozen=True)
class CopyResult:
    """What a finished copy holds: as many jobs (per state) and transitions as the source."""

    destination: str
    """The destination as messages name it (any password hidden)."""
    jobs: int
    transitions: int
    resumed: bool
    """True if it finished a copy that an earlier run had begun."""


def copy_store(
    source: str | Path,
    destination: str | Path,
    *,
    batch: int = BATCH,
    progress: Progress = lambda table, done, total: None,
) -> CopyResult:
    """Copy every job and transition of the store at `source` into the empty store at `destination`.

    Both are store targets as JobStore takes them (a path or a URL). Raises StoreError when the source
    is itself unfinished or its scheduler is running, when the destination holds jobs or another
    copy, and when the counts disagree at the end (the source changed during the copy).
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, not {batch}")
    with StoreDatabase(source) as src, StoreDatabase(destination) as dst:
        if src.read(COPY_SOURCE):
            raise StoreError(f"{src.path}: this store is itself an unfinished copy; finish that copy first")
        resumed = _begin(src, dst)
        for table in (JOBS, TRANSITIONS):  # jobs first: every transition refers to its job
            _copy_rows(src, dst, table, batch, progress)
        return _finish(src, dst, resumed)


_SMALL_TABLES = (CANCEL_REQUESTS, SAVED_PROGRESS, COPIES)
"""Tables bounded by the jobs in progress, not by the store's history: copied in the last transaction."""


def _count(database: StoreDatabase, table: TableClause) -> int:
    return database.read(select(func.count()).select_from(table))[0][0]


def _begin(src: StoreDatabase, dst: StoreDatabase) -> bool:
    """Mark the destination as being filled from `src`; True if an earlier run had marked it so."""
    lease = src.read(select(LEASE.c.holder, LEASE.c.expires_at))
    if lease and lease[0].expires_at > time.time():
        raise StoreLeased(*lease[0])  # a running scheduler would change the source under the copy
    with dst.write() as db:
        marked = db.execute(COPY_SOURCE).scalar()
        if marked is None:
            held = db.execute(select(func.count()).select_from(JOBS)).scalar()
            if held:
                raise StoreError(f"{dst.path}: holds {held} jobs already; copy into a new, empty store")
            db.execute(insert(STORE_META).values(key=COPY_IN_PROGRESS, value=src.path))
            return False
        if marked != src.path:
            raise StoreError(f"{dst.path}: an unfinished copy from {marked} is in it; finish that one first")
        return True


def _copy_rows(
    src: StoreDatabase, dst: StoreDatabase, table: TableClause, batch: int, progress: Progress
) -> None:
    """Copy the rows of `table` that the destination lacks, in position order, `batch` at a time."""
    seq = table.c.seq
    total = _count(src, table)
    done = _count(dst, table)
    last = dst.read(select(func.coalesce(func.max(seq), 0)))[0][0]
    while rows := src.read(select(*table.c).where(seq > last).order_by(seq).limit(batch)):
        with dst.write() as db:
            db.execute(insert(table), [row._asdict() for row in rows])
        last, done = rows[-1].seq, done + len(rows)
        progress(table.name, done, total)


def _finish(src: StoreDatabase, dst: StoreDatabase, resumed: bool) -> CopyResult:
    """Copy the cancel requests and the scheduler's facts, check the counts and remove the mark, in one
    transaction; StoreError if the source changed."""
    small = [(table, [row._asdict() for row in src.read(select(*table.c))]) for table in _SMALL_TABLES]
    with dst.write() as db:
        for table, rows in small:
            if rows:
                db.execute(insert(table), rows)
        if dst.dialect == "postgresql":  # rows came with their positions: new ones must follow them
            for table in (JOBS, TRANSITIONS):
                sequence = func.pg_get_serial_sequence(table.name, "seq")
                db.execute(select(func.setval(sequence, func.max(table.c.seq))))
        per_state = select(JOBS.c.state, func.count()).group_by(JOBS.c.state)
        tables = (TRANSITIONS, *_SMALL_TABLES)
        wanted = (dict(src.read(per_state)), *(_count(src, table) for table in tables))
        got = (
            dict(db.execute(per_state).all()),
            *(db.execute(select(func.count()).select_from(table)).scalar() for table in tables),
        )
        if got != wanted:
            raise StoreError(
                f"{src.path} changed during the copy (jobs per state, transitions, cancel requests, saved "
                f"progress, copies: {wanted} there, {got} copied): stop every cpn that uses it, empty "
                f"{dst.path} and copy again"
            )
        db.execute(delete(STORE_META).where(STORE_META.c.key == COPY_IN_PROGRESS))
    return CopyResult(dst.path, sum(got[0].values()), got[1], resumed)
