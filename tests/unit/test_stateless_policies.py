"""Policies keep nothing between rounds: a replay with one long-lived policy and a replay with a policy
built afresh every round (as a service rebuilt per Prefect run would) decide alike, round by round, for
every policy. What a plan needs of the past (when running jobs free their cards) comes from the snapshot
alone (`Snapshot.running`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from config.settings import ClustersConfig
from cpn.bootstrap import build_simulation
from cpn.decisions import Decision, Snapshot
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.jobs import JobSpec
from cpn.policies import POLICIES, make_policy
from cpn.policies.base import Policy, Traits
from cpn.sim.estimates import OracleEstimates
from cpn.sim.replay import arrivals_from_jobs, replay

H = 3600.0

CLUSTERS = ClustersConfig.model_validate(
    {
        "clusters": [
            {
                "name": "site-a",
                "node_groups": [
                    {"name": "a", "count": 2, "gpu_product": "Tesla-V100-SXM2-16GB", "gpus_per_node": 4,
                     "gpu_memory_gb": 16, "cpu_cores": 32},
                    {"name": "a-hyb", "count": 1, "gpu_product": "Tesla-V100-SXM2-16GB", "gpus_per_node": 2,
                     "gpu_memory_gb": 16, "cpu_cores": 16, "usage": "hybrid"},
                ],
            },
            {
                "name": "site-b",
                "node_groups": [
                    {"name": "b", "count": 1, "gpu_product": "Tesla-K80", "gpus_per_node": 4,
                     "gpu_memory_gb": 12, "cpu_cores": 32},
                ],
            },
        ],
        "wan_gbps": {"site-a": {"site-b": 10}},
    }
)  # fmt: skip

TABLE = ThroughputTable(
    [
        ThroughputRow(model, 32, gpu, n, rate * n * (3.0 if gpu == "v100" else 1.0))
        for model, rate in (("ResNet-18", 2.0), ("ResNet-50", 0.5))
        for gpu in ("v100", "k80")
        for n in (1, 2, 4)
    ]
)


def trace(seed: int, n: int = 16) -> list[JobSpec]:
    """Training jobs of 1-4 cards arriving over 3 h, and two services (one deleted after 2 h)."""
    rng = random.Random(seed)
    jobs = [
        JobSpec(
            job_id=f"t/j{i:02d}",
            model=rng.choice(["ResNet-18", "ResNet-50"]),
            batch_size=32,
            num_gpus=rng.choice([1, 1, 2, 4]),
            total_steps=rng.randint(1_000, 12_000),
            cpu=2.0,
            source_cluster=rng.choice(["site-a", "site-b"]),
            data_size_gb=5.0,
            arrival_s=round(rng.uniform(0, 3 * H)),
        )
        for i in range(n)
    ]
    services = [
        JobSpec("s/chat", "ResNet-18", kind="inference", num_gpus=1, arrival_s=600.0, duration_s=2 * H),
        JobSpec("s/search", "ResNet-50", kind="inference", num_gpus=1, arrival_s=1200.0),
    ]
    return sorted(jobs + services, key=lambda j: j.arrival_s)


@dataclass
class Rounds:
    """Decides with `policy` kept for the whole replay, or with a new one every round (`fresh`), and
    records what each round decided."""

    name: str
    fresh: bool
    decided: list[tuple[float, Decision]] = field(default_factory=list)
    _kept: Policy | None = None
    traits: Traits = field(default_factory=Traits)

    def decide(self, snapshot: Snapshot) -> Decision:
        if self.fresh or self._kept is None:
            self._kept = make_policy(self.name)
        decision = self._kept.decide(snapshot)
        self.decided.append((snapshot.now, decision))
        return decision


def replayed(name: str, fresh: bool) -> list[tuple]:
    """Each round's time, placements, rejections and waiting reasons with predicted starts."""
    rounds = Rounds(name, fresh)
    sim = build_simulation(CLUSTERS, ":memory:", rounds, TABLE, estimator=OracleEstimates(TABLE))
    sim.scheduler.explain_every_s = 0.0  # explain every round in both replays, whatever the wall clock
    replay(sim.scheduler, sim.simulator, sim.clock, arrivals_from_jobs(trace(0)), migrator=sim.migrator)
    sim.store.close()
    return [(now, d.placements, d.rejections, d.waiting) for now, d in rounds.decided]


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_policy_built_afresh_every_round_decides_as_a_long_lived_one(name):
    kept = replayed(name, fresh=False)
    assert sum(len(placements) for _, placements, _, _ in kept) >= len(trace(0))  # all ran (some twice)
    assert any(w.predicted_start is not None for *_, waiting in kept for w in waiting) or name != "milp"
    assert replayed(name, fresh=True) == kept
