"""GPU pins as clusters write them: the node labels a pod may require, read as the GPUs they name.

A manifest written for one cloud pins its card with that cloud's label; cpn places it on any of its
clusters, so it reads each well-known label as the GPU it names (`read_pin`) and matches that against
every node's product (`pin_matches`), whatever labels the node carries. Understood labels:

- GPU Feature Discovery (NVIDIA, github.com/NVIDIA/k8s-device-plugin, docs/gpu-feature-discovery):
  `nvidia.com/gpu.product` (the product itself, e.g. `NVIDIA-A100-SXM4-40GB`), `nvidia.com/gpu.family`
  (`ampere`, `hopper`, ...: FAMILY_MODELS), `nvidia.com/gpu.memory` (MiB per card, In or Gt),
  `nvidia.com/gpu.machine` (the machine type, read through the instance-type table) and
  `nvidia.com/gpu.present` (any GPU);
- GKE `cloud.google.com/gke-accelerator` (`nvidia-tesla-a100`, `nvidia-l4`, `nvidia-h100-80gb`, ...:
  cloud.google.com/kubernetes-engine/docs/concepts/gpus) and the Cluster Autoscaler's EKS label
  `k8s.amazonaws.com/accelerator` (`nvidia-tesla-v100`, ...), both through data/gpus/node_labels.csv;
- EKS Auto Mode `eks.amazonaws.com/instance-gpu-name` and Karpenter `karpenter.k8s.aws/instance-gpu-name`
  (the card's model in lower case: `a100`, `l4`, `t4`), their `instance-gpu-manufacturer` (`nvidia`: any
  GPU) and Karpenter's `instance-gpu-memory` (MiB, docs.aws.amazon.com/eks/latest/userguide/
  ml-workload-placement.html, karpenter.sh/docs/reference/instance-types);
- AKS `accelerator` and `kubernetes.azure.com/accelerator` (`nvidia`: any NVIDIA GPU,
  learn.microsoft.com/azure/aks/gpu-cluster);
- `node.kubernetes.io/instance-type` (and the older `beta.kubernetes.io/instance-type`): AWS p3, p4d,
  p4de, p5, p5e, g4dn, g5, g6, g6e; GCP a2, a3, g2; Azure NCv3, NCasT4_v3, NC A100 v4, NCads H100 v5,
  NDv2, ND A100 v4, ND H100/H200 v5, through data/gpus/node_labels.csv (each row cites the vendor's page).

A GPU is named as a *pin*: a product label (`NVIDIA-A100-SXM4-40GB`: that product, any spelling), or a
model with an optional memory (`a100`, `a100-40gb`: any form factor of that card, of that memory within
MEMORY_TOLERANCE). A key that looks like a GPU label (GPU_ISH) but is none of these, a value the tables
do not map, or an operator that cannot be read as a set of GPUs (NotIn, DoesNotExist) is refused
(PinError), never ignored: cpn would otherwise place the job where its author said it must not run.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

from config.settings import DATA_DIR
from cpn.gpus import canonical_gpu

NODE_LABELS_CSV = DATA_DIR / "gpus" / "node_labels.csv"
"""Cloud label values and instance types -> the GPU they carry (pin) and how many, with each source."""

PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
FAMILY_LABEL = "nvidia.com/gpu.family"
MACHINE_LABEL = "nvidia.com/gpu.machine"
PRESENT_LABEL = "nvidia.com/gpu.present"
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
TABLE_LABELS = ("cloud.google.com/gke-accelerator", "k8s.amazonaws.com/accelerator")
"""Labels whose values data/gpus/node_labels.csv maps (besides the instance types)."""
MODEL_NAME_LABELS = ("eks.amazonaws.com/instance-gpu-name", "karpenter.k8s.aws/instance-gpu-name")
MANUFACTURER_LABELS = (
    "eks.amazonaws.com/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "accelerator",
    "kubernetes.azure.com/accelerator",
)
"""Labels that name the GPU vendor only: `nvidia` allows any NVIDIA card."""
MIB_MEMORY_LABELS = (MEMORY_LABEL, "karpenter.k8s.aws/instance-gpu-memory")
"""Labels giving a card's memory in MiB."""

