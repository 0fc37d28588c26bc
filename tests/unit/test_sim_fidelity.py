"""Simulator fidelity on tiny literal clusters whose right answers are worked out by hand.

Gangs over several nodes, the scaling rule beyond the measured GPU counts, cards shared by jobs that
ask for it (co-location slowdown, rescheduled ends, OOM against what is left of the card), and the
pool/taint rules the simulated clusters enforce at submit.
"""

from __future__ import annotations

import os
import statistics

import pytest

from cpn.adapters.gateway import OOM_REASON, SubmitRejected
from cpn.clock import SimClock
from cpn.decisions import Placement
from cpn.formats.throughput import ThroughputFormatError, ThroughputRow, ThroughputTable
from cpn.inventory import Node, SharedCard, Taint
from cpn.jobs import JobSpec
from cpn.sim.colocation import UNMEASURED_FACTOR, ColocationTable, parse_job_name
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.memory import gpu_memory_gb
from cpn.sim.scaling import ScaledThroughput
from cpn.sim.truth import LOAD_S, GroundTruth

V100 = "Tesla-V100-SXM2-16GB"
USAGE, PRODUCT = "maip.mxsf.io/node.usage", "nvidia.com/gpu.product"


def node(name: str, cluster: str = "a", product: str = V100, gpus: int = 8, usage: str = "training", **kw):
    taints = (Taint(key=USAGE, value=usage), Taint(key=PRODUCT, value=product), *kw.pop("taints", ()))
    return Node(cluster, name, product, gpus, 16, 64, usage, taints=taints, **kw)


N0, N1 = node("v100-0"), node("v100-1")
P100 = node("p100-0", product="Tesla-P100-PCIE-16GB")
ONE = node("one", gpus=1)

R18, R50 = ("resnet-18", 32), ("resnet-50", 32)
TABLE = ThroughputTable(
    [
        ThroughputRow("ResNet-50", 32, "v100", 1, 5.0),
        ThroughputRow("ResNet-50", 32, "v100", 4, 10.0),
        ThroughputRow("ResNet-50", 32, "v100", 8, 16.0),
        ThroughputRow("ResNet-50", 32, "v100", 4, 8.0, consolidated=False),
        ThroughputRow("ResNet-50", 32, "v100", 8, 12.0, consolidated=False),
        ThroughputRow("ResNet-50", 32, "p100", 8, 9.0),
        ThroughputRow("ResNet-18", 32, "v100", 1, 10.0),
        ThroughputRow("ResNet-50", 128, "v100", 1, 2.0),
        ThroughputRow("Transformer", 32, "v100", 1, 4.0),
        ThroughputRow("LM", 20, "v100", 4, 3.0),
        ThroughputRow("LM", 20, "v100", 8, 0.0),
    ]
)
PAIRS = ColocationTable({("v100", R18, R50): 0.5, ("v100", R50, R18): 0.8})
"""ResNet-18 runs at half speed next to ResNet-50, which keeps 80 % of its own."""


def job(job_id: str, model: str = "ResNet-50", batch: int | None = 32, gpus: int = 1, steps: int = 100, **kw):
    return JobSpec(job_id=job_id, model=model, batch_size=batch, num_gpus=gpus, total_steps=steps, **kw)


def make(*nodes: Node) -> tuple[SimulatedGateway, SimClock]:
    clock = SimClock()
    return SimulatedGateway(nodes or (N0, N1, P100), GroundTruth(TABLE, colocation=PAIRS), clock), clock


def drain(gw: SimulatedGateway) -> None:
    while (t := gw.next_event_time()) is not None:
        gw.advance(t)


def state(gw: SimulatedGateway, n: Node):
    return next(s for s in gw.inventory() if s.node == n)


def ends(gw: SimulatedGateway) -> dict[str, float]:
    return {e.job_id: e.end for e in gw.executions}


# --- gangs and the scaling rule --------------------------------------------------------------------


def test_a_16_gpu_job_is_one_gang_over_two_nodes_at_the_scaled_unconsolidated_rate():
    gw, _ = make()
    gang = job("gang", gpus=16, steps=1800, cpu=8)
    gw.submit(gang, Placement("gang", "a", "v100-0", 8, (("v100-1", 8),)))
    for n in (N0, N1):
        s = state(gw, n)
        assert (s.free_gpus, s.cpu_used, s.running) == (0, 4, ("gang",))  # CPU split by cards
    # Unconsolidated 8 -> 12 steps/s, 4 -> 8: efficiency 12 / (2 x 8) = 0.75; 16 GPUs: 12 x 2 x 0.75 = 18.
    assert gw.next_event_time() == pytest.approx(1800 / 18.0)
    drain(gw)
    assert [(e.node, e.gpus, e.outcome) for e in gw.executions] == [
        ("v100-0", tuple(range(8)), "succeeded"),
        ("v100-1", tuple(range(8)), "succeeded"),
    ]
    assert state(gw, N0).free_gpus == state(gw, N1).free_gpus == 8


