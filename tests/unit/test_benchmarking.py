"""The benchmark loop on simulated clusters: a GPU type no benchmarks file knows is measured, then used."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import date
from types import MappingProxyType

import pytest
import yaml

from cli import main
from config.benchmarking import BenchmarkingSettings
from config.benchmarks import load_benchmarks
from config.settings import ClustersConfig
from cpn.adapters.clusters import cluster_to_add, stored_clusters
from cpn.benchmarking import FailureLog, benchmark_job, plan_benchmarks, run_benchmarks
from cpn.bootstrap import build_benchmark_clusters
from cpn.decisions import Estimate, Placement, Snapshot
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node, NodeState, Taint
from cpn.jobs import JobSpec
from cpn.policies import make_policy
from cpn.store import JobStore
from models.benchmark_runs import ingest_runs
from models.benchmarks import BenchmarkCatalog

A10 = "NVIDIA-A10"
# Literal rates of the new type: the three proxies of config/benchmarks.yaml, and one user model.
A10_ROWS = [
    ThroughputRow("ResNet-50", 64, "a10", 1, 5.0),
    ThroughputRow("CycleGAN", None, "a10", 1, 6.0),
    ThroughputRow("Transformer", 64, "a10", 1, 10.0),
    ThroughputRow("ResNet-18", 64, "a10", 1, 20.0),
]
SETTINGS = BenchmarkingSettings(seconds_per_workload=60, poll_s=30)


def clusters(*groups: tuple[str, str]) -> ClustersConfig:
    node_groups = [
        {"name": name, "gpu_product": product, "gpus_per_node": 2, "gpu_memory_gb": 16, "cpu_cores": 16}
        for name, product in groups
    ]
    return ClustersConfig.model_validate({"clusters": [{"name": "bj", "node_groups": node_groups}]})


@pytest.fixture
def table() -> ThroughputTable:
    return ThroughputTable([*ThroughputTable.load(), *A10_ROWS])


def test_a_new_gpu_type_is_measured_from_the_truth_then_scored_and_nothing_is_left(tmp_path, table):
    lab = build_benchmark_clusters(clusters(("v", "Tesla-V100-SXM2-16GB"), ("a", A10)), table)
    store = load_benchmarks()
    plan = plan_benchmarks(lab.gateway.inventory(), store, SETTINGS)
    assert [t.node.key for t in plan.targets] == ["bj/a-0"]  # V100 has scores of the store's method
    assert "GPU type a10 has no score measured by gavel-proxy" in plan.targets[0].reason
    (run,) = run_benchmarks(lab.gateway, plan.targets, SETTINGS, lab.clock, lab.wait)
    assert (run.outcome, run.started, run.ended) == ("succeeded", 0.0, 180.0)  # 3 workloads x 60 s
    out = tmp_path / "benchmarks.yaml"
    ingested = ingest_runs([run], "config/benchmarks.yaml", out, date(2025, 1, 2))
    assert ingested.changed
    measured = load_benchmarks(out)
    assert measured.gpus[A10].scores == pytest.approx({"resnet50": 320.0, "yolov8m": 6.0, "llama3": 640.0})
    assert measured.nodes["a-0"].measured == date(2025, 1, 2)
    assert BenchmarkCatalog.load(out).find(A10) is not None  # the predictor now scores the type
    assert plan_benchmarks(lab.gateway.inventory(), measured, SETTINGS).targets == ()
    # The new type is used: a job now runs on its cards.
    job = JobSpec("u/r18", "ResNet-18", batch_size=64, total_steps=2000)
    lab.gateway.submit(job, Placement(job.job_id, "bj", "a-0", 1))
    lab.wait(200)
    assert [e.kind for e in lab.gateway.poll_events()] == ["running", "succeeded"]


def test_benchmark_job_is_pinned_exclusive_lowest_priority_and_waits_for_an_idle_card(table):
    lab = build_benchmark_clusters(clusters(("a", A10)), table)
    hog = JobSpec("u/hog", "ResNet-18", batch_size=64, num_gpus=2, total_steps=10**6)
    lab.gateway.submit(hog, Placement(hog.job_id, "bj", "a-0", 2))
    plan = plan_benchmarks(lab.gateway.inventory(), load_benchmarks(), SETTINGS)
    assert plan.targets[0].reason.endswith("no idle card now: waits")
    (run,) = run_benchmarks(lab.gateway, plan.targets, SETTINGS, lab.clock, lab.wait)
    assert run.outcome == "busy" and lab.gateway.held_jobs() == {"u/hog"}  # never displaces a job
    job = benchmark_job(plan.targets[0], SETTINGS)
    assert (job.num_gpus, job.gpu_share, job.priority < hog.priority) == (1, None, True)
    workload, script = yaml.safe_load_all(job.manifest)
    assert workload["kind"] == "Job" and "nodeName" not in workload["spec"]["template"]["spec"]
    assert (
        script["metadata"]["name"] == workload["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"]
    )


def test_a_failing_type_is_retried_once_then_reported(tmp_path):
    # The truth has no rate on this type: its benchmark fails at start-up.
    lab = build_benchmark_clusters(clusters(("x", "NVIDIA-H100-80GB-HBM3")), ThroughputTable.load())
    failures = FailureLog(tmp_path / "failures.json")
    for attempt in (1, 2):
        plan = plan_benchmarks(lab.gateway.inventory(), load_benchmarks(), SETTINGS, failures.read())
        (run,) = run_benchmarks(lab.gateway, plan.targets, SETTINGS, lab.clock, lab.wait)
        assert run.outcome == "failed"
        ingested = ingest_runs([run], "config/benchmarks.yaml", tmp_path / "b.yaml", date(2025, 1, 2))
        assert not ingested.changed and ingested.runs[0].outcome == "failed"
        assert failures.record(ingested.runs)["h100-80gb-hbm3"][0] == attempt
    plan = plan_benchmarks(lab.gateway.inventory(), load_benchmarks(), SETTINGS, failures.read())
    assert plan.targets == () and plan.reported[0].failures == 2
    assert "no measured throughput for ResNet-50" in plan.reported[0].error


def test_dry_run_prints_the_nodes_and_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    (tmp_path / "clusters.yaml").write_text(
        yaml.safe_dump(clusters(("v", "Tesla-V100-SXM2-16GB"), ("a", A10)).model_dump(mode="json"))
    )
    (tmp_path / "benchmarking.yaml").write_text("every_node: true\n")
    assert main(["benchmark", "--config", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    # every_node: the V100 node too, though its product has scores: the node has none of its own.
    assert [line.split(":")[0] for line in out] == ["bj/a-0", "bj/v-0"]
    assert all("the node has no score measured by gavel-proxy" in line for line in out)


def test_a_cluster_added_while_cpn_runs_is_planned_for_a_benchmark_from_the_store(
    tmp_path, monkeypatch, capsys
):
    """`cpn cluster add` of a cluster with an unmeasured type: the loop reads the store's cluster set, not
    clusters.yaml, so the type is benchmarked as soon as its cluster joins."""
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    config = clusters(("v", "Tesla-V100-SXM2-16GB"))
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))
    with JobStore(tmp_path / "jobs.db") as store:
        stored_clusters(store, config)  # a service's first start seeds the set from the config
        dry_run = ["benchmark", "--config", str(tmp_path), "--dry-run"]
        assert main(dry_run) == 0
        assert capsys.readouterr().out.strip() == "every GPU type has scores: nothing to benchmark"
        added = {
            "name": "lab",
            "node_groups": [
                {"name": "a", "gpu_product": A10, "gpus_per_node": 2, "gpu_memory_gb": 24, "cpu_cores": 16}
            ],
            "wan_gbps": {"bj": 10},
        }
        store.add_cluster(*cluster_to_add(store.clusters(), added))
        assert main(dry_run) == 0
        (line,) = capsys.readouterr().out.splitlines()
        assert line.startswith("lab/a-0: GPU type a10 has no score measured by gavel-proxy")
        # from here the run is the one of test_a_new_gpu_type_is_measured_from_the_truth_then_scored...


# A type with no scores yet (item 3), on a literal snapshot: one V100 node, one A10 node whose benchmark is
# pending (the predictor's estimates there: no runtime, or a guess for a job to explore).
PENDING = Estimate(math.inf, 8.0, pending_benchmark=True)
ESTIMATED_POLICIES = ("sjf", "greedy", "milp")


def lab_node(name: str, product: str) -> Node:
    taints = (Taint("maip.mxsf.io/node.usage", "training"), Taint("nvidia.com/gpu.product", product))
    return Node("bj", name, product, 4, 16.0, 32, "training", taints=taints)


def snapshot(v100_free: int, rows: dict[str, dict[str, Estimate]]) -> Snapshot:
    nodes = (
        NodeState(lab_node("v0", "Tesla-V100-SXM2-16GB"), v100_free),
        NodeState(lab_node("a0", A10), 4),
    )
    jobs = tuple(JobSpec(jid, "ResNet-18", batch_size=32, total_steps=100) for jid in rows)
    return Snapshot(now=0.0, pending=jobs, nodes=nodes, estimates=MappingProxyType(rows))


@pytest.mark.parametrize("policy", ESTIMATED_POLICIES)
def test_a_job_without_an_estimate_on_an_unscored_type_waits_naming_its_pending_benchmark(policy):
    rows = {"u/known": {"v100": Estimate(100.0), "a10": PENDING}, "u/only-a10": {"a10": PENDING}}
    decision = make_policy(policy).decide(snapshot(0, rows))
    assert decision.placements == () and decision.rejections == ()  # it waits; it is not refused
    waits = {w.job_id: (w.code, w.detail) for w in decision.waiting}
    for job_id in rows:
        code, detail = waits[job_id]
        assert code == "pending-benchmark" and "GPU type a10 has no benchmark scores yet" in detail


@pytest.mark.parametrize("policy", ESTIMATED_POLICIES)
def test_an_unscored_type_takes_jobs_to_explore_or_with_an_estimate_and_the_others_run_elsewhere(policy):
    guess = Estimate(300.0, explore=True)
    rows = {
        "u/explore": {"v100": guess, "a10": guess},
        "u/oracle": {"v100": Estimate(100.0), "a10": Estimate(50.0)},  # e.g. the simulator's truth
        "u/known": {"v100": Estimate(100.0), "a10": PENDING},
    }
    decision = make_policy(policy).decide(snapshot(0, rows))  # the V100 is full
    assert {p.job_id: p.node for p in decision.placements} == {"u/explore": "a0", "u/oracle": "a0"}
    assert [w.code for w in decision.waiting if w.job_id == "u/known"] == ["pending-benchmark"]
    decision = make_policy(policy).decide(snapshot(1, {"u/known": rows["u/known"]}))
    assert [(p.job_id, p.node) for p in decision.placements] == [("u/known", "v0")]


@pytest.mark.parametrize("policy", ESTIMATED_POLICIES)
def test_a_gang_that_fits_only_on_the_unscored_type_waits_on_its_benchmark_not_on_gang(policy):
    """The lab's A100 cluster: its free cards are the only ones that could hold the gang, but they have
    no scores yet; the job says so (`pending-benchmark`), not `gang` over the scored types' few free cards."""
    rows = {"u/gang": {"v100": Estimate(100.0), "a10": PENDING}}
    s = snapshot(3, rows)
    s = Snapshot(now=0.0, pending=(replace(s.pending[0], num_gpus=4),), nodes=s.nodes, estimates=s.estimates)
    decision = make_policy(policy).decide(s)
    ((code, detail),) = [(w.code, w.detail) for w in decision.waiting]
    assert code == "pending-benchmark" and "GPU type a10 has no benchmark scores yet" in detail
    assert "gang" in detail  # what the scored V100 lacks stays said
