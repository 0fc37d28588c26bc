"""The GPU catalog the predictor reads (scores + specs), and ingestion of benchmark job output.

`BenchmarkCatalog` joins a benchmarks YAML (config/benchmarks.py) with the public specs in
data/gpus/specs.csv (keyed by product label, as GPU types are) and data/gpus/devices.csv: a
product's `spec` in the YAML wins, else its specs.csv row, else its devices.csv row.

Benchmark jobs (examples/benchmark-job.yaml) print one line per workload:

    CPN_BENCH {"workload": "resnet50", "score": 281.3, "unit": "images/s", "method": "cpn-bench/1",
               "gpu_product": "Tesla-V100-SXM2-16GB", "node": "gpu-node-3"}

`parse_benchmark_log` turns a log into results (other lines are ignored) and
`merge_results` folds them into a benchmarks config: every node's scores under `nodes`,
and each product's score as the median over its nodes.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from functools import cached_property
from pathlib import Path

from pydantic import ValidationError

from config.benchmarks import (
    BENCHMARKS_YAML,
    BenchmarksConfig,
    GpuEntry,
    NodeEntry,
    Workload,
    load_benchmarks,
)
from config.settings import DATA_DIR, format_validation_error
from cpn.gpus import canonical_gpu
from cpn.model_names import model_key

SPECS_CSV = DATA_DIR / "gpus" / "specs.csv"
"""Public GPU specs by product label (memory GB, bandwidth GB/s, SMs, FP32 TFLOPS), from datasheets."""
DEVICES_CSV = DATA_DIR / "gpus" / "devices.csv"
"""More public GPU specs (memory GB, bandwidth GB/s, FP32 TFLOPS), Apache-2.0 (data/gpus/)."""

MARKER = "CPN_BENCH "
"""Prefix of a result line in a benchmark job's log."""


class BenchmarkError(ValueError):
    """A benchmarks file, a devices table or a benchmark log is unusable; the message says where."""


@dataclass(frozen=True)
class GpuProfile:
    """Everything the predictor knows about one GPU type (or one node of it)."""

    key: str
    """Canonical GPU key."""
    scores: tuple[float, ...]
    """Scores in the catalog's workload order."""
    memory_gb: float
    mem_bw_gbps: float
    fp32_tflops: float

    @cached_property
    def log_speed(self) -> float:
        """Log of the geometric mean of the scores: one number for 'how fast is this GPU' (computed once:
        the predictor asks it for every query)."""
        return sum(math.log(s) for s in self.scores) / len(self.scores)


SPEC_FIELDS = ("memory_gb", "mem_bw_gbps", "fp32_tflops")
"""GPU spec figures the predictor uses as features (GpuProfile attributes)."""


