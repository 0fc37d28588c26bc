"""Job traces in, generated queues out, and jobs rendered as Volcano Job manifests.

- `load_trace_csv`: the project's job trace CSV (DESIGN.md).
- `load_gavel_trace`: Gavel's tab-separated Philly-derived `.trace` files.
- `generate_queue`: a seeded random queue over configurations the throughput table measures.
- `to_manifest`: one job as the YAML document intake accepts.
"""

from __future__ import annotations

import csv
import math
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from config.settings import ClustersConfig
from cpn.jobs import JobSpec
from cpn.sim.memory import gpu_memory_gb
from cpn.throughput import ThroughputTable


class TraceFormatError(ValueError):
    """A trace file is malformed; the message names the file, the line and the column."""


REQUIRED_COLUMNS = ("job_id", "arrival_s", "model", "batch_size", "num_gpus", "total_steps")
"""Columns every job trace CSV has."""

OPTIONAL_COLUMNS = (
    "kind",
    "data_size_gb",
    "image",
    "image_size_gb",
    "gpu_mem_gb",
    "cpu",
    "priority",
    "source_cluster",
)
"""Columns a job trace CSV may add; an empty cell means the JobSpec default."""


def _text(value: str) -> str:
    if not value:
        raise ValueError("empty")
    return value


def _count(value: str) -> int:
    n = int(value)
    if n < 1:
        raise ValueError(f"must be >= 1, got {n}")
    return n


def _non_negative(value: str) -> float:
    x = float(value)
    if not x >= 0 or math.isinf(x):
        raise ValueError(f"must be a finite number >= 0, got {value}")
    return x


def _positive(value: str) -> float:
    x = _non_negative(value)
    if x == 0:
        raise ValueError("must be > 0")
    return x


def _kind(value: str) -> str:
    if value not in ("training", "inference"):
        raise ValueError(f"must be training or inference, got {value!r}")
    return value


_PARSERS: dict[str, Callable[[str], Any]] = {
    "job_id": _text,
    "arrival_s": _non_negative,
    "model": _text,
    "batch_size": _count,
    "num_gpus": _count,
    "total_steps": _count,
    "kind": _kind,
    "data_size_gb": _non_negative,
    "image": str,
    "image_size_gb": _non_negative,
    "gpu_mem_gb": _positive,
    "cpu": _positive,
    "priority": int,
    "source_cluster": str,
}
_MAY_BE_EMPTY = frozenset(OPTIONAL_COLUMNS) | {"batch_size"}


def load_trace_csv(path: Path | str) -> list[JobSpec]:
    """Jobs of a trace CSV, in file order; TraceFormatError naming file, line and column otherwise.

    An empty `batch_size` means a model measured at one fixed batch (A3C, CycleGAN). Unknown
    columns and repeated job ids are errors.
    """
    path = Path(path)
    jobs: list[JobSpec] = []
    seen: set[str] = set()
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            columns = list(reader.fieldnames or ())
            missing = [c for c in REQUIRED_COLUMNS if c not in columns]
            if missing:
                raise TraceFormatError(f"{path}:1: missing column(s) {', '.join(missing)}")
            unknown = [c for c in columns if c not in _PARSERS]
            if unknown:
                raise TraceFormatError(
                    f"{path}:1: unknown column(s) {', '.join(unknown)}; allowed: "
                    f"{', '.join(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}"
                )
            for record in reader:
                if record.get(None):
                    where = f"{path}:{reader.line_num}"
                    raise TraceFormatError(f"{where}: more cells than the {len(columns)} columns")
                fields: dict[str, Any] = {}
                for column in columns:
                    value = (record[column] or "").strip()
                    if not value and column in _MAY_BE_EMPTY:
                        continue
                    try:
                        fields[column] = _PARSERS[column](value)
                    except ValueError as exc:
                        raise TraceFormatError(f"{path}:{reader.line_num}: column {column}: {exc}") from None
                if fields["job_id"] in seen:
                    raise TraceFormatError(
                        f"{path}:{reader.line_num}: column job_id: repeats {fields['job_id']!r}"
                    )
                seen.add(fields["job_id"])
                jobs.append(JobSpec(**fields))
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: file not found") from None
    return jobs


