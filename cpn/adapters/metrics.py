"""The metrics-source port: live GPU and CPU load per node, with a health state per cluster.

Implemented by the Prometheus collector (DCGM and node-exporter series) and by the simulated
clusters. A cluster whose metrics are `unknown` (Prometheus unreachable) is scheduled on inventory
alone, and the scheduler says so; `degraded` means some series are missing, stale or frozen, and only
the readings that are fresh are used (a frozen card has none: it is scheduled on inventory alone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal, Protocol

SeriesState = Literal["ok", "missing", "stale", "frozen", "unreachable"]
"""One required series of one cluster: present and fresh; absent; older than allowed; fresh samples of
values that stopped changing on some card (its energy counter does not grow); or no answer."""

ClusterHealth = Literal["ok", "degraded", "unknown"]
"""A cluster's metrics as a whole: every series ok; some missing, stale or frozen; none readable."""


@dataclass(frozen=True)
class GpuReading:
    """One card as the metrics see it."""

    index: int
    """0-based card index on its node (DCGM's `gpu` label)."""
    utilization: float | None = None
    """0..1, DCGM_FI_DEV_GPU_UTIL / 100; None = not reported."""
    memory_used_gb: float | None = None
    """Framebuffer in use (DCGM_FI_DEV_FB_USED), GB."""
    memory_free_gb: float | None = None
    """Framebuffer free (DCGM_FI_DEV_FB_FREE), GB."""


@dataclass(frozen=True)
class NodeReading:
    """One node's live load, joined to inventory by node name (Kubernetes hostname)."""

    node: str
    cpu_used_cores: float | None = None
    """Cores busy (node-exporter), None = not reported."""
    memory_used_gb: float | None = None
    """Host memory in use, GB."""
    gpus: tuple[GpuReading, ...] = ()


@dataclass(frozen=True)
class SeriesHealth:
    """The state of one required series on one cluster."""

    name: str
    state: SeriesState
    age_s: float | None = None
    """Age of its newest sample when read; None when there is none."""


def _empty() -> Mapping:
    return MappingProxyType({})


@dataclass(frozen=True)
class ClusterMetrics:
    """What one cluster's metrics said at `time`."""

    cluster: str
    time: float
    health: ClusterHealth
    series: tuple[SeriesHealth, ...] = ()
    nodes: Mapping[str, NodeReading] = field(default_factory=_empty)
    """node name -> reading (fresh readings only; frozen cards left out)."""
    frozen: tuple[tuple[str, int], ...] = ()
    """(node, card index) of the cards whose values stopped changing: scheduled on inventory alone."""
    detail: str = ""
    """Why the health is not ok, in words."""
    age_s: float = 0.0
    """How old the reading was when handed out (BackgroundMetrics); 0 for one read on the spot."""


class MetricsSource(Protocol):
    """Live load of every cluster."""

    def sample(self) -> Mapping[str, ClusterMetrics]:
        """cluster name -> its metrics now; never raises for a cluster that does not answer (`unknown`)."""
        ...


class BackgroundMetrics:
    """A metrics source read by a daemon thread every `interval_s`, so that a round never waits for it.

    `sample()` answers at once with the latest reading of each cluster and its age (`age_s`): a Prometheus
    that is slow but up delays the collector, never the round. A cluster with no reading yet, or whose
    latest one is older than `max_age_s`, is `unknown` (scheduled on inventory alone), with the reason.
    """

    def __init__(
        self,
        source: MetricsSource,
        clusters: Sequence[str],
        interval_s: float,
        max_age_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.clusters = tuple(clusters)
        self.interval_s = interval_s
        self.max_age_s = max_age_s
        self.clock = clock
        self._latest: dict[str, ClusterMetrics] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> Mapping[str, ClusterMetrics]:
        """cluster name -> its latest reading, aged; starts the collector on the first call."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="metrics-collector", daemon=True)
            self._thread.start()
        now = self.clock()
        with self._lock:
            latest = dict(self._latest)
        out = {}
        for name in self.clusters:
            reading = latest.get(name)
            if reading is None:
                out[name] = ClusterMetrics(name, now, "unknown", detail="no reading yet")
                continue
            age = max(0.0, now - reading.time)
            if age > self.max_age_s:
                detail = f"latest reading {age:.0f} s old (limit {self.max_age_s:g} s)"
                out[name] = ClusterMetrics(name, reading.time, "unknown", age_s=age, detail=detail)
            else:
                out[name] = replace(reading, age_s=age)
        return out

    def close(self) -> None:
        """Stop the collector (after the reading under way, if any)."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            reading = self.source.sample()
            with self._lock:
                self._latest.update(reading)
            self._stop.wait(self.interval_s)