class BenchmarkCatalog:
    """GPU types with their benchmark scores and specs, looked up by any spelling of the product.

    A spec figure neither the benchmarks file nor devices.csv gives is NaN: the predictor's
    tree models treat it as missing. `missing_specs` lists them and `spec_warning()` says so.
    """

    def __init__(
        self,
        config: BenchmarksConfig,
        devices_csv: Path | str = DEVICES_CSV,
        source: str = "the benchmarks file",
        specs_csv: Path | str = SPECS_CSV,
    ) -> None:
        self.config = config
        self.source = source
        """Where the config came from (a path), for messages."""
        self.workloads = tuple(config.workloads)
        needs_devices = any(
            e.spec is None or any(getattr(e.spec, f) is None for f in SPEC_FIELDS)
            for e in config.gpus.values()
        )
        devices = (
            {**_read_devices(Path(devices_csv)), **_read_specs(Path(specs_csv))} if needs_devices else {}
        )
        self.missing_specs: dict[str, tuple[str, ...]] = {}
        """GPU key -> spec figures known nowhere (NaN features)."""
        self._profiles: dict[str, GpuProfile] = {}
        spelled: dict[str, str] = {}
        for name, entry in config.gpus.items():
            key = canonical_gpu(name)
            if key in spelled:
                raise BenchmarkError(
                    f"{source}: gpus.{name} and gpus.{spelled[key]} name one GPU product ({key}); keep one"
                )
            spelled[key] = name
            self._profiles[key] = self._profile(key, entry.scores, entry, devices)
        self._nodes = {}
        for name, n in config.nodes.items():
            entry = config.gpus[n.gpu]
            self._nodes[name] = self._profile(
                canonical_gpu(n.gpu), {**entry.scores, **n.scores}, entry, devices
            )

    def __setstate__(self, state: dict) -> None:
        # Catalogs pickled before missing specs were allowed had every figure.
        state.setdefault("missing_specs", {})
        state.setdefault("source", "the benchmarks file")
        self.__dict__.update(state)

    @classmethod
    def load(cls, path: Path | str = BENCHMARKS_YAML) -> BenchmarkCatalog:
        """Catalog from a benchmarks YAML file (ConfigError if the file is invalid)."""
        return cls(load_benchmarks(path), source=str(path))

    def _profile(self, key: str, scores: Mapping[str, float], entry: GpuEntry, devices: dict) -> GpuProfile:
        figures = []
        for i, name in enumerate(SPEC_FIELDS):
            value = getattr(entry.spec, name) if entry.spec is not None else None
            if value is None and key in devices:
                value = devices[key][i]
            figures.append(math.nan if value is None else float(value))
        missing = tuple(name for name, v in zip(SPEC_FIELDS, figures, strict=True) if math.isnan(v))
        if missing:
            self.missing_specs[key] = missing
        return GpuProfile(key, tuple(scores[w] for w in self.workloads), *figures)

    def spec_warning(self) -> str | None:
        """What is missing from the GPU specs and what the predictor does about it; None if nothing."""
        if not self.missing_specs:
            return None
        gpus = "; ".join(f"gpus.{k}: no spec figure {', '.join(v)}" for k, v in self.missing_specs.items())
        return (
            f"{self.source}: {gpus} (neither the file's `spec:` nor {SPECS_CSV.name} nor {DEVICES_CSV.name} "
            "has them); the "
            "predictor treats them as missing features. Add `spec: {memory_gb, mem_bw_gbps, fp32_tflops, "
            "source}` under the GPU to use them"
        )

    def find(self, gpu_type: str, node: str | None = None) -> GpuProfile | None:
        """Profile of a GPU type (with `node`'s own scores if it has some); None if the type is unknown."""
        key = canonical_gpu(gpu_type)
        node_profile = self._nodes.get(node) if node is not None else None
        if node_profile is not None and node_profile.key == key:
            return node_profile
        return self._profiles.get(key)

    def samples_per_gb(self, model: str) -> float | None:
        """Training samples per GB of `model`'s dataset (the file's `samples_per_gb`, the model matched
        by its key); None when the file does not say."""
        return {model_key(m): v for m, v in self.config.samples_per_gb.items()}.get(model_key(model))

    def gpu_types(self) -> tuple[str, ...]:
        """Canonical keys of every GPU type in the catalog."""
        return tuple(self._profiles)

    def reference_models(self) -> tuple[str, ...]:
        """The model each workload runs, in workload order: its `measured_as` model where the file derives
        the score from a table, else the workload's own name (`resnet50`); models.catalog profiles them."""
        return tuple(
            w.measured_as.model if w.measured_as is not None else name
            for name, w in self.config.workloads.items()
        )

    def same_scoring(self, other: BenchmarkCatalog) -> bool:
        """True if both catalogs score the same workloads the same way (features are comparable)."""
        return self.config.workloads == other.config.workloads


def _read_figures(
    path: Path, key: str, columns: tuple[str, str, str]
) -> dict[str, tuple[float, float, float]]:
    """(memory GB, bandwidth, FP32 TFLOPS) by canonical GPU key from a CSV whose GPU name is in column
    `key` and whose figures are in `columns` (header names compared trimmed and lower-cased)."""
    out = {}
    try:
        with path.open(newline="") as fh:
            for lineno, raw in enumerate(csv.DictReader(fh), start=2):
                rec = {(k or "").strip().lower(): v for k, v in raw.items()}
                try:
                    out[canonical_gpu(rec[key])] = tuple(float(rec[c]) for c in columns)
                except (KeyError, TypeError, ValueError) as exc:
                    raise BenchmarkError(
                        f"{path}:{lineno}: need {key}, {', '.join(columns)}: {exc}"
                    ) from None
    except FileNotFoundError:
        raise BenchmarkError(f"{path}: file not found") from None
    return out


def _read_specs(path: Path) -> dict[str, tuple[float, float, float]]:
    """specs.csv rows (gpu_product, mem_gb, mem_bw_gbs, num_sm, fp32_tflops) by GPU key."""
    return _read_figures(path, "gpu_product", ("mem_gb", "mem_bw_gbs", "fp32_tflops"))


def _read_devices(path: Path) -> dict[str, tuple[float, float, float]]:
    """devices.csv rows with memory, bandwidth and FP32 figures, by canonical GPU key."""
    return _read_figures(path, "device", ("mem", "mem_bw", "single"))


@dataclass(frozen=True)
class BenchmarkResult:
    """One workload's score measured on one node."""

    workload: str
    score: float
    unit: str
    method: str
    gpu_product: str
    """The product as the job saw it (e.g. `Tesla-V100-SXM2-16GB`); canonicalised on merge."""
    node: str
    driver: str | None = None
    """The node's driver version, when the job reported one (`"driver"`); kept with the node's scores."""


