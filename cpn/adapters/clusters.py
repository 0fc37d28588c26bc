"""Many clusters behind one ClusterGateway: each cluster's own gateway, kept and addressed by name.

The composition root gives every cluster a gateway (the Kubernetes one for a cluster that names a
kubeconfig context, the simulated one otherwise; simulated clusters share one simulator, so one gateway
may serve several names). The scheduler sees one port: inventory and events of all of them, and
submissions routed by the placement's cluster name, never by position in a list.

The cluster set lives in the job store (cpn.store `clusters`), seeded from the config on a service's first
start and changed while cpn runs (`cpn cluster add|cordon|uncordon|remove`, the API's `/clusters`).
ClusterBook brings a leader's ClusterSet up to it at the start of every round: a new cluster's gateway is
built and joins, a cordoned one's nodes leave the inventory the policies place on (its running jobs are
still followed to their end), and a removed one's jobs are deleted there and queued again, marked lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from config.runtime import store_exists
from config.settings import Cluster, ClustersConfig, ConfigError, format_validation_error
from cpn.adapters.gateway import ClusterGateway, JobEvent, NoLog, SubmitRejected
from cpn.decisions import Placement
from cpn.inventory import NodeState, nodes_from_config
from cpn.jobs import ON_CLUSTER, IllegalTransition, JobSpec, JobState
from cpn.store import ClusterRow, JobStore, UnknownJob
from cpn.transfer import TransferTimes

log = logging.getLogger(__name__)

LOST_REASON = "lost: its cluster {cluster} was removed while it was there; queued again"
"""The reason recorded when a removed cluster's job is queued again."""


class ClusterSet:
    """A ClusterGateway over named clusters, each served by the gateway given for its name."""

    def __init__(self, gateways: Mapping[str, ClusterGateway], cordoned: Sequence[str] = ()) -> None:
        if not gateways:
            raise ValueError("a cluster set needs at least one cluster")
        self._by_cluster = dict(gateways)
        self._distinct: list[ClusterGateway] = []
        self._index()
        self.cordoned = frozenset(cordoned)
        """Clusters that take no new jobs: their nodes leave `inventory`, their events still come."""

    def _index(self) -> None:
        self._distinct = []
        for gateway in self._by_cluster.values():
            if all(gateway is not g for g in self._distinct):
                self._distinct.append(gateway)

    @property
    def clusters(self) -> tuple[str, ...]:
        """The cluster names, in the order they joined (cordoned ones included)."""
        return tuple(self._by_cluster)

    def join(self, cluster: str, gateway: ClusterGateway) -> None:
        """Add `cluster`, served by `gateway` (which may serve others already)."""
        self._by_cluster[cluster] = gateway
        self._index()

    def leave(self, cluster: str) -> None:
        """Drop `cluster`; its gateway is closed unless it serves another cluster still."""
        gateway = self._by_cluster.pop(cluster)
        self._index()
        close = getattr(gateway, "close", None)
        if close is not None and all(gateway is not g for g in self._distinct):
            close()

    def gateway(self, cluster: str) -> ClusterGateway:
        """The gateway serving `cluster`; KeyError naming the known clusters otherwise."""
        try:
            return self._by_cluster[cluster]
        except KeyError:
            raise KeyError(f"unknown cluster {cluster!r}; known: {', '.join(self._by_cluster)}") from None

    def inventory(self) -> tuple[NodeState, ...]:
        """Every node jobs may be placed on: of every cluster in the set but the cordoned ones (a gateway's
        nodes of other clusters left out)."""
        return tuple(s for s in self.every_node() if s.node.cluster not in self.cordoned)

    def every_node(self) -> tuple[NodeState, ...]:
        """Every node of every cluster in the set, the cordoned ones' too: what people see (the web UI,
        /metrics), where a cordoned cluster's running jobs and cards must not vanish."""
        return tuple(
            state
            for gateway in self._distinct
            for state in gateway.inventory()
            if state.node.cluster in self._by_cluster
        )

    def submit(self, job: JobSpec, placement: Placement) -> None:
        """Submit through the gateway of the placement's cluster; SubmitRejected for an unknown cluster."""
        gateway = self._by_cluster.get(placement.cluster)
        if gateway is None:
            raise SubmitRejected(f"no cluster {placement.cluster!r}; known: {', '.join(self._by_cluster)}")
        gateway.submit(job, placement)

    def delete(self, job_id: str, grace_s: float | None = None) -> None:
        """Delete the job on whichever gateway holds it (none: nothing to do)."""
        for gateway in self._distinct:
            if job_id in gateway.held_jobs():
                gateway.delete(job_id, grace_s)

    def logs(self, job_id: str, tail_lines: int) -> str:
        """The job's log from the first gateway that has one; NoLog when none has."""
        for gateway in self._distinct:
            try:
                return gateway.logs(job_id, tail_lines)
            except NoLog:
                continue
        raise NoLog(f"no cluster has a log of {job_id}")

    def poll_events(self) -> list[JobEvent]:
        """Every gateway's events, oldest first."""
        events = [event for gateway in self._distinct for event in gateway.poll_events()]
        return sorted(events, key=lambda e: e.time)

    def close(self) -> None:
        """Stop what the gateways run in the background (a real cluster's watches)."""
        for gateway in self._distinct:
            close = getattr(gateway, "close", None)
            if close is not None:
                close()

    def held_jobs(self) -> frozenset[str]:
        """Jobs any gateway holds."""
        return frozenset().union(*(gateway.held_jobs() for gateway in self._distinct))


