"""The project's job trace CSV (DESIGN.md): one job per row, every cell checked with file, line and column."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cpn.jobs import JobSpec, normalise_precision
from cpn.model_names import model_key


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
    "precision",
    "duration_s",
    "namespace",
    "checkpoint_interval_s",
)
"""Columns a job trace CSV may add; an empty cell means the JobSpec default. `duration_s` is an inference
service's lifetime (seconds until it is deleted; empty = until deleted), given on service rows only.
`namespace` puts the job in a namespace (its id becomes `namespace/job_id`, which decides its team,
config.teams); `checkpoint_interval_s` is how often it checkpoints."""


def parse_text(value: str) -> str:
    """A non-empty cell."""
    if not value:
        raise ValueError("empty")
    return value


def parse_model(value: str) -> str:
    """A non-empty model name as written, once it has a key (cpn.model_names.model_key: a letter or digit)."""
    model_key(parse_text(value))
    return value


def parse_count(value: str) -> int:
    """A whole number >= 1."""
    n = int(value)
    if n < 1:
        raise ValueError(f"must be >= 1, got {n}")
    return n


def parse_non_negative(value: str) -> float:
    """A finite number >= 0."""
    x = float(value)
    if not x >= 0 or math.isinf(x):
        raise ValueError(f"must be a finite number >= 0, got {value}")
    return x


def parse_positive(value: str) -> float:
    """A finite number > 0."""
    x = parse_non_negative(value)
    if x == 0:
        raise ValueError("must be > 0")
    return x


def parse_kind(value: str) -> str:
    """training or inference."""
    if value not in ("training", "inference"):
        raise ValueError(f"must be training or inference, got {value!r}")
    return value


def parse_namespace(value: str) -> str:
    """A Kubernetes namespace name: lower-case letters, digits and '-', at most 63 characters."""
    if not _NAMESPACE.fullmatch(value):
        raise ValueError(
            f"not a namespace name (lower-case letters, digits and '-', 1-63 characters): {value!r}"
        )
    return value


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

_PARSERS: dict[str, Callable[[str], Any]] = {
    "job_id": parse_text,
    "arrival_s": parse_non_negative,
    "model": parse_model,
    "batch_size": parse_count,
    "num_gpus": parse_count,
    "total_steps": parse_count,
    "kind": parse_kind,
    "data_size_gb": parse_non_negative,
    "image": str,
    "image_size_gb": parse_non_negative,
    "gpu_mem_gb": parse_positive,
    "cpu": parse_positive,
    "priority": int,
    "source_cluster": str,
    "precision": normalise_precision,
    "duration_s": parse_positive,
    "namespace": parse_namespace,
    "checkpoint_interval_s": parse_positive,
}
_MAY_BE_EMPTY = frozenset(OPTIONAL_COLUMNS) | {"batch_size", "total_steps"}


def load_trace_csv(path: Path | str) -> list[JobSpec]:
    """Jobs of a trace CSV, in file order; TraceFormatError naming file, line and column otherwise.

    An empty `batch_size` means a model measured at one fixed batch (A3C, CycleGAN). An inference row is
    a service: it may leave `total_steps` empty and give a `duration_s`; a training row needs its
    `total_steps` and has no `duration_s`. Unknown columns and repeated job ids are errors.
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
                where = f"{path}:{reader.line_num}"
                if fields.get("kind") != "inference":
                    if "total_steps" not in fields:
                        raise TraceFormatError(
                            f"{where}: column total_steps: empty; a training job needs its steps "
                            "(only an inference service may leave it empty)"
                        )
                    if "duration_s" in fields:
                        raise TraceFormatError(
                            f"{where}: column duration_s: only an inference service has a lifetime; "
                            "a training job ends after its total_steps"
                        )
                namespace = fields.pop("namespace", None)
                if namespace is not None:
                    if "/" in fields["job_id"]:
                        raise TraceFormatError(
                            f"{where}: column job_id: {fields['job_id']!r} has a namespace already; "
                            "leave the namespace column empty or the id without one"
                        )
                    fields["job_id"] = f"{namespace}/{fields['job_id']}"
                if fields["job_id"] in seen:
                    raise TraceFormatError(
                        f"{path}:{reader.line_num}: column job_id: repeats {fields['job_id']!r}"
                    )
                seen.add(fields["job_id"])
                jobs.append(JobSpec(**fields))
    except FileNotFoundError:
        raise TraceFormatError(f"{path}: file not found") from None
    return jobs