_GAVEL_JOB_TYPE = re.compile(r"^(?P<model>.+?) \(batch size (?P<batch>\d+)\)$")

GAVEL_MSR_COLUMNS = (
    "job_type",
    "command",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "arrival_s",
    "num_gpus",
)
"""Columns of Gavel's simulation traces (traces/msr/seed=*/…)."""

GAVEL_PHYSICAL_COLUMNS = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "num_gpus",
    "priority_weight",
    "slo",
    "arrival_s",
)
"""Columns of Gavel's physical-cluster traces (traces/physical_cluster/…); `num_gpus` is its scale factor."""


_GAVEL_LAYOUTS = {
    len(GAVEL_MSR_COLUMNS): GAVEL_MSR_COLUMNS,
    len(GAVEL_PHYSICAL_COLUMNS): GAVEL_PHYSICAL_COLUMNS,
}


def _cell(where: str, row: dict[str, str], column: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(row[column])
    except ValueError as exc:
        raise TraceFormatError(f"{where}: column {column}: {exc}") from None


def load_gavel_trace(path: Path | str) -> list[JobSpec]:
    """Jobs of a Gavel `.trace` file, either layout (7 or 10 tab-separated columns), ids `<stem>-NNNNN`.

    `ResNet-50 (batch size 128)` becomes model ResNet-50 at batch 128; a job type without a batch
    size (A3C, CycleGAN) gets none. The physical-cluster layout's priority weight and SLO have no
    JobSpec counterpart: rows that set them to anything but Gavel's defaults (1 and -1) are refused
    rather than silently dropped.
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: file not found") from None
    jobs = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        cells = line.split("\t")
        if len(cells) not in _GAVEL_LAYOUTS:
            raise TraceFormatError(
                f"{where}: {len(cells)} tab-separated columns; expected {len(GAVEL_MSR_COLUMNS)} "
                f"(simulation traces) or {len(GAVEL_PHYSICAL_COLUMNS)} (physical-cluster traces)"
            )
        row = dict(zip(_GAVEL_LAYOUTS[len(cells)], (c.strip() for c in cells), strict=True))
        if "slo" in row and (
            _cell(where, row, "priority_weight", float) != 1 or _cell(where, row, "slo", float) >= 0
        ):
            raise TraceFormatError(
                f"{where}: column priority_weight/slo: {row['priority_weight']}/{row['slo']} not supported "
                "(only Gavel's defaults 1 and -1)"
            )
        job_type = _cell(where, row, "job_type", _text)
        match = _GAVEL_JOB_TYPE.match(job_type)
        jobs.append(
            JobSpec(
                job_id=f"{path.stem}-{len(jobs):05d}",
                model=match["model"] if match else job_type,
                batch_size=int(match["batch"]) if match else None,
                num_gpus=_cell(where, row, "num_gpus", _count),
                total_steps=_cell(where, row, "total_steps", _count),
                arrival_s=_cell(where, row, "arrival_s", _non_negative),
            )
        )
    return jobs


GPU_COUNT_WEIGHTS = {1: 0.70, 2: 0.10, 4: 0.15, 8: 0.05}
"""How often a generated job asks for 1, 2, 4 or 8 GPUs (Gavel's multi-GPU job generator)."""

RUNTIME_RANGE_S = (300.0, 4 * 3600.0)
"""Generated jobs run between 5 minutes and 4 hours on the reference GPU (log-uniform)."""

OVERSIZE_SHARE = 0.15
"""Share of generated jobs drawn from configurations too big for the smallest card in the clusters."""


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


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
    Each job declares its modelled memory (`gpu_mem_gb`), 2-8 CPU cores, a source cluster, and its
    model's image. Arrivals are uniform over `arrival_window_s` (all at 0 when it is 0).
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
        m: (f"cpn-workloads/{_slug(m)}:gavel", round(rng.uniform(2.0, 10.0), 1))
        for m in sorted({cfg[0] for cfg in measured})
    }
    names = [c.name for c in clusters.clusters]
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
                cpu=float(rng.randint(2, 8)),
                image=image,
                image_size_gb=image_size,
                source_cluster=rng.choice(names),
                arrival_s=round(rng.uniform(0.0, arrival_window_s), 3) if arrival_window_s > 0 else 0.0,
            )
        )
    drawn.sort(key=lambda d: d["arrival_s"])
    width = max(4, len(str(n - 1)))
    return [JobSpec(job_id=f"default/job-{i:0{width}d}", **d) for i, d in enumerate(drawn)]


