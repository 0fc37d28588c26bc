"""A dry run: what a scheduling round would do now, carried out nowhere.

A dry run is the round without an executor: the composition root (cpn.bootstrap.open_dry_run) builds the
scheduler `cpn run` builds over the store opened read-only, and its own `snapshot` and `decide` stages
give the decision; `cpn plan` and the `schedule-round` flow's dry run both decide so, so they agree on
every queued job (running jobs, teams, saved progress, copies in flight and whole cards for jobs to explore
included). `cpn plan FILE...` asks about jobs not submitted yet: `WithProposed` shows the scheduler the
store with them queued after every stored job, as if accepted now, and writes nothing.

`planned_jobs` renders the decision per queued job: each placed job as the objects its cluster would
receive (a ManifestBinder per cluster), each validated as before a real submission.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from cpn.adapters.binding import ManifestBinder
from cpn.clock import Clock
from cpn.decisions import Decision, Snapshot
from cpn.jobs import JobSpec, JobState
from cpn.store import Change, JobStore

Outcome = Literal["placed", "waiting", "rejected", "invalid"]


@dataclass(frozen=True)
class PlannedJob:
    """What the dry run decided for one queued job."""

    job_id: str
    outcome: Outcome
    cluster: str | None = None
    nodes: tuple[tuple[str, int], ...] = ()
    """(node, cards) of the gang."""
    gpu_type: str | None = None
    predicted_runtime_s: float | None = None
    """What its run would take there (a preempted job's: what its checkpoint left, and the restart)."""
    uncertainty: float | None = None
    """Relative spread of the runtime estimate (Estimate.uncertainty)."""
    explore: bool = False
    """The estimate is a guess to learn from (Estimate.explore): the job runs on whole cards, alone."""
    transfer_s: float | None = None
    code: str = ""
    """Why it waits (a cpn.decisions.WaitCode), when it does."""
    reason: str = ""
    """Why it waits, is rejected or its objects are invalid."""
    predicted_start: float | None = None
    """When a waiting job is predicted to start, on the scheduler's clock (the forward look's)."""
    objects: tuple[dict[str, Any], ...] = ()
    """What would be submitted, workload first."""

    @property
    def gpus(self) -> int:
        """Cards over all its nodes."""
        return sum(c for _, c in self.nodes)


def planned_jobs(
    snapshot: Snapshot,
    decision: Decision,
    *,
    binders: Mapping[str, ManifestBinder],
    validate: Callable[[str, dict[str, Any]], None],
) -> list[PlannedJob]:
    """The decision for every job queued in `snapshot`, in queue order; `validate(cluster, obj)` raises
    ValueError on a bad object. A running job the decision moves or stops is no queued job's outcome."""
    out: dict[str, PlannedJob] = {}
    by_name = {(s.node.cluster, s.node.name): s.node for s in snapshot.nodes}
    for rejection in decision.rejections:
        out[rejection.job_id] = PlannedJob(rejection.job_id, "rejected", reason=rejection.reason)
    for waiting in decision.waiting:
        out[waiting.job_id] = PlannedJob(
            waiting.job_id,
            "waiting",
            code=waiting.code,
            reason=waiting.detail,
            predicted_start=waiting.predicted_start,
        )
    specs = {job.job_id: job for job in snapshot.pending}
    for placement in decision.placements:
        job = specs.get(placement.job_id)
        if job is None:
            continue
        node = by_name[(placement.cluster, placement.node)]
        estimate = snapshot.estimates.get(job.job_id, {}).get(node.gpu_type)
        base = PlannedJob(
            job.job_id,
            "placed",
            cluster=placement.cluster,
            nodes=placement.nodes,
            gpu_type=node.gpu_type,
            predicted_runtime_s=None if estimate is None else estimate.runtime_s,
            uncertainty=None if estimate is None else estimate.uncertainty,
            explore=estimate is not None and estimate.explore,
            transfer_s=snapshot.transfer_s.get(job.job_id, {}).get(placement.cluster),
        )
        try:
            objects = binders[placement.cluster].bind(job, placement)
            for obj in objects:
                validate(placement.cluster, obj)
        except ValueError as exc:
            out[job.job_id] = replace(base, outcome="invalid", reason=str(exc))
            continue
        out[job.job_id] = replace(base, objects=objects)
    return [
        out.get(job.job_id) or PlannedJob(job.job_id, "waiting", code="queue-order", reason="left queued")
        for job in snapshot.pending
    ]


class WithProposed:
    """The job store as a dry run reads it: every stored job and, queued after them, `proposed` jobs that
    are not stored (the manifests `cpn plan` is given), as if the store accepted them when the scheduler
    first reads its queue (`clock`'s time then). Every read passes on to `store`; nothing is written.

    A job the store holds with the same content is no proposal (it is planned as stored, as submitting it
    again would change nothing); one it holds with other content is refused (ValueError naming it), as
    submitting it would be."""

    def __init__(self, store: JobStore, proposed: Sequence[JobSpec], clock: Clock) -> None:
        self._store = store
        self._proposed = {job.job_id: job for job in proposed}
        self._clock = clock
        self._entered = not proposed

    def changes_since(self, after: int = 0) -> tuple[int, list[Change]]:
        """The store's transitions after `after`, and at the first call the proposed jobs' entries into the
        queue after them (each ordered after every job the store has seen so far: the scheduler's queue
        reads from the start)."""
        position, changes = self._store.changes_since(after)
        if self._entered:
            return position, changes
        self._entered = True
        for job_id, stored in self._store.specs(list(self._proposed)).items():
            if stored != self._proposed.pop(job_id):
                raise ValueError(
                    f"job {job_id} is in the job store with other content: submitting it would be refused; "
                    "give the manifest another name to plan it as a new job"
                )
        last = max((c.order for c in changes), default=0)
        now = self._clock.now()
        entries = [
            Change(job.job_id, JobState.QUEUED, last + i, job.source_cluster, submitted_at=now)
            for i, job in enumerate(self._proposed.values(), start=1)
        ]
        return position, [*changes, *entries]

    def specs(self, job_ids: Sequence[str]) -> dict[str, JobSpec]:
        """The specs of those of `job_ids` that are stored or proposed."""
        found = self._store.specs([j for j in job_ids if j not in self._proposed])
        found.update((j, self._proposed[j]) for j in job_ids if j in self._proposed)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)
