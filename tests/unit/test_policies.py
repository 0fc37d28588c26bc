"""The baseline policies on hand-built snapshots: placement rules they share, and what sets each apart.

Every policy places through cpn.policies.placement, so the rules (gangs, pools and taints, the CPU
threshold, shared cards) are checked for all four; SJF and greedy then get their own ordering and
choice checks, and a generated workload checks the invariants and that the simulated clusters accept
every placement the policies make.
"""

from __future__ import annotations

import random
from collections import Counter
from types import MappingProxyType

import pytest

from cpn.clock import SimClock
from cpn.decisions import Decision, Estimate, Snapshot
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node, NodeState, SharedCard, Taint
from cpn.jobs import JobSpec
from cpn.policies import POLICIES, make_policy
from cpn.policies.placement import NO_ESTIMATE, job_memory_gb
from cpn.rules import admission_problem, gang_cpu
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import GroundTruth

ALL = sorted(POLICIES)
USAGE, PRODUCT = "maip.mxsf.io/node.usage", "nvidia.com/gpu.product"
PRODUCTS = {"v100": "Tesla-V100-SXM2-16GB", "k80": "Tesla-K80"}


def node(
    name: str, cluster: str = "a", gpu: str = "v100", gpus: int = 8, usage: str = "training", **kw
) -> Node:
    product = PRODUCTS[gpu]
    taints = (Taint(key=USAGE, value=usage), Taint(key=PRODUCT, value=product), *kw.pop("taints", ()))
    memory = kw.pop("memory", 12 if gpu == "k80" else 16)
    return Node(cluster, name, product, gpus, memory, kw.pop("cpu", 32), usage, taints=taints, **kw)


def state(n: Node, free: int | None = None, cpu_used: float = 0.0, shared=()) -> NodeState:
    return NodeState(n, n.gpu_count if free is None else free, cpu_used, shared=tuple(shared))