def test_scaling_rule_from_the_last_measured_step_never_better_than_linear():
    rates = ScaledThroughput(TABLE)
    # Consolidated: 8 -> 16, 4 -> 10: efficiency 0.8 per doubling.
    assert rates.steps_per_sec("ResNet-50", 32, "v100", 16) == pytest.approx(16 * 2 * 0.8)
    assert rates.steps_per_sec("ResNet-50", 32, "v100", 32) == pytest.approx(16 * 4 * 0.8**2)
    assert rates.steps_per_sec("ResNet-50", 32, "v100", 12) == pytest.approx(
        16 * 1.5 * 0.8 ** (0.58496250072)
    )
    assert rates.steps_per_sec("ResNet-50", 32, "v100", 16, consolidated=False) == pytest.approx(18.0)
    assert rates.steps_per_sec("ResNet-50", 32, "v100", 8) == 16.0  # measured figures stay as measured
    assert rates.steps_per_sec("LM", 20, "v100", 16) == 0.0  # measured not to run at 8: not wider either


def test_a_configuration_measured_at_one_count_scales_as_the_others_on_its_gpu_type_do():
    rates = ScaledThroughput(TABLE)
    # Transformer is measured on 1 V100 only; ResNet-50 goes 5 -> 10 steps/s from 1 to 4 V100s (LM never
    # runs at 1, so it says nothing about 1 -> 4): Transformer doubles too.
    assert rates.steps_per_sec("Transformer", 32, "v100", 4) == pytest.approx(4.0 * 2)
    # No configuration has two counts on P100: borrow from any GPU type (ResNet-50 V100, 8 -> 16: x1.6).
    assert rates.steps_per_sec("ResNet-50", 32, "p100", 16) == pytest.approx(9.0 * 1.6)
    # Never better than linear, whatever the others do.
    superlinear = ThroughputTable(
        [
            ThroughputRow("A", 32, "v100", 1, 1.0),
            ThroughputRow("A", 32, "v100", 2, 3.0),
            ThroughputRow("B", 32, "v100", 1, 5.0),
        ]
    )
    assert ScaledThroughput(superlinear).steps_per_sec("B", 32, "v100", 2) == pytest.approx(10.0)
    # A table where nothing is measured at two counts gives nothing to borrow.
    single = ThroughputTable([ThroughputRow("B", 32, "v100", 1, 5.0), ThroughputRow("C", 8, "v100", 1, 2.0)])
    assert ScaledThroughput(single).steps_per_sec("B", 32, "v100", 2) is None


def test_on_gavels_table_wider_jobs_never_scale_better_than_linearly_from_8_gpus():
    rates = ScaledThroughput(ThroughputTable.load())
    checked = 0
    for model, batch in rates.table.configs():
        for gpu in ("k80", "p100", "v100"):
            for consolidated in (True, False):
                eight = rates.steps_per_sec(model, batch, gpu, 8, consolidated)
                wide = rates.steps_per_sec(model, batch, gpu, 32, consolidated)
                if eight:
                    assert eight <= rates.steps_per_sec(model, batch, gpu, 16, consolidated) <= 2 * eight
                    assert wide <= 4 * eight
                    checked += 1
    assert checked > 80


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (Placement("gang", "a", "v100-0", 8), "needs 16 GPUs; the placement gives it 8"),
        (Placement("gang", "a", "v100-0", 8, (("p100-0", 8),)), "one GPU type"),
        (Placement("gang", "a", "v100-0", 8, (("v100-0", 8),)), "listed twice"),
        (Placement("gang", "a", "v100-0", 8, (("v100-9", 8),)), "no node a/v100-9"),
    ],
)
def test_a_gang_the_cluster_cannot_run_is_refused_whole(placement, message):
    gw, _ = make()
    with pytest.raises(SubmitRejected, match=message):
        gw.submit(job("gang", gpus=16), placement)
    assert [s.free_gpus for s in gw.inventory()] == [8, 8, 8]
    assert gw.poll_events() == [] and gw.running_jobs() == ()


# --- shared cards -----------------------------------------------------------------------------------


