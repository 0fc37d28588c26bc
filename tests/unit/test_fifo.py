"""FIFO policies as pure functions on hand-built snapshots, plus the policy registry."""

from __future__ import annotations

from collections import Counter
from types import MappingProxyType

import pytest

from cpn.adapters.gateway import OOM_REASON
from cpn.clock import SimClock
from cpn.decisions import Decision, Estimate, Placement, Snapshot
from cpn.formats.throughput import ThroughputTable
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.policies import POLICIES, make_policy
from cpn.policies.fifo import FifoPolicy
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import GroundTruth

K80 = Node("a", "k80-0", "Tesla-K80", 8, 12, 32, "training")
V100 = Node("b", "v100-0", "Tesla-V100-SXM2-16GB", 4, 16, 32, "training")
HYBRID = Node("b", "hyb-0", "Tesla-V100-SXM2-16GB", 2, 16, 32, "hybrid")
INFER = Node("c", "inf-0", "Tesla-P100-PCIE-16GB", 4, 16, 32, "inference")

NAIVE, AWARE = FifoPolicy(memory_aware=False), FifoPolicy()


def job(job_id: str, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", batch_size=32, num_gpus=gpus, total_steps=10, **kw)


def state(node: Node, free: int | None = None, cpu_used: float = 0.0) -> NodeState:
    return NodeState(node, node.gpu_count if free is None else free, cpu_used)


def snap(jobs, nodes, **kw) -> Snapshot:
    return Snapshot(now=0.0, pending=tuple(jobs), nodes=tuple(nodes), **kw)


def placed(decision: Decision) -> dict[str, str]:
    return {p.job_id: p.node for p in decision.placements}


def assert_feasible(snapshot: Snapshot, decision: Decision) -> None:
    """No card double-booked, no job placed twice, gangs on one node with all their cards."""
    specs = {j.job_id: j for j in snapshot.pending}
    used = Counter()
    for p in decision.placements:
        assert p.num_gpus == specs[p.job_id].num_gpus
        used[(p.cluster, p.node)] += p.num_gpus
    for s in snapshot.nodes:
        assert used[(s.node.cluster, s.node.name)] <= s.free_gpus
    ids = [p.job_id for p in decision.placements] + [r.job_id for r in decision.rejections]
    assert len(ids) == len(set(ids))


def test_jobs_start_in_arrival_order_first_fit_over_nodes_in_inventory_order():
    s = snap([job("a", 4), job("b", 4), job("c", 4)], [state(K80), state(V100)])
    decision = AWARE.decide(s)
    assert [(p.job_id, p.node) for p in decision.placements] == [
        ("a", "k80-0"),
        ("b", "k80-0"),
        ("c", "v100-0"),
    ]
    assert_feasible(s, decision)


def test_head_of_line_blocking():
    s = snap([job("a", 2), job("big", 4), job("small", 1)], [state(V100)])
    decision = AWARE.decide(s)
    assert placed(decision) == {"a": "v100-0"}
    assert decision.rejections == ()


def test_no_card_is_double_booked_within_one_decision():
    s = snap([job(f"j{i}") for i in range(10)], [state(K80, free=3), state(V100, free=2)])
    decision = AWARE.decide(s)
    assert Counter(placed(decision).values()) == {"k80-0": 3, "v100-0": 2}
    assert_feasible(s, decision)


def test_pools_follow_the_job_kind_and_prefer_the_own_pool_over_hybrid():
    s = snap([job("train"), job("serve", kind="inference")], [state(INFER), state(HYBRID), state(K80)])
    assert placed(AWARE.decide(s)) == {"train": "k80-0", "serve": "inf-0"}
    training_full = snap([job("train")], [state(INFER), state(HYBRID), state(K80, free=0)])
    assert placed(AWARE.decide(training_full)) == {"train": "hyb-0"}
    only_training = snap([job("serve", kind="inference")], [state(K80)])
    (rejection,) = AWARE.decide(only_training).rejections
    assert "no node in a pool for inference jobs" in rejection.reason


def test_cpu_load_after_placement_stays_within_the_threshold():
    s = snap([job("j", cpu=4)], [state(K80, cpu_used=20), state(V100, cpu_used=18)], cpu_threshold=0.7)
    assert placed(AWARE.decide(s)) == {"j": "v100-0"}  # 24/32 > 0.7 >= 22/32
    both_busy = snap([job("j", cpu=4)], [state(K80, cpu_used=20), state(V100, cpu_used=20)])
    decision = AWARE.decide(both_busy)
    assert decision.placements == () and [w.code for w in decision.waiting] == ["cpu-threshold"]


def test_cpu_is_counted_across_placements_of_one_decision():
    s = snap([job("a", cpu=12), job("b", cpu=12)], [state(K80), state(V100)], cpu_threshold=0.7)
    assert placed(AWARE.decide(s)) == {"a": "k80-0", "b": "v100-0"}


def test_naive_fifo_puts_a_job_too_big_for_a_k80_on_the_k80_and_aware_fifo_does_not():
    s = snap([job("big", gpu_mem_gb=14.0)], [state(K80), state(V100)])
    assert placed(NAIVE.decide(s)) == {"big": "k80-0"}
    assert placed(AWARE.decide(s)) == {"big": "v100-0"}


def test_aware_fifo_uses_the_estimated_memory_per_gpu_type():
    estimates = MappingProxyType({"j": {"k80": Estimate(100, gpu_mem_gb=13.0), "v100": Estimate(50, 13.0)}})
    s = snap([job("j")], [state(K80), state(V100)], estimates=estimates)
    assert placed(AWARE.decide(s)) == {"j": "v100-0"}
    declared_more = snap([job("j", gpu_mem_gb=17.0)], [state(K80), state(V100)], estimates=estimates)
    (rejection,) = AWARE.decide(declared_more).rejections
    assert "more GPU memory" in rejection.reason


def test_aware_fifo_waits_when_only_the_big_cards_are_busy():
    s = snap([job("big", gpu_mem_gb=14.0), job("small")], [state(K80), state(V100, free=0)])
    decision = AWARE.decide(s)
    assert decision.placements == ()
    assert {w.job_id: w.code for w in decision.waiting} == {"big": "memory", "small": "queue-order"}


@pytest.mark.parametrize(
    ("impossible", "reason"),
    [
        (job("huge", 16), "needs 16 GPUs; no cluster has that many eligible GPUs of one type"),
        (job("cpu", cpu=40), "needs 40 CPU cores"),
    ],
)
def test_a_job_no_node_could_ever_take_is_rejected_and_does_not_block(impossible, reason):
    s = snap([impossible, job("next")], [state(K80, free=0), state(V100)])
    decision = NAIVE.decide(s)
    assert [r.job_id for r in decision.rejections] == [impossible.job_id]
    assert reason in decision.rejections[0].reason
    assert placed(decision) == {"next": "v100-0"}


def test_a_head_too_big_for_every_card_is_rejected_even_while_other_cards_are_busy():
    s = snap([job("giant", gpu_mem_gb=40.0), job("next")], [state(K80), state(V100, free=0)])
    decision = AWARE.decide(s)
    assert [r.job_id for r in decision.rejections] == ["giant"]
    assert placed(decision) == {"next": "k80-0"}


def test_memory_too_big_for_every_card_is_rejected_only_by_the_aware_flavour():
    s = snap([job("giant", gpu_mem_gb=40.0)], [state(K80), state(V100)])
    assert placed(NAIVE.decide(s)) == {"giant": "k80-0"}
    assert [r.job_id for r in AWARE.decide(s).rejections] == ["giant"]


def test_decide_is_pure():
    s = snap([job("a", 2), job("b", 8)], [state(K80, free=4), state(V100)])
    assert AWARE.decide(s) == AWARE.decide(s)
    assert AWARE.decide(s).placements == (Placement("a", "a", "k80-0", 2),)


def test_registry_makes_both_flavours_and_names_the_known_ones_on_error():
    assert {"fifo", "fifo-naive"} <= set(POLICIES)
    assert make_policy("fifo").name == "fifo"
    assert make_policy("fifo-naive").name == "fifo-naive"
    assert make_policy("fifo") is not make_policy("fifo")
    with pytest.raises(ValueError, match="unknown policy 'lifo'; known: fifo-naive, fifo"):
        make_policy("lifo")


@pytest.mark.parametrize(("policy", "ooms"), [(NAIVE, 1), (AWARE, 0)])
def test_on_the_simulator_only_the_naive_flavour_meets_oom_kills(policy, ooms):
    clock = SimClock()
    gw = SimulatedGateway([K80, V100], GroundTruth(ThroughputTable.load()), clock)
    queue = [JobSpec("r50", model="ResNet-50", batch_size=128, num_gpus=2, total_steps=100, gpu_mem_gb=12.4)]
    while queue or gw.running_jobs():
        decision = policy.decide(snap(queue, gw.inventory()))
        for p in decision.placements:
            gw.submit(next(j for j in queue if j.job_id == p.job_id), p)
        queue = [j for j in queue if j.job_id not in placed(decision)]
        gw.advance(gw.next_event_time())
    assert sum(e.reason == OOM_REASON for e in gw.executions) == ooms
    assert gw.executions[-1].outcome == ("failed" if ooms else "succeeded")
