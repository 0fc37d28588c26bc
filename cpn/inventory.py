"""What the clusters have: nodes with their GPUs, labels and taints, and free capacity."""

from __future__ import annotations

from dataclasses import dataclass, field

from config.settings import ClustersConfig
from cpn.gpus import canonical_gpu

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
HAMI_NODE_ANNOTATIONS = ("hami.io/node-nvidia-register", "4pd.io/node-nvidia-register")
"""Annotation HAMi's device plugin writes on every node whose NVIDIA cards it registers (Project-HAMi/HAMi,
pkg/device/nvidia: the node's devices for the HAMi scheduler); the second is its name before HAMi's
rename (4paradigm's k8s-vgpu-scheduler)."""


@dataclass(frozen=True)
class Taint:
    """A Kubernetes node taint: only pods that tolerate it are scheduled on the node."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"
    """NoSchedule, PreferNoSchedule or NoExecute."""


@dataclass(frozen=True)
class Node:
    """One GPU node as the Kubernetes API describes it."""

    cluster: str
    name: str
    gpu_product: str
    """The nvidia.com/gpu.product label, as spelled on the node."""
    gpu_count: int
    gpu_memory_gb: float
    cpu_cores: float
    usage: str
    """Node pool: training, inference or hybrid."""
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[Taint, ...] = ()
    gpu_key: str = ""
    """Canonical GPU key when a config alias names it; empty = derive it from `gpu_product`."""
    hami: bool = False
    """The node runs HAMi's device plugin, so pods asking for card slices (`nvidia.com/gpumem`, ...) can
    start on it: a live node says so by HAMi's registration annotation (HAMI_NODE_ANNOTATIONS), a simulated
    one by its config (`Cluster.hami`, `NodeGroup.hami`)."""
    device_classes: tuple[str, ...] = ()
    """DRA device classes the node's drivers offer (`gpu.nvidia.com`, `mig.nvidia.com`), as its config
    declares them (`NodeGroup.device_classes`)."""
    workloads: tuple[str, ...] | None = None
    """Workload kinds a CRD defines that the node's cluster serves (cpn.workloads.custom_kind keys): read
    from a live cluster's API discovery, declared by a simulated one's config (`Cluster.workloads`); None:
    not known, every kind is taken (the gateway still refuses one whose CRD it finds missing)."""

    @property
    def gpu_type(self) -> str:
        """Canonical GPU key (see cpn.gpus)."""
        return self.gpu_key or canonical_gpu(self.gpu_product)

    @property
    def key(self) -> str:
        """`cluster/node`, unique across clusters."""
        return f"{self.cluster}/{self.name}"


@dataclass(frozen=True)
class SharedCard:
    """A card held by jobs that share it (JobSpec.gpu_share, HAMi/MPS style), and what is left of it."""

    index: int
    """0-based card index on the node."""
    free_share: float
    """1 minus the shares of the jobs on it: the largest gpu_share another job may still bring."""
    free_memory_gb: float
    """Card memory minus what the jobs on it use."""


@dataclass(frozen=True)
class NodeState:
    """A node and what is free on it now."""

    node: Node
    free_gpus: int
    """Cards with no job on them (shared cards are listed in `shared` instead)."""
    cpu_used: float = 0.0
    """CPU cores requested by running jobs (or measured, for live clusters)."""
    running: tuple[str, ...] = field(default=())
    """Ids of the jobs on the node."""
    shared: tuple[SharedCard, ...] = ()
    """Cards that sharing jobs hold (not counted in free_gpus), lowest index first."""


def nodes_from_config(config: ClustersConfig) -> tuple[Node, ...]:
    """Expand every cluster's node groups into nodes labelled and tainted per the seed's scheme."""
    usage_key = f"{config.label_domain}/node.usage"
    nodes = []
    for cluster in config.clusters:
        for group in cluster.node_groups:
            labels = {
                usage_key: group.usage,
                GPU_PRODUCT_LABEL: group.gpu_product,
                GPU_COUNT_LABEL: str(group.gpus_per_node),
                GPU_MEMORY_LABEL: str(int(group.gpu_memory_gb * 1024)),
                **group.extra_labels,
            }
            taints = (
                Taint(key=usage_key, value=group.usage),
                Taint(key=GPU_PRODUCT_LABEL, value=group.gpu_product),
                *(Taint(t.key, t.value, t.effect) for t in group.extra_taints),
            )
            for i in range(group.count):
                nodes.append(
                    Node(
                        cluster=cluster.name,
                        name=f"{group.name}-{i}",
                        gpu_product=group.gpu_product,
                        gpu_count=group.gpus_per_node,
                        gpu_memory_gb=group.gpu_memory_gb,
                        cpu_cores=group.cpu_cores,
                        usage=group.usage,
                        labels=tuple(sorted(labels.items())),
                        taints=taints,
                        gpu_key=canonical_gpu(group.gpu_product, config.gpu_aliases),
                        hami=cluster.hami or group.hami,
                        device_classes=tuple(sorted(group.device_classes)),
                        workloads=None if cluster.workloads is None else tuple(sorted(cluster.workloads)),
                    )
                )
    return tuple(nodes)
