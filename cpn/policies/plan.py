"""What a plan over time needs beyond what is free now: when running jobs free their cards, and a
list-schedule projection of when queued jobs would start.

Both count cards per group (cluster, GPU type, pool: `placement.Group.key`), as the optimiser does;
node boundaries are the realisation's business (`Capacity.fit`). When cards free is read from the
snapshot alone (`Snapshot.running`), so a policy built afresh every round plans exactly as a long-lived
one. A sharing job's card is not counted: it frees when its last partner ends, which the snapshot does
not follow. A service's cards (`JobSpec.is_service`) never come back: its predicted end is infinite.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass

from cpn.decisions import Snapshot

GroupKey = tuple[str, str, str]
"""(cluster, GPU type, pool)."""


@dataclass(frozen=True)
class Releases:
    """When the busy whole cards of a snapshot free: (time, cards) lists, by group and by node."""

    groups: dict[GroupKey, list[tuple[float, int]]]
    """Per group (cluster, GPU type, pool)."""
    nodes: dict[str, list[tuple[float, int]]]
    """Per node (`cluster/node`)."""


def releases(snapshot: Snapshot) -> Releases:
    """When each node's busy whole cards free, from the running jobs' predicted ends (`Snapshot.running`):
    a job frees its cards on the node at its end, now if it is past it; cards no entry accounts for (a job
    the snapshot has no end for, another scheduler's pods) free at infinity, as a service's do. An entry
    names no more cards than the node has busy (a service scaled down since holds fewer)."""
    groups: dict[GroupKey, list[tuple[float, int]]] = {}
    nodes: dict[str, list[tuple[float, int]]] = {}
    for state in snapshot.nodes:
        node = state.node
        held: list[tuple[float, int]] = []
        busy = node.gpu_count - state.free_gpus - len(state.shared)
        for job_id in state.running:
            job = snapshot.running.get(job_id)
            cards = 0 if job is None else min(busy, dict(job.cards).get(node.key, 0))
            if cards > 0:
                held.append((max(job.end, snapshot.now), cards))
                busy -= cards
        if busy > 0:
            held.append((math.inf, busy))
        if held:
            groups.setdefault((node.cluster, node.gpu_type, node.usage), []).extend(held)
            nodes[node.key] = held
    return Releases(groups, nodes)


class Projection:
    """A list schedule of whole cards per group: each job takes the earliest moment enough cards are
    free and holds them for its duration; the queue's predicted start times come from it."""

    def __init__(self, now: float, free: dict[GroupKey, int], releases: dict[GroupKey, list]) -> None:
        self._heaps: dict[GroupKey, list[float]] = {}
        for key in set(free) | set(releases):
            heap = [now] * free.get(key, 0)
            for time, cards in releases.get(key, ()):
                heap.extend([time] * cards)
            heapq.heapify(heap)
            self._heaps[key] = heap

    def earliest(self, key: GroupKey, cards: int, not_before: float) -> float:
        """When `cards` cards of the group are first free together at or after `not_before`."""
        heap = self._heaps.get(key, [])
        if cards > len(heap):
            return math.inf
        return max(not_before, heapq.nsmallest(cards, heap)[-1])

    def free_at(self, key: GroupKey, when: float) -> int:
        """Cards of the group free at `when` (as booked so far)."""
        return sum(1 for t in self._heaps.get(key, []) if t <= when)

    def book(self, key: GroupKey, cards: int, start: float, duration: float) -> None:
        """Hold `cards` cards of the group from `start` for `duration` (as many as it has: a sharing job
        that joined a shared card holds none of the whole cards counted here)."""
        heap = self._heaps.setdefault(key, [])
        held = min(cards, len(heap))
        for _ in range(held):
            heapq.heappop(heap)
        for _ in range(held):
            heapq.heappush(heap, start + duration)

    def best(
        self, options: Iterable[tuple[GroupKey, float]], cards: int, not_before: float
    ) -> tuple[GroupKey, float, float] | None:
        """Of (group, duration) options, the one that finishes first: (group, start, duration)."""
        best = None
        for key, duration in options:
            start = self.earliest(key, cards, not_before)
            if start < math.inf and (best is None or start + duration < best[1] + best[2]):
                best = (key, start, duration)
        return best
