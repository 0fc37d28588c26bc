"""Measured throughput tables (`model,batch_size,gpu_product,num_gpus,steps_per_sec`).

The simulator's ground truth and the predictor's training data. Gavel's table
names the GPU column `gpu_type` and adds `placement` (consolidated on one node
or spread); both spellings are read. Optional `precision` (fp32, fp16/amp, bf16) and
`samples_per_sec` columns; other extra columns are ignored.

Conventions (docs/formats.md): `batch_size` is per GPU, and `steps_per_sec` counts every worker's
steps, so that samples/s = steps_per_sec x batch_size whatever the GPU count. A table whose rows
give `samples_per_sec` has its steps/s taken from it (samples_per_sec / batch_size); its
`steps_per_sec` column may be empty, or counted per synchronous step of the whole gang
(samples_per_sec / (batch_size x num_gpus)), as Lambda's benchmarks count it. Header names are
matched ignoring case and spaces; UTF-8 with or without a byte-order mark, CRLF line
ends, `;`- or tab-separated exports and whole numbers written `64.0` are read. A value
that is malformed (not a number, negative, NaN, a fraction of a GPU, a row with too few
or too many fields) is an error naming the file, the line and the column. Model names are matched by
cpn.model_names.model_key: `ResNet-50`, `resnet50` and `resnet_50` are one model.
"""

from __future__ import annotations

import csv
import difflib
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from config.settings import DATA_DIR
from cpn.gpus import canonical_gpu
from cpn.jobs import normalise_precision
from cpn.model_names import model_key

GAVEL_ISOLATED = DATA_DIR / "gavel" / "simulation_throughputs_isolated.csv"
"""Gavel's measured isolated throughputs on K80/P100/V100 (MIT licence, data/gavel/LICENSE.txt)."""

GAVEL_COLOCATED = DATA_DIR / "gavel" / "simulation_throughputs_colocated.csv"
"""Gavel's measured throughputs of co-located job pairs (MIT licence)."""


class ThroughputFormatError(ValueError):
    """A throughput table is malformed; the message names the file, row and column."""


@dataclass(frozen=True)
class ThroughputRow:
    """One measurement: `steps_per_sec` of `model` at `batch_size` on `num_gpus` cards of `gpu_type`.

    `steps_per_sec == 0` means the configuration was measured not to run.
    """

    model: str
    batch_size: int | None
    gpu_type: str
    num_gpus: int
    steps_per_sec: float
    consolidated: bool = True
    precision: str = "fp32"
    """Training precision: `fp32`, `fp16` (also mixed precision/AMP) or `bf16`."""
    source: str | None = field(default=None, compare=False, repr=False)
    """Where the row was read (`file:line`), for error messages; None for rows made in code."""


COLUMNS = ("model", "batch_size", "gpu_product", "num_gpus", "steps_per_sec")
"""Required columns (DESIGN.md); `gpu_type` may stand for `gpu_product`, `placement` is optional."""

PLACEMENTS = ("consolidated", "unconsolidated")


def _rate(value: str, batch_size: int | None, num_gpus: int, given: float | None) -> float:
    """steps/s (every worker's steps) from a samples_per_sec cell; checks a given steps_per_sec agrees."""
    text = value.strip()
    try:
        samples = float(text)
    except ValueError:
        raise ValueError(f"column samples_per_sec: {text!r} is not a number") from None
    if not math.isfinite(samples) or samples < 0:
        raise ValueError(f"column samples_per_sec: must be a finite number >= 0, got {text!r}")
    if batch_size is None:
        raise ValueError("column samples_per_sec: needs a batch_size to give steps/s")
    steps = samples / batch_size
    if given is not None and samples > 0:
        per_gang = steps / num_gpus
        if not (math.isclose(given, steps, rel_tol=0.02) or math.isclose(given, per_gang, rel_tol=0.02)):
            raise ValueError(
                f"columns steps_per_sec {given:g} and samples_per_sec {samples:g} disagree: with batch_size "
                f"{batch_size} per GPU, steps_per_sec is {steps:g} (every worker's steps) or {per_gang:g} "
                "(steps of the whole gang); fix one or leave steps_per_sec empty"
            )
    return steps


def _column_name(name: str | None) -> str:
    """How header names are compared: case, surrounding spaces and inner spaces/hyphens ignored."""
    return re.sub(r"[\s-]+", "_", (name or "").strip().lower())


