"""The scheduler lease and fencing in the store: who may schedule from it, in which term, and the check
that refuses a leader's write once its term has passed (cpn.engine.lease keeps a process's hold on it)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Connection, insert, select, update

from cpn.jobs import JobState
from cpn.store.database import StoreDatabase, StoreError
from cpn.store.schema import LEASE

FENCED = frozenset({JobState.ASSIGNED, JobState.MIGRATING, JobState.SUBMITTED})
"""The moves a scheduler makes only as the leader: under a fence (`JobStore.fence`) each is refused unless
the store's lease is still in the fence's term."""

_LEASE_ROW = select(LEASE.c.holder, LEASE.c.term, LEASE.c.expires_at).where(LEASE.c.id == 1)


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


class Fence:
    """The term a leader's fenced writes carry (None: no fence), and the check each makes in its own
    transaction."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.term: int | None = None

    def check(self, db: Connection) -> None:
        """Raise StaleTerm in transaction `db` if a fence is set and the lease has left its term."""
        if self.term is None:
            return
        row = db.execute(_LEASE_ROW).first()
        if row is None or row.term != self.term:
            raise StaleTerm(self.path, self.term, None if row is None else Lease(*row))


class LeaseTable:
    """The lease's one row: taken, renewed and released atomically (each a write transaction)."""

    def __init__(self, database: StoreDatabase) -> None:
        self._database = database

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


def _check_ttl(ttl_s: float) -> None:
    if not ttl_s > 0:
        raise ValueError(f"ttl_s must be a positive number of seconds, not {ttl_s!r}")
