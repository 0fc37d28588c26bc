"""Every policy declares what the engine may rely on (cpn.policies.base.Traits), and the wrappers that
preempt and re-balance keep what their inner policy declares: the forward look reads nothing else."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cpn.policies import make_policy
from cpn.policies.base import Traits, looked_forward_with
from cpn.policies.fifo import FifoPolicy
from cpn.policies.greedy import GreedyPolicy

ENGINE = Path(__file__).resolve().parents[2] / "cpn" / "engine"


@pytest.mark.parametrize(
    ("name", "traits"),
    [
        ("fifo", Traits(queue_order=True)),
        ("fifo-naive", Traits(queue_order=True)),
        ("greedy", Traits()),  # jobs may wait for a faster type, booking cards: the look asks about all
        ("sjf", Traits(skips_blocked=True)),
        ("milp", Traits(keeps_plan=True)),
    ],
)
def test_each_policy_declares_its_traits(name, traits):
    policy = make_policy(name)
    assert policy.traits == traits
    assert looked_forward_with(policy) is policy


def test_greedy_that_never_waits_for_a_faster_type_takes_the_queue_in_order_and_skips():
    assert make_policy("greedy", wait_for_faster="false").traits == Traits(
        queue_order=True, skips_blocked=True
    )


def test_wrappers_keep_the_inner_policys_traits_and_look_forward_with_it():
    preempting = make_policy("greedy", preemption="true", wait_for_faster="false")
    assert isinstance(looked_forward_with(preempting), GreedyPolicy)
    assert preempting.traits.queue_order and not preempting.traits.rebalances
    both = make_policy("fifo", preemption="true", rebalance="true")
    assert both.traits.rebalances and both.traits.queue_order
    assert isinstance(looked_forward_with(both), FifoPolicy)  # through both wrappers


def test_the_engine_asks_a_policy_nothing_by_getattr():
    """The engine reads a policy's traits as declared; `getattr` would let one default in silence."""
    for path in ENGINE.glob("*.py"):
        calls = [
            node
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
        ]
        assert not calls, f"{path.name}:{calls[0].lineno} uses getattr"
