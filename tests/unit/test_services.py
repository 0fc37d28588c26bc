"""Services are services: an inference job needs no runtime estimate to be placed, holds its cards with no
predicted end (a plan never gets them back), spreads its replicas over nodes when its manifest asks, runs
in the simulator for its trace lifetime or until deleted, and deleting it frees its cards."""

from __future__ import annotations

import math

import pytest
import yaml

from config.settings import ClustersConfig
from cpn.adapters.gateway import DELETED_REASON
from cpn.bootstrap import build_simulation
from cpn.clock import SimClock
from cpn.decisions import Placement
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.formats.trace_csv import TraceFormatError, load_trace_csv
from cpn.intake import parse_manifests
from cpn.inventory import Node, NodeState, Taint
from cpn.jobs import JobSpec, JobState
from cpn.policies import POLICIES, make_policy
from cpn.policies.placement import NO_ESTIMATE
from cpn.policies.plan import releases
from cpn.sim.estimates import OracleEstimates
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.journal import JournaledGateway, SubmissionJournal
from cpn.sim.replay import arrivals_from_jobs, replay
from cpn.sim.truth import GroundTruth
from tests.unit.test_milp import snap
from tests.unit.test_policies import assert_feasible

H = 3600.0
ALL = sorted(POLICIES)
V100 = "Tesla-V100-SXM2-16GB"


def node(name: str, gpus: int = 2, usage: str = "training", cluster: str = "a") -> Node:
    taints = (Taint("maip.mxsf.io/node.usage", usage), Taint("nvidia.com/gpu.product", V100))
    return Node(cluster, name, V100, gpus, 16, 32, usage, taints=taints)


def service(job_id: str, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id, "ResNet-18", kind="inference", num_gpus=gpus, image="srv:1", **kw)


def training(job_id: str, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id, "ResNet-18", batch_size=32, num_gpus=gpus, total_steps=100, **kw)


# --- placed with no estimate, by pool -----------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_a_service_with_no_estimate_is_placed_in_its_own_pool_a_training_job_is_not(name):
    train, infer, hybrid = node("t0"), node("i0", usage="inference"), node("h0", usage="hybrid")
    s = snap(
        0.0,
        [service("chat", 2), training("fit")],
        [NodeState(train, 2), NodeState(hybrid, 2), NodeState(infer, 2)],
        {},
    )
    decision = make_policy(name).decide(s)
    placed = {p.job_id: p.nodes for p in decision.placements}
    assert placed.pop("chat") == (("i0", 2),)
    assert_feasible(s, decision)
    if name.startswith("fifo"):  # FIFO needs no estimate for anything: the training job runs on its pool
        assert placed == {"fit": (("t0", 1),)}
    else:
        assert placed == {} and [(r.job_id, r.reason) for r in decision.rejections] == [("fit", NO_ESTIMATE)]


@pytest.mark.parametrize("name", ALL)
def test_a_service_that_asks_for_spread_replicas_gets_one_node_each(name):
    i0, i1 = node("i0", 4, "inference"), node("i1", 4, "inference")
    packed, spread = service("packed", 2, pod_gpus=(1, 1)), service("apart", 2, pod_gpus=(1, 1), spread=True)
    s = snap(0.0, [packed, spread], [NodeState(i0, 4), NodeState(i1, 4)], {})
    decision = make_policy(name).decide(s)
    nodes = {p.job_id: p.nodes for p in decision.placements}
    assert len(nodes["packed"]) == 1 and nodes["packed"][0][1] == 2  # both pods on one node
    assert sorted(n for n, _ in nodes["apart"]) == ["i0", "i1"] and {c for _, c in nodes["apart"]} == {1}
    assert_feasible(s, decision)
    # One node where it may run: spread can never be satisfied; packed still can.
    lone = snap(0.0, [spread, packed], [NodeState(i0, 4)], {})
    decision = make_policy(name).decide(lone)
    (rejection,) = decision.rejections
    assert rejection.job_id == "apart" and "must run on distinct nodes" in rejection.reason
    assert [p.job_id for p in decision.placements] == ["packed"]


