"""A frozen dcgm-exporter against a real Prometheus: it keeps serving the same values, every scrape stamps
them afresh, and only the energy counter that stopped growing gives it away."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

import pytest
import yaml

from cli import main
from cpn.engine.live_load import apply_metrics
from cpn.inventory import NodeState
from tests.integration import test_prometheus_metrics as base
from tests.integration.test_prometheus_metrics import NODES, SCRAPE_S, cluster_config, sample_when, source

exporter, prom = base.exporter, base.prom
"""The Prometheus tests' fixtures: the simulated exporter, and a real Prometheus scraping it every 1 s."""

pytestmark = [pytest.mark.integration, pytest.mark.prometheus, pytest.mark.timeout(120)]

WINDOW_S = 3.0
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
GPU_SERIES = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", ENERGY}


def growth(url: str) -> dict[tuple[str, str], float]:
    """(node, card) -> what the energy counter grew over the window, straight from Prometheus's API."""
    query = urllib.parse.urlencode({"query": f"increase({ENERGY}[{WINDOW_S:g}s])"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as response:
        result = json.load(response)["data"]["result"]
    return {(r["metric"]["Hostname"], r["metric"]["gpu"]): float(r["value"][1]) for r in result}


def test_ok_while_the_energy_grows_then_frozen_when_the_exporter_freezes(tmp_path, exporter, prom):
    ex, _ = exporter
    metrics = source(prom, frozen_after_s=WINDOW_S)
    cards = {(n.name, str(i)) for n in NODES for i in range(n.gpu_count)}

    # Ok before: every card judged (two samples or more in the window), every one growing.
    m = sample_when(metrics, lambda m: m.health == "ok" and set(growth(prom)) == cards, "judged, healthy")
    deadline = time.monotonic() + WINDOW_S + 2 * SCRAPE_S
    while time.monotonic() < deadline:
        m = metrics.sample()["site-a"]
        assert (m.health, m.frozen) == ("ok", ()), m.detail
        time.sleep(0.25)
    assert all(v > 0 for v in growth(prom).values())
    assert {s.name: s.state for s in m.series}[ENERGY] == "ok"

    ex.freeze()
    frozen_at = time.monotonic()
    m = sample_when(metrics, lambda m: len(m.frozen) == len(cards), "every card frozen")
    took = time.monotonic() - frozen_at
    states = {s.name: s.state for s in m.series}
    # Sample times stay fresh (the exporter stamps nothing; Prometheus stamps each scrape): not stale.
    assert {states[name] for name in GPU_SERIES} == {"frozen"}
    assert {s.age_s <= 3 * SCRAPE_S for s in m.series} == {True}
    assert states["node_memory_MemAvailable_bytes"] == "ok"
    assert m.health == "degraded" and "did not grow in 3 s" in m.detail and "inventory alone" in m.detail
    assert all(r.gpus == () for r in m.nodes.values())
    # Decided on inventory alone: every card the inventory counts free stays free.
    inventory = tuple(NodeState(node, free_gpus=node.gpu_count) for node in NODES)
    assert [s.free_gpus for s in apply_metrics(inventory, {"site-a": m})] == [n.gpu_count for n in NODES]

    config = tmp_path / "config"
    config.mkdir()
    (config / "clusters.yaml").write_text(yaml.safe_dump(cluster_config(prom, frozen_after_s=WINDOW_S)))
    out = tmp_path / "check.json"
    assert main(["metrics", "check", "--config", str(config), "--json", str(out)]) == 1
    report = json.loads(out.read_text())["clusters"]["site-a"]
    assert {s["state"] for s in report["series"] if s["name"] in GPU_SERIES} == {"frozen"}
    assert len(report["frozen_cards"]) == len(cards)
    print(f"every card frozen {took:.1f} s after the exporter froze (window {WINDOW_S:g} s)")
