"""The queue optimiser on tiny literal snapshots: feasible plans, waiting for a faster card greedy
cannot, no starvation with the reservation, greedy's plan when the solver has no time, predicted starts.

Feasibility on generated workloads and the rules every policy keeps run in test_policies (milp is one
of the parametrised policies there).
"""

from __future__ import annotations

from types import MappingProxyType

import pytest

from cpn.decisions import Estimate, RunningJob, Snapshot
from cpn.inventory import Node, NodeState, Taint
from cpn.jobs import JobSpec
from cpn.policies import make_policy
from tests.unit.test_policies import assert_feasible

PRODUCTS = {"v100": ("Tesla-V100-SXM2-16GB", 16.0), "k80": ("Tesla-K80", 12.0)}
H = 3600.0


def node(name: str, gpu: str, gpus: int = 1, cluster: str = "a") -> Node:
    product, memory = PRODUCTS[gpu]
    taints = (Taint("maip.mxsf.io/node.usage", "training"), Taint("nvidia.com/gpu.product", product))
    return Node(cluster, name, product, gpus, memory, 64, "training", taints=taints)


def job(job_id: str, gpus: int = 1, arrival: float = 0.0, **kw) -> JobSpec:
    return JobSpec(job_id, "ResNet-18", batch_size=32, num_gpus=gpus, total_steps=1, arrival_s=arrival, **kw)


def snap(now, jobs, states, runtimes, running=None) -> Snapshot:
    """`running`: job id -> (predicted end, `cluster/node`, cards) of the jobs running on `states`."""
    estimates = {j: {g: Estimate(t) for g, t in row.items()} for j, row in runtimes.items()}
    ends = {j: RunningJob(end, ((where, cards),)) for j, (end, where, cards) in (running or {}).items()}
    return Snapshot(
        now=now,
        pending=tuple(jobs),
        nodes=tuple(states),
        estimates=MappingProxyType(estimates),
        running=MappingProxyType(ends),
    )


def running(n: Node, *job_ids: str, free: int = 0) -> NodeState:
    return NodeState(n, free, running=job_ids)


K, V = node("k", "k80"), node("v", "v100")


def test_a_long_job_waits_for_the_fast_card_that_frees_soon_as_greedy_does_unless_told_not_to():
    milp, greedy = make_policy("milp"), make_policy("greedy", wait_for_faster=False)
    # Round 1: a 1 h job takes the V100 (both policies agree); the K80 stays free.
    first = snap(
        0.0, [job("short")], [NodeState(K, 1), NodeState(V, 1)], {"short": {"v100": H, "k80": 9 * H}}
    )
    assert {p.node for p in milp.decide(first).placements} == {"v"}
    # Round 2: a long job arrives: 100 h on the K80 now, or 10 h on the V100 once it frees at 1 h.
    runtimes = {"long": {"k80": 100 * H, "v100": 10 * H}}
    ends = {"short": (H, "a/v", 1)}  # the snapshot says when it ends: the policy keeps nothing
    second = snap(60.0, [job("long", arrival=60.0)], [NodeState(K, 1), running(V, "short")], runtimes, ends)
    assert [p.node for p in greedy.decide(second).placements] == ["k"]
    waits = make_policy("greedy").decide(second)  # greedy by default weighs waiting for the faster type
    assert waits.placements == () and [w.predicted_start for w in waits.waiting] == [pytest.approx(H)]
    decision = milp.decide(second)
    assert decision.placements == ()
    (waiting,) = decision.waiting
    assert waiting.code == "queue-order" and waiting.predicted_start == pytest.approx(H)
    assert decision.solver is not None and decision.solver.status in ("optimal", "feasible")


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_the_plan_is_feasible_each_job_once_and_no_worse_than_greedy(solver):
    nodes = [node("k0", "k80", 4), node("v0", "v100", 4, cluster="b"), node("v1", "v100", 2, cluster="b")]
    jobs = [job(f"j{i}", gpus=(1, 2, 4)[i % 3], cpu=4) for i in range(14)]
    runtimes = {j.job_id: {"k80": (3 + i) * H, "v100": (1 + i / 3) * H} for i, j in enumerate(jobs)}
    s = snap(0.0, jobs, [NodeState(n, n.gpu_count) for n in nodes], runtimes)
    decision = make_policy("milp", solver=solver).decide(s)
    assert_feasible(s, decision)
    assert decision.placements
    left = {j.job_id for j in jobs} - {p.job_id for p in decision.placements}
    assert {w.job_id for w in decision.waiting} == left and len(decision.waiting) == len(left)
    stats = decision.solver
    assert stats.solver == solver and stats.fallback is None and stats.status in ("optimal", "feasible")
    assert stats.objective is not None and stats.variables > 0 and stats.jobs == len(jobs)


