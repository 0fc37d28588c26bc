"""The Prometheus collector: live GPU and node load of every cluster, behind the metrics-source port.

Each cluster's `prometheus_url` is read through prometheus-api-client with the PromQL of its settings
(`metrics.queries`, defaults on dcgm-exporter and node-exporter series, each overridable). Every reading
names the raw series that dates it; the collector asks Prometheus for those series' sample timestamps
(`timestamp(SERIES)`) and judges each series against the cluster's staleness limit (3 scrape intervals
unless set):

- ok: every target's newest sample is younger than the limit;
- stale: some target's newest sample is older (a hung exporter serving old samples);
- missing: no sample at all (never scraped, or the target went down: Prometheus then marks its series
  stale and they vanish from instant queries);
- unreachable: Prometheus did not answer.

Only readings whose series are ok reach the snapshot; a cluster with some series not ok is `degraded`,
one whose Prometheus does not answer (or that has no `prometheus_url`) is `unknown` and is scheduled on
inventory alone. Readings are joined to inventory by the node name (dcgm-exporter's `Hostname`,
node-exporter's `nodename` from `node_uname_info`) and the card index (`gpu`); an override must keep
those labels (use `label_replace` where a deployment names them otherwise).

This is the only module that imports prometheus_api_client.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from config.settings import Cluster, PromQueries
from cpn.adapters.metrics import (
    ClusterHealth,
    ClusterMetrics,
    GpuReading,
    NodeReading,
    SeriesHealth,
    SeriesState,
)

GPU_READINGS = ("gpu_utilization", "gpu_memory_used", "gpu_memory_free")
"""Readings per card, labelled `Hostname` and `gpu`."""

NODE_READINGS = ("cpu_used_cores", "memory_used_bytes")
"""Readings per node, labelled `nodename`."""

NODE_LABEL = "Hostname"
GPU_LABEL = "gpu"
NODENAME_LABEL = "nodename"

SCALE = {
    "gpu_utilization": 1 / 100,  # percent -> 0..1
    "gpu_memory_used": 1 / 1024,  # MiB -> GB (GiB, as the node labels count)
    "gpu_memory_free": 1 / 1024,
    "cpu_used_cores": 1.0,
    "memory_used_bytes": 1 / 1024**3,  # bytes -> GB
}
"""Unit of each reading -> cpn's unit."""


@dataclass(frozen=True)
class Sample:
    """One sample of an instant query: its labels and value."""

    labels: Mapping[str, str]
    value: float


def required_series(queries: PromQueries) -> dict[str, tuple[str, ...]]:
    """Raw series selector -> the readings it dates, in the order the readings are declared."""
    series: dict[str, list[str]] = {}
    for reading in (*GPU_READINGS, *NODE_READINGS):
        series.setdefault(getattr(queries, reading).series, []).append(reading)
    return {name: tuple(readings) for name, readings in series.items()}


def series_state(
    timestamps: Sequence[float], now: float, stale_after_s: float
) -> tuple[SeriesState, float | None]:
    """State and age of one series from its targets' newest sample times, judged at `now`.

    The age is that of the stalest target: one hung exporter among several makes the series stale.
    """
    if not timestamps:
        return "missing", None
    age = max(0.0, now - min(timestamps))
    return ("stale" if age > stale_after_s else "ok"), age


def cluster_health(series: Iterable[SeriesHealth]) -> ClusterHealth:
    """ok when every series is ok; unknown when none could be read; degraded otherwise."""
    states = [s.state for s in series]
    if states and all(s == "unreachable" for s in states):
        return "unknown"
    return "ok" if all(s == "ok" for s in states) else "degraded"


