"""Measured throughput tables (`model,batch_size,gpu_product,num_gpus,steps_per_sec`).

The simulator's ground truth and the predictor's training data. Gavel's table
names the GPU column `gpu_type` and adds `placement` (consolidated on one node
or spread); both spellings are read. Extra columns are ignored.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from config.settings import DATA_DIR
from cpn.gpus import canonical_gpu

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


def _batch(value: str) -> int | None:
    return int(value) if value.strip() else None


class ThroughputTable:
    """Lookup of measured steps/s by (model, batch size, GPU type, GPU count)."""

    def __init__(self, rows: list[ThroughputRow]) -> None:
        self.rows = tuple(rows)
        self._index: dict[tuple, float] = {}
        for r in rows:
            self._index[(r.model.lower(), r.batch_size, r.gpu_type, r.num_gpus, r.consolidated)] = (
                r.steps_per_sec
            )

    @classmethod
    def load(cls, path: Path | str = GAVEL_ISOLATED) -> ThroughputTable:
        """Read a throughput CSV; raise ThroughputFormatError naming file, row and column."""
        path = Path(path)
        rows = []
        try:
            with path.open(newline="") as fh:
                reader = csv.DictReader(fh)
                cols = set(reader.fieldnames or ())
                gpu_col = "gpu_product" if "gpu_product" in cols else "gpu_type"
                need = {"model", "batch_size", gpu_col, "num_gpus", "steps_per_sec"}
                if not need <= cols:
                    raise ThroughputFormatError(
                        f"{path}: missing column(s) {sorted(need - cols)}; need "
                        "model,batch_size,gpu_product,num_gpus,steps_per_sec"
                    )
                for lineno, rec in enumerate(reader, start=2):
                    try:
                        row = ThroughputRow(
                            model=rec["model"].strip(),
                            batch_size=_batch(rec["batch_size"]),
                            gpu_type=canonical_gpu(rec[gpu_col]),
                            num_gpus=int(rec["num_gpus"]),
                            steps_per_sec=float(rec["steps_per_sec"]),
                            consolidated=rec.get("placement", "consolidated") != "unconsolidated",
                        )
                    except (ValueError, TypeError, AttributeError) as exc:
                        raise ThroughputFormatError(f"{path}:{lineno}: {exc}") from None
                    if not row.model:
                        raise ThroughputFormatError(f"{path}:{lineno}: column model: empty")
                    if row.num_gpus < 1 or row.steps_per_sec < 0:
                        raise ThroughputFormatError(
                            f"{path}:{lineno}: num_gpus must be >= 1 and steps_per_sec >= 0"
                        )
                    rows.append(row)
        except FileNotFoundError:
            raise ThroughputFormatError(f"{path}: file not found") from None
        return cls(rows)

    def __iter__(self) -> Iterator[ThroughputRow]:
        return iter(self.rows)

    def steps_per_sec(
        self, model: str, batch_size: int | None, gpu_type: str, num_gpus: int, consolidated: bool = True
    ) -> float | None:
        """Measured steps/s, or None if the table has no such measurement."""
        gpu = canonical_gpu(gpu_type)
        key = (model.lower(), batch_size, gpu, num_gpus, consolidated)
        if key in self._index:
            return self._index[key]
        if not consolidated:
            return self._index.get((model.lower(), batch_size, gpu, num_gpus, True))
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
