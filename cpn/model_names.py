"""Model names as jobs, throughput tables, benchmark files and the simulator write them: one key per model.

`model_key` folds spelling only: case is ignored and everything but letters and digits is dropped, so
`ResNet-50`, `resnet50`, `resnet_50` and ` RESNET 50 ` are one model, `resnet50`. Letters and digits all
stay, so `ResNet-18` and `ResNet-50` (or `bert_base` and `bert_large`) stay two models. There is no alias
table: two names are one model only when they are spelt alike.

Intake, the throughput table, the oracle, the simulator (rates, GPU memory, co-location) and the
predictor all look a model up by this key, so they agree on which model a job runs. A job keeps the name
as it was written (`JobSpec.model`) for people to read.
"""

from __future__ import annotations

from functools import lru_cache


class ModelNameError(ValueError):
    """A model name that names no model: not text, or without a letter or digit."""


@lru_cache(maxsize=4096)
def model_key(name: str) -> str:
    """Key of a model name: lower case, letters and digits only (`ResNet-50` -> `resnet50`).

    Raises ModelNameError for a name with no letters or digits (cached: every lookup asks).
    """
    if not isinstance(name, str):
        raise ModelNameError(f"model name must be a string, got {name!r}")
    key = "".join(ch for ch in name.lower() if ch.isalnum())
    if not key:
        raise ModelNameError(f"model name {name!r} has no letters or digits")
    return key
