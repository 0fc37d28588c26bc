"""cpn's own metrics, served at `/metrics` by `cpn run` in Prometheus' text format (docs/metrics.md).

A scrape never waits on a round and never calls a cluster: the loop publishes what a round learned
(`Telemetry.after_round`: stage durations, the inventory's cards, each cluster's metrics health, the jobs
that started) on its own thread, and the collector reads those cached values, plus two cheap store
queries made at scrape time: jobs per (state, namespace, waiting reason) in one GROUP BY, and the lease.
Labels are bounded (states, namespaces, reason codes, clusters, GPU types, stages, outcomes): never a job.

Submissions and image copies are counted where they happen, at the scheduler's ports: `CountingGateway`
and `CountingMigrator` (`PortCounts`) wrap the gateway and migrator as the composition root builds the
scheduler, and pass every call on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from cpn.adapters.gateway import ClusterGateway, SubmitRejected
from cpn.adapters.migrator import MigrationDone, Migrator
from cpn.decisions import Placement
from cpn.engine.scheduler import RoundResult
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore

CARD_STATES = ("free", "used", "unusable", "cordoned", "pool", "memory")
"""The `status` of `cpn_gpus`: what each card of a cluster and GPU type is (cpn.ui.capacity.CardCounts)."""
HEALTH_STATES = ("ok", "degraded", "unknown")
"""A cluster's metrics health (cpn.adapters.metrics.ClusterHealth), one 0/1 series each."""
STAGE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds: a stage takes milliseconds on a small queue and seconds for a MILP over thousands of jobs."""
WAIT_BUCKETS = (
    10.0,
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    3 * 3600.0,
    6 * 3600.0,
    12 * 3600.0,
    86400.0,
    3 * 86400.0,
    7 * 86400.0,
)
"""Seconds from acceptance to start, and predicted-start errors: from seconds to a week."""
COPY_BUCKETS = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""Seconds an image copy takes."""


class Cards(Protocol):
    """One cluster's cards of one GPU type (cpn.ui.capacity.CardCounts has this shape)."""

    cluster: str
    gpu_type: str
    free: int
    used: int
    unusable: int
    cordoned: int
    pool: int
    memory: int


