"""`cpn bench scale`: how a replay's cost grows with the number of jobs replayed.

Each size is a generated queue (cpn.sim.generated) arriving at one steady rate, `gap_s` seconds apart on
average, so a larger size is the same load for longer: a scheduler whose round costs what can start,
not what is queued, replays ten times the jobs in about ten times the time. Each replay runs through
the production Scheduler (cpn.perf.policies.run_policy) with oracle estimates; wall and CPU time
(`time.process_time`) are both reported, since a shared machine's wall time is not a quiet one's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from config.policies import PolicySettings
from config.settings import ClustersConfig
from cpn.formats.throughput import ThroughputTable
from cpn.perf.policies import run_policy
from cpn.sim.estimates import OracleEstimates
from cpn.sim.generated import generate_queue


@dataclass(frozen=True)
class ScaleRun:
    """One size's replay."""

    jobs: int
    wall_s: float
    """Wall time of the replay and its figures."""
    cpu_s: float
    """CPU time of this process over the same span."""
    makespan_s: float
    mean_jct_s: float | None


def bench_scale(
    settings: PolicySettings,
    sizes: Sequence[int],
    clusters: ClustersConfig,
    table: ThroughputTable,
    seed: int = 0,
    gap_s: float = 180.0,
    progress: Callable[[str], None] = lambda msg: None,
) -> list[ScaleRun]:
    """Replay a generated queue of each size in `sizes` under the policy `settings` names, arrivals
    uniform over `size x gap_s` seconds; returns each replay's times and figures."""
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError("sizes: give at least one, each at least 1 job")
    if gap_s <= 0:
        raise ValueError(f"gap_s={gap_s}: give a positive number of seconds")
    runs = []
    for n in sizes:
        jobs = generate_queue(n, seed, table, clusters, arrival_window_s=n * gap_s)
        progress(f"replaying {n:,} generated jobs under {settings.name} ...")
        wall, cpu = time.perf_counter(), time.process_time()
        run = run_policy(settings, jobs, clusters, table, OracleEstimates(table))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        runs.append(ScaleRun(n, wall, cpu, run.summary["makespan_s"], run.summary["mean_jct_s"]))
    return runs
