"""Facts about the store itself (STORE_META, by key): the mark of an unfinished `cpn store copy` into it,
and counters such as the cluster set's version."""

from __future__ import annotations

from sqlalchemy import Connection, delete, insert, select

from cpn.store.database import StoreDatabase, StoreError
from cpn.store.schema import STORE_META

COPY_IN_PROGRESS = "copy_in_progress"
"""STORE_META key present while `cpn store copy` fills the store; its value names the source."""

COPY_SOURCE = select(STORE_META.c.value).where(STORE_META.c.key == COPY_IN_PROGRESS)
"""The source a store is being copied from: one row while a copy into it is unfinished, else none."""


class StoreCopyUnfinished(StoreError):
    """The store is the destination of a `cpn store copy` that has not finished: its jobs are incomplete."""

    def __init__(self, path: str, source: str) -> None:
        self.source = source
        super().__init__(
            f"{path}: a copy of the job store {source} into this store did not finish, so it lacks jobs; "
            f"finish it first: cpn store copy {source} {path}"
        )


class Meta:
    """The STORE_META facts, read and written by key."""

    def __init__(self, database: StoreDatabase) -> None:
        self._database = database

    def meta(self, key: str) -> str | None:
        """The store fact kept under `key` (STORE_META), None if none is."""
        rows = self._database.read(select(STORE_META.c.value).where(STORE_META.c.key == key))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        """Keep `value` under `key` in STORE_META, replacing what was there."""
        with self._database.write() as db:
            put(db, key, value)


def put(db: Connection, key: str, value: str) -> None:
    """Keep `value` under `key` in transaction `db`, replacing what was there."""
    db.execute(delete(STORE_META).where(STORE_META.c.key == key))
    db.execute(insert(STORE_META).values(key=key, value=value))


def count_up(db: Connection, key: str) -> None:
    """Add one to the counter kept under `key` (0 when none is), in transaction `db`."""
    value = db.execute(select(STORE_META.c.value).where(STORE_META.c.key == key)).scalar()
    put(db, key, str(int(value or 0) + 1))
