"""The composition root: build the services of a run from settings, in one place.

Nothing connects to a real system at import time; callers ask for what they need.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from config.settings import ClustersConfig
from cpn.clock import SimClock
from cpn.engine.scheduler import EstimateSource, Scheduler
from cpn.engine.transfer import TransferTimes
from cpn.formats.throughput import ThroughputTable
from cpn.inventory import Node, nodes_from_config
from cpn.policies import make_policy
from cpn.sim.colocation import ColocationTable
from cpn.sim.gateway import GroundTruth, SimulatedGateway
from cpn.sim.migrator import SimulatedMigrator
from cpn.store import JobStore


@dataclass
class Simulation:
    """Everything a simulated run uses: the production scheduler over simulated clusters."""

    clock: SimClock
    nodes: tuple[Node, ...]
    store: JobStore
    gateway: SimulatedGateway
    migrator: SimulatedMigrator
    scheduler: Scheduler

    @property
    def total_gpus(self) -> int:
        """Cards across all clusters."""
        return sum(n.gpu_count for n in self.nodes)


def ground_truth(table: ThroughputTable) -> GroundTruth:
    """The simulator's truth: measured isolated throughputs and the measured co-location pairs."""
    return GroundTruth(table, colocation=ColocationTable.load(table))


def build_simulation(
    clusters: ClustersConfig,
    store_path: Path | str,
    policy: str,
    table: ThroughputTable,
    cpu_threshold: float = 0.7,
    estimator: EstimateSource | None = None,
) -> Simulation:
    """Simulated `clusters`, a job store at `store_path` on simulated time, and the production scheduler."""
    clock = SimClock()
    nodes = nodes_from_config(clusters)
    store = JobStore(store_path, clock=clock)
    gateway = SimulatedGateway(nodes, ground_truth(table), clock)
    transfers = TransferTimes(clusters)
    migrator = SimulatedMigrator(transfers, clock)
    scheduler = Scheduler(
        store,
        gateway,
        make_policy(policy),
        clock,
        cpu_threshold=cpu_threshold,
        estimator=estimator,
        transfers=transfers,
        migrator=migrator,
    )
    return Simulation(
        clock=clock, nodes=nodes, store=store, gateway=gateway, migrator=migrator, scheduler=scheduler
    )
