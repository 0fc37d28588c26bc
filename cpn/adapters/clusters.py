"""Many clusters behind one ClusterGateway: each cluster's own gateway, kept and addressed by name.

The composition root gives every configured cluster a gateway (the Kubernetes one for a cluster that
names a kubeconfig context, the simulated one otherwise; simulated clusters share one simulator, so
one gateway may serve several names). The scheduler sees one port: inventory and events of all of
them, and submissions routed by the placement's cluster name, never by position in a list.
"""

from __future__ import annotations

from collections.abc import Mapping

from cpn.adapters.gateway import ClusterGateway, JobEvent, NoLog, SubmitRejected
from cpn.decisions import Placement
from cpn.inventory import NodeState
from cpn.jobs import JobSpec


class ClusterSet:
    """A ClusterGateway over named clusters, each served by the gateway given for its name."""

    def __init__(self, gateways: Mapping[str, ClusterGateway]) -> None:
        if not gateways:
            raise ValueError("a cluster set needs at least one cluster")
        self._by_cluster = dict(gateways)
        self._distinct: list[ClusterGateway] = []
        for gateway in self._by_cluster.values():
            if all(gateway is not g for g in self._distinct):
                self._distinct.append(gateway)

    @property
    def clusters(self) -> tuple[str, ...]:
        """The cluster names, as configured."""
        return tuple(self._by_cluster)

    def gateway(self, cluster: str) -> ClusterGateway:
        """The gateway serving `cluster`; KeyError naming the known clusters otherwise."""
        try:
            return self._by_cluster[cluster]
        except KeyError:
            raise KeyError(f"unknown cluster {cluster!r}; known: {', '.join(self._by_cluster)}") from None

    def inventory(self) -> tuple[NodeState, ...]:
        """Every node of every configured cluster (a gateway's nodes of other clusters left out)."""
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
