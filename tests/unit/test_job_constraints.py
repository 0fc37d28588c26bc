"""What a manifest pins (a GPU product, a pool, a least card memory), every policy keeps to."""

from __future__ import annotations

import pytest

from cpn.decisions import Estimate, Snapshot
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.policies import make_policy

K80 = Node("c", "k80-0", "Tesla-K80", 4, 12, 32, "training", gpu_key="k80")
V100 = Node("c", "v100-0", "Tesla-V100-SXM2-16GB", 4, 16, 32, "training", gpu_key="v100")
HYBRID = Node("c", "hy-0", "Tesla-V100-SXM2-16GB", 4, 16, 32, "hybrid", gpu_key="v100")


def snapshot(jobs, free):
    estimates = {j.job_id: {"k80": Estimate(100.0), "v100": Estimate(50.0)} for j in jobs}
    nodes = tuple(NodeState(n, free_gpus=f) for n, f in zip((K80, V100, HYBRID), free, strict=True))
    return Snapshot(now=0.0, pending=tuple(jobs), nodes=nodes, estimates=estimates)


@pytest.mark.parametrize("policy", ["fifo", "sjf", "greedy"])
def test_a_job_pinned_to_a_product_waits_for_it_rather_than_take_another(policy):
    pinned = JobSpec(job_id="ns/pinned", model="m", gpu_products=("Tesla-K80",))
    decision = make_policy(policy).decide(snapshot([pinned], free=(0, 4, 4)))
    assert decision.placements == () and decision.rejections == ()
    decision = make_policy(policy).decide(snapshot([pinned], free=(4, 4, 4)))
    assert [p.node for p in decision.placements] == ["k80-0"]


@pytest.mark.parametrize("policy", ["fifo", "sjf", "greedy"])
def test_pool_and_memory_constraints_narrow_the_choice(policy):
    hybrid_only = JobSpec(job_id="ns/hy", model="m", node_pools=("hybrid",))
    big = JobSpec(job_id="ns/big", model="m", gpu_memory_min_gb=14)
    decision = make_policy(policy).decide(snapshot([hybrid_only, big], free=(4, 0, 4)))
    placed = {p.job_id: p.node for p in decision.placements}
    assert placed["ns/hy"] == "hy-0"
    assert placed.get("ns/big") in (None, "hy-0") and placed.get("ns/big") != "k80-0"


def test_a_job_no_node_can_satisfy_is_rejected_with_the_reason():
    nowhere = JobSpec(job_id="ns/h20", model="m", gpu_products=("NVIDIA-H20",))
    decision = make_policy("fifo").decide(snapshot([nowhere], free=(4, 4, 4)))
    assert [r.job_id for r in decision.rejections] == ["ns/h20"]
    assert "NVIDIA-H20" in decision.rejections[0].reason
