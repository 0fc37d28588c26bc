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
- frozen: fresh samples, but some card's values stopped changing. An exporter that hangs and keeps
  serving its last values gets a fresh timestamp at every scrape, so sample times never show it; a
  counter that grows on every powered GPU does (`queries.gpu_energy`: DCGM's energy since boot). A card
  whose counter did not grow over `frozen_after_s` (several scrape intervals) is frozen: its GPU series
  are marked so, its card readings are dropped and the card is scheduled on inventory alone;
- unreachable: Prometheus did not answer.

Only readings whose series are ok reach the snapshot; a cluster with some series not ok is `degraded`,
one whose Prometheus does not answer (or that has no `prometheus_url`) is `unknown` and is scheduled on
inventory alone. Readings are joined to inventory by the node name (dcgm-exporter's `Hostname`,
node-exporter's `nodename` from `node_uname_info`) and the card index (`gpu`); an override must keep
those labels (use `label_replace` where a deployment names them otherwise).

This is the only module that imports prometheus_api_client.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from config.settings import WINDOW, Cluster, PromQueries
from cpn.adapters.metrics import (
    BackgroundMetrics,
    ClusterHealth,
    ClusterMetrics,
    GpuReading,
    NodeReading,
    SeriesHealth,
    SeriesState,
)

log = logging.getLogger(__name__)

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


def promql_duration(seconds: float) -> str:
    """`seconds` as a PromQL duration (whole milliseconds, at least 1)."""
    return f"{max(1, round(seconds * 1000))}ms"


def frozen_cards(growth: Sequence[Sample]) -> tuple[tuple[str, int], ...]:
    """(node, card) of every card whose energy counter did not grow, from the `gpu_energy` query's samples
    (one per card: the counter's increase over the window), sorted.

    A card with fewer than two samples in the window gets no sample from PromQL's `increase` and is not
    judged (a Prometheus or an exporter that just started); a counter reset (a reboot) is growth.
    Samples without `Hostname` and `gpu` labels are ignored.
    """
    cards = set()
    for sample in growth:
        node, gpu = sample.labels.get(NODE_LABEL), sample.labels.get(GPU_LABEL)
        if node is not None and gpu is not None and gpu.isdigit() and not sample.value > 0:
            cards.add((node, int(gpu)))
    return tuple(sorted(cards))


def _cards_text(cards: Sequence[tuple[str, int]]) -> str:
    by_node: dict[str, list[int]] = {}
    for node, card in cards:
        by_node.setdefault(node, []).append(card)
    return ", ".join(f"{node} card {'/'.join(map(str, idx))}" for node, idx in by_node.items())


def cluster_health(series: Iterable[SeriesHealth]) -> ClusterHealth:
    """ok when every series is ok; unknown when none could be read; degraded otherwise."""
    states = [s.state for s in series]
    if states and all(s == "unreachable" for s in states):
        return "unknown"
    return "ok" if all(s == "ok" for s in states) else "degraded"


def join_readings(
    readings: Mapping[str, Sequence[Sample]], frozen: Collection[tuple[str, int]] = ()
) -> dict[str, NodeReading]:
    """Node name -> its reading, from the samples of the usable readings (reading name -> samples).

    Card readings are joined by (`Hostname`, `gpu`), node readings by `nodename`; samples without those
    labels, and those of `frozen` (node, card) pairs, are ignored. Values are converted to cpn's units
    (0..1, GB, cores).
    """
    cards: dict[str, dict[int, dict[str, float]]] = {}
    hosts: dict[str, dict[str, float]] = {}
    for reading, samples in readings.items():
        scale = SCALE[reading]
        for sample in samples:
            if reading in GPU_READINGS:
                node, gpu = sample.labels.get(NODE_LABEL), sample.labels.get(GPU_LABEL)
                if node is None or gpu is None or not gpu.isdigit() or (node, int(gpu)) in frozen:
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

    def query_at(self, cluster: Cluster, promql: str, at: float) -> list[Sample]:
        """Samples of an instant query evaluated at `at` (Unix seconds); Unreachable when it cannot ask."""
        return self._query(cluster, promql, {"time": f"{at:.3f}"})[0]

    def _query(
        self, cluster: Cluster, promql: str, params: Mapping[str, str] | None = None
    ) -> tuple[list[Sample], float | None]:
        """Samples of an instant query and Prometheus's evaluation time (None when there were none)."""
        try:
            result = self._client(cluster).custom_query(promql, params=dict(params or {}))
        except (requests.RequestException, PrometheusApiClientException) as exc:
            raise Unreachable(f"{cluster.prometheus_url}: {type(exc).__name__}: {exc}") from None
        samples, evaluated = [], None
        for item in result:
            evaluated, value = float(item["value"][0]), float(item["value"][1])
            samples.append(Sample(labels=item.get("metric", {}), value=value))
        return samples, evaluated

    def read(self, cluster: Cluster) -> ClusterMetrics:
        """One cluster's metrics: series health; the readings of ok series, frozen cards left out."""
        now = self.clock()
        settings = cluster.metrics
        series = required_series(settings.queries)
        energy = settings.queries.gpu_energy
        names = list(dict.fromkeys([*series, *([energy.series] if energy is not None else [])]))
        if cluster.prometheus_url is None:
            return ClusterMetrics(
                cluster=cluster.name,
                time=now,
                health="unknown",
                series=tuple(SeriesHealth(name, "unreachable") for name in names),
                detail="no prometheus_url configured: scheduled on inventory alone",
            )
        try:
            health = {}
            for name in names:
                stamps, evaluated = self._query(cluster, f"timestamp({name})")
                state, age = series_state([s.value for s in stamps], evaluated or now, settings.staleness_s)
                health[name] = SeriesHealth(name, state, age)
            usable = [r for name, rs in series.items() if health[name].state == "ok" for r in rs]
            readings = {r: self._query(cluster, getattr(settings.queries, r).query)[0] for r in usable}
            frozen: tuple[tuple[str, int], ...] = ()
            if energy is not None and health[energy.series].state == "ok":
                window = promql_duration(settings.frozen_window_s)
                frozen = frozen_cards(self._query(cluster, energy.query.replace(WINDOW, window))[0])
        except Unreachable as exc:
            return ClusterMetrics(
                cluster=cluster.name,
                time=now,
                health="unknown",
                series=tuple(SeriesHealth(name, "unreachable") for name in names),
                detail=f"Prometheus unreachable ({exc}): scheduled on inventory alone",
            )
        bad = [f"{h.name} {h.state}" for h in health.values() if h.state != "ok"]
        details = []
        if bad:
            details.append(f"{', '.join(bad)} (limit {settings.staleness_s:g} s): those readings unused")
        if frozen and energy is not None:
            gpu_series = {energy.series} | {n for n, rs in series.items() if set(rs) & set(GPU_READINGS)}
            health = {
                n: replace(h, state="frozen") if n in gpu_series and h.state == "ok" else h
                for n, h in health.items()
            }
            details.append(
                f"frozen: {energy.series} did not grow in {settings.frozen_window_s:g} s on "
                f"{_cards_text(frozen)}: those cards scheduled on inventory alone"
            )
        return ClusterMetrics(
            cluster=cluster.name,
            time=now,
            health=cluster_health(health.values()),
            series=tuple(health.values()),
            nodes=join_readings(readings, frozen),
            detail="; ".join(details),
            frozen=frozen,
        )


POD_LABEL, NAMESPACE_LABEL = "pod", "namespace"
"""The labels dcgm-exporter attaches to a card's series for the pod that holds it (with `container`)."""


def peak_memory_query(series: str, pods: Sequence[tuple[str, str]], window_s: float) -> str:
    """PromQL for the peak framebuffer in use on any card of `pods` ((namespace, name) pairs) over the
    `window_s` before the evaluation time: the highest per-card value of `series` (dcgm-exporter's
    DCGM_FI_DEV_FB_USED, MiB, a bare metric name) among the samples labelled with those pods."""
    if not pods:
        raise ValueError("peak_memory_query needs at least one pod")
    by_ns: dict[str, list[str]] = {}
    for ns, name in pods:
        # A regex metacharacter (a pod name has only '.') escaped, its backslash doubled in a PromQL string.
        by_ns.setdefault(ns, []).append(re.sub(r"([.\\^$|?*+()\[\]{}])", r"\\\\\1", name))
    parts = [
        f'max_over_time({series}{{{NAMESPACE_LABEL}="{ns}",{POD_LABEL}=~"{"|".join(names)}"}}'
        f"[{promql_duration(window_s)}])"
        for ns, names in sorted(by_ns.items())
    ]
    return f"max({' or '.join(parts)})"


class PeakGpuMemory:
    """What one cluster's Prometheus measured of a finished job: its pods' peak GPU memory per card in GB
    over its run (the Kubernetes gateway's `gpu_memory` source, so the value travels on the end event to
    the job store and from there to the memory model's training data).

    None when Prometheus has no sample of the pods' series over the run (dcgm-exporter without the pod
    mapping, a run shorter than a scrape, a Prometheus that does not answer): the job then feeds the
    runtime model only, and its end says so (cpn.adapters.kubernetes.gateway.NO_MEMORY_SERIES).
    """

    def __init__(self, cluster: Cluster) -> None:
        if cluster.prometheus_url is None:
            raise ValueError(f"cluster {cluster.name} has no prometheus_url: nothing to measure peaks with")
        self._metrics = PrometheusMetrics([cluster])
        self.cluster = cluster

    def __call__(
        self, job_id: str, pods: tuple[tuple[str, str], ...], start: float, end: float
    ) -> float | None:
        """Peak GB per card of `pods` between `start` and `end` (Unix seconds), None = not measured."""
        series = self.cluster.metrics.queries.gpu_memory_used.series
        if not pods or end <= start:
            return None
        # One scrape interval past the end: the last sample before the pods went may come a little late.
        window = end - start + self.cluster.metrics.scrape_interval_s
        query = peak_memory_query(series, pods, window)
        try:
            samples = self._metrics.query_at(
                self.cluster, query, end + self.cluster.metrics.scrape_interval_s
            )
        except Unreachable as exc:
            log.warning("peak GPU memory of %s not measured: %s", job_id, exc)
            return None
        if not samples:
            log.warning("peak GPU memory of %s not measured: no %s series for its pods", job_id, series)
            return None
        return max(s.value for s in samples) * SCALE["gpu_memory_used"]

    def close(self) -> None:
        """Close the HTTP session."""
        self._metrics.close()


def collected_in_background(clusters: Sequence[Cluster]) -> BackgroundMetrics:
    """The Prometheus metrics of `clusters`, read by a background collector once per scrape interval (the
    shortest of theirs); a reading older than a cluster's staleness limit plus its timeout is not used."""
    return BackgroundMetrics(
        PrometheusMetrics(clusters),
        [c.name for c in clusters],
        interval_s=min(c.metrics.scrape_interval_s for c in clusters),
        max_age_s=max(c.metrics.staleness_s + c.metrics.timeout_s for c in clusters),
    )
