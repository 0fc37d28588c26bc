"""How the service's memory grows with the jobs it has seen: it should follow the queue, not the history.

`memory_profile` pushes generated jobs through the live loop's code path (the store on disk, the
queue view, the scheduler's caches, the simulated clusters without their run log, as `cpn run` keeps
them) in batches, and reads the process's resident memory at given job counts.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from pathlib import Path

from config.settings import ClustersConfig
from cpn.bootstrap import build_service
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.jobs import JobSpec, JobState
from cpn.sim.estimates import OracleEstimates

_TABLE = ThroughputTable([ThroughputRow("bench-model", 32, "v100", 1, 1.0)])
_CLUSTERS = ClustersConfig.model_validate(
    {
        "clusters": [
            {
                "name": "bench",
                "node_groups": [
                    {
                        "name": "n",
                        "count": 16,
                        "gpu_product": "Tesla-V100-SXM2-16GB",
                        "gpus_per_node": 8,
                        "gpu_memory_gb": 16,
                        "cpu_cores": 64,
                    }
                ],
            }
        ]
    }
)


def rss_mb() -> float:
    """Resident memory of this process, MB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise OSError("no VmRSS in /proc/self/status")


def memory_profile(
    store_path: Path | str,
    jobs: int,
    checkpoints: Sequence[int],
    batch: int = 500,
    interval_s: float = 120.0,
    progress: Callable[[int, float], None] | None = None,
) -> dict[int, float]:
    """Run `jobs` generated one-GPU jobs through the scheduler in batches of `batch`, a round every
    `interval_s` of simulated time (or at the next event, if later), as the live loop paces them; returns
    the resident memory (MB) after each checkpoint's number of jobs has finished."""
    service = build_service(
        _CLUSTERS, store_path, "greedy", _TABLE, estimator=OracleEstimates(_TABLE), time_scale=None
    )
    sim = service.simulator
    assert sim is not None
    sim.keep_executions = False
    scheduler, clock = service.scheduler, service.clock
    marks: dict[int, float] = {}
    wanted = sorted(checkpoints)
    for start in range(0, jobs, batch):
        service.store.submit(
            [
                JobSpec(job_id=f"bench/j{i}", model="bench-model", batch_size=32, total_steps=60 + i % 240)
                for i in range(start, min(jobs, start + batch))
            ]
        )
        while True:
            scheduler.round()
            due = [t for t in (sim.next_event_time(), service.migrator.next_event_time()) if t is not None]
            if not due:
                break
            until = max(min(due), clock.now() + interval_s)
            service.migrator.advance(until)
            sim.advance(until)
        done = min(jobs, start + batch)
        while wanted and wanted[0] <= done:
            gc.collect()
            marks[wanted.pop(0)] = rss_mb()
            if progress is not None:
                progress(done, marks[max(marks)])
    unfinished = service.store.counts()[JobState.QUEUED]
    service.close()
    if unfinished:
        raise RuntimeError(f"{unfinished} jobs were left queued")
    return marks
