"""What the job store hands out and takes in: a job as stored, its transitions, the outcomes of a
submission and a cancel, and the canonical JSON a spec is stored as (which makes resubmission idempotent).

Reports read `transitions_all()` once: a job's completion time (JCT) is its
`succeeded` time minus the time it entered `queued` first, its wait the first
`running` time (`submitted` for a succeeded job whose start was never reported) minus that same
queued time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal, get_args, get_type_hints

from cpn.decisions import Placement, Waiting
from cpn.jobs import Cause, JobSpec, JobState

_FLOAT_FIELDS = frozenset(
    name for name, hint in get_type_hints(JobSpec).items() if hint is float or float in get_args(hint)
)


@dataclass(frozen=True)
class JobRecord:
    """A job as stored: its spec, where it is in its life, and where it runs."""

    spec: JobSpec
    state: JobState
    cluster: str | None
    """Cluster the job is placed on; None while queued or schedule-failed."""
    node: str | None
    """Node the job is placed on; None while unplaced."""
    location: str | None
    """Cluster holding the job's image and data now: its source cluster until a migration moves them."""
    submitted_at: float
    """When the store accepted the job (its entry into `queued`), by the store's clock."""
    updated_at: float
    """Time of the job's latest transition."""
    placement: tuple[tuple[str, int], ...] = ()
    """Every (node, cards) of the job's gang while it is placed; empty otherwise."""
    waiting: Waiting | None = None
    """Why the latest round left it queued, and that round's prediction (start, its interval, end); its
    `moved` is why the start last moved, in any round while queued. None when not queued."""
    first_predicted_start: float | None = None
    """The first start time any plan predicted for it (kept after it starts, to measure predictions)."""
    image: str | None = None
    """The image reference to run instead of the spec's, pinned by digest, once a migration copied it."""
    needs_more_than_gb: float | None = None
    """GPU memory per card of the largest card it was OOM-killed on: it needs more than this."""

    @property
    def job_id(self) -> str:
        """The job's id, `<namespace>/<name>`."""
        return self.spec.job_id

    @property
    def gpus(self) -> int:
        """Cards the job holds over all its nodes (0 when unplaced)."""
        return sum(cards for _, cards in self.placement)


@dataclass(frozen=True)
class Change:
    """A job's state after one recorded transition, for readers that follow the store incrementally."""

    job_id: str
    state: JobState
    order: int
    """The job's acceptance position (queue order)."""
    location: str | None
    """Where the job's image and data are now."""
    image: str | None = None
    """The image to run instead of the spec's (after a migration), None = the spec's."""
    needs_more_than_gb: float | None = None
    """Learned from an OOM kill: the job needs more GPU memory per card than this."""
    submitted_at: float = 0.0
    """When the store accepted the job."""


@dataclass(frozen=True)
class Transition:
    """One recorded state change of one job."""

    job_id: str
    from_state: JobState | None
    """None for the job's entry into the store (to `queued`)."""
    to_state: JobState
    time: float
    reason: str = ""
    cluster: str | None = None
    """Placement after the change (None when unplaced)."""
    node: str | None = None
    gpu_mem_gb: float | None = None
    """Peak GPU memory per card the cluster measured for the run that just ended; None = not measured."""
    log_tail: str = ""
    """On a failed run's end: the last lines of its pod's log, as the gateway bounded them; '' = none."""
    cause: Cause = Cause.NONE
    """What the transition counts as (an OOM kill, a failed migration), as data."""


@dataclass(frozen=True)
class CancelOutcome:
    """What `JobStore.cancel` did with one job."""

    job_id: str
    status: Literal["cancelled", "requested", "finished"]
    """`cancelled`: it was not on a cluster and is cancelled now; `requested`: it is on a cluster, and the
    scheduler's next round deletes it there and records it cancelled; `finished`: it had ended already
    (`state` says how) and nothing changed."""
    state: JobState
    """The job's state after the call."""


@dataclass(frozen=True)
class Copy:
    """A copy in flight of a job's image and data, as the store has it (cpn.store.facts.CopyStarted)."""

    record: JobRecord
    """The migrating job (see `whole_cards`)."""
    placement: Placement
    """The cards it was assigned, held until the copy ends; `placement.cluster` is where the copy goes."""
    source: str
    """The cluster the copy is from."""
    started_at: float
    """When the copy began (the store's clock)."""
    whole_cards: bool
    """Whether the job runs on whole cards though its spec asks to share one (a model to explore)."""