class PortCounts:
    """Submissions and image copies, counted where they happen: the composition root (cpn.bootstrap) wraps
    the gateway and the migrator it builds the scheduler with in `gateway` and `migrator` (a
    cpn.bootstrap.PortWrappers), before `Telemetry` over the store it opens serves them from `registry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.submissions = Counter(
            "cpn_submissions",
            "Submissions to a cluster by outcome: accepted, refused (transient), failed "
            "(the cluster refused for good).",
            ["cluster", "outcome"],
            registry=self.registry,
        )
        self.copy_bytes = Counter(
            "cpn_image_copy_bytes",
            "Bytes image copies moved, by destination cluster.",
            ["cluster"],
            registry=self.registry,
        )
        self.copy_seconds = Histogram(
            "cpn_image_copy_duration_seconds",
            "Wall seconds each measured image copy took.",
            ["cluster"],
            buckets=COPY_BUCKETS,
            registry=self.registry,
        )
        self.copy_failures = Counter(
            "cpn_image_copy_failures",
            "Image copies that failed, by destination cluster.",
            ["cluster"],
            registry=self.registry,
        )

    def gateway(self, gateway: ClusterGateway) -> ClusterGateway:
        """`gateway`, its submissions counted."""
        return CountingGateway(gateway, self)

    def migrator(self, migrator: Migrator) -> Migrator:
        """`migrator`, its finished copies counted."""
        return CountingMigrator(migrator, self)


class Telemetry(Collector):
    """The series of one `cpn run` process, in their own registry (`registry`), thread-safe.

    `store` is read at scrape time (`JobStore.tally`, `JobStore.lease`); `holder` names this process's
    lease (cpn.engine.lease.SchedulerLease.holder; None: it holds none); `ports` are the counters the
    composition root wrapped the scheduler's ports with (a new set when not given), served from the same
    registry. Starts seen in the store before the telemetry was built are not observed again.
    """

    def __init__(self, store: JobStore, holder: str | None = None, ports: PortCounts | None = None) -> None:
        self.store = store
        self.holder = holder
        self.ports = ports or PortCounts()
        self.registry = self.ports.registry
        """What `/metrics` serves: this collector, the histograms and counters below, the ports' counters."""
        self._lock = threading.Lock()
        self._cards: tuple[Cards, ...] = ()
        self._health: dict[str, str] = {}
        self._cordoned: frozenset[str] = frozenset()
        self._cursor, _ = store.changes_since(0)
        self.stage_seconds = Histogram(
            "cpn_round_stage_duration_seconds",
            "Wall seconds each stage of a scheduling round took.",
            ["stage"],
            buckets=STAGE_BUCKETS,
            registry=self.registry,
        )
        self.rounds = Counter("cpn_rounds", "Scheduling rounds completed.", registry=self.registry)
        self.wait_seconds = Histogram(
            "cpn_job_wait_seconds",
            "Scheduler-clock seconds from a job's acceptance to each start of it on a cluster.",
            ["namespace", "gpus"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.prediction_error = Histogram(
            "cpn_predicted_start_error_seconds",
            "Absolute difference between a started job's first predicted start and its actual start.",
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(self)

    def after_round(
        self,
        result: RoundResult,
        cards: Iterable[Cards],
        health: Mapping[str, str] | None = None,
        cordoned: Collection[str] = (),
    ) -> None:
        """Publish what a round learned: its stages' durations, the inventory's cards (cordoned clusters'
        included), each cluster's metrics health (None: clusters have no metrics source), the cordoned
        clusters, and the jobs that started since the last round. Called on the loop's thread, after the
        round."""
        for stage, seconds in result.stage_s:
            self.stage_seconds.labels(stage).observe(seconds)
        self.rounds.inc()
        with self._lock:
            self._cards = tuple(cards)
            self._health = dict(health or {})
            self._cordoned = frozenset(cordoned)
        self._observe_starts()

    def _observe_starts(self) -> None:
        """Observe the wait, and the first prediction's error, of each job that started since last time."""
        self._cursor, changes = self.store.changes_since(self._cursor)
        for change in changes:
            if change.state != JobState.RUNNING:
                continue
            record = self.store.get(change.job_id)
            started = next(
                t.time for t in reversed(self.store.history(change.job_id)) if t.to_state == JobState.RUNNING
            )
            namespace = change.job_id.split("/", 1)[0]
            wait = started - change.submitted_at
            self.wait_seconds.labels(namespace, str(record.spec.num_gpus)).observe(wait)
            if record.first_predicted_start is not None:
                self.prediction_error.observe(abs(started - record.first_predicted_start))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The gauges computed at scrape time: jobs, cards, metrics health and the lease."""
        jobs = GaugeMetricFamily(
            "cpn_jobs",
            "Jobs in the store by state, namespace and waiting reason code ('' when none).",
            labels=["state", "namespace", "reason"],
        )
        for state, namespace, reason, n in self.store.tally():
            jobs.add_metric([state.value, namespace, reason], n)
        yield jobs
        with self._lock:
            cards, health, cordoned = self._cards, self._health, self._cordoned
        gpus = GaugeMetricFamily(
            "cpn_gpus",
            "Cards per cluster and GPU type as the latest round's inventory says: free, used, unusable "
            "(free, but the node's CPU room serves no queued job), cordoned (free on a cordoned cluster) and "
            "pool (free on a node whose pool or taints admit no queued job) and memory (free, with less "
            "memory than any queued job asks per card).",
            labels=["cluster", "gpu_type", "status"],
        )
        for c in cards:
            for status in CARD_STATES:
                gpus.add_metric([c.cluster, c.gpu_type, status], getattr(c, status))
        yield gpus
        fenced = GaugeMetricFamily(
            "cpn_cluster_cordoned",
            "1 for a cluster cordoned (no new jobs; its running jobs go on), 0 for one that takes jobs.",
            labels=["cluster"],
        )
        for cluster in sorted({c.cluster for c in cards} | cordoned):
            fenced.add_metric([cluster], float(cluster in cordoned))
        yield fenced
        healthy = GaugeMetricFamily(
            "cpn_cluster_metrics_health",
            "1 for each cluster's metrics health now (ok, degraded: some series "
            "missing, stale or frozen, unknown: none readable), 0 for the others.",
            labels=["cluster", "health"],
        )
        for cluster, now in sorted(health.items()):
            for state in HEALTH_STATES:
                healthy.add_metric([cluster, state], float(now == state))
        yield healthy
        lease = self.store.lease()
        leads = (
            self.holder is not None
            and lease is not None
            and lease.holder == self.holder
            and lease.expires_at > time.time()
        )
        yield GaugeMetricFamily(
            "cpn_leader",
            "1 while this process holds the store's scheduler lease, else 0.",
            value=float(leads),
        )


class CountingGateway:
    """A cluster gateway that counts each submission's outcome per cluster, passing every call on."""

    def __init__(self, gateway: ClusterGateway, counts: PortCounts) -> None:
        self._gateway = gateway
        self._submissions = counts.submissions

    def submit(self, spec: JobSpec, placement: Placement) -> Any:
        """Submit through the wrapped gateway; count accepted, refused (transient) or failed."""
        try:
            out = self._gateway.submit(spec, placement)
        except SubmitRejected as exc:
            self._submissions.labels(placement.cluster, "refused" if exc.transient else "failed").inc()
            raise
        self._submissions.labels(placement.cluster, "accepted").inc()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gateway, name)


class CountingMigrator:
    """A migrator that counts the finished copies' bytes, seconds and failures, passing every call on."""

    def __init__(self, migrator: Migrator, counts: PortCounts) -> None:
        self._migrator = migrator
        self._counts = counts

    def start(self, job: JobSpec, src: str, dst: str, started_at: float | None = None) -> None:
        """Start the copy (the wrapped migrator's)."""
        self._migrator.start(job, src, dst, started_at)

    def poll(self) -> list[MigrationDone]:
        """The wrapped migrator's finished copies, counted."""
        done = self._migrator.poll()
        t = self._counts
        for m in done:
            if not m.ok:
                t.copy_failures.labels(m.cluster).inc()
                continue
            if m.bytes is not None:
                t.copy_bytes.labels(m.cluster).inc(m.bytes)
            if m.seconds is not None:
                t.copy_seconds.labels(m.cluster).observe(m.seconds)
        return done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._migrator, name)