def test_a_partner_starting_and_ending_moves_a_sharing_jobs_end():
    gw, clock = make()
    r18 = job("r18", model="ResNet-18", steps=100, gpu_share=0.5)  # alone: 10 steps/s, 10 s
    r50 = job("r50", steps=20, gpu_share=0.5)  # alone: 5 steps/s
    gw.submit(r18, Placement("r18", "a", "v100-0", 1))
    gw.advance(2.0)  # r18 alone: 20 steps done
    gw.submit(r50, Placement("r50", "a", "v100-0", 1))
    # Together: r18 at 10 x 0.5 = 5 steps/s, r50 at 5 x 0.8 = 4: r50's 20 steps end at 2 + 5 = 7.
    # By then r18 has 20 + 25 = 45 steps; the other 55 alone take 5.5 s more: it ends at 12.5.
    drain(gw)
    assert ends(gw) == {"r50": pytest.approx(7.0), "r18": pytest.approx(12.5)}
    assert {e.job_id: (e.gpus, e.share) for e in gw.executions} == {"r18": ((0,), 0.5), "r50": ((0,), 0.5)}
    assert clock.now() == pytest.approx(12.5)


def test_shared_cards_are_in_the_inventory_with_what_is_left_of_them():
    gw, _ = make()
    a = job("a", model="ResNet-18", gpu_share=0.25, gpu_mem_gb=3.0)
    gw.submit(a, Placement("a", "a", "v100-0", 1))
    s = state(gw, N0)
    assert (s.free_gpus, s.running) == (7, ("a",))
    assert s.shared == (SharedCard(0, 0.75, 16 - 3.0),)
    drain(gw)
    assert (state(gw, N0).free_gpus, state(gw, N0).shared) == (8, ())


def test_only_jobs_that_ask_for_it_share_a_card_and_only_while_the_shares_fit():
    gw, _ = make(ONE)
    gw.submit(job("half", gpu_share=0.5), Placement("half", "a", "one", 1))
    with pytest.raises(SubmitRejected, match="0 free GPUs"):
        gw.submit(job("whole"), Placement("whole", "a", "one", 1))
    with pytest.raises(SubmitRejected, match="no shared card with room for a share of 0.6"):
        gw.submit(job("big", gpu_share=0.6), Placement("big", "a", "one", 1))
    gw.submit(job("other-half", gpu_share=0.5), Placement("other-half", "a", "one", 1))
    assert state(gw, ONE).shared == (SharedCard(0, 0.0, 16 - 2 * gpu_memory_gb("ResNet-50", 32)),)


def test_a_sharing_job_over_what_its_partner_leaves_of_the_card_is_oom_killed():
    gw, _ = make()
    gw.submit(
        job("holder", model="ResNet-18", gpu_share=0.5, gpu_mem_gb=10.0),
        Placement("holder", "a", "v100-0", 1),
    )
    big = job("big", batch=128, gpu_share=0.5)  # 11.8 GB: fits an empty 16 GB card, not the 6 GB left
    assert gpu_memory_gb("ResNet-50", 128) < 16
    gw.submit(big, Placement("big", "a", "v100-0", 1))
    drain(gw)
    outcome = {e.job_id: (e.outcome, e.reason, e.end) for e in gw.executions}
    assert outcome["big"] == ("failed", OOM_REASON, LOAD_S)
    assert outcome["holder"] == ("succeeded", "", pytest.approx(10.0))  # a failed partner never slowed it
    alone, _ = make()
    alone.submit(big, Placement("big", "a", "v100-0", 1))
    drain(alone)
    assert alone.executions[0].outcome == "succeeded"


def test_unmeasured_pairs_use_the_jobs_worst_measured_factor_else_the_documented_constant():
    transformer = ("transformer", 32)
    assert PAIRS.factor("v100", R18, R50) == 0.5
    assert PAIRS.factor("v100", R18, transformer) == 0.5  # ResNet-18's worst measured on a V100
    assert PAIRS.factor("v100", transformer, R18) == UNMEASURED_FACTOR  # never measured sharing
    assert PAIRS.factor("k80", R18, R50) == UNMEASURED_FACTOR  # nothing measured on that card


