"""The one interface every scheduling policy implements: `decide(snapshot) -> Decision`.

Policies are pure: they see one frozen Snapshot (pending jobs, node states,
estimates, the time) and return one Decision (cpn.decisions). The live loop and
the simulator call the very same policy objects.
"""

from __future__ import annotations

from typing import Protocol

from cpn.decisions import Decision, Snapshot
from cpn.jobs import JobSpec


class Policy(Protocol):
    """A scheduling policy."""

    name: str
    """Name on the command line and in reports."""

    def decide(self, snapshot: Snapshot) -> Decision:
        """Choose placements for this round; must not mutate anything."""
        ...


def by_priority(jobs: tuple[JobSpec, ...]) -> list[JobSpec]:
    """`jobs` with higher `priority` first, arrival order kept within a priority (intake's promise)."""
    if not any(job.priority for job in jobs):  # the common case: one priority, the order as it is
        return list(jobs)
    return sorted(jobs, key=lambda job: -job.priority)


def looked_forward_with(policy: Policy) -> Policy:
    """The policy a forward look (cpn.engine.forecast) replays for `policy`: the one `policy` names as its
    `looks_with` (a preempting policy's inner one, cpn.policies.preemption), else `policy` itself."""
    return getattr(policy, "looks_with", policy)


def rebalances(policy: Policy) -> bool:
    """Whether `policy` moves running jobs (`rebalances`, cpn.policies.rebalance): the scheduler then asks it
    to decide while nothing is queued, and gives each running job's estimates (RunningJob.estimates)."""
    return bool(getattr(policy, "rebalances", False))