def parse_benchmark_log(text: str, source: str = "<log>") -> list[BenchmarkResult]:
    """Results from the `CPN_BENCH {json}` lines of a benchmark job's log.

    Raises BenchmarkError naming `source` and the line for a malformed result line, or
    when the log holds no result at all.
    """
    results = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line.startswith(MARKER):
            continue
        where = f"{source}:{lineno}"
        try:
            rec = json.loads(line[len(MARKER) :])
        except json.JSONDecodeError as exc:
            raise BenchmarkError(f"{where}: result is not JSON: {exc}") from None
        if not isinstance(rec, dict):
            raise BenchmarkError(f"{where}: result must be a JSON object")
        results.append(_result(rec, where))
    if not results:
        raise BenchmarkError(f"{source}: no `{MARKER.strip()}` result lines")
    return results


def _result(rec: dict, where: str) -> BenchmarkResult:
    fields = ("workload", "unit", "method", "gpu_product", "node")
    for name in fields:
        if not isinstance(rec.get(name), str) or not rec[name].strip():
            raise BenchmarkError(f"{where}: field {name!r} must be a non-empty string")
    score = rec.get("score")
    if (
        isinstance(score, bool)
        or not isinstance(score, int | float)
        or not math.isfinite(score)
        or score <= 0
    ):
        raise BenchmarkError(f"{where}: field 'score' must be a positive number, got {score!r}")
    driver = rec.get("driver")
    if driver is not None and (not isinstance(driver, str) or not driver.strip()):
        raise BenchmarkError(f"{where}: field 'driver' must be a non-empty string when given")
    return BenchmarkResult(
        score=float(score), driver=driver and driver.strip(), **{name: rec[name].strip() for name in fields}
    )


def merge_results(
    results: Iterable[BenchmarkResult], base: BenchmarksConfig | None = None, measured: date | None = None
) -> BenchmarksConfig:
    """`base` with the results folded in (a new config when `base` is None).

    Each node gets its scores (median of repeats) under `nodes`, with its driver (as reported) and the day
    `measured` (None: not recorded); each product measured
    gets, per workload, the median over its nodes. Results measured by another method or
    in another unit than `base` declares are refused: such scores are not comparable.
    """
    results = list(results)
    workloads = dict(base.workloads) if base else {}
    for r in results:
        declared = workloads.get(r.workload)
        if declared is None and base is not None:
            raise BenchmarkError(
                f"result for unknown workload {r.workload!r}; the file has {sorted(workloads)}"
            )
        if declared is None:
            workloads[r.workload] = Workload(
                unit=r.unit, method=r.method, description="measured by benchmark jobs"
            )
        elif (declared.unit, declared.method) != (r.unit, r.method):
            raise BenchmarkError(
                f"{r.node}/{r.workload}: measured as {r.unit} by {r.method}, but scores here are "
                f"{declared.unit} by {declared.method}; ingest into a new benchmarks file instead"
            )
    per_node: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    node_gpu: dict[str, str] = {}
    node_driver: dict[str, str | None] = {}
    # A product already in `base` keeps its spelling there; a new one is written as the job reported it.
    spelled = {canonical_gpu(k): k for k in base.gpus} if base else {}
    for r in results:
        gpu = spelled.setdefault(canonical_gpu(r.gpu_product), r.gpu_product)
        if node_gpu.setdefault(r.node, gpu) != gpu:
            raise BenchmarkError(f"node {r.node!r} reported two GPU products: {node_gpu[r.node]} and {gpu}")
        per_node[r.node][r.workload].append(r.score)
        node_driver[r.node] = r.driver or node_driver.get(r.node)
    nodes = dict(base.nodes) if base else {}
    per_gpu: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for node, scores in per_node.items():
        medians = {w: statistics.median(v) for w, v in scores.items()}
        nodes[node] = NodeEntry(
            gpu=node_gpu[node], scores=medians, driver=node_driver[node], measured=measured
        )
        for w, v in medians.items():
            per_gpu[node_gpu[node]][w].append(v)
    gpus = dict(base.gpus) if base else {}
    for gpu, scores in per_gpu.items():
        old = gpus.get(gpu)
        merged = {**(old.scores if old else {}), **{w: statistics.median(v) for w, v in scores.items()}}
        gpus[gpu] = GpuEntry(scores=merged, spec=old.spec if old else None)
    try:
        return BenchmarksConfig(
            workloads=workloads,
            gpus=gpus,
            nodes=nodes,
            samples_per_gb=base.samples_per_gb if base else {},
        )
    except ValidationError as exc:
        raise BenchmarkError(f"merged benchmarks are incomplete: {format_validation_error(exc)}") from None
