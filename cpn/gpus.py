"""GPU types as the cluster names them: the `nvidia.com/gpu.product` label, normalised for spelling only.

A GPU type is one product label. `canonical_gpu` turns every *spelling* of a label into one lower-case
key and keeps everything that tells two products apart: form factor and memory stay, so
`NVIDIA-A100-PCIE-40GB` (`a100-pcie-40gb`), `NVIDIA-A100-80GB-PCIe` (`a100-80gb-pcie`) and
`NVIDIA-A100-SXM4-80GB` (`a100-sxm4-80gb`) are three types, as are `NVIDIA-H100-PCIe` (`h100-pcie`) and
`NVIDIA-H100-80GB-HBM3` (`h100-80gb-hbm3`). What spelling normalisation does:

1. case is ignored, punctuation and runs of spaces, `_` and `-` become one `-`;
2. vendor and brand prefixes are dropped (`NVIDIA`, `Tesla`, `GeForce`, `Quadro`, `AMD`, `Radeon`,
   `Instinct`): they name no second product (`Tesla-V100-SXM2-16GB` and `NVIDIA Tesla V100 SXM2 16GB`
   are one card);
3. the model number is glued to its series (`RTX 4090` -> `rtx4090`, as devices.csv writes `RTX2080Ti`),
   and a short letter suffix to the number before it (`2080 Ti` -> `2080ti`, `80 GB` -> `80gb`).

The alias table comes first: GPU_ALIASES (built in), extended or overridden by a config's own aliases.
A user merges variants *on purpose* there (`{NVIDIA-A100-SXM4-80GB: a100}` makes the SXM4 card count as
whatever `a100` names); nothing merges them by accident. The built-in table holds the short names of the
cards Gavel's table (data/gavel) measured, each tied to the one label of the card Gavel ran on
(AWS p2/p3 and GCP instances): `k80`, `p100` = `Tesla-P100-PCIE-16GB`, `v100` = `Tesla-V100-SXM2-16GB`.
Other variants of those cards (`Tesla-V100-PCIE-16GB`, `Tesla-V100-SXM2-32GB`) get keys of their own.

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
        # The cards of Gavel's throughput table (data/gavel), which names them k80, p100 and v100:
        # one label each, the card Gavel measured (K80 and V100 SXM2 on AWS p2/p3, P100 PCIe on GCP).
        "Tesla-P100-PCIE-16GB": "p100",
        "Tesla-V100-SXM2-16GB": "v100",
    }
)
"""Built-in spelling -> key. A config extends it with `canonical_gpu(..., aliases=...)`."""

_VENDORS = frozenset({"nvidia", "tesla", "geforce", "quadro", "amd", "radeon", "instinct"})
_SEPARATORS = re.compile(r"[\s_-]+")
_OTHER = re.compile(r"[^0-9a-z.+\s_-]+")
_SHORT_SUFFIX = re.compile(r"[a-z]{1,2}")


def _spelling(name: str) -> str:
    """How alias lookups compare names: lower case, any run of spaces, `_` or `-` as one `-`."""
    return _SEPARATORS.sub("-", name.strip()).lower()


_BUILT_IN = {_spelling(k): v for k, v in GPU_ALIASES.items()}


def _glue(words: list[str]) -> list[str]:
    """Join a series to its model number (`rtx 4090`) and a short suffix to a number (`2080 ti`, `80 gb`)."""
    out: list[str] = []
    for word in words:
        if out and (
            (len(out) == 1 and out[0].isalpha() and word[0].isdigit())
            or (out[-1][-1].isdigit() and _SHORT_SUFFIX.fullmatch(word))
        ):
            out[-1] += word
        else:
            out.append(word)
    return out


@lru_cache(maxsize=1024)
def _by_rule(name: str) -> str:
    """The built-in table, then spelling normalisation (cached: node types are asked for per round)."""
    if (key := _BUILT_IN.get(_spelling(name))) is not None:
        return key
    words = [w for w in _SEPARATORS.split(_OTHER.sub(" ", name.lower()).strip()) if w]
    while len(words) > 1 and words[0] in _VENDORS:
        words = words[1:]
    return "-".join(_glue(words))


def canonical_gpu(product: str, aliases: Mapping[str, str] | None = None) -> str:
    """Key of a GPU product label (`NVIDIA-A100-SXM4-80GB` -> `a100-sxm4-80gb`, `Tesla-V100-SXM2-16GB` ->
    `v100`); the same key for every spelling of one label, distinct keys for distinct labels.

    `aliases` (spelling -> key, typically a config's `gpu_aliases`) are looked up first and override the
    built-in table: that is where a user merges variants on purpose.
    """
    name = product.strip()
    if not name:
        raise ValueError("empty GPU product name")
    if aliases:
        wanted = _spelling(name)
        for spelled, key in aliases.items():
            if _spelling(spelled) == wanted:
                return _by_rule(key)
    key = _by_rule(name)
    if not key or key in _VENDORS:
        raise ValueError(f"GPU product name {product!r} names no product (e.g. A100-SXM4-80GB, RTX 4090)")
    return key
