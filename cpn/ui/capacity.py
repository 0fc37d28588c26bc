"""What the clusters page shows: the cards of each cluster and GPU type, free, used and unusable, now and
over time, as the service's latest inventory says; each cluster's metrics health and its age; the WAN
bandwidth learnt from image copies; and which jobs ran where over the history window (the Gantt).

`cpn run` records the inventory after every round (on the loop's thread, so the gateway is never called
from a web request) and hands `Capacity.view` to the web UI: a read-only callable, the UI's one window on
the running service.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cpn.admission import Room
from cpn.inventory import NodeState
from cpn.jobs import JobSpec
from cpn.rules import gang_cpu, kind_admits

if TYPE_CHECKING:
    from cpn.adapters.metrics import ClusterMetrics

HISTORY_POINTS = 720
"""Samples of utilisation kept for the chart (one per round: with 5 s rounds, the last hour)."""


@dataclass(frozen=True)
class CardCounts:
    """The cards of one cluster and GPU type."""

    cluster: str
    gpu_type: str
    free: int
    """Cards no job holds that a queued job could use (CPU and pool allowing)."""
    used: int
    """Cards jobs hold (whole, or shared)."""
    unusable: int
    """Free cards the node's CPU cannot serve: what its running jobs leave under the scheduler's CPU
    threshold is less than any queued job asks per card (with no queue: nothing is left)."""
    cordoned: int = 0
    """Free cards of a cordoned cluster: no new job goes there (its running jobs' cards are `used`)."""
    pool: int = 0
    """Free cards on nodes whose pool or taints admit no queued job's kind (with no queue: none)."""
    memory: int = 0
    """Free cards with less memory than any queued job asks for per card (with no queue: none)."""

    @property
    def total(self) -> int:
        """Every card."""
        return self.free + self.used + self.unusable + self.cordoned + self.pool + self.memory


@dataclass(frozen=True)
class MetricsHealth:
    """One cluster's live metrics as the latest round read them."""

    cluster: str
    health: str
    """`ok`, `degraded` or `unknown` (cpn.adapters.metrics.ClusterHealth)."""
    age_s: float
    """Age of the reading when the round used it."""
    detail: str = ""
    """Why the health is not ok, in words."""


@dataclass(frozen=True)
class Run:
    """A job seen on a cluster's nodes from `start` to `end` (inventory times, one sample per round)."""

    cluster: str
    job_id: str
    start: float
    end: float
    running: bool
    """Still on the cluster at the latest inventory."""


@dataclass(frozen=True)
class CapacityView:
    """The latest counts and the utilisation history (time, cluster -> used share of its cards)."""

    counts: tuple[CardCounts, ...] = ()
    history: tuple[tuple[float, dict[str, float]], ...] = ()
    node_gpu: dict[tuple[str, str], str] | None = None
    """(cluster, node) -> GPU type of each node, to name the cards a placed job holds."""
    health: tuple[MetricsHealth, ...] = ()
    """Each cluster's metrics health, in name order; empty when the service reads no live metrics."""
    bandwidth: tuple[tuple[str, str, float], ...] = ()
    """(source, destination, Gbit/s) learnt from measured image copies (cpn.transfer.TransferTimes)."""
    runs: tuple[Run, ...] = ()
    """Jobs seen on each cluster within the history window, by cluster and start."""
    cordoned: frozenset[str] = frozenset()
    """Clusters that take no new jobs (`cpn cluster cordon`); their nodes, jobs and cards are still shown."""


def count_cards(
    states: Iterable[NodeState],
    cpu_threshold: float,
    cordoned: Collection[str] = (),
    queued: Sequence[JobSpec] = (),
) -> tuple[CardCounts, ...]:
    """Free, used and unusable cards per (cluster, GPU type), in name order, counted node by node against
    the `queued` jobs: a free card of a cluster in `cordoned` is cordoned; else on a node whose pool or
    taints admit none of their kinds, `pool`; else one with less memory than any of them asks for per
    card (declared, `gpu_mem_gb` or `gpu_memory_min_gb`), `memory`; else one the node's CPU room under
    the threshold cannot serve, `unusable`: of the queued jobs whose cards fit in the node's free cards,
    the one asking least CPU per card sets how many cards the room serves (a node where no queued job's
    cards fit keeps its cards free: they wait on gangs, not on CPU). With no queue, a node's free cards
    are unusable only when its CPU is used up."""
    kinds = {job.kind for job in queued}
    least = _least_cpu_per_card(queued)
    least_gb = min((max(j.gpu_mem_gb or 0.0, j.gpu_memory_min_gb or 0.0) for j in queued), default=0.0)
    totals: dict[tuple[str, str], list[int]] = {}
    for state in states:
        free, node = state.free_gpus, state.node
        counts = totals.setdefault((node.cluster, node.gpu_type), [0, 0, 0, 0, 0, 0])
        counts[1] += node.gpu_count - free
        if node.cluster in cordoned:
            counts[3] += free
            continue
        if kinds and not any(kind_admits(node, kind) for kind in kinds):
            counts[4] += free
            continue
        if node.gpu_memory_gb < least_gb:
            counts[5] += free
            continue
        room = Room.of(state, cpu_threshold)
        left = room.cpu_cap - room.cpu_used
        per_card = least[min(free, len(least) - 1)] if least else 0.0
        if per_card == math.inf or free == 0:
            served = free
        elif per_card <= 0:
            served = free if left > 0 else 0
        else:
            served = min(free, max(0, math.floor(left / per_card + 1e-9)))
        counts[0] += served
        counts[2] += free - served
    return tuple(CardCounts(c, g, *n) for (c, g), n in sorted(totals.items()))


def _least_cpu_per_card(queued: Sequence[JobSpec]) -> list[float]:
    """[k] -> the least CPU per card a queued job of at most k cards asks (inf: none that small); empty
    without a queue."""
    if not queued:
        return []
    widest = max(job.num_gpus for job in queued)
    least = [math.inf] * (widest + 1)
    for job in queued:
        if job.num_gpus:
            least[job.num_gpus] = min(least[job.num_gpus], gang_cpu(job, 1))
    for k in range(1, widest + 1):
        least[k] = min(least[k], least[k - 1])
    return least


class Capacity:
    """Keeps the latest inventory's card counts and a bounded utilisation history; thread-safe."""

    def __init__(self, cpu_threshold: float = 1.0) -> None:
        self.cpu_threshold = cpu_threshold
        self._lock = threading.Lock()
        self._view = CapacityView()
        self._history: deque[tuple[float, dict[str, float]]] = deque(maxlen=HISTORY_POINTS)
        self._runs: dict[tuple[str, str], list[float]] = {}
        """(cluster, job id) -> [first seen, last seen]."""

    def record(
        self,
        states: tuple[NodeState, ...],
        now: float,
        metrics: Mapping[str, ClusterMetrics] | None = None,
        bandwidth: Mapping[tuple[str, str], float] | None = None,
        cordoned: Collection[str] = (),
        queued: Sequence[JobSpec] = (),
    ) -> None:
        """Take a new inventory, seen at `now` (store clock), with the metrics the round read (None: the
        service reads none), the learnt WAN bandwidth per (source, destination) pair, the cordoned
        clusters (`states` has their nodes too: ClusterSet.every_node) and the queued jobs, which the free
        cards are counted against (count_cards)."""
        counts = count_cards(states, self.cpu_threshold, cordoned, queued)
        on_now = {(s.node.cluster, job) for s in states for job in s.running}
        per_cluster: dict[str, list[int]] = {}
        for c in counts:
            used_total = per_cluster.setdefault(c.cluster, [0, 0])
            used_total[0] += c.used
            used_total[1] += c.total
        health = tuple(
            MetricsHealth(name, m.health, m.age_s, m.detail) for name, m in sorted((metrics or {}).items())
        )
        with self._lock:
            self._history.append((now, {k: u / t for k, (u, t) in per_cluster.items() if t}))
            for key in on_now:
                self._runs.setdefault(key, [now, now])[1] = now
            oldest = self._history[0][0]
            self._runs = {k: v for k, v in self._runs.items() if v[1] >= oldest}
            runs = tuple(
                Run(cluster, job, start, end, (cluster, job) in on_now)
                for (cluster, job), (start, end) in sorted(
                    self._runs.items(), key=lambda kv: (kv[0][0], kv[1])
                )
            )
            self._view = CapacityView(
                counts,
                tuple(self._history),
                {(s.node.cluster, s.node.name): s.node.gpu_type for s in states},
                health,
                tuple((src, dst, gbps) for (src, dst), gbps in sorted((bandwidth or {}).items())),
                runs,
                frozenset(cordoned),
            )

    def view(self) -> CapacityView:
        """The latest counts and history (empty before the first round)."""
        with self._lock:
            return self._view