FAMILY_MODELS: dict[str, tuple[str, ...]] = {
    "kepler": ("k80", "k40", "k20"),
    "maxwell": ("m60", "m40", "m10"),
    "pascal": ("p100", "p40", "p4", "p6"),
    "volta": ("v100",),
    "turing": ("t4", "rtx2080ti", "rtx2080", "rtx2070", "rtx6000", "rtx8000"),
    "ampere": (
        "a100",
        "a40",
        "a30",
        "a16",
        "a10",
        "a10g",
        "a2",
        "a6000",
        "a5000",
        "a4000",
        "rtx3090",
        "rtx3080",
    ),
    "ada-lovelace": ("l4", "l40", "l40s", "rtx4090", "rtx4080"),
    "hopper": ("h100", "h200", "h800", "h20", "gh200"),
    "blackwell": ("b100", "b200", "gb200", "rtx5090"),
}
"""GPU Feature Discovery's `nvidia.com/gpu.family` values (its architecture names) -> the models of that
architecture, as cpn names models (`pin_matches`)."""

GPU_ISH = re.compile(r"gpu|accelerator|^nvidia\.com/", re.IGNORECASE)
"""Keys that look like a GPU label: one cpn does not understand is refused, not ignored."""

MEMORY_TOLERANCE = 0.08
"""How far a card's memory may be from a pin's (`a100-40gb`) and still match: labels report usable
memory (an H100 80GB shows 81,559 MiB, a T4 15,360 MiB)."""

_MODEL = re.compile(r"[a-z]*[0-9][a-z0-9.]*")
_MEMORY = re.compile(r"([0-9]+(?:\.[0-9]+)?)gb")
_WHOLE = re.compile(r"[0-9]{1,9}")


class PinError(ValueError):
    """A node label a pod requires that cpn cannot read as GPUs; the message says what it reads."""


@dataclass(frozen=True)
class Pin:
    """What one required label expression asks of a node's GPUs."""

    products: frozenset[str] | None = None
    """The pins (`pin_matches`) any of which the node's card must match; None: any card."""
    memory_gb: float | None = None
    """Least card memory in GB; None: any."""


@cache
def _table() -> dict[tuple[str, str], str]:
    """(label, value in lower case) -> the pin of its row of data/gpus/node_labels.csv (whose `gpus` column,
    the cards of an instance type, is for people: a pod's cards are its own limits)."""
    with NODE_LABELS_CSV.open(newline="") as f:
        return {(r["label"], r["value"].lower()): r["gpu"] for r in csv.DictReader(f)}


def understood() -> str:
    """The labels cpn reads as GPU pins, for messages."""
    keys = (
        PRODUCT_LABEL,
        FAMILY_LABEL,
        *MIB_MEMORY_LABELS,
        MACHINE_LABEL,
        PRESENT_LABEL,
        *TABLE_LABELS,
        *MODEL_NAME_LABELS,
        *MANUFACTURER_LABELS,
        *INSTANCE_TYPE_LABELS,
    )
    return ", ".join(dict.fromkeys(keys))


def is_pin_label(key: str) -> bool:
    """Whether `key` is a label cpn reads as a GPU pin (`read_pin`): the binder replaces such a pin by
    the product of the node cpn chose, which every cluster's nodes carry."""
    return key in _READERS or key in MIB_MEMORY_LABELS


def read_pin(key: str, operator: str, values: Sequence[str]) -> Pin | None:
    """What a required node label expression (`key operator values`; a nodeSelector entry is `In` one
    value) asks of the GPUs; None when `key` is not a GPU label (cpn leaves it to the cluster).
    PinError when it is a GPU label cpn cannot read, naming what it understands."""
    if key in MIB_MEMORY_LABELS:
        return Pin(memory_gb=_memory(key, operator, values))
    reader = _READERS.get(key)
    if reader is None:
        if GPU_ISH.search(key):
            raise PinError(
                f"{key!r} looks like a GPU label, but cpn does not know it and would place the job without "
                f"it; pin the card with one of the labels cpn reads ({understood()}), or remove the pin"
            )
        return None
    if operator == "Exists":
        return Pin()
    if operator != "In":
        raise PinError(
            f"operator {operator!r} on {key!r}: cpn reads GPU pins as In (or Exists); list the GPUs the job "
            "may use with In"
        )
    if not values:
        raise PinError(f"{key!r} In names no value; list the GPUs the job may use")
    products: set[str] = set()
    anything = False
    for value in values:
        found = reader(key, str(value).strip())
        if found is None:
            anything = True  # a value meaning any GPU (nvidia, true)
        else:
            products |= found
    return Pin() if anything else Pin(products=frozenset(products))


