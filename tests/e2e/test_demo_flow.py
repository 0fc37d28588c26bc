"""The end-to-end demo flow under Prefect's test harness."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from cpn.jobs import JobState
from cpn.store import JobStore
from flows.demo import demo

pytestmark = pytest.mark.e2e


def test_demo_flow_drains_queue_and_reports(prefect_harness, tmp_path):
    summary = demo(out=str(tmp_path), jobs=30, seed=3)

    written = json.loads((tmp_path / "summary.json").read_text())
    assert written == summary
    for key in (
        "jobs",
        "succeeded",
        "failed",
        "oom",
        "makespan_s",
        "mean_jct_s",
        "p99_jct_s",
        "mean_wait_s",
        "gpu_utilization",
    ):
        assert key in written
    assert written["jobs"] == 30
    assert written["succeeded"] + written["failed"] + written["unfinished"] == 30
    assert written["oom"] == 0, "the demo's memory-aware policy must not place a job on a too-small card"
    assert 0 < written["gpu_utilization"] <= 1
    with Image.open(tmp_path / "gantt.png") as img:
        assert img.size[0] > 500

    store = JobStore(tmp_path / "jobs.db")
    assert store.counts().get(JobState.QUEUED, 0) == 0
    assert sum(store.counts().values()) == 30


def test_naive_fifo_hits_oom_where_memory_aware_does_not(prefect_harness, tmp_path):
    naive = demo(out=str(tmp_path / "naive"), jobs=40, seed=5, policy="fifo-naive")
    aware = demo(out=str(tmp_path / "aware"), jobs=40, seed=5, policy="fifo")
    assert naive["oom"] > 0
    assert aware["oom"] == 0
