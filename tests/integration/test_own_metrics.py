"""cpn's own metrics as Prometheus sees them: `cpn run` on the demo's simulated clusters, a real Prometheus
scraping its `/metrics`; PromQL over the scraped series gives the queue depth per state that `GET /jobs`
lists and the cards per cluster that the jobs on them and the clusters' nodes account for."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from config.settings import DEMO_DIR, load_profile
from tests.e2e.test_cpn_run import start, submit_generated
from tests.integration.servers import free_port, prometheus, stop

pytestmark = [pytest.mark.integration, pytest.mark.prometheus]

HOLDING = {"submitted", "running"}
"""States of jobs that hold cards on their cluster."""


def promql(url: str, query: str) -> dict[tuple[str, ...], float]:
    result = httpx.get(f"{url}/api/v1/query", params={"query": query}, timeout=10).json()["data"]["result"]
    return {tuple(r["metric"].values()): float(r["value"][1]) for r in result}


def jobs(port: int) -> list[dict]:
    out, cursor = [], None
    while True:
        params = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"http://127.0.0.1:{port}/jobs", params=params, timeout=10).json()
        out += page["jobs"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out


def test_promql_over_scraped_series_matches_the_api_and_the_inventory(tmp_path: Path):
    port = free_port()
    # Real time (scale 1): the demo's jobs run for simulated hours, so the queue holds still while compared.
    proc = start(tmp_path / "home", port, tmp_path / "cpn.log", ("--estimates", "oracle", "--interval", "1"))
    try:
        submit_generated(port, tmp_path, jobs=40, seed=3)
        scrape = [{"job_name": "cpn", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
        with prometheus(tmp_path, scrape) as url:
            totals = Counter()
            for c in load_profile(DEMO_DIR).clusters.clusters:
                totals[c.name] += sum(g.count * g.gpus_per_node for g in c.node_groups)
            deadline, seen = time.monotonic() + 60, None
            while time.monotonic() < deadline:
                listed = jobs(port)
                depth = Counter(j["state"] for j in listed)
                used = Counter()
                for j in listed:
                    if j["state"] in HOLDING:
                        used[j["cluster"]] += j["gpus"]
                scraped_depth = promql(url, "sum by (state) (cpn_jobs)")
                scraped_used = promql(url, 'sum by (cluster) (cpn_gpus{status="used"})')
                scraped_total = promql(url, "sum by (cluster) (cpn_gpus)")
                seen = (depth, scraped_depth, used, scraped_used, scraped_total)
                if (
                    {(s,): float(n) for s, n in depth.items()} == scraped_depth
                    and {(c,): float(n) for c, n in totals.items()} == scraped_total
                    and all(scraped_used.get((c,), 0.0) == used[c] for c in totals)
                    and depth["running"] + depth["submitted"] > 0
                ):
                    break
                time.sleep(1)
            else:
                raise AssertionError(f"scraped series never matched GET /jobs and the inventory: {seen}")
            leader = promql(url, "cpn_leader")
            assert list(leader.values()) == [1.0]
            stages = promql(url, "sum by (stage) (cpn_round_stage_duration_seconds_count)")
            assert {("collect",), ("snapshot",), ("decide",), ("submit",)} <= set(stages)
            assert promql(url, 'sum(cpn_submissions_total{outcome="accepted"})')[()] >= depth["running"]
    finally:
        stop(proc)
