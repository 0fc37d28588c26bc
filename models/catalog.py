"""What a model computes: the model catalog (data/models/catalog.csv) the predictor reads.

Per model, sourced in the CSV's `method` column: training FLOPs per sample (3 x the forward pass,
a multiply-add counted as 2 FLOPs; for transformers 6 N T + 12 L T^2 d, Kaplan et al. 2020), parameters,
its family (cnn, detector, transformer, rnn, recsys, gan, rl, audio) and what one sample is. The
predictor uses it twice (models.physical, models.features):

- **Level of a model never measured**: samples/s = efficiency x speed / FLOPs per sample, with the
  efficiency learnt over the measured models; without FLOPs, a new model's throughput is a guess
  across three orders of magnitude.
- **Which benchmark a model moves like** across GPU types (`ModelCatalog.affinity`): a transformer
  speeds up on a new card as the transformer benchmark does, a CNN as the CNN benchmark.

Models are matched by the domain's one key (cpn.model_names.model_key) of the catalog name or one of
its `aliases` (`;`-separated: names other labs' tables give the same model, such as Sia's `cifar10`
for ResNet-18 on CIFAR-10). A model the catalog lacks gets None, and the predictor falls back to what
it did before (the mean over benchmarks, a level learnt from data only).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from config.settings import DATA_DIR
from cpn.model_names import ModelNameError, model_key

MODELS_CSV = DATA_DIR / "models" / "catalog.csv"
"""The shipped model catalog (sources in its `method` column and data/models/README.md)."""

FAMILY_DISTANCE = 2.0
"""Affinity distance between models of different families, in decades of FLOPs per parameter: the kind of
operations (convolutions, attention, recurrences) matters more than how often a weight is reused (a
round figure, not fitted to any table)."""


class CatalogError(ValueError):
    """The model catalog file is unusable; the message names the file, line and field."""


@dataclass(frozen=True)
class ModelProfile:
    """What one model computes per training sample."""

    key: str
    """cpn.model_names.model_key of the catalog name."""
    family: str
    train_gflops: float
    """Training FLOPs per sample (forward, backward, weight gradients), GFLOPs."""
    params_m: float
    """Parameters, millions."""
    sample: str
    """What one sample is (an image at a resolution, a sequence of N tokens)."""

    @property
    def log10_flops_per_param(self) -> float:
        """Decimal log of FLOPs per parameter per sample: how often each weight is reused (about 6 x the
        positions of a sample: pixels after striding, tokens). High: compute-bound; low: memory-bound."""
        return math.log10(self.train_gflops * 1e3 / self.params_m)


class ModelCatalog:
    """Model profiles by model key (catalog names and aliases)."""

    def __init__(self, profiles: dict[str, ModelProfile]) -> None:
        self._profiles = profiles

    @classmethod
    def load(cls, path: Path | str = MODELS_CSV) -> ModelCatalog:
        """Read a catalog CSV (model, aliases, family, train_gflops, params_m, sample, method)."""
        path = Path(path)
        profiles: dict[str, ModelProfile] = {}
        try:
            with path.open(newline="") as fh:
                for lineno, rec in enumerate(csv.DictReader(fh), start=2):
                    profile, names = _profile(rec, f"{path}:{lineno}")
                    for name in names:
                        if name in profiles:
                            raise CatalogError(f"{path}:{lineno}: model {name!r} is catalogued twice")
                        profiles[name] = profile
        except FileNotFoundError:
            raise CatalogError(f"{path}: file not found") from None
        return cls(profiles)

    def find(self, model: str) -> ModelProfile | None:
        """The profile of `model` (any spelling model_key accepts); None if the catalog lacks it."""
        try:
            return self._profiles.get(model_key(model))
        except ModelNameError:
            return None

    def affinity(self, model: str, references: tuple[str, ...]) -> tuple[float, ...] | None:
        """Weights (summing to 1) of how much `model` moves across GPU types like each of `references`
        (benchmark workloads' models): exp(-distance), the distance being decades of FLOPs per parameter
        apart plus FAMILY_DISTANCE if the families differ. None when `model` or every reference is
        uncatalogued (no basis to prefer one benchmark); an uncatalogued reference gets the weight of
        the most distant catalogued one."""
        mine = self.find(model)
        theirs = [self.find(r) for r in references]
        if mine is None or all(t is None for t in theirs):
            return None
        dist = [math.nan if t is None else profile_distance(mine, t) for t in theirs]
        known = [d for d in dist if not math.isnan(d)]
        weights = [math.exp(-(max(known) if math.isnan(d) else d)) for d in dist]
        total = sum(weights)
        return tuple(w / total for w in weights)


def profile_distance(a: ModelProfile, b: ModelProfile) -> float:
    """How unlike two models are in how they use a card: decades of FLOPs per parameter apart, plus
    FAMILY_DISTANCE if their families differ."""
    return abs(a.log10_flops_per_param - b.log10_flops_per_param) + FAMILY_DISTANCE * (a.family != b.family)


@lru_cache(maxsize=1)
def shipped_catalog() -> ModelCatalog:
    """The shipped catalog (MODELS_CSV), read once per process."""
    return ModelCatalog.load(MODELS_CSV)


def _profile(rec: dict[str | None, str | None], where: str) -> tuple[ModelProfile, list[str]]:
    """One CSV record as a profile and the keys it answers to; CatalogError naming the field."""
    values = {(k or "").strip(): (v or "").strip() for k, v in rec.items() if k is not None}
    numbers = {}
    for field in ("train_gflops", "params_m"):
        try:
            numbers[field] = float(values[field])
        except (KeyError, ValueError):
            raise CatalogError(
                f"{where}: {field} must be a positive number, got {values.get(field)!r}"
            ) from None
        if not math.isfinite(numbers[field]) or numbers[field] <= 0:
            raise CatalogError(f"{where}: {field} must be a positive number, got {values[field]!r}")
    for field in ("model", "family", "method"):
        if not values.get(field):
            raise CatalogError(f"{where}: {field} is empty; every catalogued model needs it")
    names = [values["model"], *(a.strip() for a in values.get("aliases", "").split(";") if a.strip())]
    try:
        keys = list(dict.fromkeys(model_key(n) for n in names))
    except ModelNameError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    family, sample = values["family"], values.get("sample", "")
    return ModelProfile(keys[0], family, numbers["train_gflops"], numbers["params_m"], sample), keys
