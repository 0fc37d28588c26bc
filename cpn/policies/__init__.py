"""Scheduling policies by name: every one implements `decide(snapshot) -> Decision` (see base)."""

from __future__ import annotations

from collections.abc import Callable

from cpn.policies.base import Policy
from cpn.policies.fifo import FifoPolicy

POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": lambda: FifoPolicy(memory_aware=True),
    "fifo-naive": lambda: FifoPolicy(memory_aware=False),
}
"""Factories of the known policies, by the name used on the command line and in reports."""


def make_policy(name: str) -> Policy:
    """A new policy called `name`; ValueError listing the known names otherwise."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
    return factory()