# --- a service never frees its cards in a plan ----------------------------------------------------------


def test_the_cards_of_a_running_service_are_released_never():
    v = node("v", 4)
    busy = NodeState(v, 1, running=("chat", "fit"))
    s = snap(0.0, [], [busy], {}, {"chat": (math.inf, "a/v", 2), "fit": (H, "a/v", 1)})
    assert releases(s).groups == {("a", "v100", "training"): [(math.inf, 2), (H, 1)]}
    assert releases(s).nodes == {"a/v": [(math.inf, 2), (H, 1)]}


def test_the_optimiser_plans_no_start_on_a_services_cards():
    # Two cards: a service holds one for ever, a training job the other until 1 h.
    v = node("v", 2)
    state = NodeState(v, 0, running=("chat", "fit"))
    running = {"chat": (math.inf, "a/v", 1), "fit": (H, "a/v", 1)}
    queue = [training("one", arrival_s=0.0), training("pair", 2, arrival_s=0.0)]
    s = snap(60.0, queue, [state], {"one": {"v100": 2 * H}, "pair": {"v100": H}}, running)
    decision = make_policy("milp").decide(s)
    starts = {w.job_id: w.predicted_start for w in decision.waiting}
    assert decision.placements == ()
    assert starts["one"] == pytest.approx(H)  # the training job's card comes back
    assert starts["pair"] is None  # two cards together never: one of them serves for ever


def test_a_waiting_service_is_predicted_to_start_when_a_training_job_frees_its_card():
    v = node("v", 1, usage="hybrid")
    s = snap(0.0, [service("chat")], [NodeState(v, 0, running=("fit",))], {}, {"fit": (2 * H, "a/v", 1)})
    (waiting,) = make_policy("milp").decide(s).waiting
    assert (waiting.job_id, waiting.code, waiting.predicted_start) == ("chat", "no-gpu-type", 2 * H)


# --- the simulator and deletion -------------------------------------------------------------------------

TABLE = ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", n, 10.0 * n) for n in (1, 2)])


def test_the_simulator_keeps_a_service_for_its_lifetime_or_until_deleted(tmp_path):
    clock = SimClock()
    journal = JournaledGateway(
        SimulatedGateway([node("h", 2, "hybrid")], GroundTruth(TABLE), clock),
        SubmissionJournal(tmp_path / "journal"),
    )
    sim = journal.sim
    journal.submit(service("day", duration_s=H), Placement("day", "a", "h", 1))
    journal.submit(service("ever"), Placement("ever", "a", "h", 1))
    assert sim.next_event_time() == H
    sim.advance(10 * H)
    assert sim.next_event_time() is None  # the one with no lifetime serves on, with no end to wait for
    assert [(e.job_id, e.kind, e.time, e.reason) for e in sim.poll_events()][2:] == [
        ("day", "succeeded", H, DELETED_REASON)
    ]
    assert [s.free_gpus for s in sim.inventory()] == [1]
    journal.delete("ever")
    assert [s.free_gpus for s in sim.inventory()] == [2]
    assert [(e.job_id, e.kind, e.time, e.reason) for e in sim.poll_events()] == [
        ("ever", "succeeded", 10 * H, DELETED_REASON)
    ]
    # A restarted service's simulator replays the deletion too: nothing runs.
    again = JournaledGateway(
        SimulatedGateway([node("h", 2, "hybrid")], GroundTruth(TABLE), SimClock()), journal.journal
    )
    assert again.restore() == 2 and again.held_jobs() == {"day", "ever"}  # their ends not yet polled
    assert [s.running for s in again.inventory()] == [()]


