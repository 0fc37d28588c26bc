"""`cpn bench solver`: how long an optimising policy's rounds take on generated queues.

A cluster of `gpus` cards (three sites, one GPU type each: K80, P100, V100 on 8-card nodes) and a
generated queue (cpn.sim.generated, over Gavel's measured configurations) run through the
production scheduler on simulated clusters; the queue is topped up after every round so that `jobs`
stay queued, and each round's `decide` and forward look (the predicted starts) are timed. The figures
are those a round of the live service would take on that queue (the scheduler's own bookkeeping
excluded).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from config.policies import PolicySettings
from config.settings import ClustersConfig
from cpn.bootstrap import build_simulation
from cpn.formats.throughput import ThroughputTable
from cpn.perf.recorder import RecordingPolicy
from cpn.policies import make_policy
from cpn.sim.estimates import OracleEstimates
from cpn.sim.generated import generate_queue

SITES = (
    ("k80", "Tesla-K80", 12.0),
    ("p100", "Tesla-P100-PCIE-16GB", 16.0),
    ("v100", "Tesla-V100-SXM2-16GB", 16.0),
)
"""The generated clusters: one site per GPU type, as in Gavel's cluster."""

NODE_GPUS = 8


@dataclass(frozen=True)
class SolverBench:
    """Round times of one policy on one generated queue."""

    jobs: int
    gpus: int
    rounds: int
    median_s: float
    max_s: float
    fallbacks: int
    """Rounds that used greedy's plan instead of the solver's."""
    solve_median_s: float | None
    """Median of the model's build-and-solve time alone (None for a policy without a solver)."""
    forecast_median_s: float = 0.0
    """Median time of a round's forward look (cpn.engine.forecast), on top of the decision. The queue is
    topped up every round: the first round looks afresh, the later ones follow the last look up to where
    the new jobs could start (estimates are exact here, so nothing else moves)."""
    forecast_max_s: float = 0.0
    """The slowest round's look: the first, afresh (what a round costs after a job ends off its
    prediction)."""
    forecast_cpu_median_s: float = 0.0
    """Median CPU time of a round's look (this process's): the figure to compare on a loaded machine."""

    def to_json(self) -> dict:
        """`{"jobs": N, "gpus": M, "rounds": R, "median_s": X, "max_s": Y, "fallbacks": F, ...}`."""
        return dict(self.__dict__)


def generated_clusters(gpus: int) -> ClustersConfig:
    """`gpus` cards, rounded up to 8-card nodes, spread over three single-type sites 100 Gbit/s apart."""
    nodes = max(1, -(-gpus // NODE_GPUS))
    per_site = [nodes // len(SITES) + (1 if i < nodes % len(SITES) else 0) for i in range(len(SITES))]
    clusters = [
        {
            "name": f"site-{key}",
            "node_groups": [
                {
                    "name": key,
                    "count": count,
                    "gpu_product": product,
                    "gpus_per_node": NODE_GPUS,
                    "gpu_memory_gb": memory,
                    "cpu_cores": 64,
                }
            ],
        }
        for (key, product, memory), count in zip(SITES, per_site, strict=True)
        if count
    ]
    names = [c["name"] for c in clusters]
    wan = {a: {b: 100.0 for b in names[i + 1 :]} for i, a in enumerate(names[:-1])}
    return ClustersConfig.model_validate({"clusters": clusters, "wan_gbps": wan})


def bench_solver(
    settings: PolicySettings, jobs: int, gpus: int, table: ThroughputTable, rounds: int = 10, seed: int = 0
) -> SolverBench:
    """Time `rounds` rounds of the policy with `jobs` queued on `gpus` generated cards."""
    clusters = generated_clusters(gpus)
    queue = generate_queue(jobs * (rounds + 1), seed, table, clusters)
    recorder = RecordingPolicy(make_policy(settings))
    sim = build_simulation(
        clusters,
        ":memory:",
        recorder,
        table,
        estimator=OracleEstimates(table),
        on_decision=recorder.observe,
        forecast=True,
    )
    forecaster = sim.scheduler.forecaster
    sim.store.submit(queue[:jobs])
    given = jobs
    looks, cpu = [], []
    for _ in range(rounds):
        spent, spent_cpu = forecaster.spent_s, forecaster.spent_cpu_s
        result = sim.scheduler.round()
        looks.append(forecaster.spent_s - spent)
        cpu.append(forecaster.spent_cpu_s - spent_cpu)
        started = jobs - result.pending_after
        if started > 0:
            sim.store.submit(queue[given : given + started])
            given += started
        sources = (sim.simulator, sim.migrator)  # a copy's end is an event, as in a replay
        times = [t for t in (source.next_event_time() for source in sources) if t is not None]
        if times:
            for source in sources:
                source.advance(min(times))
    sim.store.close()
    times = recorder.decide_s
    solves = [r.solve_s for r in recorder.solver_rounds]
    return SolverBench(
        jobs=jobs,
        gpus=sum(n.gpu_count for n in sim.nodes),
        rounds=len(times),
        median_s=statistics.median(times),
        max_s=max(times),
        fallbacks=sum(1 for r in recorder.solver_rounds if r.fallback is not None),
        solve_median_s=statistics.median(solves) if solves else None,
        forecast_median_s=statistics.median(looks),
        forecast_max_s=max(looks),
        forecast_cpu_median_s=statistics.median(cpu),
    )
