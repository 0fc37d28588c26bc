"""The composition root: build the services of a run from settings, in one place.

`build_service` wires the job store, the clock, one gateway per cluster (the Kubernetes gateway for a
cluster whose config names a kubeconfig context, the simulated one otherwise), the migrator, the
estimate source, the policy and the teams (`service_teams`) into the production Scheduler, built once:
what an entrance adds is handed in (`PortWrappers` around its ports, an observer of its decisions), and
nothing rewires a scheduler once built (the lease it acts under is its service's, `HeldLease`). Every
entrance builds through it: `cpn run` (and so `cpn up`), the `schedule-round` flow, `cpn plan`, the demo,
the benchmarks and replays. They differ in `time_scale` and whether they write:

- `None` (replays, benchmarks, the demo): simulated time jumps from event to event, driven by the
  replay (cpn.sim.replay);
- a number (`cpn run`, the flow): simulated clusters follow the wall clock that many times faster
  (cpn.sim.driver), their submissions journaled beside a store file, or in a server's store, so a
  restart, or a standby that takes over, resumes them;
- read-only (`open_dry_run`: `cpn plan` and the flow's dry run): that service over the store opened for
  reading, the round without an executor (cpn.dry_run).

Nothing connects to a real system at import time; client libraries load only for clusters that need
them. The estimate source is chosen by name in models.sources and handed in here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from config.policies import DEFAULT_CPU_THRESHOLD, BasePolicySettings, PolicySettings, SchedulerPolicy
from config.runtime import store_exists
from config.settings import ClustersConfig
from config.teams import folder_teams, quota_warnings
from cpn.adapters.clusters import ClusterBook, ClusterSet, stored_clusters, stored_config
from cpn.adapters.gateway import ClusterGateway
from cpn.adapters.migrator import Migrator
from cpn.clock import Clock, SimClock, WallClock
from cpn.decisions import Decision, Snapshot, Teams
from cpn.dry_run import WithProposed
from cpn.engine.forecast import LIVE_SHARE
from cpn.engine.lease import LEASE_TTL_S, SchedulerLease
from cpn.engine.live_load import MeasuredLoad
from cpn.engine.scheduler import EstimateSource, NodeLoad, Scheduler
from cpn.formats.throughput import ThroughputTable
from cpn.inventory import Node, nodes_from_config
from cpn.jobs import JobSpec
from cpn.policies import make_policy
from cpn.policies.base import Policy
from cpn.policies.teams import quota_cards, teams_of
from cpn.sim.colocation import ColocationTable
from cpn.sim.driver import SimDriver, Timeline
from cpn.sim.gateway import GroundTruth, SimulatedGateway
from cpn.sim.journal import JournaledGateway, StoreJournal, SubmissionJournal
from cpn.sim.migrator import SimulatedMigrator
from cpn.store import JobStore, StoreError, StoreLeased, store_file
from cpn.transfer import TransferTimes

log = logging.getLogger(__name__)

SIM_TIMELINE = "sim_timeline"
"""The store fact (JobStore.meta) that keeps the simulated timeline of a server's store (cpn.sim.driver)."""

REPLAY_EXPLAIN_EVERY_S = 1.0
"""A replay asks why jobs wait at most once per wall-clock second: replays run thousands of rounds a
second, and nothing in a replay's figures depends on the reasons."""


class PortWrappers(Protocol):
    """What an entrance wraps the scheduler's ports in as `build_service` builds it (cpn.telemetry.PortCounts
    counts submissions and copies there): the one way to add to a scheduler, which nothing rewires once
    built."""

    def gateway(self, gateway: ClusterGateway) -> ClusterGateway:
        """The gateway the scheduler submits through, wrapping the clusters' own."""
        ...

    def migrator(self, migrator: Migrator) -> Migrator:
        """The migrator the scheduler copies through, wrapping the built one."""
        ...


@dataclass
class HeldLease:
    """The store's scheduler lease a service holds now: its scheduler reads it here every round
    (Scheduler.lease), and the service alone changes it, as it takes the lease or loses it."""

    lease: SchedulerLease | None = None


