"""Gavel's tab-separated Philly-derived `.trace` files, both layouts."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cpn.formats.trace_csv import TraceFormatError, parse_count, parse_non_negative, parse_text
from cpn.jobs import JobSpec

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
        job_type = _cell(where, row, "job_type", parse_text)
        match = _GAVEL_JOB_TYPE.match(job_type)
        jobs.append(
            JobSpec(
                job_id=f"{path.stem}-{len(jobs):05d}",
                model=match["model"] if match else job_type,
                batch_size=int(match["batch"]) if match else None,
                num_gpus=_cell(where, row, "num_gpus", parse_count),
                total_steps=_cell(where, row, "total_steps", parse_count),
                arrival_s=_cell(where, row, "arrival_s", parse_non_negative),
            )
        )
    return jobs
