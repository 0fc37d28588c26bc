"""A frozen exporter: fresh sample times, values that stopped changing, told by the energy counter."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from config.settings import ClustersConfig, ConfigError, MetricsSettings, PromQueries, PromQuery, load_profile
from cpn.adapters.metrics import ClusterMetrics
from cpn.adapters.prometheus import PrometheusMetrics, Sample, frozen_cards, join_readings, promql_duration
from cpn.engine.live_load import apply_metrics
from cpn.inventory import Node, NodeState
from cpn.sim.exporter import DCGM_ENERGY, SimExporter

ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
NODES = (
    Node("a", "gpu-0", "Tesla-V100-SXM2-16GB", 2, 16, 16, "training"),
    Node("a", "gpu-1", "Tesla-V100-SXM2-16GB", 2, 16, 16, "training"),
)


def card(node: str, gpu: str, value: float) -> Sample:
    return Sample({"Hostname": node, "gpu": gpu}, value)


def test_a_card_whose_energy_did_not_grow_is_frozen():
    growth = [
        card("gpu-1", "1", 0.0),
        card("gpu-0", "0", 41_000.0),
        card("gpu-0", "1", 0.0),
        card("gpu-1", "0", 3.5),  # grew a little (a counter reset counts as growth too: `increase` says so)
        Sample({"gpu": "0"}, 0.0),  # no node: cannot be joined, not judged
        card("gpu-0", "x", 0.0),
    ]
    assert frozen_cards(growth) == (("gpu-0", 1), ("gpu-1", 1))
    assert frozen_cards([]) == ()  # too few samples in the window: nothing judged


def test_frozen_cards_lose_their_readings_and_are_decided_on_inventory():
    used = [card("gpu-0", "0", 16 * 1024), card("gpu-0", "1", 16 * 1024)]
    nodes = join_readings({"gpu_memory_used": used}, frozen=[("gpu-0", 1)])
    assert [g.index for g in nodes["gpu-0"].gpus] == [0]
    inventory = (NodeState(NODES[0], free_gpus=2),)
    # Card 0 measures busy, card 1 (frozen) is counted as the inventory says: free.
    metrics = ClusterMetrics("a", 0.0, "degraded", nodes=nodes, frozen=(("gpu-0", 1),))
    assert apply_metrics(inventory, {"a": metrics})[0].free_gpus == 1


def test_the_window_spans_several_scrapes_and_dcgm_collect_intervals():
    assert MetricsSettings(scrape_interval_s=15).frozen_window_s == 60  # 2 x dcgm-exporter's 30 s
    assert MetricsSettings(scrape_interval_s=30).frozen_window_s == 120  # 4 scrapes
    assert MetricsSettings(scrape_interval_s=1, frozen_after_s=3).frozen_window_s == 3
    assert promql_duration(3) == "3000ms" and promql_duration(0.0001) == "1ms"
    with pytest.raises(ValueError, match="frozen_after_s .* at least 2 scrape intervals"):
        MetricsSettings(scrape_interval_s=15, frozen_after_s=20)
    with pytest.raises(ValueError, match=r"gpu_energy.query must contain \{window\}"):
        PromQueries(gpu_energy=PromQuery(query=f"increase({ENERGY}[1m])", series=ENERGY))
    assert PromQueries(gpu_energy=None).gpu_energy is None


class Canned(PrometheusMetrics):
    """The collector over canned answers: PromQL -> samples (fake at cpn's own boundary, `_query`)."""

    def __init__(self, clusters, answers):
        super().__init__(clusters, clock=lambda: 100.0)
        self.answers = answers
        self.asked: list[str] = []

    def _query(self, cluster, promql):
        self.asked.append(promql)
        for key, samples in self.answers.items():
            if promql == key or promql.startswith(key):
                return samples, 100.0
        return [], None


def _cluster(**metrics):
    group = {"name": "gpu", "gpu_product": "V100", "gpus_per_node": 2, "gpu_memory_gb": 16, "cpu_cores": 16}
    config = {"name": "a", "prometheus_url": "http://prom:9090", "metrics": metrics, "node_groups": [group]}
    return ClustersConfig.model_validate({"clusters": [config]}).clusters


def _answers(growth: list[Sample]) -> dict[str, list[Sample]]:
    cards = [card(n, g, 1024.0) for n in ("gpu-0", "gpu-1") for g in ("0", "1")]
    fresh = [Sample({}, 99.0)]
    return {
        "timestamp(": fresh,
        "DCGM_FI_DEV_GPU_UTIL": cards,
        "DCGM_FI_DEV_FB_USED": cards,
        "DCGM_FI_DEV_FB_FREE": cards,
        "sum by (nodename)": [Sample({"nodename": "gpu-0"}, 2.0)],
        "increase(": growth,
    }


def test_the_collector_marks_the_gpu_series_frozen_and_keeps_the_rest():
    growth = [card("gpu-0", "0", 5e4), card("gpu-0", "1", 5e4), card("gpu-1", "0", 0), card("gpu-1", "1", 0)]
    source = Canned(_cluster(scrape_interval_s=1, frozen_after_s=4), _answers(growth))
    m = source.read(source.clusters[0])
    assert f"increase({ENERGY}[4000ms])" in source.asked
    assert m.frozen == (("gpu-1", 0), ("gpu-1", 1))
    states = {s.name: s.state for s in m.series}
    assert states == {
        "DCGM_FI_DEV_GPU_UTIL": "frozen",
        "DCGM_FI_DEV_FB_USED": "frozen",
        "DCGM_FI_DEV_FB_FREE": "frozen",
        "node_cpu_seconds_total": "ok",
        "node_memory_MemAvailable_bytes": "ok",
        ENERGY: "frozen",
    }
    assert m.health == "degraded"
    assert "did not grow in 4 s on gpu-1 card 0/1" in m.detail and "inventory alone" in m.detail
    assert len(m.nodes["gpu-0"].gpus) == 2 and "gpu-1" not in m.nodes  # no reading left: inventory alone
    assert m.nodes["gpu-0"].cpu_used_cores == 2.0


def test_growing_counters_are_ok_and_the_check_can_be_turned_off():
    growth = [card(n, g, 5e4) for n in ("gpu-0", "gpu-1") for g in ("0", "1")]
    source = Canned(_cluster(scrape_interval_s=1, frozen_after_s=4), _answers(growth))
    m = source.read(source.clusters[0])
    assert (m.health, m.frozen, m.detail) == ("ok", (), "")
    off = Canned(_cluster(queries={"gpu_energy": None}), _answers([card("gpu-0", "0", 0)]))
    m = off.read(off.clusters[0])
    assert m.health == "ok" and ENERGY not in {s.name for s in m.series}
    assert not any(q.startswith("increase(") for q in off.asked)


def test_a_missing_energy_series_is_not_judged_frozen():
    answers = {f"timestamp({ENERGY})": [], **_answers([card("gpu-0", "0", 0)])}
    source = Canned(_cluster(scrape_interval_s=1, frozen_after_s=4), answers)
    m = source.read(source.clusters[0])
    assert {s.name: s.state for s in m.series}[ENERGY] == "missing"
    assert m.frozen == () and m.health == "degraded"
    assert all(len(r.gpus) == 2 for r in m.nodes.values())


def _energy(exporter: SimExporter) -> dict[tuple[str, str], float]:
    families = {f.name: f for f in text_string_to_metric_families(exporter.render("/metrics").decode())}
    return {(s.labels["Hostname"], s.labels["gpu"]): s.value for s in families[DCGM_ENERGY].samples}


def test_the_simulated_exporter_counts_energy_by_use_and_stops_when_frozen(monkeypatch):
    now = [0.0]
    monkeypatch.setattr("cpn.sim.exporter.time.monotonic", lambda: now[0])
    exporter = SimExporter(NODES)
    exporter.occupy("gpu-0", 1, memory_gb=4.0, utilization=1.0)
    now[0] = 10.0
    first = _energy(exporter)
    assert first[("gpu-0", "0")] == pytest.approx(10 * 50 * 1000)  # idle: 50 W for 10 s, in mJ
    assert first[("gpu-0", "1")] == pytest.approx(10 * 250 * 1000)  # busy
    exporter.freeze()
    now[0] = 20.0
    assert _energy(exporter) == first


def test_config_error_names_the_field(tmp_path):
    (tmp_path / "clusters.yaml").write_text(
        "clusters: [{name: a, metrics: {scrape_interval_s: 10, frozen_after_s: 5}, node_groups: "
        "[{name: g, gpu_product: V100, gpus_per_node: 1, gpu_memory_gb: 16, cpu_cores: 4}]}]"
    )
    with pytest.raises(ConfigError, match="frozen_after_s"):
        load_profile(tmp_path)
