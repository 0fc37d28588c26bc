"""Settings of the benchmark loop (`benchmark-nodes`, `cpn benchmark`): which nodes it measures and how.

Read from `benchmarking.yaml` in a config folder, beside `clusters.yaml`; every field has a default, so the
file is optional. docs/predictor.md describes the loop.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from config.benchmarks import BENCHMARKS_YAML
from config.runtime import runtime_settings
from config.settings import load_model

BENCHMARKING_FILE = "benchmarking.yaml"
"""The optional file of a config folder these settings come from."""


class BenchmarkingSettings(BaseModel):
    """How the benchmark loop chooses nodes and runs its jobs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    every_node: bool = Field(
        False,
        description="Benchmark every node not measured yet, not one node per unmeasured GPU type (and "
        "driver): for clusters whose nodes of one type differ (cooling, clocks, PCIe).",
    )
    seconds_per_workload: float = Field(
        600.0,
        gt=0,
        description="How long each reference workload trains (BENCH_SECONDS; the seed's 10 minutes).",
    )
    timeout_s: float = Field(
        3600.0,
        gt=0,
        description="A benchmark job still running this long after submission is deleted and counted failed "
        "(also its activeDeadlineSeconds on Kubernetes).",
    )
    poll_s: float = Field(
        30.0, gt=0, description="Seconds between two looks at the jobs while following them."
    )
    namespace: str = Field(
        "cpn-bench",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="Kubernetes namespace the benchmark jobs run in.",
    )
    image: str = Field(
        "pytorch/pytorch:2.4.1-cuda12.1-cudnn9-runtime",
        min_length=1,
        description="Container image of the benchmark job (examples/benchmark-job.yaml says what it needs).",
    )
    retries: int = Field(
        1,
        ge=0,
        description="How many later runs try a GPU type again after its benchmark failed or timed out; after "
        "that it is reported and left alone until its failures are cleared.",
    )
    store: Path | None = Field(
        None,
        description="Benchmarks file the scores are ingested into; default: this cpn home's benchmarks.yaml. "
        "Its workloads' method is the one the loop measures by: results of another method are refused.",
    )


def load_benchmarking(folder: Path | str) -> BenchmarkingSettings:
    """`folder/benchmarking.yaml`, or the defaults when the folder has none; ConfigError names the field."""
    path = Path(folder) / BENCHMARKING_FILE
    return load_model(path, BenchmarkingSettings) if path.exists() else BenchmarkingSettings()


def store_paths(settings: BenchmarkingSettings) -> tuple[Path, Path, Path]:
    """(the benchmarks file to start from, the one to write, the failure log beside it): the configured
    store, else this cpn home's benchmarks.yaml; started from the shipped file while it does not exist."""
    out = settings.store or runtime_settings().benchmarks_path
    base = out if out.exists() else BENCHMARKS_YAML
    return base, out, out.with_name(f"{out.stem}-failures.json")
