"""The one interface every scheduling policy implements: `decide(snapshot) -> Decision`.

Policies are pure: they see one frozen Snapshot (pending jobs, node states,
estimates, the time) and return one Decision (cpn.decisions). The live loop and
the simulator call the very same policy objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cpn.decisions import Decision, Snapshot
from cpn.jobs import JobSpec


@dataclass(frozen=True)
class Traits:
    """What the engine relies on about a policy besides its decisions, declared by the policy itself: the
    engine reads nothing else of it, so a policy that changes how it orders jobs changes these in the same
    place, or the forward look's predicted starts would be wrong in silence."""

    queue_order: bool = False
    """It takes the queue in `by_priority` order, each job on what the ones before it left (FIFO, greedy):
    a look may keep the predictions of jobs ahead of a new arrival (cpn.engine.forecast)."""
    skips_blocked: bool = False
    """A job it cannot start now is passed over and changes nothing for the rest (greedy, sjf)."""
    keeps_plan: bool = False
    """Its waiting jobs' predicted starts are its own plan's (the optimiser): the engine keeps them rather
    than looking forward with it (a solve at every simulated end would cost a solve per queued job)."""
    rebalances: bool = False
    """It moves running jobs (cpn.policies.rebalance): the scheduler asks it to decide while nothing is
    queued, and gives each running job's estimates (RunningJob.estimates)."""
    looks_with: Policy | None = None
    """The policy a forward look replays in its place (a preempting or re-balancing policy's inner one: the
    look starts jobs, it never stops or moves them); None = this policy."""


class Policy(Protocol):
    """A scheduling policy."""

    name: str
    """Name on the command line and in reports."""
    traits: Traits
    """What the engine may rely on (Traits)."""

    def decide(self, snapshot: Snapshot) -> Decision:
        """Choose placements for this round; must not mutate anything."""
        ...


def by_priority(jobs: tuple[JobSpec, ...]) -> list[JobSpec]:
    """`jobs` with higher `priority` first, arrival order kept within a priority (intake's promise)."""
    if not any(job.priority for job in jobs):  # the common case: one priority, the order as it is
        return list(jobs)
    return sorted(jobs, key=lambda job: -job.priority)


def looked_forward_with(policy: Policy) -> Policy:
    """The policy a forward look (cpn.engine.forecast) replays for `policy` (Traits.looks_with)."""
    return policy.traits.looks_with or policy
