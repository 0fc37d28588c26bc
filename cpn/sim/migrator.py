"""Simulated migration: a copy takes (image + data) / WAN bandwidth seconds of simulated time."""

from __future__ import annotations

import heapq

from cpn.adapters.migrator import MigrationDone
from cpn.clock import SimClock
from cpn.jobs import JobSpec
from cpn.transfer import TransferTimes


class SimulatedMigrator:
    """Copies finish after their transfer time; copies do not slow each other down."""

    def __init__(self, transfers: TransferTimes, clock: SimClock) -> None:
        self.transfers = transfers
        self.clock = clock
        self._heap: list[tuple[float, int, str, str]] = []
        self._seq = 0
        self._done: list[MigrationDone] = []
        self.total_s = 0.0
        """Seconds of transfer started so far (a run's `transfer_s_total`)."""

    def start(self, job: JobSpec, src: str, dst: str, started_at: float | None = None) -> None:
        """Schedule the copy's completion: its transfer time after it started (`started_at` for one another
        process began, whose time was counted there: not counted again in `total_s`)."""
        seconds = self.transfers.seconds(job, src, dst)
        if started_at is None:
            self.total_s += seconds
        began = self.clock.now() if started_at is None else started_at
        heapq.heappush(self._heap, (began + seconds, self._seq, job.job_id, dst))
        self._seq += 1

    def poll(self) -> list[MigrationDone]:
        """Copies finished since the last call."""
        done, self._done = self._done, []
        return done

    def next_event_time(self) -> float | None:
        """When the next copy finishes, if any is under way."""
        return self._heap[0][0] if self._heap else None

    def advance(self, until: float) -> None:
        """Finish every copy due at or before `until` (the clock is moved by the caller)."""
        while self._heap and self._heap[0][0] <= until:
            time, _, job_id, dst = heapq.heappop(self._heap)
            self._done.append(MigrationDone(job_id=job_id, cluster=dst, time=time))
