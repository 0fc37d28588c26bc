"""The durable job store: every accepted job, its current state, and every transition it made; the
cluster set; the scheduler lease and fencing; the simulated clusters' journal; facts about the store.

One database (cpn.store.database: SQLite or PostgreSQL, its schema Alembic's, cpn.migrations) holds each
concern in a module of its own:

- jobs, records: jobs and transitions, cancels, waiting reasons, and every read of them;
- facts: the scheduler's facts written with the transitions that make or end them;
- clusters: the cluster set;
- lease: the scheduler lease, and the fence that refuses a former leader's writes;
- journal: the simulated clusters' journal; meta: facts about the store itself;
- copier: `cpn store copy`, a whole store into another database.

`JobStore` is the one object callers hold: it opens the database once and composes the parts, each of its
methods one of theirs, so a caller needs no part's name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cpn.clock import Clock, WallClock
from cpn.store.clusters import (
    CLUSTER_STATES,
    CLUSTERS_VERSION,
    ClusterRefused,
    ClusterRow,
    ClusterTable,
    UnknownCluster,
)
from cpn.store.database import StoreDatabase, StoreError, StoreUnavailable, store_file
from cpn.store.jobs import JobTable
from cpn.store.journal import Journal
from cpn.store.lease import FENCED, Fence, Lease, LeaseLost, LeaseTable, StaleTerm, StoreLeased
from cpn.store.meta import COPY_IN_PROGRESS, COPY_SOURCE, Meta, StoreCopyUnfinished
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
)
from cpn.store.schema import CANCEL_REQUESTS, CLUSTERS, JOBS, LEASE, SIM_JOURNAL, STORE_META, TRANSITIONS

__all__ = [
    "CANCEL_REQUESTS",
    "CLUSTERS",
    "CLUSTERS_VERSION",
    "CLUSTER_STATES",
    "COPY_IN_PROGRESS",
    "COPY_SOURCE",
    "FENCED",
    "JOBS",
    "LEASE",
    "SIM_JOURNAL",
    "STORE_META",
    "TRANSITIONS",
    "CancelOutcome",
    "CancelRequest",
    "Change",
    "ClusterRefused",
    "ClusterRow",
    "Copy",
    "JobConflict",
    "JobRecord",
    "JobStore",
    "Lease",
    "LeaseLost",
    "StaleTerm",
    "StoreCopyUnfinished",
    "StoreDatabase",
    "StoreError",
    "StoreLeased",
    "StoreUnavailable",
    "SubmitOutcome",
    "Transition",
    "UnknownCluster",
    "UnknownJob",
    "store_file",
]


def _part(name: str, method: Callable) -> Callable:
    """A JobStore method that is `method` of its part `name` (its docstring and signature included)."""

    @functools.wraps(method)
    def call(self: JobStore, *args: Any, **kwargs: Any) -> Any:
        return method(getattr(self, name), *args, **kwargs)

    return call


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
        self._fence = Fence(self.path)
        self._jobs = JobTable(self._database, self._clock, self._fence)
        self._meta = Meta(self._database)
        self._clusters = ClusterTable(self._database, self._meta)
        self._leases = LeaseTable(self._database)
        self._journal = Journal(self._database, self._fence)
        copying = self._database.read(COPY_SOURCE)
        if copying:
            self.close()
            raise StoreCopyUnfinished(self.path, copying[0][0])

    def fence(self, term: int | None) -> None:
        """Make every later FENCED move, and every journal entry, through this store carry scheduler term
        `term` and be refused (StaleTerm, nothing written) once the lease has moved to another term; the
        check runs in the write's own transaction, so a leader paused past its lease can never assign
        or submit. None lifts the fence (a process that leads no more)."""
        self._fence.term = term

    # jobs and transitions (cpn.store.jobs)
    submit = _part("_jobs", JobTable.submit)
    transition = _part("_jobs", JobTable.transition)
    cancel = _part("_jobs", JobTable.cancel)
    cancel_requests = _part("_jobs", JobTable.cancel_requests)
    set_waiting = _part("_jobs", JobTable.set_waiting)
    add_listener = _part("_jobs", JobTable.add_listener)
    saved_progress = _part("_jobs", JobTable.saved_progress)
    copies = _part("_jobs", JobTable.copies)
    get = _part("_jobs", JobTable.get)
    jobs = _part("_jobs", JobTable.jobs)
    jobs_on = _part("_jobs", JobTable.jobs_on)
    page = _part("_jobs", JobTable.page)
    history = _part("_jobs", JobTable.history)
    transitions_all = _part("_jobs", JobTable.transitions_all)
    changes_since = _part("_jobs", JobTable.changes_since)
    terms = _part("_jobs", JobTable.terms)
    specs = _part("_jobs", JobTable.specs)
    counts = _part("_jobs", JobTable.counts)
    tally = _part("_jobs", JobTable.tally)

    # the cluster set (cpn.store.clusters)
    clusters = _part("_clusters", ClusterTable.clusters)
    clusters_version = _part("_clusters", ClusterTable.clusters_version)
    seed_clusters = _part("_clusters", ClusterTable.seed_clusters)
    add_cluster = _part("_clusters", ClusterTable.add_cluster)
    set_cluster_state = _part("_clusters", ClusterTable.set_cluster_state)
    remove_cluster = _part("_clusters", ClusterTable.remove_cluster)

    # the scheduler lease (cpn.store.lease)
    acquire_lease = _part("_leases", LeaseTable.acquire_lease)
    renew_lease = _part("_leases", LeaseTable.renew_lease)
    release_lease = _part("_leases", LeaseTable.release_lease)
    lease = _part("_leases", LeaseTable.lease)

    # the simulated clusters' journal and the store's own facts (cpn.store.journal, cpn.store.meta)
    append_journal = _part("_journal", Journal.append_journal)
    journal = _part("_journal", Journal.journal)
    meta = _part("_meta", Meta.meta)
    set_meta = _part("_meta", Meta.set_meta)

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
