"""GPU product names: one canonical key per card, whatever spelling a source uses.

Node labels say `Tesla-V100-SXM2-16GB` or `NVIDIA-H20`, dcgm-exporter says
`Tesla V100-SXM2-16GB`, throughput tables say `v100`. `canonical_gpu` maps all of
them to one lower-case key (`v100`, `h20`) by dropping the vendor prefix and
the form-factor/memory suffix. `aliases` (from config) override the rule for
products it cannot tell apart (for example A100 40 GB vs 80 GB).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_VENDOR = re.compile(r"^(nvidia|tesla|geforce|quadro|amd|radeon|instinct)[\s_-]+", re.IGNORECASE)
_SUFFIX = re.compile(
    r"[\s_-]+(sxm\d?|pcie|nvl|hbm\d?e?|\d+\s*gb|mig.*|fhhl|lhhl|dgx.*)([\s_-].*)?$", re.IGNORECASE
)


def canonical_gpu(product: str, aliases: Mapping[str, str] | None = None) -> str:
    """Canonical key of a GPU product name (`Tesla-V100-SXM2-16GB` -> `v100`)."""
    name = product.strip()
    if not name:
        raise ValueError("empty GPU product name")
    if aliases:
        for spelled, key in aliases.items():
            if spelled.lower() == name.lower():
                return key.lower()
    while True:
        stripped = _VENDOR.sub("", name)
        if stripped == name:
            break
        name = stripped
    name = _SUFFIX.sub("", name)
    return re.sub(r"[\s_]+", "-", name).lower()
