"""The Prometheus collector against a real Prometheus scraping the simulated dcgm/node exporters."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
import yaml

from cli import main
from config.settings import ClustersConfig
from cpn.adapters.metrics import ClusterMetrics
from cpn.adapters.prometheus import PrometheusMetrics
from cpn.clock import SimClock
from cpn.decisions import Placement
from cpn.engine.live_load import apply_metrics
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import NodeState, nodes_from_config
from cpn.jobs import JobSpec
from cpn.sim.exporter import SimExporter
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import GroundTruth
from tests.integration.servers import free_port, prometheus

pytestmark = [pytest.mark.integration, pytest.mark.prometheus, pytest.mark.timeout(120)]

SCRAPE_S = 1.0


def cluster_config(url: str, **metrics) -> dict:
    return {
        "clusters": [
            {
                "name": "site-a",
                "prometheus_url": url,
                "metrics": {"scrape_interval_s": SCRAPE_S, **metrics},
                "node_groups": [
                    {
                        "name": "gpu",
                        "count": 2,
                        "gpu_product": "Tesla-V100-SXM2-16GB",
                        "gpus_per_node": 4,
                        "gpu_memory_gb": 16,
                        "cpu_cores": 16,
                    }
                ],
            }
        ]
    }


NODES = nodes_from_config(ClustersConfig.model_validate(cluster_config("http://unused")))


def until(check: Callable[[], object], timeout_s: float, what: str):
    """Call `check` until it returns something true; its last value (or fail naming `what`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            break
        time.sleep(0.25)
    assert value, f"{what} did not happen within {timeout_s} s"
    return value


def sample_when(
    metrics: PrometheusMetrics, good: Callable[[ClusterMetrics], bool], what: str
) -> ClusterMetrics:
    """The first sample of site-a that is `good`, within 30 s."""

    def check():
        m = metrics.sample()["site-a"]
        return m if good(m) else None

    return until(check, 30, what)


@pytest.fixture
def exporter():
    ex = SimExporter(NODES)
    address = ex.start()
    yield ex, address
    ex.stop()


@pytest.fixture
def prom(tmp_path, exporter):
    ex, address = exporter
    with prometheus(tmp_path, ex.scrape_configs(address), interval_s=SCRAPE_S) as url:
        yield url


def source(url: str, **metrics) -> PrometheusMetrics:
    return PrometheusMetrics(ClustersConfig.model_validate(cluster_config(url, **metrics)).clusters)


def test_collects_cpn_and_foreign_load_and_the_scheduler_sees_it(exporter, prom):
    ex, _ = exporter
    truth = GroundTruth(ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", 1, 10.0)]))
    gateway = SimulatedGateway(NODES, truth, SimClock())
    job = JobSpec("ns/r18", "ResNet-18", batch_size=32, total_steps=10**6, gpu_mem_gb=6.0, cpu=2.0)
    gateway.submit(job, Placement(job.job_id, "site-a", "gpu-0", 1))
    ex.update(gateway)
    ex.occupy("gpu-0", 3, memory_gb=5.0)  # another user's process on card 3
    ex.occupy_cpu("gpu-1", 3.0)
    metrics = source(prom)

    def settled():
        m = metrics.sample()["site-a"]
        node1 = m.nodes.get("gpu-1")
        cpu = node1.cpu_used_cores if node1 else None
        return m if m.health == "ok" and cpu is not None and abs(cpu - 3.0) < 0.3 else None

    m = until(settled, 30, "a settled, healthy reading")
    assert {s.state for s in m.series} == {"ok"}
    assert all(s.age_s is not None and s.age_s <= 3 * SCRAPE_S for s in m.series)
    cards = {g.index: g for g in m.nodes["gpu-0"].gpus}
    assert cards[0].memory_used_gb == pytest.approx(truth.memory_gb(job, 1), abs=0.01)
    assert cards[0].utilization == 1.0
    assert cards[3].memory_used_gb == pytest.approx(5.0, abs=0.01)
    assert cards[3].memory_free_gb == pytest.approx(11.0, abs=0.01)
    assert cards[1].memory_used_gb == 0.0
    assert m.nodes["gpu-0"].memory_used_gb == 0.0

    before = {s.node.name: s for s in gateway.inventory()}
    after = {s.node.name: s for s in apply_metrics(gateway.inventory(), {"site-a": m})}
    assert before["gpu-0"].free_gpus == 3 and after["gpu-0"].free_gpus == 2
    assert before["gpu-1"].cpu_used == 0 and after["gpu-1"].cpu_used == pytest.approx(3.0, abs=0.3)
    # The node measures about what the job requested (irate of a counter: a little over or under); never less.
    assert after["gpu-0"].cpu_used == pytest.approx(2.0, abs=0.05) and after["gpu-0"].cpu_used >= 2.0


def test_a_series_nobody_exports_is_missing_and_its_reading_unused(prom):
    temperature = "DCGM_FI_DEV_GPU_TEMP"  # a real DCGM field the simulator does not export
    metrics = source(prom, queries={"gpu_utilization": {"query": temperature, "series": temperature}})
    m = sample_when(
        metrics,
        lambda m: m.nodes and all(s.state == "ok" for s in m.series if s.name != temperature),
        "others ok",
    )
    states = {s.name: s.state for s in m.series}
    assert states[temperature] == "missing"
    assert m.health == "degraded" and f"{temperature} missing" in m.detail
    gpus = m.nodes["gpu-0"].gpus
    assert gpus and all(g.utilization is None and g.memory_used_gb is not None for g in gpus)


def test_a_hung_exporter_goes_stale(tmp_path):
    """An exporter stamping its samples (as cAdvisor does) that stops updating them: Prometheus keeps the
    old samples, and their age gives them away."""
    ex = SimExporter(NODES, timestamps=True)
    address = ex.start()
    try:
        with prometheus(tmp_path, ex.scrape_configs(address), interval_s=SCRAPE_S) as url:
            metrics = source(url, stale_after_s=2.0)
            sample_when(metrics, lambda m: m.health == "ok", "a healthy reading")
            ex.freeze()
            m = sample_when(metrics, lambda m: all(s.state == "stale" for s in m.series), "staleness")
    finally:
        ex.stop()
    assert m.health == "degraded" and "stale (limit 2 s)" in m.detail
    assert all(s.age_s > 2.0 for s in m.series)
    assert m.nodes == {}


def test_cli_reports_ok_then_not_ok_within_30_s_of_the_exporter_stopping(tmp_path, exporter, prom):
    ex, _ = exporter
    config = tmp_path / "config"
    config.mkdir()
    (config / "clusters.yaml").write_text(yaml.safe_dump(cluster_config(prom)))
    out = tmp_path / "check.json"
    args = ["metrics", "check", "--config", str(config), "--json", str(out)]

    until(lambda: main(args) == 0, 30, "cpn metrics check exit 0")
    report = json.loads(out.read_text())
    assert report["ok"] and report["clusters"]["site-a"]["health"] == "ok"

    ex.stop()
    stopped = time.monotonic()

    def all_gone():
        if main(args) != 1:
            return None
        states = {s["state"] for s in json.loads(out.read_text())["clusters"]["site-a"]["series"]}
        return states if states <= {"stale", "missing"} else None

    states = until(all_gone, 30, "every series stale or missing")
    print(f"every series {sorted(states)} {time.monotonic() - stopped:.1f} s after the exporter stopped")


def test_prometheus_down_makes_the_cluster_unknown(tmp_path, exporter):
    ex, address = exporter
    with prometheus(tmp_path, ex.scrape_configs(address), interval_s=SCRAPE_S) as url:
        metrics = source(url)
        sample_when(metrics, lambda m: m.health == "ok", "a healthy reading")
    m = metrics.sample()["site-a"]
    assert m.health == "unknown" and m.nodes == {}
    assert {s.state for s in m.series} == {"unreachable"}
    assert "unreachable" in m.detail and "inventory alone" in m.detail
    inventory = tuple(NodeState(node, free_gpus=node.gpu_count) for node in NODES)
    assert apply_metrics(inventory, {"site-a": m}) == inventory  # scheduled on inventory alone
    never = source(f"http://127.0.0.1:{free_port()}").sample()["site-a"]
    assert never.health == "unknown"
