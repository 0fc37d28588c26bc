"""Live inventory from the API: nodes with their labels, taints and allocatable capacity, minus what pods ask.

A node is a GPU node of cpn when it has the seed's pool label (`<domain>/node.usage`) and cards
(`nvidia.com/gpu.count` as GPU Feature Discovery writes it, else allocatable `nvidia.com/gpu`).
Control-plane nodes (`node-role.kubernetes.io/control-plane` or `master` labels, or the seed's
`<domain>/control-plane` taint) never get jobs and are left out. A node that is not Ready or is cordoned
is listed with no free card, so that what runs there still shows.

Free cards = cards minus the GPUs requested by the node's pods that have not ended (cpn's or anyone
else's); CPU in use = their CPU requests. A pod of a job sharing a card (cpn's `gpu-share` annotation)
holds a share of the card its `card` annotation names instead of whole cards. Quantities are parsed by
the kubernetes client's own `parse_quantity`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.utils import parse_quantity

from cpn.gpus import canonical_gpu
from cpn.inventory import (
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    Node,
    NodeState,
    SharedCard,
    Taint,
)

from .labels import CpnLabels

GPU_RESOURCE = "nvidia.com/gpu"
CONTROL_PLANE_ROLES = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("500m", "16Gi", 2) as a float."""
    return float(parse_quantity(value))


def read_node(
    cluster: str, obj: Mapping[str, Any], labels: CpnLabels, gpu_aliases: Mapping[str, str]
) -> Node | None:
    """The cpn Node of a Kubernetes Node object; None for control-plane, pool-less or card-less nodes."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    node_labels: dict[str, str] = meta.get("labels") or {}
    taints = tuple(
        Taint(t["key"], t.get("value") or "", t.get("effect") or "NoSchedule")
        for t in spec.get("taints") or []
    )
    if any(r in node_labels for r in CONTROL_PLANE_ROLES) or any(
        t.key == labels.control_plane for t in taints
    ):
        return None
    usage = node_labels.get(labels.usage)
    allocatable = status.get("allocatable") or {}
    count = node_labels.get(GPU_COUNT_LABEL) or allocatable.get(GPU_RESOURCE) or 0
    gpus = int(quantity(count))
    if usage is None or gpus < 1:
        return None
    product = node_labels.get(GPU_PRODUCT_LABEL, "")
    return Node(
        cluster=cluster,
        name=meta["name"],
        gpu_product=product,
        gpu_count=gpus,
        gpu_memory_gb=quantity(node_labels.get(GPU_MEMORY_LABEL, 0)) / 1024,
        cpu_cores=quantity(allocatable.get("cpu", 0)),
        usage=usage,
        labels=tuple(sorted(node_labels.items())),
        taints=taints,
        gpu_key=canonical_gpu(product, gpu_aliases),
    )


def schedulable(obj: Mapping[str, Any]) -> bool:
    """Ready and not cordoned."""
    if (obj.get("spec") or {}).get("unschedulable"):
        return False
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_request(pod: Mapping[str, Any], resource: str) -> float:
    """What a pod asks of `resource`: its containers' requests (limits where no request is set)."""
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("requests") or {}).get(resource, (resources.get("limits") or {}).get(resource))
        if value is not None:
            total += quantity(value)
    return total


@dataclass
class _Use:
    gpus: float = 0.0
    cpu: float = 0.0
    jobs: list[str] = field(default_factory=list)
    shared: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    """Card index -> shares held."""


@dataclass(frozen=True)
class Claim:
    """Cards a submitted job holds before its pods show: (node, cards) and CPU per node."""

    job_id: str
    nodes: tuple[tuple[str, int, float], ...]
    """(node, cards, CPU cores)."""
    share: tuple[int, float] | None = None
    """(card, share) of a job sharing a card."""


def node_states(
    nodes: Iterable[tuple[Node, bool]],
    pods: Iterable[Mapping[str, Any]],
    labels: CpnLabels,
    claims: Iterable[Claim] = (),
) -> tuple[NodeState, ...]:
    """Each (node, schedulable) with what its live pods and the not-yet-seen `claims` leave free."""
    use: dict[str, _Use] = defaultdict(_Use)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        u = use[node]
        u.cpu += pod_request(pod, "cpu")
        job_id = annotations.get(labels.job_id) if (meta.get("labels") or {}).get(labels.managed) else None
        if job_id and job_id not in u.jobs:
            u.jobs.append(job_id)
        if labels.gpu_share in annotations and labels.card in annotations:
            u.shared[int(annotations[labels.card])] += float(annotations[labels.gpu_share])
        else:
            u.gpus += pod_request(pod, GPU_RESOURCE)
    for claim in claims:
        for name, cards, cpu in claim.nodes:
            u = use[name]
            u.cpu += cpu
            if claim.job_id not in u.jobs:
                u.jobs.append(claim.job_id)
            if claim.share is None:
                u.gpus += cards
            else:
                u.shared[claim.share[0]] += claim.share[1]
    out = []
    for node, ok in nodes:
        u = use.get(node.name, _Use())
        shared = tuple(
            SharedCard(i, max(0.0, 1.0 - s) if ok else 0.0, node.gpu_memory_gb * max(0.0, 1.0 - s))
            for i, s in sorted(u.shared.items())
        )
        free = node.gpu_count - int(round(u.gpus)) - len(shared)
        out.append(
            NodeState(
                node=node,
                free_gpus=max(0, free) if ok else 0,
                cpu_used=u.cpu,
                running=tuple(u.jobs),
                shared=shared,
            )
        )
    return tuple(out)