def test_a_replayed_service_holds_its_card_with_no_predicted_end_and_training_jobs_use_the_rest():
    clusters = ClustersConfig.model_validate(
        {
            "clusters": [
                {
                    "name": "a",
                    "node_groups": [
                        {"name": "h", "gpu_product": V100, "gpus_per_node": 2, "gpu_memory_gb": 16,
                         "cpu_cores": 16, "usage": "hybrid"}
                    ],
                }
            ]
        }
    )  # fmt: skip
    jobs = [service("s/chat", arrival_s=0.0)] + [
        JobSpec(f"t/fit{i}", "ResNet-18", batch_size=32, total_steps=36_000, arrival_s=0.0) for i in range(3)
    ]
    sim = build_simulation(clusters, ":memory:", "milp", TABLE, estimator=OracleEstimates(TABLE))
    sim.store.submit(jobs)
    sim.scheduler.round()
    sim.scheduler.collect()
    snapshot = sim.scheduler.snapshot()
    assert snapshot.running["s/chat"].end == math.inf
    assert snapshot.running["t/fit0"].end == pytest.approx(H)
    (waiting,) = [w for w in sim.scheduler.decide(snapshot).waiting if w.job_id == "t/fit1"]
    assert waiting.predicted_start == pytest.approx(H)  # after fit0, on the card the service leaves
    result = replay(sim.scheduler, sim.simulator, sim.clock, arrivals_from_jobs([]), migrator=sim.migrator)
    assert result.stuck == () and sim.clock.now() == pytest.approx(3 * H)
    states = {r.job_id: r.state for r in sim.store.jobs()}
    assert states == {"s/chat": JobState.RUNNING, **{f"t/fit{i}": JobState.SUCCEEDED for i in range(3)}}
    sim.store.close()


# --- where services come from: traces and manifests -----------------------------------------------------

HEADER = "job_id,arrival_s,model,batch_size,num_gpus,total_steps,kind,duration_s"


def test_a_trace_gives_a_service_a_lifetime_and_no_steps(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        f"{HEADER}\nj1,0,ResNet-18,32,1,100,training,\ns1,5,ResNet-18,,2,,inference,86400\ns2,5,A3C,,1,,inference,\n"
    )
    fit, day, ever = load_trace_csv(path)
    assert (fit.kind, fit.duration_s) == ("training", None)
    assert (day.kind, day.total_steps, day.duration_s, day.num_gpus) == ("inference", None, 86400.0, 2)
    assert (ever.duration_s, ever.is_service) == (None, True)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("j1,0,ResNet-18,32,1,,training,", ":2: column total_steps: empty; a training job needs its steps"),
        ("j1,0,ResNet-18,32,1,100,,60", ":2: column duration_s: only an inference service has a lifetime"),
        ("s1,0,ResNet-18,32,1,,inference,0", ":2: column duration_s: must be > 0"),
    ],
)
def test_a_trace_row_that_mixes_up_services_and_training_is_refused_naming_the_column(tmp_path, row, message):
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER}\n{row}\n")
    with pytest.raises(TraceFormatError, match=message):
        load_trace_csv(path)


def deployment(**pod_spec) -> str:
    containers = [{"name": "m", "image": "srv:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
    return yaml.safe_dump(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "chat",
                "annotations": {"model_name": "ResNet-18", "data_size": "1", "epoch": "1"},
            },
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "chat"}},
                "template": {
                    "metadata": {"labels": {"app": "chat"}},
                    "spec": {"containers": containers, **pod_spec},
                },
            },
        }
    )


ANTI = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
    {"labelSelector": {"matchLabels": {"app": "chat"}}, "topologyKey": "kubernetes.io/hostname"}
]}}  # fmt: skip


@pytest.mark.parametrize(
    ("pod_spec", "spread"),
    [
        ({}, False),
        ({"affinity": ANTI}, True),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                          "whenUnsatisfiable": "DoNotSchedule"}]}, True),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                          "whenUnsatisfiable": "ScheduleAnyway"}]}, False),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone"}]},
         False),
    ],
    ids=["packed", "anti-affinity", "spread", "spread-if-it-can", "zones"],
)  # fmt: skip
def test_a_deployment_spreads_its_replicas_when_its_manifest_asks_them_onto_distinct_hosts(pod_spec, spread):
    (spec,) = parse_manifests(deployment(**pod_spec))
    assert (spec.is_service, spec.total_steps, spec.pod_gpus, spec.spread) == (True, None, (1, 1, 1), spread)
