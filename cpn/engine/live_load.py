"""Merge live metrics into the scheduler's node states: what the cards and CPUs really carry.

The gateway's inventory knows what cpn placed; the metrics know what the hardware does. A card whose
framebuffer is in use although cpn put nothing on it (another user's process, a job cpn lost track of)
must not be offered as free, and a node whose CPUs are busier than its requests say must hit the CPU
threshold sooner.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from cpn.adapters.metrics import ClusterMetrics, GpuReading, MetricsSource, NodeReading
from cpn.inventory import Node, NodeState

log = logging.getLogger(__name__)

BUSY_MEMORY_GB = 0.25
"""A card with more framebuffer than this in use is busy. An idle card reports a few MiB; a CUDA
context alone takes several hundred."""


def apply_metrics(
    nodes: tuple[NodeState, ...],
    metrics: Mapping[str, ClusterMetrics],
    busy_memory_gb: float = BUSY_MEMORY_GB,
) -> tuple[NodeState, ...]:
    """The node states with live load merged in; nodes of clusters without usable metrics unchanged.

    Per node with a reading (clusters whose health is `unknown`, and nodes the metrics do not name, pass
    through as they are):
    - whole free cards: at most the cards (not shared by cpn's sharing jobs) that measure idle, so a card
      busy outside cpn's knowledge is not counted free. A card without a memory reading counts as idle;
      one that cpn just took and that does not show its load yet is still counted by the inventory.
    - shared cards: free memory is at most what the card measures free.
    - CPU in use: the measured load where it is above the requests; where it is below, the requests still
      bind (Kubernetes admits by requests, and a job placed since the sample has not shown its load yet).
    """
    out = []
    for state in nodes:
        cluster = metrics.get(state.node.cluster)
        reading = (
            None if cluster is None or cluster.health == "unknown" else cluster.nodes.get(state.node.name)
        )
        out.append(state if reading is None else _merge(state, reading, busy_memory_gb))
    return tuple(out)


def _merge(state: NodeState, reading: NodeReading, busy_memory_gb: float) -> NodeState:
    node = state.node
    cards = {g.index: g for g in reading.gpus if 0 <= g.index < node.gpu_count}
    shared = {card.index for card in state.shared}
    idle = sum(
        1
        for i in range(node.gpu_count)
        if i not in shared and (i not in cards or (cards[i].memory_used_gb or 0.0) <= busy_memory_gb)
    )
    merged_shared = tuple(
        replace(
            card, free_memory_gb=min(card.free_memory_gb, _free_gb(cards[card.index], node.gpu_memory_gb))
        )
        if card.index in cards
        else card
        for card in state.shared
    )
    cpu = state.cpu_used if reading.cpu_used_cores is None else max(state.cpu_used, reading.cpu_used_cores)
    return replace(state, free_gpus=min(state.free_gpus, idle), shared=merged_shared, cpu_used=cpu)


def _free_gb(gpu: GpuReading, node: Node) -> float:
    """What a card measures free: its free reading, else its size minus what it uses, else all of it."""
    if gpu.memory_free_gb is not None:
        return gpu.memory_free_gb
    if gpu.memory_used_gb is not None:
        return node.gpu_memory_gb - gpu.memory_used_gb
    return node.gpu_memory_gb


class MeasuredLoad:
    """Node states adjusted by each cluster's live metrics (`apply_metrics`), sampled every round.

    A cluster whose metrics turn unknown or degraded is scheduled on inventory alone (or on its fresh
    readings only), and the change is logged once, when it happens.
    """

    def __init__(self, source: MetricsSource) -> None:
        self.source = source
        self.health: dict[str, str] = {}
        self.latest: Mapping[str, ClusterMetrics] = {}
        """The latest sample of every cluster (its health and age, for the web UI's clusters page)."""

    def __call__(self, nodes: tuple[NodeState, ...]) -> tuple[NodeState, ...]:
        sample = self.latest = self.source.sample()
        for name, metrics in sample.items():
            if self.health.get(name, "ok") != metrics.health:
                level = logging.INFO if metrics.health == "ok" else logging.WARNING
                fallback = {
                    "unknown": "; scheduling it on inventory alone",
                    "degraded": "; fresh readings only",
                }
                log.log(
                    level,
                    "cluster %s metrics %s%s%s",
                    name,
                    metrics.health,
                    f" ({metrics.detail})" if metrics.detail else "",
                    fallback.get(metrics.health, ""),
                )
            self.health[name] = metrics.health
        return apply_metrics(nodes, sample)