def cluster_specs(config: ClustersConfig) -> list[tuple[str, dict[str, Any]]]:
    """The clusters of `config` as the store keeps them (JobStore.seed_clusters): each one's config, with
    `wan_gbps` its links to the clusters before it."""
    specs = []
    for i, cluster in enumerate(config.clusters):
        spec = cluster.model_dump(mode="json", exclude_defaults=True)
        spec["wan_gbps"] = {c.name: config.bandwidth_gbps(cluster.name, c.name) for c in config.clusters[:i]}
        specs.append((cluster.name, spec))
    return specs


def stored_clusters(store: JobStore, config: ClustersConfig) -> list[ClusterRow]:
    """The store's cluster set, removed clusters too, seeded from `config` if the store has none yet (a
    service's first start); a read-only store with none gives `config`'s."""
    rows = store.clusters(removed=True)
    if not rows and not store.read_only:
        store.seed_clusters(cluster_specs(config))
        rows = store.clusters(removed=True)
    return rows or [ClusterRow(name, spec, "active", 0.0) for name, spec in cluster_specs(config)]


def clusters_now(configured: ClustersConfig, store_target: Path | str) -> ClustersConfig:
    """The clusters a service on the job store `store_target` places on now: the store's cluster set
    (clusters added with `cpn cluster add` included; cordoned and removed ones left out) over
    `configured`'s label domain and GPU aliases; `configured` where no service has kept a set there yet.
    What the benchmark loop measures, so that a cluster that joins at run time is benchmarked."""
    if not store_exists(store_target):
        return configured
    with JobStore(store_target, read_only=True) as store:
        rows = [r for r in store.clusters() if r.state == "active"]
    return stored_config(configured, rows) if rows else configured


def stored_config(base: ClustersConfig, rows: Sequence[ClusterRow]) -> ClustersConfig:
    """`base` (its label domain and GPU aliases) over the stored clusters `rows` and their WAN links."""
    names = {row.name for row in rows}
    clusters, wan = [], {}
    for row in rows:
        spec = dict(row.spec)
        wan[row.name] = {dst: gbps for dst, gbps in spec.pop("wan_gbps", {}).items() if dst in names}
        clusters.append(spec)
    return ClustersConfig.model_validate(
        {
            "label_domain": base.label_domain,
            "gpu_aliases": base.gpu_aliases,
            "clusters": clusters,
            "wan_gbps": wan,
        }
    )