def job(job_id: str, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", batch_size=32, num_gpus=gpus, total_steps=100, **kw)


def snap(jobs, states, runtimes=None, **kw) -> Snapshot:
    """Estimates: `runtimes` maps job id -> GPU type -> seconds; by default 100 s on every type."""
    if runtimes is None:
        runtimes = {j.job_id: {"v100": 100.0, "k80": 100.0} for j in jobs}
    estimates = {jid: {gpu: Estimate(t) for gpu, t in row.items()} for jid, row in runtimes.items()}
    return Snapshot(
        now=0.0, pending=tuple(jobs), nodes=tuple(states), estimates=MappingProxyType(estimates), **kw
    )


def where(decision: Decision) -> dict[str, tuple]:
    """job id -> (cluster, node, cards) of every node of its placement."""
    return {p.job_id: tuple((p.cluster, n, c) for n, c in p.nodes) for p in decision.placements}


def waits(decision: Decision) -> dict[str, str]:
    """job id -> reason code of every job the decision leaves waiting; nothing placed or rejected."""
    assert decision.placements == () and decision.rejections == ()
    return {w.job_id: w.code for w in decision.waiting}


def assert_feasible(s: Snapshot, decision: Decision, memory_aware: bool = True) -> None:
    """No card, shared card or CPU threshold overrun; each job once, one gang of one cluster and GPU type."""
    specs = {j.job_id: j for j in s.pending}
    states = {(st.node.cluster, st.node.name): st for st in s.nodes}
    cards, cpu, shares = Counter(), Counter(), Counter()
    for p in decision.placements:
        j = specs[p.job_id]
        assert p.total_gpus == j.num_gpus
        gpu_types = {states[(p.cluster, n)].node.gpu_type for n, _ in p.nodes}
        assert len(gpu_types) == 1 and len({n for n, _ in p.nodes}) == len(p.nodes)
        for name, count in p.nodes:
            st = states[(p.cluster, name)]
            assert admission_problem(st.node, j.kind) is None
            mem = job_memory_gb(j, s.estimates, st.node.gpu_type)
            if memory_aware and mem is not None:
                assert mem <= st.node.gpu_memory_gb
            cpu[(p.cluster, name)] += gang_cpu(j, count)
            if j.gpu_share is not None and j.num_gpus == 1:
                shares[(p.cluster, name)] += j.gpu_share
            else:
                cards[(p.cluster, name)] += count
    for key, st in states.items():
        room = st.free_gpus + sum(c.free_share for c in st.shared)
        assert cards[key] + shares[key] <= room + 1e-9
        assert st.cpu_used + cpu[key] <= s.cpu_threshold * st.node.cpu_cores + 1e-9
    ids = [p.job_id for p in decision.placements] + [r.job_id for r in decision.rejections]
    assert len(ids) == len(set(ids))


def test_the_four_baselines_are_registered_by_their_command_line_names():
    assert {"fifo-naive", "fifo", "sjf", "greedy"} <= set(POLICIES)
    assert {name: make_policy(name).name for name in POLICIES} == {name: name for name in POLICIES}


# --- rules every policy keeps ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_a_job_wider_than_any_node_is_one_gang_over_nodes_of_one_cluster(name):
    a0, a1, b0 = node("a0"), node("a1"), node("b0", cluster="b", gpus=8)
    s = snap([job("wide", 16)], [state(a0, free=8), state(b0), state(a1, free=8)])
    decision = make_policy(name).decide(s)
    assert where(decision) == {"wide": (("a", "a0", 8), ("a", "a1", 8))}
    assert_feasible(s, decision)


@pytest.mark.parametrize("name", ALL)
def test_a_gang_waits_for_all_its_cards_and_is_rejected_when_no_cluster_has_them(name):
    a0, a1, b0 = node("a0"), node("a1"), node("b0", cluster="b")
    waiting = snap([job("wide", 16)], [state(a0, free=8), state(a1, free=7), state(b0)])
    assert waits(make_policy(name).decide(waiting)) == {"wide": "gang"}
    too_wide = snap([job("wider", 24)], [state(a0), state(a1), state(b0)])
    (rejection,) = make_policy(name).decide(too_wide).rejections
    assert "needs 24 GPUs; no cluster has that many" in rejection.reason


@pytest.mark.parametrize("name", ALL)
def test_a_job_that_fits_one_node_takes_the_fullest_node_that_fits(name):
    roomy, snug = node("roomy"), node("snug")
    s = snap([job("four", 4)], [state(roomy, free=8), state(snug, free=5)])
    assert where(make_policy(name).decide(s)) == {"four": (("a", "snug", 4),)}


@pytest.mark.parametrize("name", ALL)
def test_pools_and_taints_as_the_seed_says(name):
    control = node("cp", taints=(Taint(key="maip.mxsf.io/control-plane", value="true"),))
    infer, hybrid, train = node("inf", usage="inference"), node("hyb", usage="hybrid"), node("train")
    s = snap(
        [job("t1"), job("t2", 8), job("s1", kind="inference"), job("s2", kind="inference")],
        [state(control), state(infer, free=1), state(hybrid, free=8), state(train, free=1)],
    )
    decision = make_policy(name).decide(s)
    # t1 keeps to its own pool; t2 finds no room there and spills to hybrid; s1 takes the one inference
    # card; s2 waits, as t2 filled the hybrid node; nobody uses the control-plane node. SJF and the
    # optimiser start services first (they have no length to rank by), so s2 takes a hybrid card and t2
    # waits for eight.
    placed = {j: nodes[0][1] for j, nodes in where(decision).items()}
    if name in ("milp", "sjf"):
        assert placed.pop("t1") == "train" and set(placed) == {"s1", "s2"}
        assert set(placed.values()) == {"inf", "hyb"}
    else:
        assert placed == {"t1": "train", "t2": "hyb", "s1": "inf"}
    assert_feasible(s, decision)
    only_training = snap([job("s", kind="inference")], [state(train)])
    (rejection,) = make_policy(name).decide(only_training).rejections
    assert "no node in a pool for inference jobs" in rejection.reason
    only_control = snap([job("t")], [state(control)])
    (rejection,) = make_policy(name).decide(only_control).rejections
    assert (
        "taint they do not tolerate (such as maip.mxsf.io/control-plane=true:NoSchedule)" in rejection.reason
    )


@pytest.mark.parametrize("name", ALL)
def test_a_node_above_the_cpu_threshold_after_placement_takes_no_more_jobs(name):
    busy, calm = node("busy", cpu=32), node("calm", cpu=32)
    # 0.7 x 32 = 22.4 cores: busy has 20 in use, so a 4-core job (24) goes to calm (18 -> 22).
    s = snap([job("j", cpu=4)], [state(busy, cpu_used=20), state(calm, cpu_used=18)], cpu_threshold=0.7)
    assert where(make_policy(name).decide(s)) == {"j": (("a", "calm", 1),)}
    both_busy = snap([job("j", cpu=4)], [state(busy, cpu_used=20), state(calm, cpu_used=20)])
    assert waits(make_policy(name).decide(both_busy)) == {"j": "cpu-threshold"}
    # A gang over two nodes asks each for its share of the CPU: 40 cores over 8 + 8 cards is 20 a node.
    gang = snap([job("g", 16, cpu=40)], [state(busy), state(calm)], cpu_threshold=0.7)
    assert where(make_policy(name).decide(gang)) == {"g": (("a", "busy", 8), ("a", "calm", 8))}


@pytest.mark.parametrize("name", ALL)
def test_jobs_that_ask_for_it_share_a_card_and_exclusive_jobs_never_do(name):
    one = node("one", gpus=1)
    s = snap(
        [job("x", gpu_share=0.5), job("y", gpu_share=0.5), job("z", gpu_share=0.5), job("whole")],
        [state(one)],
    )
    decision = make_policy(name).decide(s)
    assert set(where(decision)) == {"x", "y"}  # one card: two halves, no room for z, none for "whole"
    assert_feasible(s, decision)
    shared = SharedCard(0, 0.5, 10.0)
    joined = snap([job("half", gpu_share=0.5), job("whole")], [state(one, free=0, shared=[shared])])
    assert set(where(make_policy(name).decide(joined))) == {"half"}


def test_memory_aware_policies_mind_what_is_left_of_a_shared_card_and_naive_fifo_does_not():
    one = node("one", gpus=1)
    # The job declares no memory, so the card's device plugin would take it; its estimate says 8 GB.
    s = Snapshot(
        now=0.0,
        pending=(job("big", gpu_share=0.5),),
        nodes=(state(one, free=0, shared=[SharedCard(0, 0.5, 6.0)]),),
        estimates=MappingProxyType({"big": {"v100": Estimate(100.0, gpu_mem_gb=8.0)}}),
    )
    assert where(make_policy("fifo-naive").decide(s)) == {"big": (("a", "one", 1),)}
    for name in ("fifo", "sjf", "greedy"):
        assert waits(make_policy(name).decide(s)) == {"big": "memory"}


# --- SJF and greedy ---------------------------------------------------------------------------------


def test_sjf_starts_the_shortest_first_and_skips_what_cannot_start_now():
    v = node("v", gpus=4)
    jobs = [job("long"), job("wide", 8), job("short"), job("mid", 2)]
    runtimes = {
        "long": {"v100": 900.0},
        "wide": {"v100": 1.0},
        "short": {"v100": 10.0},
        "mid": {"v100": 50.0},
    }
    decision = make_policy("sjf").decide(snap(jobs, [state(v, free=3)], runtimes))
    assert [p.job_id for p in decision.placements] == ["short", "mid"]  # "wide" is shortest but waits


@pytest.mark.parametrize("name", ["sjf", "greedy"])
def test_gpu_types_without_an_estimate_are_unusable_and_no_estimate_at_all_is_rejected(name):
    k80, v100 = node("k", gpu="k80"), node("v")
    s = snap([job("v-only"), job("none")], [state(k80), state(v100, free=0)], {"v-only": {"v100": 10.0}})
    decision = make_policy(name).decide(s)
    assert decision.placements == ()
    assert [(r.job_id, r.reason) for r in decision.rejections] == [("none", NO_ESTIMATE)]
    infinite = snap([job("inf")], [state(k80)], {"inf": {"k80": float("inf")}})
    assert [r.reason for r in make_policy(name).decide(infinite).rejections] == [NO_ESTIMATE]


def test_greedy_sends_each_job_where_it_finishes_first_counting_the_transfer():
    k80, v100 = node("k", cluster="near", gpu="k80"), node("v", cluster="far")
    runtimes = {"j": {"k80": 1000.0, "v100": 400.0}}
    cheap_move = snap([job("j")], [state(k80), state(v100)], runtimes, transfer_s={"j": {"far": 500.0}})
    assert where(make_policy("greedy").decide(cheap_move)) == {"j": (("far", "v", 1),)}  # 900 < 1000
    dear_move = snap([job("j")], [state(k80), state(v100)], runtimes, transfer_s={"j": {"far": 700.0}})
    assert where(make_policy("greedy").decide(dear_move)) == {"j": (("near", "k", 1),)}  # 1100 > 1000


def test_greedy_takes_jobs_in_arrival_order_skipping_those_that_cannot_start_now():
    v = node("v", gpus=4)
    jobs = [job("a", 2), job("wide", 8), job("b", 2), job("c")]
    decision = make_policy("greedy").decide(snap(jobs, [state(v)]))
    assert [p.job_id for p in decision.placements] == ["a", "b"]


# --- invariants and agreement with the simulated clusters --------------------------------------------

CLUSTER = (
    node("k0", cluster="x", gpu="k80", gpus=4, cpu=16),
    node("k1", cluster="x", gpu="k80", gpus=4, cpu=16, usage="hybrid"),
    node("v0", cluster="y", gpus=8, cpu=32),
    node("v1", cluster="y", gpus=8, cpu=32),
    node("i0", cluster="y", gpus=2, cpu=8, usage="inference"),
)


def workload(seed: int, n: int = 40) -> list[JobSpec]:
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        gpus = rng.choice([1, 1, 1, 2, 4, 8, 12, 16])
        share = rng.choice([None, None, 0.25, 0.5]) if gpus == 1 else None
        kind = rng.choice(["training", "training", "inference"])
        steps = rng.randint(50, 500)
        jobs.append(
            JobSpec(
                job_id=f"j{i:02d}",
                model=rng.choice(["ResNet-18", "ResNet-50"]),
                batch_size=rng.choice([32, 128]),
                num_gpus=gpus,
                total_steps=steps,
                kind=kind,
                duration_s=float(steps) if kind == "inference" else None,  # a service deleted in time
                cpu=float(rng.randint(1, 6)),
                gpu_share=share,
                gpu_mem_gb=rng.choice([None, 4.0, 13.0]),
            )
        )
    return jobs


TRUTH = ThroughputTable(
    [
        ThroughputRow(model, batch, gpu, n, rate * n)
        for model, batch, rate in [("ResNet-18", 32, 2.0), ("ResNet-18", 128, 1.0), ("ResNet-50", 32, 0.5)]
        for gpu in ("k80", "v100")
        for n in (1, 2, 4, 8)
    ]
    + [ThroughputRow("ResNet-50", 128, "v100", n, 0.2 * n) for n in (1, 2, 4, 8)]
)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("seed", range(5))
def test_policies_drive_the_simulated_clusters_to_the_end_without_a_refused_submit(name, seed):
    """Whatever a policy places, the simulated clusters accept; every decision is feasible."""
    clock = SimClock()
    truth = GroundTruth(TRUTH)
    gw = SimulatedGateway(CLUSTER, truth, clock)
    queue = workload(seed)
    types = ("k80", "v100")
    policy = make_policy(name)
    rejected = set()
    while queue:
        runtimes = {
            j.job_id: {g: j.total_steps / r for g in types if (r := truth.steps_per_sec(j, g, j.num_gpus))}
            for j in queue
        }
        s = snap(queue, gw.inventory(), runtimes, cpu_threshold=0.7)
        decision = policy.decide(s)
        assert_feasible(s, decision, memory_aware=name != "fifo-naive")
        specs = {j.job_id: j for j in queue}
        for p in decision.placements:
            gw.submit(specs[p.job_id], p)
        rejected |= {r.job_id for r in decision.rejections}
        done = {p.job_id for p in decision.placements} | rejected
        queue = [j for j in queue if j.job_id not in done]
        if gw.next_event_time() is None:
            assert not queue, f"{[j.job_id for j in queue]} left with nothing running"
            break
        gw.advance(gw.next_event_time())
    while gw.next_event_time() is not None:
        gw.advance(gw.next_event_time())
    finished = {e.job_id for e in gw.executions}
    assert finished | rejected == {j.job_id for j in workload(seed)}


@pytest.mark.parametrize("name", ALL)
def test_higher_priority_goes_first_then_the_policy_order(name):
    v = node("v", gpus=2)
    jobs = [job("low-short"), job("high-long", priority=5), job("mid", priority=1)]
    runtimes = {"low-short": {"v100": 10.0}, "high-long": {"v100": 900.0}, "mid": {"v100": 500.0}}
    decision = make_policy(name).decide(snap(jobs, [state(v)], runtimes))
    assert set(where(decision)) == {"high-long", "mid"}
    assert [w.job_id for w in decision.waiting] == ["low-short"]
    same = [job("first"), job("second")]
    decision = make_policy(name).decide(snap(same, [state(v, free=1)]))
    assert set(where(decision)) == {"first"}
