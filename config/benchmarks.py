"""Typed benchmark scores and GPU specs: the GPU-side inputs of the runtime predictor.

`config/benchmarks.yaml` holds, per GPU product, a score for each reference workload
(the seed's resnet50, yolov8m and llama3) and, where `data/gpus/devices.csv` has no row
for the product, its specs. Per-node scores (from benchmark jobs run on each node)
override the product's where a node differs. A user adds GPU products the project has
never seen by writing a file of the same shape and passing it with `--benchmarks`.

GPU keys are product labels in any spelling (`NVIDIA-A100-SXM4-80GB`, `a100-sxm4-80gb`); the
predictor's catalog keys them as `cpn.gpus.canonical_gpu` does and refuses two entries that name
one product. Every workload of a file is scored by one method: scores measured another way are
not comparable, and a file mixing methods is refused.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from config.settings import REPO_ROOT, ConfigError, load_model

BENCHMARKS_YAML = REPO_ROOT / "config" / "benchmarks.yaml"
"""The static benchmark scores shipped with the project."""

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_GPU_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+ _()/-]*")
GpuKey = Annotated[str, Field(pattern=f"^{_GPU_KEY.pattern}$")]
"""A GPU product as `nvidia.com/gpu.product` spells it (any case and separators)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProxyRun(_Strict):
    """The throughput-table configuration a workload's score is derived from: score = its one-GPU steps/s
    x `per_step`. The simulated clusters' benchmark jobs measure it on their ground truth
    (cpn.sim.gateway), so a GPU type the simulator knows gets scores of the file's method."""

    model: str = Field(min_length=1, description="Model as the throughput table names it, e.g. ResNet-50.")
    batch_size: int | None = Field(None, gt=0, description="Its batch size; omit for fixed-batch models.")
    per_step: PositiveFloat = Field(1.0, description="Score per step/s, e.g. 64 images per step.")


class Workload(_Strict):
    """One reference workload and how its score is measured.

    Scores are only comparable when every GPU in a file was scored the same way, so
    each workload names its `method`; results measured another way are refused.
    """

    unit: str = Field(min_length=1, description="Unit of the score, e.g. images/s. Higher is faster.")
    method: str = Field(
        min_length=1,
        description="How scores were obtained, e.g. `gavel-proxy` (derived from a measured table) or "
        "`cpn-bench/1` (examples/benchmark-job.yaml). Every workload of a file has the same method.",
    )
    description: str = Field("", description="What is run, at which batch size and precision.")
    proxy: str | None = Field(
        None, description="The measured configuration that stands in for the workload, when it was not run."
    )
    measured_as: ProxyRun | None = Field(
        None, description="That configuration as data, for simulated benchmark jobs; None = not derived."
    )


class GpuSpec(_Strict):
    """Public specs of one GPU (one die for multi-die boards such as K80).

    A figure left out is taken from data/gpus/devices.csv if it has the product, else the
    predictor treats it as missing (and says so).
    """

    memory_gb: PositiveFloat | None = Field(None, description="Memory of one GPU, GB.")
    mem_bw_gbps: PositiveFloat | None = Field(None, description="Peak memory bandwidth, GB/s.")
    fp32_tflops: PositiveFloat | None = Field(None, description="Peak single-precision throughput, TFLOPS.")
    source: str = Field(min_length=1, description="Where the figures come from (datasheet, URL).")


class GpuEntry(_Strict):
    """Scores of one GPU product, and its specs if devices.csv has none."""

    scores: dict[str, PositiveFloat] = Field(description="Workload name -> score (see `workloads`).")
    spec: GpuSpec | None = Field(None, description="Specs; omit to take them from data/gpus/devices.csv.")


class NodeEntry(_Strict):
    """Scores measured on one node, overriding its product's where given."""

    gpu: GpuKey = Field(description="The node's GPU product, spelled as a key of `gpus`.")
    scores: dict[str, PositiveFloat] = Field(description="Workload name -> score measured on this node.")
    driver: str | None = Field(
        None, description="The node's NVIDIA driver version when measured (GFD label); None = not labelled."
    )
    measured: date | None = Field(None, description="The day the benchmark job measured it.")


class BenchmarksConfig(_Strict):
    """Reference workloads, per-product scores and specs, per-node overrides."""

    workloads: dict[str, Workload] = Field(min_length=1, description="Reference workloads by name.")
    gpus: dict[GpuKey, GpuEntry] = Field(
        min_length=1, description="GPU product (the nvidia.com/gpu.product label) -> scores (and specs)."
    )
    nodes: dict[str, NodeEntry] = Field(
        default_factory=dict, description="Node name -> scores measured on it (benchmark jobs)."
    )
    samples_per_gb: dict[str, PositiveFloat] = Field(
        default_factory=dict,
        description="Model name -> training samples per GB of its dataset; turns a job's `data_size` and "
        "`epoch` annotations into steps when the job gives no total_steps.",
    )

    @field_validator("gpus", mode="before")
    @classmethod
    def _check_gpu_keys(cls, gpus: object) -> object:
        if isinstance(gpus, dict):
            for key in gpus:
                if not isinstance(key, str) or not _GPU_KEY.fullmatch(key):
                    raise ValueError(
                        f"GPU key {key!r} is not a GPU product name: write the nvidia.com/gpu.product "
                        "label, e.g. NVIDIA-A100-SXM4-80GB or NVIDIA-GeForce-RTX-4090"
                    )
        return gpus

    @model_validator(mode="after")
    def _check_scores(self) -> BenchmarksConfig:
        methods = {w.method for w in self.workloads.values()}
        if len(methods) > 1:
            listed = ", ".join(f"{n}: {w.method}" for n, w in self.workloads.items())
            raise ValueError(
                f"workloads are scored by {len(methods)} methods ({listed}); scores measured another way "
                "are not comparable: keep one method per file (ingest new results into a new file)"
            )
        known = set(self.workloads)
        for gpu, entry in self.gpus.items():
            missing, extra = known - set(entry.scores), set(entry.scores) - known
            if missing:
                raise ValueError(f"gpus.{gpu}: no score for workload(s) {sorted(missing)}")
            if extra:
                raise ValueError(f"gpus.{gpu}: unknown workload(s) {sorted(extra)}; known: {sorted(known)}")
        for node, entry in self.nodes.items():
            if entry.gpu not in self.gpus:
                raise ValueError(f"nodes.{node}: gpu {entry.gpu!r} is not a key of gpus: {sorted(self.gpus)}")
            extra = set(entry.scores) - known
            if extra:
                raise ValueError(f"nodes.{node}: unknown workload(s) {sorted(extra)}; known: {sorted(known)}")
        return self


def load_benchmarks(path: Path | str = BENCHMARKS_YAML) -> BenchmarksConfig:
    """Load a benchmarks YAML file; ConfigError names the file, the field and the reason."""
    try:
        return load_model(path, BenchmarksConfig)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:  # a folder, no permission (a missing file is ConfigError already)
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None


def dump_benchmarks(config: BenchmarksConfig, path: Path | str) -> None:
    """Write `config` as YAML that `load_benchmarks` reads back unchanged."""
    data = config.model_dump(mode="json", exclude_none=True)
    Path(path).write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
