"""One verdict everywhere, through the commands: `cpn plan`, the service `cpn run` builds and the
`schedule-round` flow reject the jobs no cluster of the demo profile can ever take in their first round,
each with the same reason. (On literal clusters, for every policy: tests/unit/test_one_verdict.py.)"""

from __future__ import annotations

import json

import pytest

from cli import main
from config.settings import load_profile
from cpn.bootstrap import build_service
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.intake import parse_manifests
from cpn.jobs import JobState
from cpn.sim.estimates import OracleEstimates
from cpn.store import JobStore
from flows.schedule import schedule_round
from tests.kubernetes.test_plan import H20_JOB

pytestmark = pytest.mark.e2e

IMPOSSIBLE = (
    H20_JOB
    + """---
apiVersion: batch/v1
kind: Job
metadata:
  name: too-wide
  annotations: {model_name: ResNet-50, data_size: "1", epoch: "1", batch_size: "64"}
spec:
  parallelism: 4
  completions: 4
  template:
    spec:
      restartPolicy: Never
      containers: [{name: m, image: x:1, resources: {limits: {nvidia.com/gpu: 8}}}]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: wants-a-lab-pool
  annotations: {model_name: ResNet-50, data_size: "1", epoch: "1", batch_size: "64"}
spec:
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {maip.mxsf.io/node.usage: gpu-lab}
      containers: [{name: m, image: x:1, resources: {limits: {nvidia.com/gpu: 1}}}]
"""
)
"""A product no cluster has, 32 GPUs (the demo's widest cluster has 28 K80), a pool no node is in."""


def rejected(store: JobStore) -> dict[str, str]:
    return {r.job_id: store.history(r.job_id)[-1].reason for r in store.jobs([JobState.SCHEDULE_FAILED])}


def test_plan_run_and_schedule_round_reject_alike_in_the_first_round(prefect_harness, tmp_path, monkeypatch):
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    monkeypatch.delenv("CPN_STORE", raising=False)
    manifests = tmp_path / "impossible.yaml"
    manifests.write_text(IMPOSSIBLE)
    jobs = parse_manifests(IMPOSSIBLE, "impossible.yaml")
    profile = load_profile()

    out = tmp_path / "plan"
    assert main(["plan", "--estimates", "oracle", "--out", str(out), str(manifests)]) == 1, (
        "rejections: exit 1"
    )
    planned = json.loads((out / "plan.json").read_text())["jobs"]
    by_plan = {j["job_id"]: j["reason"] for j in planned if j["outcome"] == "rejected"}

    table = ThroughputTable.load(GAVEL_ISOLATED)
    service = build_service(
        profile.clusters,
        ":memory:",
        profile.policy.name,
        table,
        estimator=OracleEstimates(table),
        cpu_threshold=profile.policy.cpu_threshold,
        time_scale=600.0,
    )
    try:
        service.store.submit(jobs)
        service.scheduler.round()
        by_run = rejected(service.store)
    finally:
        service.close()

    with JobStore(tmp_path / "jobs.db") as store:
        store.submit(jobs)
    schedule_round(estimates="oracle")
    with JobStore(tmp_path / "jobs.db") as store:
        by_flow = rejected(store)

    assert set(by_plan) == {"default/too-wide", "default/wants-h20", "default/wants-a-lab-pool"}
    assert by_plan == by_run == by_flow
    assert "needs 32 GPUs; no cluster has that many" in by_plan["default/too-wide"]
    assert "runs only on NVIDIA-H20" in by_plan["default/wants-h20"]
    assert "asks for gpu-lab" in by_plan["default/wants-a-lab-pool"]
