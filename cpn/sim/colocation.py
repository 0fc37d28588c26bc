"""How much jobs sharing a card slow each other: Gavel's measured pairs, and a conservative rule for the rest.

`data/gavel/simulation_throughputs_colocated.csv` gives, per GPU type, the steps/s of two one-GPU jobs
running on the same card (`job_a`, `job_b` named like `ResNet-18 (batch size 16)`, or `A3C`). Divided by
each job's isolated one-GPU steps/s it is a factor: how fast the job runs next to that partner, 1 = not
slowed at all. A job's rate on a shared card is its isolated rate times, for each partner on the card,
the factor of that pair (so with one partner, exactly the measured steps/s; with more, the measured
slowdowns compound). For a pair the table does not measure, the factor is:

- the job's worst measured factor on that GPU type (its slowest with any partner measured), or
- UNMEASURED_FACTOR when the job was never measured sharing that GPU type,

so an unmeasured pair is never assumed to share better than the data shows. The table's rows are all
one GPU per job; its `unconsolidated` rows (a placement that means nothing for one card) are not used.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from weakref import WeakKeyDictionary

from cpn.formats.throughput import GAVEL_COLOCATED, ThroughputFormatError, ThroughputTable
from cpn.gpus import canonical_gpu
from cpn.model_names import model_key
from cpn.sim.scaling import Config, ScaledThroughput

UNMEASURED_FACTOR = 0.25
"""Factor of a job never measured sharing a GPU type: below 95 % of Gavel's measured factors (their 5th
percentile is 0.32, their median 0.58), so it is pessimistic for almost every pair."""

_JOB_NAME = re.compile(r"^(?P<model>.+?) \(batch size (?P<batch>\d+)\)$")
_COLUMNS = {"gpu_type", "job_a", "num_gpus_a", "job_b", "num_gpus_b", "steps_per_sec_a", "steps_per_sec_b"}


def parse_job_name(name: str) -> Config:
    """`ResNet-18 (batch size 16)` -> (`resnet18`, 16); `A3C` -> (`a3c`, None): models by their key."""
    match = _JOB_NAME.match(name.strip())
    if match:
        return model_key(match["model"]), int(match["batch"])
    return model_key(name), None


_READ: WeakKeyDictionary[ThroughputTable, dict[tuple[Path, int], ColocationTable]] = WeakKeyDictionary()
"""The tables read, per isolated table (while it lives) and (file, modification time)."""


def _keyed(config: Config) -> Config:
    """`config` with its model as its key (cpn.model_names.model_key), however it was spelt."""
    return model_key(config[0]), config[1]


class ColocationTable:
    """Slowdown factors of jobs sharing a card, keyed by GPU type and the (job, partner) configurations.

    Models match by key, so `("ResNet-18", 16)` and `("resnet_18", 16)` are one configuration.
    """

    def __init__(self, factors: dict[tuple[str, Config, Config], float]) -> None:
        self._factors = {(gpu, _keyed(job), _keyed(partner)): f for (gpu, job, partner), f in factors.items()}
        self._worst: dict[tuple[str, Config], float] = {}
        for (gpu, job, _), factor in self._factors.items():
            self._worst[(gpu, job)] = min(factor, self._worst.get((gpu, job), factor))

    @classmethod
    def load(cls, isolated: ThroughputTable, path: Path | str = GAVEL_COLOCATED) -> ColocationTable:
        """Read a co-location CSV; factors are relative to `isolated`'s one-GPU figures.

        Pairs whose jobs the isolated table does not measure on that GPU are left out. The table is read
        once per `isolated` table and file version (a table is never changed once built): each service a
        benchmark or a test builds over the same ground truth gets the same one.
        Raises ThroughputFormatError naming file, row and column.
        """
        path = Path(path)
        try:
            version = (path.resolve(), path.stat().st_mtime_ns)
        except FileNotFoundError:
            raise ThroughputFormatError(f"{path}: file not found") from None
        read = _READ.setdefault(isolated, {})
        if version not in read:
            read[version] = cls._read(isolated, path)
        return read[version]

    @classmethod
    def _read(cls, isolated: ThroughputTable, path: Path) -> ColocationTable:
        rates = ScaledThroughput(isolated)
        factors: dict[tuple[str, Config, Config], float] = {}
        try:
            with path.open(newline="") as fh:
                reader = csv.DictReader(fh)
                missing = _COLUMNS - set(reader.fieldnames or ())
                if missing:
                    raise ThroughputFormatError(f"{path}: missing column(s) {sorted(missing)}")
                for lineno, rec in enumerate(reader, start=2):
                    if rec.get("placement", "consolidated") == "unconsolidated":
                        continue
                    try:
                        gpu = canonical_gpu(rec["gpu_type"])
                        if int(rec["num_gpus_a"]) != 1 or int(rec["num_gpus_b"]) != 1:
                            raise ValueError("only one-GPU pairs are supported")
                        pair = [
                            (parse_job_name(rec["job_a"]), float(rec["steps_per_sec_a"])),
                            (parse_job_name(rec["job_b"]), float(rec["steps_per_sec_b"])),
                        ]
                        if min(sps for _, sps in pair) <= 0:
                            raise ValueError("co-located steps/s must be > 0 (a pair that cannot share)")
                    except (ValueError, TypeError, AttributeError) as exc:
                        raise ThroughputFormatError(f"{path}:{lineno}: {exc}") from None
                    for (job, sps), (partner, _) in (pair, pair[::-1]):
                        alone = rates.steps_per_sec(job[0], job[1], gpu, 1)
                        if alone:
                            factors[(gpu, job, partner)] = sps / alone
        except FileNotFoundError:
            raise ThroughputFormatError(f"{path}: file not found") from None
        return cls(factors)

    @property
    def measured(self) -> Mapping[tuple[str, Config, Config], float]:
        """(GPU type, job, partner) -> measured factor, for every pair the table holds."""
        return MappingProxyType(self._factors)

    def factor(self, gpu_type: str, job: Config, partner: Config) -> float:
        """How fast `job` runs next to `partner` on one card of `gpu_type`, relative to running alone."""
        job = _keyed(job)
        measured = self._factors.get((gpu_type, job, _keyed(partner)))
        if measured is not None:
            return measured
        return self._worst.get((gpu_type, job), UNMEASURED_FACTOR)