@dataclass
class Service:
    """Everything a run uses: the production scheduler over the configured clusters."""

    clusters: ClustersConfig
    clock: Clock
    store: JobStore
    gateway: ClusterSet
    """Every cluster by name."""
    scheduler: Scheduler
    simulator: SimulatedGateway | None
    """The simulated clusters (None when every cluster is real)."""
    migrator: Migrator
    driver: SimDriver | None = None
    """Moves simulated clusters along the wall clock (`cpn run` only)."""
    journal: JournaledGateway | None = None
    """The simulated clusters' submission journal (`cpn run` only)."""
    held: HeldLease = field(default_factory=HeldLease)
    """The store's scheduler lease a live service that writes holds (`lease`)."""
    purpose: str = "cpn"
    """What the lease names this process for (cpn.engine.lease.holder_name)."""
    lease_ttl_s: float = LEASE_TTL_S
    """How long the lease lasts unrenewed."""

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node of every cluster now."""
        return tuple(state.node for state in self.gateway.inventory())

    @property
    def total_gpus(self) -> int:
        """Cards across all clusters."""
        return sum(n.gpu_count for n in self.nodes)

    @property
    def lease(self) -> SchedulerLease | None:
        """The store's scheduler lease this service holds (None: read-only, a replay, or a standby until it
        takes the lease, `try_lead`)."""
        return self.held.lease

    @property
    def leads(self) -> bool:
        """Whether this service holds the store's scheduler lease (the leader among replicas)."""
        return self.lease is not None

    def try_lead(self) -> bool:
        """Take the store's scheduler lease if no other process holds it; returns whether this service
        leads now. A standby calls it every few seconds, then `start`s (reconciling) once it leads."""
        if self.lease is None:
            try:
                self.held.lease = SchedulerLease(self.store, self.purpose, self.lease_ttl_s)
            except StoreLeased:
                return False
        return True

    def step_down(self) -> None:
        """Lead no more, after the lease was lost (cpn.store.LeaseLost): stop renewing it and lift the fence;
        the service serves on as a standby, which `try_lead` and `start` make the leader again."""
        if self.lease is not None:
            try:
                self.lease.release()  # frees nothing: another process holds it, or it lapsed
            except StoreError as exc:  # unreachable: the lease lapses by itself
                log.warning("stepping down without releasing the scheduler lease: %s", exc)
            self.held.lease = None

    def start(self) -> None:
        """Bring a live service up to where it stopped, or where the leader before it left: replay the
        simulated clusters' journal (reading it only; what this process replayed or wrote before is not
        replayed again), catch up with the wall clock, and, holding the store's lease, reconcile the store
        with what the clusters hold (going on with the copies the store has in flight). A read-only service
        changes nothing: like every scheduler, it reads the copies in flight and the saved progress from the
        store."""
        if self.journal is not None:
            self.journal.restore()
        if self.driver is not None:
            self.driver.catch_up()
        if self.lease is not None:
            self.scheduler.reconcile(self.gateway.held_jobs())
            if self.driver is not None:  # the copies gone on with that have ended by now
                self.driver.catch_up()

    def started(self) -> Service:
        """This service, `start`ed; closed again if it cannot start, so that it holds nothing then."""
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop the gateways' background work, release the store's lease and close the store."""
        self.gateway.close()
        if self.lease is not None:
            self.lease.release()
            self.held.lease = None
        self.store.close()


def ground_truth(table: ThroughputTable) -> GroundTruth:
    """The simulator's truth: measured isolated throughputs and the measured co-location pairs."""
    return GroundTruth(table, colocation=ColocationTable.load(table))


def _real_gateway(clusters: ClustersConfig, name: str) -> ClusterGateway:
    from cpn.adapters.kubernetes import gateway_for

    cluster = clusters.cluster(name)
    options = {}
    if cluster.prometheus_url:  # a finished job's peak GPU memory, measured, goes on its end event
        from cpn.adapters.prometheus import PeakGpuMemory

        options["gpu_memory"] = PeakGpuMemory(cluster)
    return gateway_for(cluster, clusters.label_domain, clusters.gpu_aliases, **options)


def _metrics_for(clusters: ClustersConfig) -> MeasuredLoad | None:
    watched = [c for c in clusters.clusters if c.prometheus_url]
    if not watched:
        return None
    from cpn.adapters.prometheus import collected_in_background

    return MeasuredLoad(collected_in_background(watched))