def _product(key: str, value: str) -> set[str]:
    try:
        canonical_gpu(value)
    except ValueError as exc:
        raise PinError(f"{key}={value!r}: {exc}") from None
    return {value}


def _family(key: str, value: str) -> set[str]:
    models = FAMILY_MODELS.get(value.lower())
    if models is None:
        raise PinError(f"{key}={value!r} is not a GPU family cpn knows ({', '.join(FAMILY_MODELS)})")
    return set(models)


def _tabled(key: str, value: str) -> set[str]:
    label = INSTANCE_TYPE_LABELS[0] if key in (*INSTANCE_TYPE_LABELS, MACHINE_LABEL) else key
    pin = _table().get((label, value.lower()))
    if pin is None:
        known = sorted(v for (lab, v) in _table() if lab == label)
        raise PinError(
            f"{key}={value!r} is not a value cpn maps to a GPU (data/gpus/node_labels.csv knows "
            f"{len(known)}, e.g. {', '.join(known[:6])}); pin the card with {PRODUCT_LABEL} instead"
        )
    return {pin}


def _model_name(key: str, value: str) -> set[str]:
    name = value.lower()
    if not _MODEL.fullmatch(name):
        raise PinError(f"{key}={value!r} does not name a GPU model (e.g. a100, l4, t4)")
    return {name}


def _any_nvidia(key: str, value: str) -> set[str] | None:
    if value.lower() != "nvidia":
        raise PinError(f"{key}={value!r}: cpn places NVIDIA GPUs only (value nvidia)")
    return None


def _present(key: str, value: str) -> set[str] | None:
    if value.lower() != "true":
        raise PinError(f"{key}={value!r}: a GPU job runs where GPUs are present (value true)")
    return None


_READERS = {
    PRODUCT_LABEL: _product,
    FAMILY_LABEL: _family,
    MACHINE_LABEL: _tabled,
    PRESENT_LABEL: _present,
    **dict.fromkeys((*TABLE_LABELS, *INSTANCE_TYPE_LABELS), _tabled),
    **dict.fromkeys(MODEL_NAME_LABELS, _model_name),
    **dict.fromkeys(MANUFACTURER_LABELS, _any_nvidia),
}


def _memory(key: str, operator: str, values: Sequence[str]) -> float | None:
    """Least card memory in GB that a MiB memory label expression asks (In: the least value; Gt: above)."""
    sizes = [int(str(v).strip()) / 1024 for v in values if _WHOLE.fullmatch(str(v).strip())]
    if operator == "Exists":
        return None
    if operator not in ("In", "Gt") or not values or len(sizes) != len(values):
        raise PinError(
            f"{key} {operator} {list(values)!r}: cpn reads card memory as In or Gt whole MiB (e.g. Gt 40000)"
        )
    return min(sizes) if operator == "In" else max(sizes) + 1 / 1024


def _model(key: str) -> tuple[str, tuple[str, ...]]:
    """(model, words after it) of a canonical GPU key: `a100-sxm4-40gb` -> (`a100`, (`sxm4`, `40gb`))."""
    words = key.split("-")
    for i, word in enumerate(words):
        if any(c.isdigit() for c in word):
            return word, tuple(words[i + 1 :])
    return key, ()


@lru_cache(maxsize=4096)
def pin_matches(pin: str, product: str, memory_gb: float, gpu_type: str = "") -> bool:
    """Whether a node whose card is `product` (its `nvidia.com/gpu.product`) of `memory_gb`, of GPU type
    `gpu_type` (config aliases), matches `pin`: the same product in any spelling or alias, or, for a pin
    that is a model with an optional memory (`a100`, `a100-40gb`), a card of that model and memory.
    Cached: the policies ask it of every job and node they consider."""
    key = canonical_gpu(pin)
    node_key = canonical_gpu(product)
    if key in (node_key, gpu_type):
        return True
    model, rest = _model(key)
    memory = _MEMORY.fullmatch(rest[0]) if len(rest) == 1 else None
    if rest and memory is None:
        return False  # a product pin (`a100-sxm4-40gb`): only that product
    if model not in (_model(node_key)[0], _model(gpu_type)[0] if gpu_type else None):
        return False
    if memory is None:
        return True
    wanted = float(memory.group(1))
    return abs(memory_gb - wanted) <= MEMORY_TOLERANCE * wanted
