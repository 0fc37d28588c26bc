"""Generated queues: seeded random training jobs over configurations a throughput table measures,
and the demo's job source, which renders them as manifests and takes them back through real intake."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace

from config.policies import DEFAULT_CPU_THRESHOLD
from config.settings import ClustersConfig
from cpn.formats.manifests import slug, to_manifest
from cpn.formats.throughput import ThroughputTable
from cpn.intake import parse_manifests
from cpn.jobs import JobSpec
from cpn.sim.memory import gpu_memory_gb

GPU_COUNT_WEIGHTS = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}
"""How often a generated job asks for 1, 2, 4 or 8 GPUs (Gavel's multi-GPU job generator)."""

RUNTIME_RANGE_S = (300.0, 4 * 3600.0)
"""Generated jobs run between 5 minutes and 4 hours on the reference GPU (log-uniform)."""

OVERSIZE_SHARE = 0.15
"""Share of generated jobs drawn from configurations too big for the smallest card in the clusters."""

CPU_SHARE_RANGE = (0.25, 1.0)
"""A generated job asks, per GPU, this share (one of seven even steps) of the CPU a card's share of the
tightest node allows under the default CPU threshold: real jobs ask CPU per GPU (data loaders), and a
queue asking more than the nodes give per card leaves cards idle behind the threshold whatever the policy.
"""


def _round_up(x: float, step: float = 0.1) -> float:
    return round(math.ceil(x / step - 1e-9) * step, 6)


def generate_queue(
    n: int,
    seed: int,
    table: ThroughputTable,
    clusters: ClustersConfig,
    arrival_window_s: float = 0.0,
    reference_gpu: str = "v100",
    oversize_share: float = OVERSIZE_SHARE,
) -> list[JobSpec]:
    """`n` random training jobs, the same for the same arguments, in arrival order (ids `default/job-NNNN`).

    Like the seed's generator (random model, data size, epochs), over (model, batch, GPU count)
    configurations the table measures as running on `reference_gpu`; GPU counts follow
    GPU_COUNT_WEIGHTS, and `total_steps` gives a run time in RUNTIME_RANGE_S on the reference GPU.
    About `oversize_share` of the jobs come from configurations whose modelled memory exceeds the
    smallest card in `clusters` but fits the largest, so that memory-blind placement meets OOM kills.
    Each job declares its modelled memory (`gpu_mem_gb`), CPU cores per GPU within what every node gives
    a card under the default CPU threshold (`cpu_per_card`, CPU_SHARE_RANGE of it), a source cluster, and
    its model's image. Arrivals are uniform over `arrival_window_s` (all at 0 when it is 0).
    """
    if reference_gpu not in table.gpu_types():
        raise ValueError(f"reference GPU {reference_gpu!r} not in the table; it has {table.gpu_types()}")
    rng = random.Random(seed)
    measured: dict[tuple[str, int | None, int], float] = {}
    for model, batch in table.configs():
        for count in GPU_COUNT_WEIGHTS:
            sps = table.steps_per_sec(model, batch, reference_gpu, count)
            if sps and gpu_memory_gb(model, batch, count) is not None:
                measured[(model, batch, count)] = sps
    if not measured:
        raise ValueError(f"the table measures no configuration the memory model knows on {reference_gpu}")
    cards = sorted({g.gpu_memory_gb for c in clusters.clusters for g in c.node_groups})
    oversize = [cfg for cfg in measured if cards[0] < gpu_memory_gb(*cfg) <= cards[-1]]
    by_count = {c: [cfg for cfg in measured if cfg[2] == c] for c in GPU_COUNT_WEIGHTS}
    counts = [c for c in GPU_COUNT_WEIGHTS if by_count[c]]
    weights = [GPU_COUNT_WEIGHTS[c] for c in counts]
    images = {
        m: (f"cpn-workloads/{slug(m)}:gavel", round(rng.uniform(2.0, 10.0), 1))
        for m in sorted({cfg[0] for cfg in measured})
    }
    names = [c.name for c in clusters.clusters]
    per_card = cpu_per_card(clusters)
    lo, hi = (math.log(x) for x in RUNTIME_RANGE_S)
    drawn = []
    for _ in range(n):
        if oversize and rng.random() < oversize_share:
            model, batch, count = rng.choice(oversize)
        else:
            model, batch, count = rng.choice(by_count[rng.choices(counts, weights)[0]])
        runtime = math.exp(rng.uniform(lo, hi))
        image, image_size = images[model]
        drawn.append(
            dict(
                model=model,
                batch_size=batch,
                num_gpus=count,
                total_steps=max(1, round(runtime * measured[(model, batch, count)])),
                epochs=rng.randint(1, 100),
                data_size_gb=round(rng.uniform(1.0, 50.0), 1),
                gpu_mem_gb=_round_up(gpu_memory_gb(model, batch, count)),
                cpu=_cpu(count, per_card, rng.randint(2, 8)),
                image=image,
                image_size_gb=image_size,
                source_cluster=rng.choice(names),
                arrival_s=round(rng.uniform(0.0, arrival_window_s), 3) if arrival_window_s > 0 else 0.0,
            )
        )
    drawn.sort(key=lambda d: d["arrival_s"])
    width = max(4, len(str(n - 1)))
    return [JobSpec(job_id=f"default/job-{i:0{width}d}", **d) for i, d in enumerate(drawn)]


def cpu_per_card(clusters: ClustersConfig, threshold: float = DEFAULT_CPU_THRESHOLD) -> float | None:
    """CPU cores a card's share of the tightest node (fewest cores per card) allows under `threshold`:
    the most a generated job asks per GPU, so that every node can fill every card; None when the config
    lists no node (real clusters only: their nodes come from their API)."""
    ratios = [g.cpu_cores / g.gpus_per_node for c in clusters.clusters for g in c.node_groups]
    return threshold * min(ratios) if ratios else None


def _cpu(gpus: int, per_card: float | None, step: int) -> float:
    """The cores a job of `gpus` GPUs asks for a draw `step` in 2..8: a share of `per_card` per GPU from
    CPU_SHARE_RANGE's low end (2) to its high end (8), rounded down to 0.1 core, at least 0.1; with no
    `per_card` known, `step` cores."""
    if per_card is None:
        return float(step)
    low, high = CPU_SHARE_RANGE
    share = low + (high - low) * (step - 2) / 6
    return max(0.1, math.floor(gpus * per_card * share * 10 + 1e-9) / 10)


def generate_manifests(
    clusters: ClustersConfig, table: ThroughputTable, jobs: int, seed: int, arrival_window_s: float = 0.0
) -> list[tuple[float, str]]:
    """A seeded random queue rendered as Volcano Job manifests, each with its arrival time."""
    queue = generate_queue(jobs, seed, table, clusters, arrival_window_s=arrival_window_s)
    return [(job.arrival_s, to_manifest(job, clusters.label_domain)) for job in queue]


def accept_manifests(manifests: Sequence[tuple[float, str]]) -> list[JobSpec]:
    """Parse and validate each manifest through intake; the arrival time stays with the job."""
    accepted = []
    for i, (arrival, text) in enumerate(manifests, start=1):
        for spec in parse_manifests(text, source=f"generated manifest {i}"):
            accepted.append(replace(spec, arrival_s=arrival))
    return accepted