def test_three_jobs_on_a_card_compound_their_pairwise_slowdowns():
    gw, _ = make()
    jobs = [
        job("r18", model="ResNet-18", steps=1000, gpu_share=0.3),
        job("r50", steps=1000, gpu_share=0.3),
        job("tr", model="Transformer", steps=1000, gpu_share=0.3),
    ]
    for j in jobs:
        gw.submit(j, Placement(j.job_id, "a", "v100-0", 1))
    # Rates together: r18 10 x 0.5 (r50) x 0.5 (its worst measured, for the unmeasured Transformer) = 2.5;
    # r50 5 x 0.8 x 0.8 = 3.2; the Transformer, never measured sharing, 4 x 0.25 x 0.25 = 0.25.
    # r50 ends first, at 1000 / 3.2 = 312.5. r18 has 218.75 steps left, now at 10 x 0.5 = 5/s: ends 356.25.
    # The Transformer did 78.125 steps, 43.75 more at 4 x 0.25 = 1/s, and its last 878.125 alone at 4/s.
    drain(gw)
    assert ends(gw) == pytest.approx({"r50": 312.5, "r18": 356.25, "tr": 356.25 + 878.125 / 4})


def test_gavels_pair_table_gives_measured_over_isolated_steps_per_sec():
    table = ThroughputTable.load()
    pairs = ColocationTable.load(table)
    # data/gavel/simulation_throughputs_colocated.csv line 2 and the isolated K80 figure of its job a.
    assert pairs.factor("k80", ("resnet-18", 16), ("resnet-18", 32)) == pytest.approx(
        2.539979567443098 / 4.795294551566172
    )
    factors = list(pairs.measured.values())
    assert len(factors) == 1881 and all(f > 0 for f in factors)  # consolidated rows, both orders
    assert UNMEASURED_FACTOR < statistics.quantiles(factors, n=20)[0]  # below the 5th percentile
    assert parse_job_name("A3C") == ("a3c", None)


def test_a_pair_table_that_cannot_be_read_says_where(tmp_path):
    bad = tmp_path / "pairs.csv"
    bad.write_text(
        "gpu_type,job_a,num_gpus_a,job_b,num_gpus_b,steps_per_sec_a,steps_per_sec_b\n"
        "v100,ResNet-18 (batch size 32),1,ResNet-50 (batch size 32),1,0,1.0\n"
    )
    with pytest.raises(ThroughputFormatError, match=r"pairs.csv:2: co-located steps/s must be > 0"):
        ColocationTable.load(TABLE, bad)


def test_a_pair_table_is_read_once_per_ground_truth_and_again_when_its_file_changes(tmp_path):
    pairs = tmp_path / "pairs.csv"
    header = "gpu_type,job_a,num_gpus_a,job_b,num_gpus_b,steps_per_sec_a,steps_per_sec_b\n"
    pairs.write_text(header + "v100,ResNet-18 (batch size 32),1,ResNet-50 (batch size 32),1,1.0,1.0\n")
    first = ColocationTable.load(TABLE, pairs)
    assert ColocationTable.load(TABLE, pairs) is first, "the same file over the same table: read once"
    assert ColocationTable.load(ThroughputTable(list(TABLE.rows)), pairs) is not first
    pairs.write_text(header + "v100,ResNet-18 (batch size 32),1,ResNet-50 (batch size 32),1,2.0,1.0\n")
    os.utime(pairs, ns=(0, pairs.stat().st_mtime_ns + 1_000_000))  # a rewrite within the clock's tick
    again = ColocationTable.load(TABLE, pairs)
    key = ("v100", ("resnet18", 32), ("resnet50", 32))
    assert again.measured[key] == pytest.approx(2 * first.measured[key])


# --- pools and taints at submit ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "spec", "message"),
    [
        (
            node("inf", usage="inference"),
            job("train"),
            "in the inference pool; training jobs use hybrid, training",
        ),
        (N0, job("serve", kind="inference"), "in the training pool"),
        (
            node("cp", taints=(Taint(key="maip.mxsf.io/control-plane", value="true"),)),
            job("train"),
            "taint maip.mxsf.io/control-plane=true:NoSchedule",
        ),
        (
            node("odd", taints=(Taint(key=PRODUCT, value="NVIDIA-H20"),)),
            job("train"),
            "taint nvidia.com/gpu.product=NVIDIA-H20",
        ),
    ],
)
def test_the_cluster_admits_jobs_only_where_their_pool_and_tolerations_allow(target, spec, message):
    gw, _ = make(target)
    with pytest.raises(SubmitRejected, match=message):
        gw.submit(spec, Placement(spec.job_id, "a", target.name, 1))


def test_hybrid_nodes_and_soft_taints_admit_both_kinds():
    soft = node("soft", usage="hybrid", taints=(Taint(key="x/busy", value="1", effect="PreferNoSchedule"),))
    gw, _ = make(soft)
    gw.submit(job("train"), Placement("train", "a", "soft", 1))
    gw.submit(job("serve", kind="inference"), Placement("serve", "a", "soft", 1))
    assert state(gw, soft).running == ("train", "serve")
