"""The queued jobs in acceptance order, kept current from the job store's change log.

Reading every queued job from the store each round costs O(queue) decoding;
following `JobStore.changes_since` costs only what changed since the last round,
which keeps rounds cheap on queues of thousands (the store stays the truth: jobs
added by the HTTP intake or another process show up the same way).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import replace

from cpn.decisions import QueueLines, Teams, shape_of
from cpn.jobs import JobSpec, JobState
from cpn.rules import MEMORY_MARGIN_GB
from cpn.store import Change, JobRecord, JobStore


def seen_spec(
    spec: JobSpec,
    learned: Change | JobRecord | None = None,
    whole_cards: bool = False,
    teams: Teams | None = None,
) -> JobSpec:
    """A job's spec as policies see it and the clusters are given it, built here only:

    - `learned`: its store record or latest change: arriving when the store accepted it (what ages a job
      for reservations and ordering, live or replayed), with what its runs taught (the migrated image,
      and more memory after an OOM kill);
    - `whole_cards`: a sharing job run on whole cards, to measure a model the predictor has not seen
      (cpn.rules.EXCLUSIVE_REASON);
    - `teams`: with its team's checkpoint interval when it gives none (Teams.checkpoint_interval), what
      it is placed and submitted with.
    """
    if learned is not None:
        if spec.arrival_s != learned.submitted_at:
            spec = replace(spec, arrival_s=learned.submitted_at)
        if learned.image and learned.image != spec.image:
            spec = replace(spec, image=learned.image)
        floor = learned.needs_more_than_gb
        if floor is not None and (spec.gpu_mem_gb is None or spec.gpu_mem_gb <= floor):
            spec = replace(spec, gpu_mem_gb=round(floor + MEMORY_MARGIN_GB, 6))
    if whole_cards and spec.gpu_share is not None:
        spec = replace(spec, gpu_share=None)
    if teams is not None and spec.checkpoint_interval_s is None:
        interval = teams.checkpoint_interval(spec)
        if interval is not None:
            spec = replace(spec, checkpoint_interval_s=interval)
    return spec


class QueueView:
    """What is queued now, where each job's payload is, and how many jobs of each shape wait."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._after = 0
        self._specs: dict[str, JobSpec] = {}
        self._order: dict[str, int] = {}
        self._last_order = -1
        self._location: dict[str, str | None] = {}
        self._shapes: dict[tuple, tuple[list[tuple[int, int]], list[tuple[tuple[int, int], JobSpec]]]] = {}
        """shape -> (ranks, (rank, spec) entries) of its queued jobs, in rank order (QueueLines): a job
        enters or leaves its line by bisection, so a round costs what changed, not a sort of each line that
        did"""
        self._lines: dict[tuple, tuple[tuple[tuple[int, int], JobSpec], ...]] = {}
        """shape -> its line in rank order, for the shapes unchanged since it was sorted"""
        self._pending: tuple[JobSpec, ...] | None = ()
        self._grouped: QueueLines | None = None

    @property
    def seen(self) -> int:
        """The store's position (JobStore.changes_since) of the last transition `refresh` applied: what was
        written with a transition (cpn.store_facts) is unchanged while it stays the same."""
        return self._after

    def refresh(self) -> tuple[JobSpec, ...]:
        """Apply every transition recorded since the last refresh.

        Returns the jobs that entered the queue and those whose payload moved (a migration that ended
        before this refresh) or what it needs (see `seen_spec`), so callers recompute what depends on
        them. A job whose image a migration replaced (pinned by digest) is held with that image; one an
        OOM kill taught that it needs more memory per card, with that much memory declared.
        """
        self._after, changes = self.store.changes_since(self._after)
        if not changes:
            return ()
        latest: dict[str, Change] = {}
        for change in changes:
            latest[change.job_id] = change
        entering = [c for c in latest.values() if c.state == JobState.QUEUED and c.job_id not in self._specs]
        moved = []
        for c in latest.values():
            if c.state != JobState.QUEUED or c.job_id not in self._specs:
                continue
            learned = seen_spec(self._specs[c.job_id], c)
            if learned != self._specs[c.job_id]:
                self._unfile(self._specs[c.job_id])
                self._specs[c.job_id] = learned
                self._file(learned)
                moved.append(learned)
            elif c.location != self._location[c.job_id]:
                moved.append(self._specs[c.job_id])
        for change in latest.values():
            if change.state != JobState.QUEUED:
                if change.job_id in self._specs:
                    self._leave(change.job_id)
                self._location.pop(change.job_id, None)
            else:
                self._location[change.job_id] = change.location
        specs = self.store.specs([c.job_id for c in entering])
        in_order = True
        for change in entering:
            in_order = in_order and change.order > self._last_order
            self._last_order = max(self._last_order, change.order)
            specs[change.job_id] = seen_spec(specs[change.job_id], change)
            self._enter(specs[change.job_id], change.order)
        if not in_order:
            ordered = sorted(self._specs, key=self._order.__getitem__)
            self._specs = {job_id: self._specs[job_id] for job_id in ordered}
        self._pending = self._grouped = None
        return (*(specs[c.job_id] for c in entering), *moved)

    def _enter(self, spec: JobSpec, order: int) -> None:
        self._specs[spec.job_id] = spec
        self._order[spec.job_id] = order
        self._file(spec)

    def _leave(self, job_id: str) -> None:
        self._unfile(self._specs.pop(job_id))
        del self._order[job_id]

    def _file(self, spec: JobSpec) -> None:
        """Add a queued job to its shape's line."""
        key = shape_of(spec)
        ranks, entries = self._shapes.setdefault(key, ([], []))
        rank = (-spec.priority, self._order[spec.job_id])
        at = bisect_left(ranks, rank)
        ranks.insert(at, rank)
        entries.insert(at, (rank, spec))
        self._lines.pop(key, None)

    def _unfile(self, spec: JobSpec) -> None:
        """Take a job out of its shape's line."""
        key = shape_of(spec)
        ranks, entries = self._shapes[key]
        at = bisect_left(ranks, (-spec.priority, self._order[spec.job_id]))
        del ranks[at], entries[at]
        if not ranks:
            del self._shapes[key]
        self._lines.pop(key, None)

    def pending(self) -> tuple[JobSpec, ...]:
        """Queued jobs in acceptance order."""
        if self._pending is None:
            self._pending = tuple(self._specs.values())
        return self._pending

    def shapes(self) -> tuple[JobSpec, ...]:
        """One queued job of each shape (see cpn.policies.base.shape_of)."""
        return tuple(entries[0][1] for _, entries in self._shapes.values())

    def lines(self) -> QueueLines:
        """The queued jobs grouped by shape, each group in queue order (cpn.decisions.QueueLines); a
        round re-sorts only the groups that changed since the last."""
        if self._grouped is None:
            for key, (_, entries) in self._shapes.items():
                if key not in self._lines:
                    self._lines[key] = tuple(entries)
            self._grouped = QueueLines(self.pending(), dict(self._lines))
        return self._grouped

    def spec(self, job_id: str) -> JobSpec:
        """A queued job's spec."""
        return self._specs[job_id]

    def size(self) -> int:
        """How many jobs are queued."""
        return len(self._specs)

    def holds(self, job_id: str) -> bool:
        """Whether the job is queued."""
        return job_id in self._specs

    def location(self, job_id: str) -> str | None:
        """Cluster holding a queued job's image and data (None: nowhere in particular). Only queued jobs
        are remembered, so the view's memory follows the queue, not the store's history."""
        return self._location.get(job_id)
