"""Scheduling policies by name: every one implements `decide(snapshot) -> Decision` (see base).

Where a job may go (pools, taints, memory, CPU, gangs, shared cards) is decided once, in
`cpn.policies.placement`; the policies differ in the order they take jobs and which option they pick.
"""

from __future__ import annotations

from collections.abc import Callable

from cpn.policies.base import Policy
from cpn.policies.fifo import FifoPolicy
from cpn.policies.greedy import GreedyPolicy
from cpn.policies.sjf import SjfPolicy

POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo-naive": lambda: FifoPolicy(memory_aware=False),
    "fifo": lambda: FifoPolicy(memory_aware=True),
    "sjf": SjfPolicy,
    "greedy": GreedyPolicy,
}
"""Factories of the known policies, by the name used on the command line and in reports."""


def make_policy(name: str) -> Policy:
    """A new policy called `name`; ValueError listing the known names otherwise."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
    return factory()