def _whole(value: str, column: str) -> int:
    """A positive whole number; `64.0` (as spreadsheets and pandas write integers) counts as 64."""
    text = value.strip()
    if not text:
        raise ValueError(f"column {column}: empty; need a positive whole number")
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"column {column}: {text!r} is not a number") from None
    if not math.isfinite(number) or number != int(number) or number < 1:
        raise ValueError(f"column {column}: must be a positive whole number, got {text!r}")
    return int(number)


def _batch(value: str) -> int | None:
    return _whole(value, "batch_size") if value.strip() else None


def _steps(value: str) -> float:
    text = value.strip()
    if not text:
        raise ValueError(
            "column steps_per_sec: empty; write 0 for a configuration measured not to run, or drop the row"
        )
    try:
        number = float(text)
    except ValueError:
        hint = " (use '.' as the decimal point)" if "," in text else ""
        raise ValueError(f"column steps_per_sec: {text!r} is not a number{hint}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"column steps_per_sec: must be a finite number >= 0, got {text!r}")
    return number


def _model(value: str) -> str:
    name = value.strip()
    try:
        model_key(name)
    except ValueError:
        raise ValueError(f"column model: needs letters or digits, got {value!r}") from None
    return name


def _consolidated(value: str | None) -> bool:
    text = (value or "").strip().lower()
    if text and text not in PLACEMENTS:
        raise ValueError(f"column placement: must be {' or '.join(PLACEMENTS)} (or empty), got {value!r}")
    return text != "unconsolidated"


def _delimiter(first_line: str) -> str:
    """`,` unless the header line has none and is clearly `;`- or tab-separated (spreadsheet exports)."""
    if "," not in first_line:
        for sep in (";", "\t"):
            if sep in first_line:
                return sep
    return ","


def _header(path: Path, fieldnames: Sequence[str] | None) -> dict[str, int]:
    """Required column -> index in the header; ThroughputFormatError naming what is missing."""
    if not fieldnames:
        raise ThroughputFormatError(
            f"{path}: empty file; need a header line {','.join(COLUMNS)} and one row per measurement"
        )
    names = [_column_name(n) for n in fieldnames]
    index: dict[str, int] = {}
    for i, name in enumerate(names):
        if not name:
            continue
        if name in index:
            raise ThroughputFormatError(f"{path}: column {name!r} appears twice in the header")
        index[name] = i
    if "gpu_product" not in index and "gpu_type" in index:
        index["gpu_product"] = index["gpu_type"]
    optional = {"steps_per_sec"} if "samples_per_sec" in index else set()  # then from samples/s
    missing = [c for c in COLUMNS if c not in index and c not in optional]
    if missing:
        hints = []
        for c in missing:
            close = difflib.get_close_matches(c, [n for n in names if n not in COLUMNS], n=1, cutoff=0.6)
            if close:
                hints.append(f"is {close[0]!r} the {c} column? rename it")
        found = ", ".join(repr(n) for n in fieldnames)
        raise ThroughputFormatError(
            f"{path}: missing column(s) {', '.join(missing)} (found {found}); need "
            f"{','.join(COLUMNS)} (`gpu_type` may name the GPU column; steps_per_sec counts training "
            f"steps per second, not samples){'; ' + '; '.join(hints) if hints else ''}"
        )
    return index


class ThroughputTable:
    """Lookup of measured steps/s by (model, batch size, GPU type, GPU count) at one precision.

    `precision` is the one `steps_per_sec` reads (fp32 unless told); `at_precision` gives the table of
    another precision's rows.
    """

    def __init__(self, rows: list[ThroughputRow], precision: str = "fp32") -> None:
        self.rows = tuple(rows)
        self.precision = normalise_precision(precision)
        self._index: dict[tuple, float] = {}
        for r in rows:
            if r.precision == self.precision:
                self._index[(model_key(r.model), r.batch_size, r.gpu_type, r.num_gpus, r.consolidated)] = (
                    r.steps_per_sec
                )

    def precisions(self) -> frozenset[str]:
        """The precisions the table has rows of."""
        return frozenset(r.precision for r in self.rows)

    def at_precision(self, precision: str) -> ThroughputTable:
        """The rows of `precision` only, looked up at that precision (this table if it is that already and
        has no others)."""
        precision = normalise_precision(precision)
        if precision == self.precision and self.precisions() <= {precision}:
            return self
        return ThroughputTable([r for r in self.rows if r.precision == precision], precision)

    @classmethod
    def load(cls, path: Path | str = GAVEL_ISOLATED) -> ThroughputTable:
        """Read a throughput CSV; raise ThroughputFormatError naming file, row and column.

        Header names are matched ignoring case and surrounding spaces, a byte-order mark is
        skipped, values may be padded with spaces, and whole numbers may be written `64.0`.
        Anything else malformed is an error: nothing becomes a zero or is dropped silently.
        """
        path = Path(path)
        try:
            with path.open(newline="", encoding="utf-8-sig") as fh:
                rows = cls._read(path, fh)
        except FileNotFoundError:
            raise ThroughputFormatError(f"{path}: file not found") from None
        except UnicodeDecodeError as exc:
            raise ThroughputFormatError(
                f"{path}: not UTF-8 text (byte {exc.start}); save the table as UTF-8 CSV"
            ) from None
        except OSError as exc:
            raise ThroughputFormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
        return cls(rows)

    @staticmethod
    def _read(path: Path, fh: TextIO) -> list[ThroughputRow]:
        first = fh.readline()
        fh.seek(0)
        reader = csv.reader(fh, delimiter=_delimiter(first), skipinitialspace=True)
        header = next(reader, None)
        col = _header(path, header)
        width = len(header or ())
        rows = []
        for rec in reader:
            lineno = reader.line_num
            if not rec or all(not v.strip() for v in rec):
                continue
            where = f"{path}:{lineno}"
            if len(rec) > width and not any(v.strip() for v in rec[width:]):
                rec = rec[:width]  # trailing empty fields, as spreadsheets write them
            if len(rec) != width:
                raise ThroughputFormatError(
                    f"{where}: {len(rec)} fields, the header has {width} (quote values that contain "
                    "the separator)"
                )
            try:
                gpu = rec[col["gpu_product"]]
                if not gpu.strip():
                    raise ValueError(f"column {header[col['gpu_product']].strip()}: empty GPU product name")
                batch, num_gpus = _batch(rec[col["batch_size"]]), _whole(rec[col["num_gpus"]], "num_gpus")
                samples = rec[col["samples_per_sec"]] if "samples_per_sec" in col else ""
                if samples.strip():
                    given = rec[col["steps_per_sec"]] if "steps_per_sec" in col else ""
                    steps = _rate(samples, batch, num_gpus, _steps(given) if given.strip() else None)
                else:
                    steps = _steps(rec[col["steps_per_sec"]])
                row = ThroughputRow(
                    model=_model(rec[col["model"]]),
                    batch_size=batch,
                    gpu_type=canonical_gpu(gpu),
                    num_gpus=num_gpus,
                    steps_per_sec=steps,
                    consolidated=_consolidated(rec[col["placement"]] if "placement" in col else None),
                    precision=normalise_precision(rec[col["precision"]] if "precision" in col else None),
                    source=where,
                )
            except ValueError as exc:
                raise ThroughputFormatError(f"{where}: {exc}") from None
            rows.append(row)
        return rows

    def __iter__(self) -> Iterator[ThroughputRow]:
        return iter(self.rows)

    def steps_per_sec(
        self, model: str, batch_size: int | None, gpu_type: str, num_gpus: int, consolidated: bool = True
    ) -> float | None:
        """Measured steps/s, or None if the table has no such measurement; models match by
        cpn.model_names.model_key (`resnet50` finds the table's `ResNet-50`)."""
        gpu, name = canonical_gpu(gpu_type), model_key(model)
        key = (name, batch_size, gpu, num_gpus, consolidated)
        if key in self._index:
            return self._index[key]
        if not consolidated:
            return self._index.get((name, batch_size, gpu, num_gpus, True))
        return None

    def gpu_types(self) -> tuple[str, ...]:
        """Canonical GPU types the table measures."""
        return tuple(sorted({r.gpu_type for r in self.rows}))

    def configs(self) -> tuple[tuple[str, int | None], ...]:
        """Distinct (model, batch size) pairs, in table order."""
        seen: dict[tuple[str, int | None], None] = {}
        for r in self.rows:
            seen.setdefault((r.model, r.batch_size), None)
        return tuple(seen)
