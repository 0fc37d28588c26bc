"""Facts a scheduling round needs beyond the jobs' states, kept in the job store (cpn.store).

A scheduler once held these in its memory only, so that a restart, a `schedule-round` run (a new service
every run) or a standby taking over decided without them: a preempted job was estimated whole again, and
every copy in flight was queued again and copied twice. Each fact is written in the transaction of the
transition that creates it (JobStore.transition's `fact`) and removed in that of the transition that ends
it, so the store never holds a fact without its transition, nor a transition without its fact:

- SavedProgress: the fraction of a preempted job's work left at the checkpoint it was stopped at, which its
  next run resumes from; from its preemption until the job ends (a later preemption replaces it).
- CopyStarted: a migrating job's copy (where from, when it began, whether the job runs on whole cards);
  from the move to `migrating` until the job leaves it. The copy's destination and cards are the job's
  assignment, on its row.

What the store has already needs no table: the runs a scheduler deleted on purpose are its preemptions,
cancels and lost clusters, each recorded as the job's move off its cluster (cpn.engine.scheduler reads them).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Boolean, Connection, column, delete, insert, table

from cpn.jobs import FINISHED, JobState

SAVED_PROGRESS = table("saved_progress", column("job_id"), column("work_left"), column("saved_at"))
"""One row per preempted job not ended yet (columns and types: cpn/migrations/versions/0009)."""

COPIES = table(
    "copies", column("job_id"), column("source"), column("started_at"), column("whole_cards", Boolean)
)
"""One row per job in `migrating` (`whole_cards` typed, so that a SQLite store's 0/1 is copied to a
PostgreSQL boolean by `cpn store copy`)."""


@dataclass(frozen=True)
class SavedProgress:
    """A preemption's fact: the fraction of the job's work (0 to 1) its last checkpoint left."""

    work_left: float

    def __post_init__(self) -> None:
        if not 0.0 <= self.work_left <= 1.0:
            raise ValueError(f"work_left is a fraction of the job's work, 0 to 1, not {self.work_left!r}")


@dataclass(frozen=True)
class CopyStarted:
    """A migration's fact: the cluster its payload is copied from, and whether the job runs on whole cards
    though it asked to share one (a model to explore, cpn.rules.EXCLUSIVE_REASON)."""

    source: str
    whole_cards: bool = False


Fact = SavedProgress | CopyStarted
"""A fact a transition may carry."""

_CARRIED_BY = {SavedProgress: JobState.QUEUED, CopyStarted: JobState.MIGRATING}
"""The state the transition carrying each kind of fact moves to."""


def check(fact: Fact | None, new_state: JobState) -> None:
    """Refuse (ValueError) a fact carried by a move that cannot create it, before anything is written."""
    if fact is not None and (wanted := _CARRIED_BY[type(fact)]) != new_state:
        raise ValueError(f"a {type(fact).__name__} is recorded with a move to {wanted}, not to {new_state}")


def record(db: Connection, job_id: str, old: JobState, new: JobState, now: float, fact: Fact | None) -> None:
    """Keep the job's facts in step with its move from `old` to `new` at `now`, in the move's transaction
    `db`: remove those the move ends, write the one it carries (`check`ed first)."""
    if old == JobState.MIGRATING:
        db.execute(delete(COPIES).where(COPIES.c.job_id == job_id))
    if new in FINISHED or isinstance(fact, SavedProgress):
        db.execute(delete(SAVED_PROGRESS).where(SAVED_PROGRESS.c.job_id == job_id))
    if isinstance(fact, SavedProgress):
        db.execute(insert(SAVED_PROGRESS).values(job_id=job_id, work_left=fact.work_left, saved_at=now))
    elif isinstance(fact, CopyStarted):
        row = {"job_id": job_id, "source": fact.source, "started_at": now, "whole_cards": fact.whole_cards}
        db.execute(insert(COPIES).values(row))
