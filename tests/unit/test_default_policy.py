"""The default policy (config.policies.DEFAULT_POLICY with DEFAULT_SETTINGS) against sjf on a generated trace
of the shape cpn used to lose on (issue #30): long jobs take the fast cards first, then short wide jobs keep
arriving; every job checkpoints. The default must be no worse than sjf on mean JCT, and on makespan."""

from __future__ import annotations

import random

import pytest

from config.policies import DEFAULT_POLICY, DEFAULT_SETTINGS, policy_settings
from config.settings import ClustersConfig
from cpn.formats.throughput import ThroughputTable
from cpn.jobs import JobSpec
from cpn.perf.policies import run_policy
from cpn.sim.estimates import OracleEstimates

H = 3600.0
CLUSTERS = {
    "label_domain": "example.org",
    "clusters": [
        {
            "name": "lab",
            "node_groups": [
                {
                    "name": "v",
                    "count": 2,
                    "gpu_product": "Tesla-V100-SXM2-16GB",
                    "gpus_per_node": 4,
                    "gpu_memory_gb": 16,
                    "cpu_cores": 64,
                },
                {
                    "name": "k",
                    "count": 2,
                    "gpu_product": "Tesla-K80",
                    "gpus_per_node": 4,
                    "gpu_memory_gb": 12,
                    "cpu_cores": 64,
                },
            ],
        }
    ],
    "wan_gbps": {},
}
TABLE = """model,batch_size,gpu_product,num_gpus,steps_per_sec
ResNet-50,64,v100,1,4.0
ResNet-50,64,v100,2,7.5
ResNet-50,64,v100,4,14.0
ResNet-50,64,Tesla-K80,1,1.0
ResNet-50,64,Tesla-K80,2,1.8
ResNet-50,64,Tesla-K80,4,3.4
"""


def trace(seed: int) -> list[JobSpec]:
    """3 long 4-card jobs (8-16 h on V100s) in the first half hour, then 12 short jobs of 1-4 cards (0.1-0.5
    h on V100s) over 6 hours; every job checkpoints every 10 minutes."""
    rng = random.Random(seed)
    jobs = []
    for _ in range(3):
        steps = int(rng.uniform(8, 16) * H * 14.0)
        jobs.append((rng.uniform(0, 0.5 * H), 4, steps))
    for _ in range(12):
        n = rng.choice((1, 2, 4))
        rate = {1: 4.0, 2: 7.5, 4: 14.0}[n]
        jobs.append((rng.uniform(0.5 * H, 6 * H), n, int(rng.uniform(0.1, 0.5) * H * rate)))
    jobs.sort()
    return [
        JobSpec(
            f"j{i:02d}",
            "ResNet-50",
            batch_size=64,
            num_gpus=n,
            total_steps=steps,
            arrival_s=arrival,
            checkpoint_interval_s=600.0,
            cpu=2,
        )
        for i, (arrival, n, steps) in enumerate(jobs)
    ]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_default_is_no_worse_than_sjf_on_mean_jct_nor_makespan(tmp_path, seed):
    clusters = ClustersConfig.model_validate(CLUSTERS)
    (tmp_path / "t.csv").write_text(TABLE)
    table = ThroughputTable.load(tmp_path / "t.csv")
    jobs = trace(seed)
    default = policy_settings(DEFAULT_POLICY, **DEFAULT_SETTINGS)
    runs = {
        name: run_policy(settings, jobs, clusters, table, OracleEstimates(table), forecast=False).summary
        for name, settings in (("default", default), ("sjf", policy_settings("sjf")))
    }
    assert runs["default"]["succeeded"] == runs["sjf"]["succeeded"] == len(jobs)
    assert runs["default"]["mean_jct_s"] <= runs["sjf"]["mean_jct_s"]
    assert runs["default"]["makespan_s"] <= runs["sjf"]["makespan_s"] * 1.001
