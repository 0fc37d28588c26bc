"""Why a job waits: one test per reason code, on a tiny literal cluster (cpn.policies.waiting).

Each case builds the capacity left after a round by hand and checks the code every policy (and the
shared explainer) gives the job it leaves queued.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from cpn.decisions import Estimate, Snapshot
from cpn.inventory import Node, NodeState, Taint
from cpn.jobs import JobSpec
from cpn.policies import make_policy
from cpn.policies.placement import Capacity
from cpn.policies.waiting import WaitingExplainer

USAGE, PRODUCT = "maip.mxsf.io/node.usage", "nvidia.com/gpu.product"
PRODUCTS = {"v100": ("Tesla-V100-SXM2-16GB", 16.0), "k80": ("Tesla-K80", 12.0)}
BASELINES = ("fifo", "sjf", "greedy")


def node(name: str, gpu: str = "v100", gpus: int = 4, usage: str = "training", taints=()) -> Node:
    product, memory = PRODUCTS[gpu]
    base = (Taint(USAGE, usage), Taint(PRODUCT, product))
    return Node("a", name, product, gpus, memory, 16, usage, taints=(*base, *taints))


def job(job_id: str, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", batch_size=32, num_gpus=gpus, total_steps=100, **kw)


def snap(jobs, states, runtimes=None) -> Snapshot:
    runtimes = runtimes or {j.job_id: {"v100": 100.0, "k80": 200.0} for j in jobs}
    estimates = {jid: {gpu: Estimate(t) for gpu, t in row.items()} for jid, row in runtimes.items()}
    return Snapshot(now=0.0, pending=tuple(jobs), nodes=tuple(states), estimates=MappingProxyType(estimates))


def reason(policy: str, s: Snapshot, job_id: str) -> tuple[str, str]:
    decision = make_policy(policy).decide(s)
    assert job_id not in {p.job_id for p in decision.placements}
    (w,) = [w for w in decision.waiting if w.job_id == job_id]
    return w.code, w.detail


@pytest.mark.parametrize("policy", BASELINES)
def test_no_free_card_at_all(policy):
    s = snap([job("j")], [NodeState(node("v0"), free_gpus=0)])
    assert reason(policy, s, "j") == ("no-gpu-type", "no card is free")


@pytest.mark.parametrize("policy", ("sjf", "greedy"))  # FIFO needs no estimate: it takes the K80
def test_no_free_card_of_a_gpu_type_it_has_an_estimate_for(policy):
    s = snap([job("j")], [NodeState(node("v0"), 0), NodeState(node("k0", "k80"), 4)], {"j": {"v100": 50.0}})
    code, detail = reason(policy, s, "j")
    assert code == "no-gpu-type" and "free: k80" in detail and "no runtime estimate" in detail


@pytest.mark.parametrize("policy", BASELINES)
def test_free_cards_only_in_a_pool_it_may_not_use(policy):
    s = snap([job("j")], [NodeState(node("v0"), 0), NodeState(node("i0", usage="inference"), 4)])
    code, detail = reason(policy, s, "j")
    assert code == "pool-or-taint" and "inference" in detail


@pytest.mark.parametrize("policy", BASELINES)
def test_free_cards_only_on_a_node_with_a_taint_it_does_not_tolerate(policy):
    cordoned = node("t0", taints=(Taint("example.com/maintenance", "true"),))
    s = snap([job("j")], [NodeState(node("v0"), 0), NodeState(cordoned, 4)])
    assert reason(policy, s, "j")[0] == "pool-or-taint"


@pytest.mark.parametrize("policy", BASELINES)
def test_free_cards_have_too_little_memory(policy):
    s = snap([job("j", gpu_mem_gb=14.0)], [NodeState(node("v0"), 0), NodeState(node("k0", "k80"), 4)])
    code, detail = reason(policy, s, "j")
    assert code == "memory" and "14 GB" in detail


@pytest.mark.parametrize("policy", BASELINES)
def test_not_enough_cards_together_for_the_gang(policy):
    s = snap([job("j", 4)], [NodeState(node("v0"), 2), NodeState(node("v1"), 3)])
    code, detail = reason(policy, s, "j")
    assert code == "gang" and "at most 3 free together" in detail


@pytest.mark.parametrize("policy", BASELINES)
def test_the_node_with_free_cards_is_over_the_cpu_threshold(policy):
    s = snap([job("j", cpu=4)], [NodeState(node("v0"), 4, cpu_used=10)])  # 10 + 4 > 0.7 x 16
    assert reason(policy, s, "j")[0] == "cpu-threshold"


def test_fifo_holds_a_job_that_could_start_behind_its_blocked_head():
    s = snap([job("head", 4), job("small")], [NodeState(node("v0"), 2)])
    assert reason("fifo", s, "head")[0] == "gang"
    assert reason("fifo", s, "small")[0] == "queue-order"


def test_a_job_that_could_start_but_whose_cards_are_held_is_reserved():
    s = snap([job("j")], [NodeState(node("v0"), 4)])
    explainer = WaitingExplainer(Capacity(s))
    w = explainer.explain(s.pending[0], estimated=True, held_for="big", predicted_start=300.0)
    assert (w.code, w.predicted_start) == ("reserved", 300.0)
    assert "held for big" in w.detail
    assert explainer.explain(s.pending[0], estimated=True).code == "queue-order"


def test_a_job_with_no_estimate_for_the_free_types():
    s = snap([job("j")], [NodeState(node("v0"), 4)], {"j": {}})
    assert WaitingExplainer(Capacity(s)).explain(s.pending[0], estimated=True).code == "no-estimate"


@pytest.mark.parametrize("policy", BASELINES)
def test_every_job_left_queued_gets_exactly_one_reason(policy):
    jobs = [job(f"j{i}", gpus=1 + i % 3) for i in range(12)]
    s = snap(jobs, [NodeState(node("v0"), 3), NodeState(node("k0", "k80"), 2)])
    decision = make_policy(policy).decide(s)
    placed = {p.job_id for p in decision.placements}
    waiting = [w.job_id for w in decision.waiting]
    assert len(waiting) == len(set(waiting))
    assert set(waiting) == {j.job_id for j in jobs} - placed


@pytest.mark.parametrize("policy", BASELINES)
def test_free_cards_only_on_nodes_without_hami_or_the_dra_class_it_claims(policy):
    busy = node("h0")
    hami, claimed = replace(busy, hami=True), replace(busy, device_classes=("gpu.nvidia.com",))
    slices = job("j", gpu_share=0.3, hami=True)
    s = snap([slices], [NodeState(hami, 0), NodeState(node("v1"), 4)])
    assert reason(policy, s, "j") == (
        "no-gpu-type",
        "no free card on a node that runs HAMi, which its card slices need",
    )
    dra = job("j", device_classes=("gpu.nvidia.com",))
    s = snap([dra], [NodeState(claimed, 0), NodeState(node("v1"), 4)])
    code, detail = reason(policy, s, "j")
    assert code == "no-gpu-type" and "DRA device classes (gpu.nvidia.com)" in detail


@pytest.mark.parametrize("policy", BASELINES)
def test_free_cards_only_on_clusters_without_its_workload_kinds_crd(policy):
    lacking = replace(node("v0"), workloads=())
    serving = replace(node("v1"), cluster="b", workloads=("kubeflow.org/v1/PyTorchJob",))
    crd_job = job("j", workload="kubeflow.org/v1/PyTorchJob")
    s = snap([crd_job], [NodeState(lacking, 4), NodeState(serving, 0)])
    assert reason(policy, s, "j") == (
        "no-gpu-type",
        "free cards are only on clusters that do not serve PyTorchJob (kubeflow.org/v1) (a): "
        "its CRD is not installed there",
    )
    decision = make_policy(policy).decide(snap([crd_job], [NodeState(lacking, 4), NodeState(serving, 4)]))
    assert [(p.job_id, p.cluster) for p in decision.placements] == [("j", "b")]
    nowhere = make_policy(policy).decide(snap([crd_job], [NodeState(lacking, 4)]))  # no cluster has the CRD
    (rejection,) = nowhere.rejections
    assert (
        "cluster a does not serve PyTorchJob (kubeflow.org/v1): its CRD is not installed" in rejection.reason
    )
