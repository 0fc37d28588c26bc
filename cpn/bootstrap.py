"""The composition root: build the services of a run from settings, in one place.

Nothing connects to a real system at import time; callers ask for what they need.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from config.settings import Profile
from cpn.clock import SimClock
from cpn.inventory import Node, nodes_from_config
from cpn.policies import make_policy
from cpn.scheduler import EstimateSource, Scheduler
from cpn.sim.gateway import GroundTruth, SimulatedGateway
from cpn.sim.migrator import SimulatedMigrator
from cpn.store import JobStore
from cpn.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.transfer import TransferTimes


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


def build_simulation(
    profile: Profile,
    store_path: Path | str,
    policy: str | None = None,
    throughputs: Path | str = GAVEL_ISOLATED,
    estimator: EstimateSource | None = None,
) -> Simulation:
    """Simulated clusters from `profile`, a job store at `store_path` on simulated time, and a scheduler."""
    clock = SimClock()
    nodes = nodes_from_config(profile.clusters)
    store = JobStore(store_path, clock=clock)
    gateway = SimulatedGateway(nodes, GroundTruth(ThroughputTable.load(throughputs)), clock)
    transfers = TransferTimes(profile.clusters)
    migrator = SimulatedMigrator(transfers, clock)
    scheduler = Scheduler(
        store,
        gateway,
        make_policy(policy or profile.policy.name),
        clock,
        cpu_threshold=profile.policy.cpu_threshold,
        estimator=estimator,
        transfers=transfers,
        migrator=migrator,
    )
    return Simulation(
        clock=clock, nodes=nodes, store=store, gateway=gateway, migrator=migrator, scheduler=scheduler
    )
