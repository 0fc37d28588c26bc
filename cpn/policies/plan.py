"""What a plan over time needs beyond what is free now: when running jobs free their cards, and a
list-schedule projection of when queued jobs would start.

Both count cards per group (cluster, GPU type, pool: `placement.Group.key`), as the optimiser does;
node boundaries are the realisation's business (`Capacity.fit`). A sharing job's card is not counted:
it frees when its last partner ends, which the book does not follow.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

from cpn.decisions import Placement, RunningJob, Snapshot

GroupKey = tuple[str, str, str]
"""(cluster, GPU type, pool)."""


class RunningBook:
    """Predicted ends of the jobs the policy started, forgotten as soon as a job no longer runs (so the
    book holds no more entries than jobs running plus jobs started in the last round)."""

    def __init__(self) -> None:
        self._bookings: dict[str, RunningJob] = {}
        self.node_releases: dict[str, list[tuple[float, int]]] = {}
        """`cluster/node` -> (time, cards) its busy whole cards free at, as of the last `releases`."""

    def record(self, placement: Placement, end: float, whole_cards: bool) -> None:
        """Remember that `placement` should end at `end`."""
        cards = tuple((f"{placement.cluster}/{n}", c) for n, c in placement.nodes) if whole_cards else ()
        self._bookings[placement.job_id] = RunningJob(end, cards)

    def __len__(self) -> int:
        return len(self._bookings)

    def releases(self, snapshot: Snapshot) -> dict[GroupKey, list[tuple[float, int]]]:
        """Per group, (time, cards) its busy whole cards free at, from the predicted ends: the book's
        own, else the snapshot's (`Snapshot.running`: jobs started before a restart, or by another
        process); cards of jobs neither knows free at infinity, and a job past its predicted end frees
        its cards now. Forgets the jobs no longer running."""
        running: set[str] = set()
        out: dict[GroupKey, list[tuple[float, int]]] = {}
        self.node_releases = {}
        for state in snapshot.nodes:
            node = state.node
            key = (node.cluster, node.gpu_type, node.usage)
            busy = node.gpu_count - state.free_gpus - len(state.shared)
            for job_id in state.running:
                running.add(job_id)
                booking = self._bookings.get(job_id) or snapshot.running.get(job_id)
                if booking is None:
                    continue
                cards = dict(booking.cards).get(node.key, 0)
                if cards:
                    out.setdefault(key, []).append((max(booking.end, snapshot.now), cards))
                    self.node_releases.setdefault(node.key, []).append(
                        (max(booking.end, snapshot.now), cards)
                    )
                    busy -= cards
            if busy > 0:
                out.setdefault(key, []).append((math.inf, busy))
                self.node_releases.setdefault(node.key, []).append((math.inf, busy))
        self._bookings = {j: b for j, b in self._bookings.items() if j in running}
        return out


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
