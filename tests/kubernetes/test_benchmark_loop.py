"""The benchmark loop against the fake Kubernetes API server, through the real client and gateway: the job
is pinned to the chosen node, its log is read through the API and parsed, the scores land in the store, and
a second run finds nothing to do."""

from __future__ import annotations

import json
from datetime import date

import pytest

from config.benchmarking import BenchmarkingSettings
from config.benchmarks import BenchmarksConfig, dump_benchmarks, load_benchmarks
from cpn.benchmarking import plan_benchmarks, run_benchmarks
from cpn.clock import WallClock
from models.benchmark_runs import ingest_runs
from tests.kubernetes.conftest import gpu_labels, make_gateway, seed_taints

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

A100 = "NVIDIA-A100-SXM4-80GB"
V100 = "Tesla-V100-SXM2-16GB"
UNITS = {"resnet50": "images/s", "yolov8m": "images/s", "llama3": "tokens/s"}
STORE = BenchmarksConfig.model_validate(
    {
        "workloads": {w: {"unit": u, "method": "cpn-bench/1"} for w, u in UNITS.items()},
        "gpus": {V100: {"scores": {"resnet50": 300.0, "yolov8m": 60.0, "llama3": 9000.0}}},
    }
)


def bench_log(node: str, scores: dict[str, float]) -> str:
    """What examples/benchmark-job.yaml prints on `node` (an A100 with driver 550.54.15)."""
    lines = ["Collecting ultralytics==8.3.40"]
    for workload, score in scores.items():
        rec = {"workload": workload, "score": score, "unit": UNITS[workload], "method": "cpn-bench/1"}
        rec |= {"gpu_product": "NVIDIA A100-SXM4-80GB", "node": node, "driver": "550.54.15"}
        lines.append("CPN_BENCH " + json.dumps(rec))
    return "\n".join(lines)


def test_benchmark_job_runs_pinned_its_log_is_ingested_and_a_second_run_has_nothing_to_do(server, tmp_path):
    labels = gpu_labels("training", A100, 4, 81920) | {"nvidia.com/cuda.driver-version.full": "550.54.15"}
    for name in ("gpu-a", "gpu-b"):
        server.add_node(name, labels, 4, taints=seed_taints("training", A100))
    server.add_node("old-0", gpu_labels("training", V100, 4, 16384), 4, taints=seed_taints("training", V100))
    base = tmp_path / "measured.yaml"
    dump_benchmarks(STORE, base)
    settings = BenchmarkingSettings(poll_s=0.05, timeout_s=30)
    gateway = make_gateway(server)
    gateway.start()
    plan = plan_benchmarks(gateway.inventory(), load_benchmarks(base), settings)
    assert [t.node.name for t in plan.targets] == ["gpu-a"]  # one node per type; V100 is measured
    assert plan.targets[0].type_key == "a100-sxm4-80gb@driver-550.54.15"
    scores = {"resnet50": 1200.5, "yolov8m": 210.0, "llama3": 31000.0}

    def finish_when_running(_: float) -> None:
        (job,) = server.objects[("batch", "jobs")].values()
        name = job["metadata"]["name"]
        if server.pods_of("cpn-bench", name) and not server.logs:
            server.finish("cpn-bench", name, log=bench_log("gpu-a", scores))

    (run,) = run_benchmarks(gateway, plan.targets, settings, WallClock(), finish_when_running)
    assert run.outcome == "succeeded", run.detail
    job = server.get(("batch", "jobs"), "cpn-bench", run.job_id.split("/")[1])
    terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert all(
        {"key": "metadata.name", "operator": "In", "values": ["gpu-a"]} in t["matchFields"] for t in terms
    )
    (pod,) = server.pods_of("cpn-bench", job["metadata"]["name"])
    assert pod["spec"]["nodeName"] == "gpu-a"
    assert server.get(("", "configmaps"), "cpn-bench", f"{job['metadata']['name']}-script") is not None

    ingested = ingest_runs([run], base, base, date(2025, 3, 4))
    assert ingested.changed
    store = load_benchmarks(base)
    node = store.nodes["gpu-a"]
    assert (node.scores, node.driver, node.measured) == (scores, "550.54.15", date(2025, 3, 4))
    assert store.gpus["NVIDIA A100-SXM4-80GB"].scores == scores
    assert plan_benchmarks(gateway.inventory(), store, settings).targets == ()
