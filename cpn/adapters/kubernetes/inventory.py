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

`LiveInventory` keeps this view current one object at a time, from the gateway's watches: each pod is
parsed once, when it changes, and a node's state costs the pods on that node, not the cluster's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

from cpn.gpus import canonical_gpu
from cpn.inventory import (
    GPU_COUNT_LABEL,
    GPU_MEMORY_LABEL,
    GPU_PRODUCT_LABEL,
    HAMI_NODE_ANNOTATIONS,
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
    cluster: str,
    obj: Mapping[str, Any],
    labels: CpnLabels,
    gpu_aliases: Mapping[str, str],
    workloads: tuple[str, ...] | None = None,
) -> Node | None:
    """The cpn Node of a Kubernetes Node object; None for control-plane, pool-less or card-less nodes.
    `workloads`: the CRD-defined kinds its cluster serves (api.served_kinds; None: not known)."""
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
        hami=any(key in (meta.get("annotations") or {}) for key in HAMI_NODE_ANNOTATIONS),
        workloads=workloads,
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


@dataclass(frozen=True)
class PodUse:
    """What one live pod bound to a node holds there (parsed once, when the pod is seen)."""

    node: str
    gpus: float
    """Whole cards requested (0 for a pod sharing a card)."""
    cpu: float
    job_id: str | None
    """The cpn job it belongs to (cpn's `managed` label and job-id annotation), else None."""
    share: tuple[int, float] | None = None
    """(card, share) of a pod sharing a card."""


def pod_use(pod: Mapping[str, Any], labels: CpnLabels) -> PodUse | None:
    """What `pod` holds on its node; None for a pod not bound to a node or ended."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return None
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    job_id = annotations.get(labels.job_id) if (meta.get("labels") or {}).get(labels.managed) else None
    cpu = pod_request(pod, "cpu")
    if labels.gpu_share in annotations and labels.card in annotations:
        share = (int(annotations[labels.card]), float(annotations[labels.gpu_share]))
        return PodUse(node, 0.0, cpu, job_id, share)
    return PodUse(node, pod_request(pod, GPU_RESOURCE), cpu, job_id)


@dataclass(frozen=True)
class Claim:
    """Cards a submitted job holds before its pods show: (node, cards) and CPU per node."""

    job_id: str
    nodes: tuple[tuple[str, int, float], ...]
    """(node, cards, CPU cores)."""
    share: tuple[int, float] | None = None
    """(card, share) of a job sharing a card."""


def node_state(node: Node, ok: bool, uses: Iterable[PodUse], claims: Iterable[Claim] = ()) -> NodeState:
    """The state of `node` (schedulable when `ok`) under the pods it holds and the `claims` on it.

    A claim counts only what the job's pods seen on the node do not hold yet, so a gang whose pods show
    one by one is never counted twice.
    """
    uses = list(uses)
    gpus = sum(u.gpus for u in uses)
    cpu = sum(u.cpu for u in uses)
    jobs = list(dict.fromkeys(u.job_id for u in uses if u.job_id))
    shared: dict[int, float] = defaultdict(float)
    for u in uses:
        if u.share is not None:
            shared[u.share[0]] += u.share[1]
    for claim in claims:
        mine = [u for u in uses if u.job_id == claim.job_id]
        for name, cards, cores in claim.nodes:
            if name != node.name:
                continue
            cpu += max(0.0, cores - sum(u.cpu for u in mine))
            if claim.job_id not in jobs:
                jobs.append(claim.job_id)
            if claim.share is None:
                gpus += max(0.0, cards - sum(u.gpus for u in mine))
            elif not mine:
                shared[claim.share[0]] += claim.share[1]
    cards_shared = tuple(
        SharedCard(i, max(0.0, 1.0 - s) if ok else 0.0, node.gpu_memory_gb * max(0.0, 1.0 - s))
        for i, s in sorted(shared.items())
    )
    free = node.gpu_count - int(round(gpus)) - len(cards_shared)
    return NodeState(
        node=node,
        free_gpus=max(0, free) if ok else 0,
        cpu_used=cpu,
        running=tuple(jobs),
        shared=cards_shared,
    )


class LiveInventory:
    """A cluster's nodes and what its pods hold on each, kept up to date one object at a time (by the
    gateway's watches), so that the state of a node costs the pods on that node, not the cluster's."""

    def __init__(self, cluster: str, labels: CpnLabels, gpu_aliases: Mapping[str, str]) -> None:
        self.cluster = cluster
        self.labels = labels
        self.gpu_aliases = gpu_aliases
        self.nodes: dict[str, tuple[Node, bool]] = {}
        """node name -> (its cpn Node, schedulable), GPU nodes only."""
        self._uses: dict[str, dict[tuple[str, str], PodUse]] = defaultdict(dict)
        """node name -> (namespace, pod name) -> what the pod holds there."""
        self._pod_node: dict[tuple[str, str], str] = {}
        self.workloads: tuple[str, ...] | None = None
        """The CRD-defined kinds the cluster serves, as API discovery found them (None: not known yet);
        set before the nodes are read, every node carries it (Node.workloads)."""

    def set_node(self, obj: Mapping[str, Any]) -> None:
        """A Node object added or changed."""
        name = (obj.get("metadata") or {}).get("name", "")
        node = read_node(self.cluster, obj, self.labels, self.gpu_aliases, self.workloads)
        if node is None:
            self.nodes.pop(name, None)
        else:
            self.nodes[name] = (node, schedulable(obj))

    def remove_node(self, name: str) -> None:
        """A Node object deleted."""
        self.nodes.pop(name, None)

    def replace_nodes(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Every Node object, as a list returns them."""
        self.nodes = {}
        for obj in items:
            self.set_node(obj)

    def set_pod(self, key: tuple[str, str], pod: Mapping[str, Any] | None) -> None:
        """A pod added or changed (None: deleted)."""
        old = self._pod_node.pop(key, None)
        if old is not None:
            self._uses[old].pop(key, None)
        use = None if pod is None else pod_use(pod, self.labels)
        if use is not None:
            self._uses[use.node][key] = use
            self._pod_node[key] = use.node

    def replace_pods(self, pods: Mapping[tuple[str, str], Mapping[str, Any]]) -> None:
        """Every pod, by (namespace, name), as a list returns them."""
        self._uses.clear()
        self._pod_node.clear()
        for key, pod in pods.items():
            self.set_pod(key, pod)

    def node(self, name: str) -> Node | None:
        """The GPU node of that name, if there is one."""
        entry = self.nodes.get(name)
        return None if entry is None else entry[0]

    def state(self, name: str, claims: Iterable[Claim] = ()) -> NodeState | None:
        """The state of one GPU node (None: no such node) under its pods and the `claims`."""
        entry = self.nodes.get(name)
        if entry is None:
            return None
        return node_state(*entry, self._uses.get(name, {}).values(), claims)

    def states(self, claims: Iterable[Claim] = ()) -> tuple[NodeState, ...]:
        """Every GPU node's state under its pods and the `claims`."""
        claims = tuple(claims)
        return tuple(
            node_state(node, ok, self._uses.get(name, {}).values(), claims)
            for name, (node, ok) in self.nodes.items()
        )