def join_readings(readings: Mapping[str, Sequence[Sample]]) -> dict[str, NodeReading]:
    """Node name -> its reading, from the samples of the usable readings (reading name -> samples).

    Card readings are joined by (`Hostname`, `gpu`), node readings by `nodename`; samples without those
    labels are ignored. Values are converted to cpn's units (0..1, GB, cores).
    """
    cards: dict[str, dict[int, dict[str, float]]] = {}
    hosts: dict[str, dict[str, float]] = {}
    for reading, samples in readings.items():
        scale = SCALE[reading]
        for sample in samples:
            if reading in GPU_READINGS:
                node, gpu = sample.labels.get(NODE_LABEL), sample.labels.get(GPU_LABEL)
                if node is None or gpu is None or not gpu.isdigit():
                    continue
                cards.setdefault(node, {}).setdefault(int(gpu), {})[reading] = sample.value * scale
            elif (node := sample.labels.get(NODENAME_LABEL)) is not None:
                hosts.setdefault(node, {})[reading] = sample.value * scale
    nodes = {}
    for name in sorted(set(cards) | set(hosts)):
        host = hosts.get(name, {})
        gpus = tuple(
            GpuReading(
                index=i,
                utilization=values.get("gpu_utilization"),
                memory_used_gb=values.get("gpu_memory_used"),
                memory_free_gb=values.get("gpu_memory_free"),
            )
            for i, values in sorted(cards.get(name, {}).items())
        )
        nodes[name] = NodeReading(
            node=name,
            cpu_used_cores=host.get("cpu_used_cores"),
            memory_used_gb=host.get("memory_used_bytes"),
            gpus=gpus,
        )
    return nodes


class Unreachable(Exception):
    """Prometheus did not answer (connection refused, timeout, HTTP error)."""


class PrometheusMetrics:
    """The metrics source of real (or simulated, exported) clusters: one Prometheus per cluster."""

    def __init__(self, clusters: Sequence[Cluster], clock: Callable[[], float] = time.time) -> None:
        """`clusters` as configured; `clock` dates the snapshots (Prometheus's own time dates the samples)."""
        self.clusters = tuple(clusters)
        self.clock = clock
        self._clients: dict[str, PrometheusConnect] = {}

    def sample(self) -> dict[str, ClusterMetrics]:
        """cluster name -> its metrics now. Never raises for a cluster that does not answer."""
        return {cluster.name: self.read(cluster) for cluster in self.clusters}

    def close(self) -> None:
        """Close the HTTP sessions."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _client(self, cluster: Cluster) -> PrometheusConnect:
        if cluster.name not in self._clients:
            self._clients[cluster.name] = PrometheusConnect(
                url=cluster.prometheus_url,
                disable_ssl=False,
                # No retries here: an unreachable Prometheus is reported at once and asked again next round.
                retry=Retry(total=0),
                timeout=cluster.metrics.timeout_s,
            )
        return self._clients[cluster.name]

    def _query(self, cluster: Cluster, promql: str) -> tuple[list[Sample], float | None]:
        """Samples of an instant query and Prometheus's evaluation time (None when there were none)."""
        try:
            result = self._client(cluster).custom_query(promql)
        except (requests.RequestException, PrometheusApiClientException) as exc:
            raise Unreachable(f"{cluster.prometheus_url}: {type(exc).__name__}: {exc}") from None
        samples, evaluated = [], None
        for item in result:
            evaluated, value = float(item["value"][0]), float(item["value"][1])
            samples.append(Sample(labels=item.get("metric", {}), value=value))
        return samples, evaluated

    def read(self, cluster: Cluster) -> ClusterMetrics:
        """One cluster's metrics: series health and the readings whose series are ok."""
        now = self.clock()
        settings = cluster.metrics
        series = required_series(settings.queries)
        if cluster.prometheus_url is None:
            return ClusterMetrics(
                cluster=cluster.name,
                time=now,
                health="unknown",
                series=tuple(SeriesHealth(name, "unreachable") for name in series),
                detail="no prometheus_url configured: scheduled on inventory alone",
            )
        try:
            health = []
            for name in series:
                stamps, evaluated = self._query(cluster, f"timestamp({name})")
                state, age = series_state([s.value for s in stamps], evaluated or now, settings.staleness_s)
                health.append(SeriesHealth(name, state, age))
            usable = [
                r for name, h in zip(series, health, strict=True) if h.state == "ok" for r in series[name]
            ]
            readings = {r: self._query(cluster, getattr(settings.queries, r).query)[0] for r in usable}
        except Unreachable as exc:
            return ClusterMetrics(
                cluster=cluster.name,
                time=now,
                health="unknown",
                series=tuple(SeriesHealth(name, "unreachable") for name in series),
                detail=f"Prometheus unreachable ({exc}): scheduled on inventory alone",
            )
        state = cluster_health(health)
        bad = [f"{h.name} {h.state}" for h in health if h.state != "ok"]
        detail = (
            "" if not bad else f"{', '.join(bad)} (limit {settings.staleness_s:g} s): those readings unused"
        )
        return ClusterMetrics(
            cluster=cluster.name,
            time=now,
            health=state,
            series=tuple(health),
            nodes=join_readings(readings),
            detail=detail,
        )
