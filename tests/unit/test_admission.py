"""The admission rule (cpn.admission), once, on literal inventories: every rule and its message, what an
admitted placement holds, and that the policies' capacity answers as the rule does on the same nodes.

Both gateways translate `admit`'s answer (tests/contract/ runs them against each other); this file is
where the rule itself is pinned down.
"""

from __future__ import annotations

import pytest

from cpn.admission import Admitted, Refused, Room, admit
from cpn.decisions import Estimate, Placement, Snapshot
from cpn.inventory import Node, NodeState, SharedCard, Taint
from cpn.jobs import JobSpec
from cpn.policies.placement import Capacity

USAGE, PRODUCT = "maip.mxsf.io/node.usage", "nvidia.com/gpu.product"
V100, K80 = "Tesla-V100-SXM2-16GB", "Tesla-K80"


def node(name: str, product: str = V100, gpus: int = 4, usage: str = "training", cpu: float = 16, **kw):
    memory = 12 if product == K80 else 16
    taints = (Taint(USAGE, usage), Taint(PRODUCT, product), *kw.pop("taints", ()))
    return Node("c", name, product, gpus, memory, cpu, usage, taints=taints)


V0, V1, K0 = node("v0"), node("v1"), node("k0", K80)
HYB, INF = node("h0", usage="hybrid", gpus=2), node("i0", usage="inference")
CP = node("cp", taints=(Taint("maip.mxsf.io/control-plane", "true"),))
ALL_FREE = {n.name: NodeState(n, n.gpu_count) for n in (V0, V1, K0, HYB, INF, CP)}