def _manifest_name(job_id: str) -> tuple[str, str]:
    namespace, _, name = job_id.rpartition("/")
    name = _slug(name)[:63].strip("-")
    if not name:
        raise ValueError(f"job id {job_id!r} gives no valid Kubernetes name")
    return (namespace or "default"), name


def _num(x: float) -> str:
    return f"{x:g}"


def to_manifest(job: JobSpec, label_domain: str) -> str:
    """`job` as a Volcano `batch.volcano.sh/v1alpha1` Job in YAML, the way intake reads it back.

    Name and namespace come from the job id (`namespace/name`, namespace `default` when the id
    has none). The job's figures travel as string annotations (`model_name`, `data_size` GB,
    `epoch`, `batch_size`, `gpu_count`, `gpu_mem` GB per card, `total_steps`, `image_size` GB,
    `source_cluster`; unknown ones left out). As in the seed, the pod template requires a node of
    the job's pool or the hybrid pool, prefers its own pool, and tolerates both pools' taints; the
    GPU product toleration and the node are added at submit, once the scheduler has chosen them.
    """
    if not job.image:
        raise ValueError(f"job {job.job_id} has no image; a manifest needs one")
    namespace, name = _manifest_name(job.job_id)
    annotations = {
        "model_name": job.model,
        "data_size": _num(job.data_size_gb),
        "epoch": str(job.epochs),
        "batch_size": None if job.batch_size is None else str(job.batch_size),
        "gpu_count": str(job.num_gpus),
        "gpu_mem": None if job.gpu_mem_gb is None else _num(job.gpu_mem_gb),
        "total_steps": None if job.total_steps is None else str(job.total_steps),
        "image_size": _num(job.image_size_gb),
        "source_cluster": job.source_cluster,
    }
    usage_key = f"{label_domain}/node.usage"
    pools = [job.kind, "hybrid"]
    pod_spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": usage_key, "operator": "In", "values": pools}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [{"key": usage_key, "operator": "In", "values": [job.kind]}]
                        },
                    }
                ],
            }
        },
        "tolerations": [
            {"key": usage_key, "operator": "Equal", "value": pool, "effect": "NoSchedule"} for pool in pools
        ],
        "containers": [
            {
                "name": "main",
                "image": job.image,
                "imagePullPolicy": "IfNotPresent",
                "resources": {
                    "requests": {"cpu": _num(job.cpu)},
                    "limits": {"cpu": _num(job.cpu), "nvidia.com/gpu": job.num_gpus},
                },
            }
        ],
        "restartPolicy": "Never",
    }
    manifest = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {k: v for k, v in annotations.items() if v is not None},
        },
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 1,
            "policies": [{"action": "CompleteJob", "event": "TaskCompleted"}],
            "tasks": [{"replicas": 1, "name": "worker", "template": {"spec": pod_spec}}],
        },
    }
    return yaml.safe_dump(manifest, sort_keys=False)
