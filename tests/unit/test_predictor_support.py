"""Builders shared by the predictor tests (this module holds no tests).

A synthetic world where throughput follows a known law, so tests can say what a
correct predictor must get: steps/s = base[model] x 32/batch x speed[gpu] x gpus^0.9,
times an optional per-(model, GPU) affinity that benchmark scores cannot explain.
"""

from __future__ import annotations

import csv
from pathlib import Path

from config.benchmarks import BenchmarksConfig
from cpn.formats.throughput import ThroughputRow
from models.benchmarks import BenchmarkCatalog

SPEED = {"k80": 1.0, "p100": 4.0, "v100": 7.0}
BASE = {"ResNet-50": 10.0, "Transformer": 6.0, "LM": 40.0, "A3C": 3.0}
BATCHES = {"ResNet-50": (16, 32, 64), "Transformer": (32, 64, 128), "LM": (10, 20, 40), "A3C": (None,)}
GPU_COUNTS = (1, 2, 4)

SPECS = {
    "k80": {"memory_gb": 12, "mem_bw_gbps": 240, "fp32_tflops": 4.37, "source": "test"},
    "p100": {"memory_gb": 16, "mem_bw_gbps": 732, "fp32_tflops": 9.3, "source": "test"},
    "v100": {"memory_gb": 16, "mem_bw_gbps": 900, "fp32_tflops": 14.0, "source": "test"},
}


def benchmarks_dict(gpus: dict[str, float] = SPEED) -> dict:
    """A benchmarks config (as YAML data) whose scores are proportional to `gpus` speeds."""
    return {
        "workloads": {w: {"unit": "u/s", "method": "test"} for w in ("resnet50", "yolov8m", "llama3")},
        "gpus": {
            g: {
                "scores": {"resnet50": 40 * s, "yolov8m": 0.5 * s, "llama3": 110 * s},
                "spec": SPECS.get(
                    g, {"memory_gb": 80, "mem_bw_gbps": 3350, "fp32_tflops": 67, "source": "test"}
                ),
            }
            for g, s in gpus.items()
        },
        "samples_per_gb": {"ResNet-50": 1000},
    }


def catalog(gpus: dict[str, float] = SPEED) -> BenchmarkCatalog:
    """A catalog of the synthetic GPU types."""
    return BenchmarkCatalog(BenchmarksConfig.model_validate(benchmarks_dict(gpus)))


def law(model: str, batch: int | None, gpu: str, n: int, affinity: float = 0.0) -> float:
    """Steps/s of the synthetic law; `affinity` makes Transformer slower on v100 than its scores say."""
    tp = BASE[model] * (32 / batch if batch else 1.0) * SPEED[gpu] * n**0.9
    if affinity and model == "Transformer" and gpu == "v100":
        tp /= 1 + affinity
    return tp


def rows(affinity: float = 0.0, gpus: tuple[str, ...] = tuple(SPEED)) -> list[ThroughputRow]:
    """Every configuration of the synthetic world."""
    return [
        ThroughputRow(m, b, g, n, law(m, b, g, n, affinity))
        for m, batches in BATCHES.items()
        for b in batches
        for g in gpus
        for n in GPU_COUNTS
    ]


def write_csv(path: Path, table: list[ThroughputRow]) -> Path:
    """`table` as a throughput CSV in the DESIGN.md format."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "batch_size", "gpu_product", "num_gpus", "steps_per_sec"])
        for r in table:
            w.writerow(
                [
                    r.model,
                    "" if r.batch_size is None else r.batch_size,
                    r.gpu_type,
                    r.num_gpus,
                    r.steps_per_sec,
                ]
            )
    return path