@dataclass(frozen=True)
class CancelRequest:
    """A cancel the scheduler has yet to carry out."""

    job_id: str
    requested_by: str
    requested_at: float


@dataclass(frozen=True)
class SubmitOutcome:
    """What `submit` did with one job."""

    job_id: str
    status: Literal["created", "already_exists"]
    """`created`: newly queued; `already_exists`: an identical job was stored before (nothing changed)."""


class JobConflict(ValueError):
    """A submitted job reuses the id of a stored job with different content; nothing was stored."""

    def __init__(self, job_id: str, differing: Sequence[str]) -> None:
        self.job_id = job_id
        self.differing = tuple(differing)
        super().__init__(
            f"job {job_id} already exists with different content ({', '.join(self.differing)} differ); "
            "nothing from this submission was stored. Resubmit the identical job, or give the changed "
            "one a new name"
        )


class UnknownJob(KeyError):
    """No job with this id is in the store."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(job_id)

    def __str__(self) -> str:
        return f"no job {self.job_id} in the store"


def encode(spec: JobSpec) -> str:
    """Canonical JSON of a spec: sorted keys, whole numbers in float fields written as floats.

    Two specs with the same content encode to the same text, which is what makes
    resubmission idempotent.
    """
    data = {f.name: getattr(spec, f.name) for f in fields(JobSpec)}
    for name in _FLOAT_FIELDS:
        value = data[name]
        if isinstance(value, int) and not isinstance(value, bool):
            data[name] = float(value)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def decode(text: str) -> JobSpec:
    """The JobSpec a stored spec's JSON holds."""
    return JobSpec(**json.loads(text))


def differing_fields(stored: str, new: str) -> list[str]:
    """The spec fields two encoded specs differ in, sorted (what a JobConflict names)."""
    old_data, new_data = json.loads(stored), json.loads(new)
    return sorted(k for k in old_data.keys() | new_data.keys() if old_data.get(k) != new_data.get(k))


def transition_row(
    job_id: str,
    from_state: JobState | None,
    to_state: JobState,
    time_: float,
    reason: str,
    cluster: str | None = None,
    node: str | None = None,
    gpu_mem_gb: float | None = None,
    log_tail: str = "",
    cause: Cause = Cause.NONE,
) -> dict:
    """A TRANSITIONS row's values but its position; its term None (a fenced move sets it)."""
    return {
        "job_id": job_id,
        "from_state": None if from_state is None else from_state.value,
        "to_state": to_state.value,
        "time": time_,
        "reason": reason,
        "cluster": cluster,
        "node": node,
        "gpu_mem_gb": gpu_mem_gb,
        "log_tail": log_tail,
        "cause": Cause(cause).value,
        "term": None,
    }


def record(row: Sequence) -> JobRecord:
    """The JobRecord of a JOBS row read as its `jobs._JOB_COLUMNS`."""
    (
        spec,
        state,
        cluster,
        node,
        location,
        submitted_at,
        updated_at,
        gang,
        code,
        detail,
        start,
        first,
        image,
        floor,
        end,
        low,
        high,
        moved,
    ) = row
    job = decode(spec)
    return JobRecord(
        job,
        JobState(state),
        cluster,
        node,
        location,
        submitted_at,
        updated_at,
        placement=tuple((n, c) for n, c in json.loads(gang)) if gang else (),
        waiting=Waiting(job.job_id, code, detail or "", start, end, low, high, moved or "") if code else None,
        first_predicted_start=first,
        image=image,
        needs_more_than_gb=floor or None,
    )


def transition(row: Sequence) -> Transition:
    """The Transition of a TRANSITIONS row read as its `jobs._TRANSITION_COLUMNS`."""
    job_id, from_state, to_state, time_, reason, cluster, node, gpu_mem_gb, log_tail, cause = row
    return Transition(
        job_id,
        JobState(from_state) if from_state else None,
        JobState(to_state),
        time_,
        reason,
        cluster,
        node,
        gpu_mem_gb,
        log_tail,
        Cause(cause),
    )