def job(job_id: str = "ns/j", gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", num_gpus=gpus, cpu=kw.pop("cpu", 4), **kw)


def states(**changed: NodeState) -> dict[tuple[str, str], NodeState]:
    """Every node all free, but for the `changed` ones (by node name)."""
    return {("c", name): st for name, st in {**ALL_FREE, **changed}.items()}


def refused(j: JobSpec, placement: Placement, at=None, cpu_threshold: float = 1.0) -> str:
    answer = admit(j, placement, at or states(), cpu_threshold)
    assert isinstance(answer, Refused), answer
    return answer.reason


@pytest.mark.parametrize(
    ("spec", "placement", "message"),
    [
        (job(), Placement("ns/j", "c", "v9", 1), "no node c/v9"),
        (job(), Placement("ns/j", "elsewhere", "v0", 1), "no node elsewhere/v0"),
        (job(gpus=8), Placement("ns/j", "c", "v0", 4, (("v0", 4),)), "node c/v0 is listed twice in"),
        (
            job(gpus=8),
            Placement("ns/j", "c", "v0", 4, (("k0", 4),)),
            "a gang runs on one GPU type; c/k0 has k80",
        ),
        (
            job(kind="inference"),
            Placement("ns/j", "c", "v0", 1),
            "node c/v0 is in the training pool; inference jobs use hybrid, inference",
        ),
        (
            job(),
            Placement("ns/j", "c", "cp", 1),
            "node c/cp has taint maip.mxsf.io/control-plane=true:NoSchedule, which training jobs do not",
        ),
        (
            job(gpu_products=("NVIDIA-H20",)),
            Placement("ns/j", "c", "v0", 1),
            f"node c/v0 has {V100}; job ns/j runs only on NVIDIA-H20",
        ),
        (
            job(node_pools=("hybrid",)),
            Placement("ns/j", "c", "v0", 1),
            "node c/v0 is in the training pool; job ns/j asks for hybrid",
        ),
        (
            job(gpu_memory_min_gb=14),
            Placement("ns/j", "c", "k0", 1),
            "node c/k0 has 12 GB cards; job ns/j asks for at least 14 GB",
        ),
        (job(gpus=5), Placement("ns/j", "c", "v0", 5), "node c/v0 has 4 free GPUs; job ns/j asks for 5"),
        (
            job(gpus=4),
            Placement("ns/j", "c", "v0", 4, (("v1", 0),)),
            "node c/v1 has 4 free GPUs; job ns/j asks for 0",
        ),
        (job(gpus=4), Placement("ns/j", "c", "v0", 3), "job ns/j needs 4 GPUs; the placement gives it 3"),
        (
            job(cpu=17),
            Placement("ns/j", "c", "v0", 1),
            "node c/v0 has 16 free CPU cores; job ns/j asks for 17",
        ),
    ],
    ids=[
        "unknown-node",
        "unknown-cluster",
        "node-twice",
        "two-gpu-types",
        "pool-of-the-kind",
        "untolerated-taint",
        "product-pin",
        "pool-pin",
        "card-memory-pin",
        "too-few-free-cards",
        "no-cards-on-a-node",
        "cards-do-not-add-up",
        "cpu",
    ],
)
def test_each_rule_refuses_with_its_reason(spec, placement, message):
    assert refused(spec, placement).startswith(message)


def test_free_cards_and_cpu_in_use_are_what_the_node_state_says():
    busy = states(v0=NodeState(V0, free_gpus=1, cpu_used=10))
    assert refused(job(gpus=2), Placement("ns/j", "c", "v0", 2), busy) == (
        "node c/v0 has 1 free GPUs; job ns/j asks for 2"
    )
    assert refused(job(cpu=7), Placement("ns/j", "c", "v0", 1), busy) == (
        "node c/v0 has 6 free CPU cores; job ns/j asks for 7"
    )
    assert isinstance(admit(job(cpu=6), Placement("ns/j", "c", "v0", 1), busy), Admitted)


def test_the_cpu_threshold_caps_a_node_below_its_cores():
    # 16 cores at 0.5: 8 may be in use; 3 are, so 5 more fit and 6 do not.
    at = states(v0=NodeState(V0, 4, cpu_used=3))
    assert isinstance(admit(job(cpu=5), Placement("ns/j", "c", "v0", 1), at, 0.5), Admitted)
    assert refused(job(cpu=6), Placement("ns/j", "c", "v0", 1), at, 0.5) == (
        "node c/v0 has 5 free CPU cores under the CPU threshold; job ns/j asks for 6"
    )


def test_an_admitted_gang_holds_its_cards_and_cpu_in_proportion_on_each_node():
    answer = admit(job(gpus=6, cpu=12), Placement("ns/j", "c", "v0", 4, (("v1", 2),)), states())
    assert answer == Admitted("ns/j", ((V0, 4, 8.0), (V1, 2, 4.0)))


def test_a_sharing_job_joins_the_fullest_shared_card_with_room_or_opens_a_free_one():
    cards = (SharedCard(1, 0.5, 8.0), SharedCard(3, 0.25, 12.0))
    at = states(h0=NodeState(HYB, free_gpus=0, shared=cards))
    # A quarter fits both cards; bin packing takes the one with least share left (card 3).
    assert admit(job(gpu_share=0.25), Placement("ns/j", "c", "h0", 1), at).card == 3
    # Half a card fits card 1 only; with 10 GB declared, neither card has the memory left.
    assert admit(job(gpu_share=0.5), Placement("ns/j", "c", "h0", 1), at).card == 1
    assert refused(job(gpu_share=0.5, gpu_mem_gb=10), Placement("ns/j", "c", "h0", 1), at) == (
        "node c/h0 has no free GPU and no shared card with room for a share of 0.5 and 10 GB (most left: 0.5)"
    )
    # With a free card as well, a job no shared card has room for opens it (which one: the cluster's).
    at = states(h0=NodeState(HYB, free_gpus=1, shared=cards))
    assert admit(job(gpu_share=0.75), Placement("ns/j", "c", "h0", 1), at) == Admitted(
        "ns/j", ((HYB, 1, 4.0),), None
    )
    # A job wider than one card holds whole cards, share or not.
    assert refused(job(gpus=2, gpu_share=0.5), Placement("ns/j", "c", "h0", 2), at) == (
        "node c/h0 has 1 free GPUs; job ns/j asks for 2"
    )


@pytest.mark.parametrize(
    ("state", "spec"),
    [
        (NodeState(V0, 2), job(gpus=2)),
        (NodeState(V0, 1), job(gpus=2)),
        (NodeState(V0, 4, cpu_used=7.0), job(cpu=4)),
        (NodeState(V0, 4, cpu_used=7.5), job(cpu=4)),
        (NodeState(V0, 0, shared=(SharedCard(0, 0.5, 8.0),)), job(gpu_share=0.5)),
        (NodeState(V0, 0, shared=(SharedCard(0, 0.4, 8.0),)), job(gpu_share=0.5)),
        (NodeState(V0, 0, shared=(SharedCard(0, 0.5, 8.0),)), job(gpu_share=0.5, gpu_mem_gb=9.0)),
    ],
    ids=["cards-enough", "cards-short", "cpu-at-the-cap", "cpu-over", "share-fits", "share-short", "memory"],
)
def test_the_policies_capacity_offers_a_node_exactly_when_the_rule_admits_it(state, spec):
    """One rule: Capacity.fit (what every policy places by) asks the same Room.refusal as `admit`."""
    threshold = 0.7  # 16 cores: 11.2 may be in use
    snapshot = Snapshot(
        now=0.0,
        pending=(spec,),
        nodes=(state,),
        estimates={spec.job_id: {"v100": Estimate(1.0)}},
        cpu_threshold=threshold,
    )
    offered = [o.placement for o in Capacity(snapshot).fit(spec).options]
    admitted = admit(spec, Placement(spec.job_id, "c", "v0", spec.num_gpus), {("c", "v0"): state}, threshold)
    assert bool(offered) == isinstance(admitted, Admitted)
    assert (Room.of(state, threshold).refusal(spec, spec.num_gpus) is None) == bool(offered)


def test_a_job_of_a_crd_kind_runs_only_where_its_cluster_serves_the_kind():
    from dataclasses import replace

    pytorch = job(workload="kubeflow.org/v1/PyTorchJob")
    place = Placement("ns/j", "c", "v0", 1)
    lacking = replace(V0, workloads=("batch.volcano.sh/v1alpha1/Job",))
    assert refused(pytorch, place, states(v0=NodeState(lacking, 4))) == (
        "cluster c does not serve PyTorchJob (kubeflow.org/v1): its CRD is not installed there; "
        "install it there, or job ns/j runs on a cluster that has it"
    )
    serving = replace(V0, workloads=("kubeflow.org/v1/PyTorchJob",))
    for n in (serving, V0):  # serving it, or a cluster whose kinds are not known
        assert isinstance(admit(pytorch, place, states(v0=NodeState(n, 4))), Admitted)
    assert isinstance(admit(job(), place, states(v0=NodeState(lacking, 4))), Admitted)  # a built-in kind