def _migrator_for(
    clusters: ClustersConfig, transfers: TransferTimes, clock: SimClock, live: bool
) -> Migrator:
    """Real copies between registries when the service is live and every cluster has one; else simulated."""
    if live and all(c.registry for c in clusters.clusters):
        from cpn.adapters.registry import SkopeoMigrator

        return SkopeoMigrator(clusters, transfers)
    return SimulatedMigrator(transfers, clock)


def build_service(
    clusters: ClustersConfig,
    store_path: Path | str,
    policy: str | PolicySettings | Policy,
    table: ThroughputTable,
    *,
    estimator: EstimateSource | None = None,
    cpu_threshold: float = DEFAULT_CPU_THRESHOLD,
    time_scale: float | None = None,
    node_load: NodeLoad | None = None,
    wall: Callable[[], float] = time.time,
    read_only: bool = False,
    purpose: str = "cpn",
    lease_ttl_s: float = LEASE_TTL_S,
    standby: bool = False,
    teams: Teams | None = None,
    ports: PortWrappers | None = None,
    on_decision: Callable[[Snapshot, Decision], None] | None = None,
    forecast: bool | None = None,
    proposed: Sequence[JobSpec] = (),
) -> Service:
    """The scheduler over `clusters` with a job store at `store_path` (see the module doc).

    `table` is the simulated clusters' ground truth; `policy` a policy, its settings (config.policies) or its
    name; `node_load` adjusts
    node states by measured load (default, live: the Prometheus of every cluster that names one). A
    live service whose clusters all name a registry copies images with skopeo; otherwise copies are
    simulated. With `time_scale`, the simulated timeline and a journal of the simulated clusters'
    submissions are kept beside a store file (two files), or in the store on a database server, which
    every replica shares (not for `:memory:`, which a restart cannot resume anyway); `wall` is the wall
    clock they follow.

    A live service takes the store's scheduler lease (cpn.engine.lease; `purpose` names it, renewed
    within `lease_ttl_s`) before it writes anything, so a second scheduler on the store is refused
    with StoreLeased, naming the holder; with `standby`, on a database server's store, it is built
    without the lease instead, a replica that serves reads and intake and takes the lease later
    (Service.try_lead). A store file serves one machine: there the refusal stands. `read_only` opens
    the store for reading and writes no file: a dry run's service, which takes no lease and must not
    record or submit anything. `teams` (cpn.policies.teams.teams_of over a teams file; `cpn run` reads
    `teams.yaml` of its config folder) makes the policy order and limit the queue by team; None: one queue.

    What an entrance adds to the scheduler is given here, never set on it afterwards: `ports` wraps its
    gateway and migrator (cpn.telemetry.PortCounts counts submissions and copies), `on_decision` sees each
    round's final decision (a benchmark's recorder, cpn.perf.recorder), `forecast` says whether it looks
    forward to predict starts (None: a live service does, a replay does not). A `read_only` service's
    scheduler may be shown `proposed` jobs the store does not hold, queued after the stored ones
    (cpn.dry_run.WithProposed: what `cpn plan FILE...` asks about). A read-only `:memory:` store is
    an empty one (a dry run before any store was made).
    """
    if proposed and not read_only:
        raise ValueError("proposed jobs are shown only to a read-only service (a dry run): it stores none")
    real = [c.name for c in clusters.clusters if c.kube_context]
    if real and time_scale not in (None, 1):
        raise ValueError(f"clusters {', '.join(real)} are real: they run on the wall clock, use time scale 1")
    live = time_scale is not None
    beside = store_file(store_path)  # the simulated clusters' files go beside a store file
    sim_clock = SimClock()
    clock: Clock = WallClock() if real and live else sim_clock
    store = JobStore(store_path, clock=clock, read_only=read_only and str(store_path) != ":memory:")
    durable = beside is not None or store.on_server
    lease = None
    if live and not read_only:
        try:
            lease = SchedulerLease(store, purpose, lease_ttl_s)
        except StoreLeased:
            if not (standby and store.on_server):
                store.close()
                raise
        except BaseException:
            store.close()
            raise
    configured, rows, gone = clusters, [], ()
    if live:  # the cluster set lives in the store (cpn.adapters.clusters)
        rows = stored_clusters(store, configured)
        clusters = stored_config(configured, [r for r in rows if r.state != "removed"])
        if any(c.kube_context for c in clusters.clusters) and not real:
            if lease is not None:
                lease.release()
            store.close()
            raise ValueError(
                "the store's cluster set has real clusters (kube_context) and the config none: start with a "
                "config that names one, so the service runs on the wall clock"
            )
        # removed simulated clusters stay in the simulator, which replays what ran there (cpn.sim.journal)
        gone = tuple(
            n for r in rows if r.state == "removed" for n in nodes_from_config(stored_config(configured, [r]))
        )
    simulated = [c.name for c in clusters.clusters if not c.kube_context]
    gateways: dict[str, ClusterGateway] = {}
    simulator = journal = driver = None
    if simulated or gone:
        nodes = tuple(n for n in nodes_from_config(clusters) if n.cluster in simulated) + gone
        simulator = SimulatedGateway(nodes, ground_truth(table), sim_clock, keep_executions=not live)
        sim_gateway: ClusterGateway = simulator
        if live and durable:
            kept = StoreJournal(store) if beside is None else SubmissionJournal(f"{beside}.sim-journal")
            journal = JournaledGateway(simulator, kept)
            sim_gateway = journal
        gateways.update(dict.fromkeys(simulated, sim_gateway))
    for name in (c.name for c in clusters.clusters if c.kube_context):
        gateways[name] = _real_gateway(clusters, name)
    gateway = ClusterSet(
        {c.name: gateways[c.name] for c in clusters.clusters}, [r.name for r in rows if r.state == "cordoned"]
    )
    transfers = TransferTimes(clusters)
    migrator = _migrator_for(clusters, transfers, sim_clock, live)
    if node_load is None and live:
        node_load = _metrics_for(clusters)
    if live:
        now = wall()
        if real:
            timeline = Timeline(now, now, 1.0)
        elif beside is not None:
            timeline = Timeline.resume(Path(f"{beside}.sim-time"), float(time_scale), now, save=not read_only)
        elif durable:
            timeline = Timeline.continued(store.meta(SIM_TIMELINE), float(time_scale), now)
            if not read_only:
                store.set_meta(SIM_TIMELINE, timeline.saved())
        else:
            timeline = Timeline(now, 0.0, float(time_scale))
        if real:
            sim_clock.advance_to(now)
        parts = [p for p in (simulator, migrator) if isinstance(p, (SimulatedGateway, SimulatedMigrator))]
        driver = SimDriver(sim_clock, parts, timeline, wall)
    held = HeldLease(lease)
    cluster_book = None
    if live and not read_only:

        def join(config: ClustersConfig, name: str) -> ClusterGateway:
            """The gateway of cluster `name`, joining while the service runs."""
            if config.cluster(name).kube_context:
                if not real:
                    raise ValueError(f"{name} is a real cluster: it joins only a service on the wall clock")
                return _real_gateway(config, name)
            if simulator is None:
                raise ValueError(f"{name} is simulated: it joins only a service with simulated clusters")
            simulator.add_nodes(tuple(n for n in nodes_from_config(config) if n.cluster == name))
            return sim_gateway

        cluster_book = ClusterBook(store, configured, gateway, join, transfers).refresh
    scheduler = Scheduler(
        WithProposed(store, proposed, clock) if proposed else store,
        gateway if ports is None else ports.gateway(gateway),
        make_policy(policy) if isinstance(policy, str | BasePolicySettings) else policy,
        clock,
        cpu_threshold=cpu_threshold,
        estimator=estimator,
        transfers=transfers,
        migrator=migrator if ports is None else ports.migrator(migrator),
        node_load=node_load,
        explain_every_s=0.0 if live else REPLAY_EXPLAIN_EVERY_S,
        lease=lambda: held.lease,
        forecast=live if forecast is None else forecast,
        forecast_share=LIVE_SHARE if live else None,
        teams=teams,
        on_decision=on_decision,
        cluster_book=cluster_book,
    )
    return Service(
        clusters=clusters,
        clock=clock,
        store=store,
        gateway=gateway,
        scheduler=scheduler,
        simulator=simulator,
        migrator=migrator,
        driver=driver,
        journal=journal,
        held=held,
        purpose=purpose,
        lease_ttl_s=lease_ttl_s,
    )


