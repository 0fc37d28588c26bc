"""Pure parts of the live-metrics path: series health, joining readings, merging them into node states,
the simulated exporter's exposition, and `cpn metrics check` when Prometheus does not answer."""

from __future__ import annotations

import argparse
import json

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from cli.metrics import run_check
from config.settings import PromQueries, PromQuery
from cpn.adapters.metrics import ClusterMetrics, GpuReading, NodeReading, SeriesHealth
from cpn.adapters.prometheus import Sample, cluster_health, join_readings, required_series, series_state
from cpn.clock import SimClock
from cpn.decisions import Placement
from cpn.engine.live_load import apply_metrics
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node, NodeState, SharedCard
from cpn.jobs import JobSpec
from cpn.sim.exporter import SimExporter, dcgm_help
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import GroundTruth

V100 = Node("a", "gpu-0", "Tesla-V100-SXM2-16GB", 4, 16, 16, "training")
OTHER = Node("b", "gpu-0", "Tesla-V100-SXM2-16GB", 4, 16, 16, "training")


def test_series_state_judges_the_stalest_target_against_the_limit():
    assert series_state([], now=100, stale_after_s=3) == ("missing", None)
    assert series_state([99.0, 98.5], now=100, stale_after_s=3) == ("ok", 1.5)
    assert series_state([99.0, 90.0], now=100, stale_after_s=3) == ("stale", 10.0)


def test_cluster_health():
    ok, stale, down = SeriesHealth("x", "ok"), SeriesHealth("y", "stale"), SeriesHealth("z", "unreachable")
    assert cluster_health([ok, ok]) == "ok"
    assert cluster_health([ok, stale]) == "degraded"
    assert cluster_health([down, down]) == "unknown"


def test_readings_sharing_a_series_are_judged_together():
    same = PromQuery(query="x", series="DCGM_FI_DEV_FB_USED")
    series = required_series(PromQueries(gpu_memory_free=same))
    assert series["DCGM_FI_DEV_FB_USED"] == ("gpu_memory_used", "gpu_memory_free")
    assert len(series) == 4


def test_join_converts_units_and_joins_by_hostname_gpu_and_nodename():
    nodes = join_readings(
        {
            "gpu_memory_used": [
                Sample({"Hostname": "gpu-0", "gpu": "1"}, 5120.0),
                Sample({"Hostname": "gpu-0"}, 1.0),  # no card index: ignored
            ],
            "gpu_utilization": [Sample({"Hostname": "gpu-0", "gpu": "1"}, 50.0)],
            "cpu_used_cores": [Sample({"nodename": "gpu-0"}, 2.5), Sample({"nodename": "gpu-9"}, 1.0)],
            "memory_used_bytes": [Sample({"nodename": "gpu-0"}, 8 * 1024**3)],
        }
    )
    assert nodes["gpu-0"] == NodeReading(
        "gpu-0", cpu_used_cores=2.5, memory_used_gb=8.0, gpus=(GpuReading(1, 0.5, 5.0, None),)
    )
    assert nodes["gpu-9"].gpus == () and nodes["gpu-9"].cpu_used_cores == 1.0


def metrics(cluster: str, health="ok", **readings: NodeReading) -> dict[str, ClusterMetrics]:
    return {cluster: ClusterMetrics(cluster, 0.0, health, nodes=readings)}


def test_a_card_busy_outside_cpn_is_not_free_and_measured_cpu_raises_the_load():
    state = NodeState(V100, free_gpus=3, cpu_used=2.0, running=("j",))  # cpn holds one card
    reading = NodeReading(
        "gpu-0", cpu_used_cores=6.0, gpus=(GpuReading(0, 1.0, 6.0), GpuReading(2, 0.9, 4.0))
    )
    [merged] = apply_metrics((state,), metrics("a", **{"gpu-0": reading}))
    assert merged.free_gpus == 2  # cards 0 (cpn's) and 2 (someone else's) busy: 2 left
    assert merged.cpu_used == 6.0


def test_requests_bind_where_the_node_measures_less_and_idle_cards_stay_free():
    state = NodeState(V100, free_gpus=2, cpu_used=4.0)
    idle = NodeReading("gpu-0", cpu_used_cores=0.5, gpus=tuple(GpuReading(i, 0.0, 0.01) for i in range(4)))
    [merged] = apply_metrics((state,), metrics("a", **{"gpu-0": idle}))
    assert merged.free_gpus == 2 and merged.cpu_used == 4.0  # cards cpn just took count until they show


def test_shared_cards_take_the_smaller_free_memory_and_are_not_counted_as_whole_cards():
    state = NodeState(V100, free_gpus=3, shared=(SharedCard(1, 0.5, 10.0),))
    reading = NodeReading("gpu-0", gpus=(GpuReading(1, 0.5, 9.0, 7.0),))
    [merged] = apply_metrics((state,), metrics("a", **{"gpu-0": reading}))
    assert merged.shared == (SharedCard(1, 0.5, 7.0),) and merged.free_gpus == 3


