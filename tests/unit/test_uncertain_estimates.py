"""Policies that choose among GPU types read the estimates' uncertainty (`pessimism`, issue 12 item 5).

A job whose runtime on the slowest card is a guess (a wide spread) that happens to look a little faster
than on a card it was measured on is not sent to the slow card on the strength of that guess; the same
estimate stated with confidence still is.
"""

from __future__ import annotations

from types import MappingProxyType

import pytest

from config.policies import PolicySettingsError
from cpn.decisions import Estimate, Snapshot
from cpn.inventory import Node, NodeState, Taint
from cpn.jobs import JobSpec
from cpn.policies import make_policy
from cpn.policies.placement import pessimistic_runtime

USAGE, PRODUCT = "maip.mxsf.io/node.usage", "nvidia.com/gpu.product"


def node(name: str, product: str, memory: float) -> Node:
    taints = (Taint(key=USAGE, value="training"), Taint(key=PRODUCT, value=product))
    return Node(name, name, product, 4, memory, 32, "training", taints=taints)


K80 = node("slow", "Tesla-K80", 12)
V100 = node("fast", "Tesla-V100-SXM2-16GB", 16)


def snapshot(k80: Estimate, v100: Estimate) -> Snapshot:
    """Both clusters empty; one job with the given estimates on each GPU type."""
    job = JobSpec(job_id="j", model="ResNet-18", batch_size=32, total_steps=100)
    estimates = {"j": {K80.gpu_type: k80, V100.gpu_type: v100}}
    return Snapshot(
        now=0.0,
        pending=(job,),
        nodes=(NodeState(K80, 4), NodeState(V100, 4)),
        estimates=MappingProxyType(estimates),
    )


GUESS_ON_SLOW_CARD = snapshot(Estimate(900.0, uncertainty=1.0), Estimate(1000.0, uncertainty=0.05))
"""Looks 10% faster on the K80, inside a +-100% spread; measured on the V100 (+-5%)."""
SURE_ON_SLOW_CARD = snapshot(Estimate(900.0, uncertainty=0.05), Estimate(1000.0, uncertainty=0.05))


def cluster_of(policy, s: Snapshot) -> str:
    (placement,) = policy.decide(s).placements
    return placement.cluster


@pytest.mark.parametrize("name", ["greedy", "milp"])
def test_a_guess_does_not_send_a_job_to_the_slowest_card_when_a_faster_one_is_free(name):
    assert cluster_of(make_policy(name, pessimism=1), GUESS_ON_SLOW_CARD) == "fast"
    assert cluster_of(make_policy(name, pessimism=0), GUESS_ON_SLOW_CARD) == "slow"


@pytest.mark.parametrize("name", ["greedy", "milp"])
def test_a_confident_estimate_still_sends_the_job_to_the_card_it_is_fastest_on(name):
    assert cluster_of(make_policy(name, pessimism=1), SURE_ON_SLOW_CARD) == "slow"


def test_the_pessimistic_runtime_is_the_estimate_so_many_spreads_up():
    e = Estimate(100.0, uncertainty=0.5)
    assert pessimistic_runtime(e, 0) == 100.0
    assert pessimistic_runtime(e, 1) == pytest.approx(150.0)
    assert pessimistic_runtime(e, 2) == pytest.approx(225.0)
    assert pessimistic_runtime(Estimate(100.0), 2) == 100.0


def test_a_negative_pessimism_is_refused_naming_the_key():
    with pytest.raises(PolicySettingsError, match="pessimism"):
        make_policy("greedy", pessimism="-1")


def test_greedy_reads_the_spread_by_default_and_milp_only_when_asked():
    assert cluster_of(make_policy("greedy"), GUESS_ON_SLOW_CARD) == "fast"
    assert cluster_of(make_policy("milp"), GUESS_ON_SLOW_CARD) == "slow"