def open_dry_run(
    clusters: ClustersConfig,
    store_path: Path | str,
    policy: SchedulerPolicy,
    table: ThroughputTable,
    *,
    estimator: EstimateSource | None = None,
    teams: Teams | None = None,
    proposed: Sequence[JobSpec] = (),
    wall: Callable[[], float] = time.time,
) -> Service:
    """The round without an executor: the service `cpn run` builds over the store at `store_path`, opened
    read-only and brought up to now (the simulated clusters' journal read, their clock caught up; nothing
    reconciled), on which a dry run takes the snapshot and decides (cpn.dry_run). The
    `schedule-round` flow's dry run and `cpn plan` both open it, so they decide alike on every queued job. A
    store file not made yet is an empty store; `proposed` jobs are queued after the stored ones (`cpn plan
    FILE...`)."""
    return build_service(
        clusters,
        store_path if store_exists(store_path) else ":memory:",
        policy.settings,
        table,
        estimator=estimator,
        cpu_threshold=policy.cpu_threshold,
        time_scale=1.0,
        wall=wall,
        read_only=True,
        purpose="dry run",
        teams=teams,
        proposed=proposed,
    ).started()


def service_teams(folder: Path | str, clusters: ClustersConfig) -> Teams | None:
    """The teams of config folder `folder` (its `teams.yaml`) every service of it orders and limits the queue
    by, each quota larger than `clusters` have logged as a warning; None without a teams file (raises
    ConfigError naming the field of a bad one)."""
    config = folder_teams(folder)
    if config is None:
        return None
    for line in quota_warnings(config, quota_cards(nodes_from_config(clusters))):
        log.warning("%s", line)
    return teams_of(config)