def test_unknown_clusters_and_unnamed_nodes_pass_through():
    states = (NodeState(V100, free_gpus=4), NodeState(OTHER, free_gpus=4))
    busy = NodeReading("gpu-0", gpus=tuple(GpuReading(i, 1.0, 10.0) for i in range(4)))
    assert apply_metrics(states, metrics("a", "unknown", **{"gpu-0": busy})) == states
    assert apply_metrics(states, metrics("a", **{"gpu-7": busy})) == states
    merged = apply_metrics(states, metrics("a", "degraded", **{"gpu-0": busy}))
    assert merged[0].free_gpus == 0 and merged[1] == states[1]


def parse(text: bytes) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text.decode())}


def test_exporter_publishes_the_gateways_load_with_dcgm_label_names():
    truth = GroundTruth(ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", 2, 10.0)]))
    gateway = SimulatedGateway([V100], truth, SimClock())
    job = JobSpec("ns/j", "ResNet-18", batch_size=32, num_gpus=2, total_steps=1000, gpu_mem_gb=7.0, cpu=3)
    gateway.submit(job, Placement(job.job_id, "a", "gpu-0", 2))
    exporter = SimExporter([V100])
    exporter.update(gateway)
    exporter.occupy("gpu-0", 3, memory_gb=2.0, utilization=0.4)

    dcgm = parse(exporter.render("/metrics"))
    used = {s.labels["gpu"]: s.value for s in dcgm["DCGM_FI_DEV_FB_USED"]}
    assert used == {"0": 7 * 1024, "1": 7 * 1024, "2": 0, "3": 2 * 1024}
    free = {s.labels["gpu"]: s.value for s in dcgm["DCGM_FI_DEV_FB_FREE"]}
    assert free["0"] == 9 * 1024 and free["2"] == 16 * 1024
    util = {s.labels["gpu"]: s.value for s in dcgm["DCGM_FI_DEV_GPU_UTIL"]}
    assert util == {"0": 100, "1": 100, "2": 0, "3": 40}
    labels = set(dcgm["DCGM_FI_DEV_FB_USED"][0].labels)
    assert labels == {
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
    }
    assert set(dcgm) <= set(dcgm_help())

    node = parse(exporter.render("/node/gpu-0/metrics"))
    assert {s.labels["nodename"] for s in node["node_uname_info"]} == {"gpu-0"}
    assert {s.labels["mode"] for s in node["node_cpu_seconds"]} == {"idle", "user"}
    assert exporter.render("/node/nope/metrics") is None


def test_exporter_cpu_counters_grow_by_busy_cores(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("cpn.sim.exporter.time.monotonic", lambda: now[0])
    exporter = SimExporter([V100])
    exporter.occupy_cpu("gpu-0", 2.5)
    now[0] = 10.0
    samples = parse(exporter.render("/node/gpu-0/metrics"))["node_cpu_seconds"]
    user = sum(s.value for s in samples if s.labels["mode"] == "user" and s.name.endswith("_total"))
    idle = sum(s.value for s in samples if s.labels["mode"] == "idle" and s.name.endswith("_total"))
    assert user == pytest.approx(25.0) and idle == pytest.approx(16 * 10 - 25.0)


def test_metrics_check_exits_1_and_says_unreachable(tmp_path, capsys):
    port = 9  # the discard port: nothing serves HTTP there
    group = {"name": "g", "gpu_product": "V100", "gpus_per_node": 1, "gpu_memory_gb": 16, "cpu_cores": 4}
    clusters = {
        "clusters": [
            {"name": "down", "prometheus_url": f"http://127.0.0.1:{port}", "node_groups": [group]},
            {"name": "none", "node_groups": [group]},
        ],
        "wan_gbps": {"down": {"none": 1}},
    }
    (tmp_path / "clusters.yaml").write_text(yaml.safe_dump(clusters))
    out = tmp_path / "check.json"
    assert run_check(argparse.Namespace(config=str(tmp_path), json=str(out))) == 1
    report = json.loads(out.read_text())
    assert not report["ok"]
    assert {s["state"] for s in report["clusters"]["down"]["series"]} == {"unreachable"}
    assert report["clusters"]["down"]["health"] == "unknown"
    assert "no prometheus_url" in report["clusters"]["none"]["detail"]
    assert "unreachable" in capsys.readouterr().out


def test_metrics_check_names_a_bad_config(tmp_path, capsys):
    (tmp_path / "clusters.yaml").write_text("clusters: [{name: a, metrics: {scrape_interval_s: 0}}]")
    assert run_check(argparse.Namespace(config=str(tmp_path), json=None)) == 2
    assert "scrape_interval_s" in capsys.readouterr().err
