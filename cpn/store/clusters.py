"""The cluster set in the store (cpn.adapters.clusters.ClusterBook reads and changes it): one row per
cluster, in the order they were added, and a counter of its changes the leader reads every round."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Connection, delete, func, insert, select, update

from cpn.store import meta
from cpn.store.database import StoreDatabase
from cpn.store.jobs import on_cluster
from cpn.store.schema import CLUSTERS

CLUSTER_STATES = ("active", "cordoned", "removed")
"""A cluster's states: `active` takes new jobs; `cordoned` takes none while its running jobs go on to their
end; `removed` is gone from the set (its row stays, so a restart can replay what simulated clusters ran)."""

CLUSTERS_VERSION = "clusters_version"
"""STORE_META key counting the cluster set's changes: the leader reads it each round, the set on a change."""


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


class ClusterTable:
    """The stored cluster set: read by anyone, changed atomically, each change counted (CLUSTERS_VERSION)."""

    def __init__(self, database: StoreDatabase, meta_: meta.Meta) -> None:
        self._database = database
        self._meta = meta_

    def clusters(self, *, removed: bool = False) -> list[ClusterRow]:
        """The stored cluster set in the order the clusters were added; `removed` ones too if asked."""
        query = select(CLUSTERS.c.name, CLUSTERS.c.spec, CLUSTERS.c.state, CLUSTERS.c.added_at)
        if not removed:
            query = query.where(CLUSTERS.c.state != "removed")
        rows = self._database.read(query.order_by(CLUSTERS.c.seq))
        return [ClusterRow(name, json.loads(spec), state, added_at) for name, spec, state, added_at in rows]

    def clusters_version(self) -> int:
        """How many times the cluster set changed: one cheap read a round tells the leader whether to look."""
        return int(self._meta.meta(CLUSTERS_VERSION) or 0)

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
            meta.count_up(db, CLUSTERS_VERSION)
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
            meta.count_up(db, CLUSTERS_VERSION)

    def set_cluster_state(self, name: str, state: Literal["active", "cordoned"]) -> bool:
        """Cordon (`cordoned`) or uncordon (`active`) cluster `name`; returns whether its state changed.
        ClusterRefused for a cluster the set does not have."""
        with self._database.write() as db:
            now = self._cluster_state(db, name)
            if now == state:
                return False
            db.execute(update(CLUSTERS).where(CLUSTERS.c.name == name).values(state=state))
            meta.count_up(db, CLUSTERS_VERSION)
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
            jobs = on_cluster(db, name)
            if jobs and not force:
                raise ClusterRefused(
                    f"cluster {name!r} has {len(jobs)} job(s) on it (assigned, copying, submitted, running); "
                    f"cordon it (cpn cluster cordon {name}) and remove it once they end, or remove it with "
                    "--force to mark them lost and queue them again"
                )
            db.execute(update(CLUSTERS).where(CLUSTERS.c.name == name).values(state="removed"))
            meta.count_up(db, CLUSTERS_VERSION)
        return len(jobs)

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
