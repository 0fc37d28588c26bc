"""A failed job's pod log tail travels with its end: gateway event -> scheduler -> job store -> API and CLI.

The real `kubernetes` client against the fake API server (cpn.adapters.kubernetes.fake_apiserver), the live
service built by the composition root as `cpn run` builds it.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from cli import main
from config.settings import ClustersConfig
from cpn.adapters.gateway import OOM_REASON
from cpn.adapters.kubernetes.gateway import tail
from cpn.api import REDACTED, create_app
from cpn.auth import ApiSecurity
from cpn.bootstrap import build_service
from cpn.decisions import Placement
from cpn.formats.throughput import ThroughputTable
from cpn.intake import parse_manifests
from cpn.jobs import JobSpec, JobState
from tests.kubernetes.conftest import (
    gpu_labels,
    lab_config,
    make_gateway,
    seed_taints,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

A100 = "NVIDIA-A100-SXM4-80GB"
LOG = "\n".join(
    [f"step {i} loss {1 / (i + 1):.4f}" for i in range(200)]
    + ["export HF_TOKEN=hf_abcdef123", "RuntimeError: CUDA error: an illegal memory access was encountered"]
)
MANIFEST = """
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: team
  annotations: {model_name: ResNet-50, data_size: "1", epoch: "1", batch_size: "64", total_steps: "1000"}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: train
          image: resnet:1
          resources: {limits: {nvidia.com/gpu: 1}, requests: {cpu: "2"}}
"""


def test_tail_keeps_the_last_whole_lines_within_both_bounds():
    text = "a\nbb\nccc\ndddd\n"
    assert tail(text, 2, 100) == "ccc\ndddd"
    assert tail(text, 10, 8) == "ccc\ndddd"  # 3 + 1 + 4 bytes; "bb" would make 11
    assert tail(text, 10, 3) == "ddd"  # one line longer than the bound keeps its end
    assert tail("é" * 4, 1, 3) == "é"  # never half a character
    assert tail(text, 0, 100) == "" and tail(text, 5, 0) == "" and tail("", 5, 100) == ""


def test_a_failed_end_carries_the_bounded_tail_and_a_success_carries_none(server, monkeypatch):
    monkeypatch.setattr("cpn.adapters.kubernetes.gateway.LOG_TAILS_KEPT", 1)
    server.add_node("t-0", gpu_labels("training", A100, 4, 81920), 4, taints=seed_taints("training", A100))
    gw = make_gateway(server, log_lines=50, log_bytes=400)
    gw.start()
    try:
        for name in ("bad", "good"):
            spec = JobSpec(job_id=f"team/{name}", model="resnet50", num_gpus=1, image="resnet:1", cpu=2)
            gw.submit(spec, Placement(spec.job_id, "east", "t-0", 1))
        running: list = []  # both running: their events may come in one poll or in two
        wait_for(lambda: running.extend(gw.poll_events()) or len(running) == 2 or None)
        server.finish("team", "bad", outcome="failed", log=LOG)
        (failed,) = wait_for(gw.poll_events)
        assert gw.log_tail("team/bad") == failed.log_tail
        server.finish("team", "good", log=LOG)
        (succeeded,) = wait_for(gw.poll_events)
        # Only the last LOG_TAILS_KEPT jobs' tails stay in the gateway; the failed one went with its event.
        assert gw.log_tail("team/bad") == "" and gw.log_tail("team/good") == tail(LOG, 50, 400)
    finally:
        gw.close()
    assert (failed.job_id, failed.kind) == ("team/bad", "failed")
    assert failed.log_tail == tail(LOG, 50, 400)
    lines = failed.log_tail.splitlines()
    assert lines[-1].startswith("RuntimeError: CUDA error") and len(failed.log_tail.encode()) <= 400
    assert LOG.endswith(failed.log_tail) and 5 < len(lines) < 50  # the byte bound bit first
    assert (succeeded.job_id, succeeded.kind, succeeded.log_tail) == ("team/good", "succeeded", "")


@pytest.fixture
def config(server, tmp_path) -> ClustersConfig:
    return lab_config(server, tmp_path, log_tail_lines=20)


def run_to_running(config: ClustersConfig, store_path):
    service = build_service(config, store_path, "fifo", ThroughputTable.load(), time_scale=1)
    service.start()
    (job,) = parse_manifests(MANIFEST)
    service.store.submit([job])
    assert service.scheduler.round().placed == 1
    wait_for(lambda: service.scheduler.round() and service.store.get(job.job_id).state == JobState.RUNNING)
    return service, job.job_id


def test_a_failed_jobs_log_lines_reach_the_store_the_api_and_cpn_job(server, config, tmp_path, capsys):
    store = tmp_path / "jobs.db"
    service, job_id = run_to_running(config, store)
    try:
        server.finish("team", "train", outcome="failed", log=LOG)
        wait_for(lambda: service.scheduler.round() and service.store.get(job_id).state == JobState.FAILED)
        end = service.store.history(job_id)[-1]
        assert end.to_state == JobState.FAILED
        assert end.log_tail == "\n".join(LOG.splitlines()[-20:])  # the cluster's log_tail_lines
        assert all(not t.log_tail for t in service.store.history(job_id)[:-1])

        api = create_app(service.store, security=ApiSecurity.no_auth(allowed_hosts={"testserver"}))
        with TestClient(api) as client:
            history = client.get(f"/jobs/{job_id}").json()["history"]
        shown = history[-1]["log_tail"].splitlines()
        assert shown[-1].startswith("RuntimeError: CUDA error: an illegal memory access")
        assert shown[-2] == f"export HF_TOKEN={REDACTED}" and "hf_abcdef123" not in history[-1]["log_tail"]
        assert shown[:-2] == LOG.splitlines()[-20:-2]
        assert all(h["log_tail"] == "" for h in history[:-1])
    finally:
        service.close()

    capsys.readouterr()
    assert main(["job", job_id, "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "log tail of the run that ended" in out
    assert "  RuntimeError: CUDA error: an illegal memory access was encountered" in out
    assert f"HF_TOKEN={REDACTED}" in out and "hf_abcdef123" not in out


def test_an_oom_killed_jobs_tail_goes_with_its_requeueing(server, config, tmp_path):
    service, job_id = run_to_running(config, tmp_path / "jobs.db")
    try:
        server.finish(
            "team", "train", outcome="failed", reason=OOM_REASON, log="torch.OutOfMemoryError: CUDA"
        )

        def requeued() -> bool:
            service.scheduler.round()
            return any(t.reason.startswith(OOM_REASON) for t in service.store.history(job_id))

        wait_for(requeued)
        (oom,) = [t for t in service.store.history(job_id) if t.reason.startswith(OOM_REASON)]
        assert oom.to_state == JobState.QUEUED and oom.log_tail == "torch.OutOfMemoryError: CUDA"
    finally:
        service.close()
