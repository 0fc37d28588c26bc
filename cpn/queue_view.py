"""The queued jobs in acceptance order, kept current from the job store's change log.

Reading every queued job from the store each round costs O(queue) decoding;
following `JobStore.changes_since` costs only what changed since the last round,
which keeps rounds cheap on queues of thousands (the store stays the truth: jobs
added by the HTTP intake or another process show up the same way).
"""

from __future__ import annotations

from cpn.jobs import JobSpec, JobState
from cpn.store import Change, JobStore


class QueueView:
    """What is queued now, and where each job's payload is."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._after = 0
        self._queued: dict[str, tuple[int, JobSpec]] = {}
        self._location: dict[str, str | None] = {}
        self._pending: tuple[JobSpec, ...] | None = ()

    def refresh(self) -> None:
        """Apply every transition recorded since the last refresh."""
        self._after, changes = self.store.changes_since(self._after)
        if not changes:
            return
        latest: dict[str, Change] = {}
        for change in changes:
            latest[change.job_id] = change
        entering = [c for c in latest.values() if c.state == JobState.QUEUED and c.job_id not in self._queued]
        for change in latest.values():
            if change.state != JobState.QUEUED:
                self._queued.pop(change.job_id, None)
            self._location[change.job_id] = change.location
        specs = self.store.specs([c.job_id for c in entering])
        last_order = max((order for order, _ in self._queued.values()), default=-1) if entering else -1
        in_order = True
        for change in entering:
            in_order = in_order and change.order > last_order
            last_order = max(last_order, change.order)
            self._queued[change.job_id] = (change.order, specs[change.job_id])
        if not in_order:
            self._queued = dict(sorted(self._queued.items(), key=lambda item: item[1][0]))
        self._pending = None

    def pending(self) -> tuple[JobSpec, ...]:
        """Queued jobs in acceptance order."""
        if self._pending is None:
            self._pending = tuple(spec for _, spec in self._queued.values())
        return self._pending

    def location(self, job_id: str) -> str | None:
        """Cluster holding the job's image and data (None: nowhere in particular)."""
        return self._location.get(job_id)
