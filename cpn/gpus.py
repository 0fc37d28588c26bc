"""GPU product names: one canonical key per card, whatever spelling a source uses.

Node labels say `Tesla-V100-SXM2-16GB` or `NVIDIA-H20`, dcgm-exporter says `Tesla V100-SXM2-16GB`,
throughput tables say `v100`, `data/gpus/devices.csv` says `RTX2080Ti`. `canonical_gpu` maps all of
them to one lower-case key (`v100`, `h20`, `rtx2080ti`) in two steps:

1. the alias table: GPU_ALIASES, extended or overridden by a config's own aliases, names the key of a
   spelling outright (products the rule below gets wrong, and the ones cpn's data ships with);
2. otherwise the rule: drop the vendor prefix (`NVIDIA`, `Tesla`, `GeForce`, ...) and the
   form-factor/memory suffix (`-SXM2-16GB`, `-PCIE-16GB`, `-80GB-HBM3`, ...), lower-case, and join
   the remaining words without separators (`GeForce RTX 4090` -> `rtx4090`, as devices.csv writes
   `RTX2080Ti`), so that `RTX 4090`, `RTX-4090` and `rtx4090` name one card.

Alias lookups ignore case and treat spaces, underscores and hyphens alike, so one entry covers the
node label (`Tesla-V100-SXM2-16GB`) and the exporter's spelling (`Tesla V100-SXM2-16GB`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType

GPU_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        # The cards of Gavel's throughput table (data/gavel) as node labels spell them.
        "Tesla-K80": "k80",
        "Tesla-P100-PCIE-16GB": "p100",
        "Tesla-P100-SXM2-16GB": "p100",
        "Tesla-V100-SXM2-16GB": "v100",
        "Tesla-V100-PCIE-16GB": "v100",
        # GeForce names split the model number into words; devices.csv writes them as one.
        "NVIDIA-GeForce-RTX-2070": "rtx2070",
        "GeForce-RTX-2070": "rtx2070",
        "NVIDIA-GeForce-RTX-2080-Ti": "rtx2080ti",
        "GeForce-RTX-2080-Ti": "rtx2080ti",
        # The seed's example card.
        "NVIDIA-H20": "h20",
    }
)
"""Built-in spelling -> canonical key. A config extends it with `canonical_gpu(..., aliases=...)`."""

_VENDOR = re.compile(r"^(nvidia|tesla|geforce|quadro|amd|radeon|instinct)[\s_-]+", re.IGNORECASE)
_SUFFIX = re.compile(
    r"[\s_-]+(sxm\d?|pcie|nvl|hbm\d?e?|\d+\s*gb|mig.*|fhhl|lhhl|dgx.*)([\s_-].*)?$", re.IGNORECASE
)
_SEPARATORS = re.compile(r"[\s_-]+")
_OTHER = re.compile(r"[^0-9A-Za-z.+\s_-]+")


def _spelling(name: str) -> str:
    """How alias lookups compare names: lower case, any run of spaces, `_` or `-` as one `-`."""
    return _SEPARATORS.sub("-", name.strip()).lower()


_BUILT_IN = {_spelling(k): v for k, v in GPU_ALIASES.items()}


@lru_cache(maxsize=1024)
def _by_rule(name: str) -> str:
    """The built-in table, then the vendor/suffix rule (cached: node types are asked for per round)."""
    if (key := _BUILT_IN.get(_spelling(name))) is not None:
        return key
    name = _OTHER.sub(" ", name).strip()  # `A100 (80GB)`, `A100/80GB`: punctuation separates words
    while True:
        stripped = _VENDOR.sub("", name)
        if stripped == name:
            break
        name = stripped
    name = _SUFFIX.sub("", name)
    return _SEPARATORS.sub("", name).lower()


def canonical_gpu(product: str, aliases: Mapping[str, str] | None = None) -> str:
    """Canonical key of a GPU product name (`Tesla-V100-SXM2-16GB` -> `v100`).

    `aliases` (spelling -> key, typically from a config) are looked up first and override the
    built-in table, for products the rule cannot tell apart (A100 40 GB vs 80 GB, say).
    """
    name = product.strip()
    if not name:
        raise ValueError("empty GPU product name")
    if aliases:
        wanted = _spelling(name)
        for spelled, key in aliases.items():
            if _spelling(spelled) == wanted:
                return key.lower()
    key = _by_rule(name)
    if not key:
        raise ValueError(f"GPU product name {product!r} has no model number (e.g. A100, RTX 4090)")
    return key