def cluster_to_add(rows: Sequence[ClusterRow], data: Any) -> tuple[str, dict[str, Any]]:
    """The name and stored spec of the cluster `data` describes (a cluster as the config's `clusters` list
    has it, plus `wan_gbps`: Gbit/s to each cluster of the set `rows`), checked against that set;
    ConfigError naming the field otherwise."""
    if not isinstance(data, dict):
        raise ConfigError("a cluster file holds one cluster: a mapping with name, node_groups, wan_gbps, ...")
    spec = dict(data)
    wan = spec.pop("wan_gbps", {})
    known = [row.name for row in rows]
    if not isinstance(wan, dict) or set(wan) - set(known):
        raise ConfigError(f"wan_gbps: give Gbit/s to each cluster of the set by name ({', '.join(known)})")
    try:
        cluster = Cluster.model_validate(spec)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None
    if cluster.name in {row.name for row in rows}:
        raise ConfigError(f"name: cluster {cluster.name!r} exists already")
    stored = {**cluster.model_dump(mode="json", exclude_defaults=True), "wan_gbps": wan}
    try:
        stored_config(
            ClustersConfig.model_construct(), [*rows, ClusterRow(cluster.name, stored, "active", 0.0)]
        )
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None
    return cluster.name, stored


def cluster_summary(store: JobStore) -> list[dict[str, Any]]:
    """The stored cluster set for people (`cpn cluster list`, `GET /clusters`): each cluster's name, state,
    whether it is simulated, its nodes and cards as its node groups list them (None for a real cluster,
    whose nodes its Kubernetes API lists), when it was added (unix time) and how many jobs are on it."""
    out = []
    for row in store.clusters():
        simulated = not row.spec.get("kube_context")
        nodes = (
            nodes_from_config(stored_config(ClustersConfig.model_construct(), [row])) if simulated else None
        )
        out.append(
            {
                "name": row.name,
                "state": row.state,
                "simulated": simulated,
                "nodes": None if nodes is None else len(nodes),
                "cards": None if nodes is None else sum(n.gpu_count for n in nodes),
                "added_at": row.added_at,
                "jobs_on": len(store.jobs_on(row.name)),
            }
        )
    return out


class ClusterBook:
    """Keeps a leader's ClusterSet, and the transfer times over it, as the store's cluster set says.

    `join(config, name)` builds the gateway of a cluster that joins (config: the whole set, new one in).
    `refresh` costs one read of the store's change counter when nothing changed.
    """

    def __init__(
        self,
        store: JobStore,
        base: ClustersConfig,
        clusters: ClusterSet,
        join: Callable[[ClustersConfig, str], ClusterGateway],
        transfers: TransferTimes,
    ) -> None:
        self.store = store
        self.base = base
        self.clusters = clusters
        self.join = join
        self.transfers = transfers
        self.config = transfers.clusters
        """The clusters in the set now, with their WAN links."""
        self._version: int | None = None
        """The store's change counter when the set was last brought up to it; None: never yet."""

    def refresh(self) -> bool:
        """Bring the set up to the store's, if the store's changed since the last call (or this is the first);
        returns whether the set itself changed. A cluster whose gateway cannot be built is left out and
        logged, and tried again at the next change."""
        version = self.store.clusters_version()
        if version == self._version:
            return False
        rows = self.store.clusters(removed=True)
        kept = [row for row in rows if row.state != "removed"]
        self.config = stored_config(self.base, kept)
        before = (self.clusters.clusters, self.clusters.cordoned)
        for row in rows:
            if row.state == "removed":
                self._drop(row.name)
        for row in kept:
            if row.name not in self.clusters.clusters:
                try:
                    self.clusters.join(row.name, self.join(self.config, row.name))
                except Exception:
                    log.exception("cluster %s could not join; it gets no jobs", row.name)
                    continue
                log.info("cluster %s joined", row.name)
        self.clusters.cordoned = frozenset(row.name for row in kept if row.state == "cordoned")
        self.transfers.reconfigure(self.config)
        self._version = version
        return (self.clusters.clusters, self.clusters.cordoned) != before

    def _drop(self, cluster: str) -> None:
        """Delete the jobs the store has on removed `cluster` there, queue them again marked lost, and
        let its gateway go."""
        for job_id in self.store.jobs_on(cluster):
            self.clusters.delete(job_id)
            try:
                self.store.transition(
                    job_id, JobState.QUEUED, reason=LOST_REASON.format(cluster=cluster), only_from=ON_CLUSTER
                )
            except (IllegalTransition, UnknownJob):
                continue  # it ended, or was cancelled, meanwhile
            log.warning("job %s lost with cluster %s; queued again", job_id, cluster)
        if cluster in self.clusters.clusters:
            self.clusters.leave(cluster)
            log.info("cluster %s left", cluster)
