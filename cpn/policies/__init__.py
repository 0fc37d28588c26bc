"""Scheduling policies by name: every one implements `decide(snapshot) -> Decision` (see base).

Where a job may go (pools, taints, memory, CPU, gangs, shared cards) is decided once, in
`cpn.policies.placement`; the policies differ in the order they take jobs and which option they pick.
Why a job left queued waits is decided once too, in `cpn.policies.waiting`. Each policy has a typed
settings model (config.policies); `make_policy` builds one from settings or from a name and overrides.
"""

from __future__ import annotations

from typing import Any

from config.policies import (
    POLICY_NAMES,
    FifoSettings,
    GreedySettings,
    MilpSettings,
    PolicySettings,
    SjfSettings,
    policy_settings,
)
from cpn.policies.base import Policy
from cpn.policies.fifo import FifoPolicy
from cpn.policies.greedy import GreedyPolicy
from cpn.policies.preemption import PreemptingPolicy
from cpn.policies.rebalance import RebalancingPolicy
from cpn.policies.sjf import SjfPolicy
from cpn.policies.slicing import SlicingPolicy

POLICIES: tuple[str, ...] = POLICY_NAMES
"""The known policies, by the name used on the command line and in reports."""


def make_policy(settings: PolicySettings | str, **overrides: Any) -> Policy:
    """A new policy from its settings, or from its name and setting overrides (`make_policy("milp",
    solver="cbc")`; string values are converted, as `--set` gives them). ValueError
    (config.policies.PolicySettingsError) naming the unknown policy, key or bad value."""
    if isinstance(settings, str):
        settings = policy_settings(settings, **overrides)
    elif overrides:
        settings = policy_settings(settings.name, **{**settings.model_dump(exclude={"name"}), **overrides})
    policy = _policy(settings)
    if settings.time_slicing:
        policy = SlicingPolicy(policy)
    if settings.preemption:
        policy = PreemptingPolicy(policy)
    return RebalancingPolicy(policy, settings) if settings.rebalance else policy


def _policy(settings: PolicySettings) -> Policy:
    match settings:
        case FifoSettings(name=name):
            return FifoPolicy(memory_aware=name == "fifo")
        case SjfSettings():
            return SjfPolicy(settings)
        case GreedySettings():
            return GreedyPolicy(settings)
        case MilpSettings():
            from cpn.policies.milp import MilpPolicy  # PuLP is imported only when the optimiser is used

            return MilpPolicy(settings)
    raise TypeError(f"not policy settings: {settings!r}")