def build_simulation(
    clusters: ClustersConfig,
    store_path: Path | str,
    policy: str | PolicySettings | Policy,
    table: ThroughputTable,
    cpu_threshold: float = DEFAULT_CPU_THRESHOLD,
    estimator: EstimateSource | None = None,
    *,
    teams: Teams | None = None,
    on_decision: Callable[[Snapshot, Decision], None] | None = None,
    forecast: bool = False,
) -> Service:
    """A replay's service: every cluster simulated, on simulated time driven by cpn.sim.replay (`teams`,
    `on_decision` and `forecast` as `build_service` takes them; a replay looks forward only when asked)."""
    if any(c.kube_context for c in clusters.clusters):
        raise ValueError("a replay simulates every cluster; this config names real ones (kube_context)")
    return build_service(
        clusters,
        store_path,
        policy,
        table,
        estimator=estimator,
        cpu_threshold=cpu_threshold,
        teams=teams,
        on_decision=on_decision,
        forecast=forecast,
    )


@dataclass
class BenchmarkClusters:
    """The clusters of a config as the benchmark loop (cpn.benchmarking) drives them: a gateway of its own
    (its events are the loop's), the clock it follows, and how to wait between looks."""

    gateway: ClusterSet
    clock: Clock
    wait: Callable[[float], None]

    def close(self) -> None:
        """Stop the real clusters' watches."""
        self.gateway.close()


def build_benchmark_clusters(clusters: ClustersConfig, table: ThroughputTable) -> BenchmarkClusters:
    """A gateway per cluster, as `build_service` makes them (simulated ones over `table`'s truth). Only
    simulated clusters: simulated time, which waiting moves on; with a real one: the wall clock, waiting
    sleeps and the simulated clusters follow."""
    sim_clock = SimClock()
    simulated = [c.name for c in clusters.clusters if not c.kube_context]
    gateways: dict[str, ClusterGateway] = {}
    sim = None
    if simulated:
        nodes = tuple(n for n in nodes_from_config(clusters) if n.cluster in simulated)
        sim = SimulatedGateway(nodes, ground_truth(table), sim_clock, keep_executions=False)
        gateways.update(dict.fromkeys(simulated, sim))
    for cluster in clusters.clusters:
        if cluster.kube_context:
            gateways[cluster.name] = _real_gateway(clusters, cluster.name)
    gateway = ClusterSet({c.name: gateways[c.name] for c in clusters.clusters})
    if sim is not None and len(simulated) == len(clusters.clusters):
        return BenchmarkClusters(gateway, sim_clock, lambda s: sim.advance(sim_clock.now() + s))
    wall = WallClock()

    def wait(seconds: float) -> None:
        time.sleep(seconds)
        if sim is not None:
            sim.advance(wall.now())

    if sim is not None:
        sim_clock.advance_to(wall.now())
    return BenchmarkClusters(gateway, wall, wait)