def test_with_no_time_to_solve_the_round_keeps_greedys_plan():
    nodes = [NodeState(node("k0", "k80", 4), 4), NodeState(node("v0", "v100", 4), 4)]
    jobs = [job(f"j{i}", gpus=1 + i % 2) for i in range(10)]
    runtimes = {j.job_id: {"k80": 4 * H, "v100": H} for j in jobs}
    s = snap(0.0, jobs, nodes, runtimes)
    decision = make_policy("milp", time_limit_s=1e-9, solver="highs").decide(s)
    greedy = make_policy("greedy").decide(s)
    assert decision.solver.status != "optimal" or decision.solver.fallback is not None
    assert {p.job_id for p in decision.placements} == {p.job_id for p in greedy.placements}
    assert_feasible(s, decision)


def _replay(policy_name: str, **settings) -> float:
    """A 4-card node busy with four 1-card jobs ending 15 min apart; a 4-card job arrives, then 1-card
    jobs of 1 h every 15 min for 40 h. Returns when the wide job started (inf: not within 60 h)."""
    policy = make_policy(policy_name, **settings)
    v = node("v", "v100", 4)
    first = [job(f"p{i}") for i in range(4)]
    arrivals = [job("wide", gpus=4, arrival=1.0)] + [
        job(f"s{i:03d}", arrival=(i + 1) * H / 4) for i in range(160)
    ]
    queue, running_until, now = first, {}, 0.0
    runtimes = {
        "wide": {"v100": 2 * H},
        **{j.job_id: {"v100": (i + 1) * H / 4} for i, j in enumerate(first)},
        **{j.job_id: {"v100": H} for j in arrivals[1:]},
    }
    pending_arrivals = list(arrivals)
    while now < 60 * H:
        queue += [j for j in pending_arrivals if j.arrival_s <= now]
        pending_arrivals = [j for j in pending_arrivals if j.arrival_s > now]
        busy = sum(4 if j == "wide" else 1 for j in running_until)
        ends = {j: (t, "a/v", 4 if j == "wide" else 1) for j, t in running_until.items()}
        s = snap(now, queue, [NodeState(v, 4 - busy, running=tuple(running_until))], runtimes, ends)
        for p in policy.decide(s).placements:
            if p.job_id == "wide":
                return now
            running_until[p.job_id] = now + runtimes[p.job_id]["v100"]
            queue = [j for j in queue if j.job_id != p.job_id]
        events = [t for t in running_until.values()] + [j.arrival_s for j in pending_arrivals[:1]]
        now = min(events) if events else now + H
        running_until = {j: t for j, t in running_until.items() if t > now}
    return float("inf")


def test_the_reservation_starts_a_wide_job_that_backfilling_starves():
    assert _replay("greedy") > 40 * H  # greedy backfills the 1-card jobs as long as they come
    assert _replay("milp", reservation=False, objective="weighted-completion") > 40 * H
    assert _replay("milp") < 6 * H  # reserved once it has waited longer than it runs (2 h)


def test_a_round_where_nothing_can_start_solves_nothing_and_still_predicts_every_start():
    from cpn.engine.forecast import Forecaster

    v2 = node("v2", "v100")
    runtimes = {j: {"v100": H} for j in ("r", "a", "b", "c")}
    forecaster = Forecaster(make_policy("milp"))
    first = snap(
        0.0, [job("a"), job("b")], [running(V, "r"), NodeState(v2, 1)], runtimes, {"r": (H, V.key, 1)}
    )
    decision = forecaster.apply(first, forecaster.policy.decide(first))
    (placed,) = decision.placements
    started = placed.job_id
    (waits,) = decision.waiting
    assert decision.solver is not None and waits.predicted_start == H  # when r frees the other card
    full = [running(V, "r"), running(v2, started)]
    ends = {"r": (H, V.key, 1), started: (H, v2.key, 1)}
    later = snap(H / 2, [job(waits.job_id), job("c", arrival=H / 2)], full, runtimes, ends)
    decision = forecaster.apply(later, forecaster.policy.decide(later))
    assert decision.solver is None and not decision.placements  # both cards busy: no model is built
    assert [(w.job_id, w.predicted_start) for w in decision.waiting] == [(waits.job_id, H), ("c", H)]
