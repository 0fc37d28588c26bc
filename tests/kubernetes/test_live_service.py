"""The live service built by the composition root on a real (fake) cluster: a job from intake to its end,
then a restart that submits nothing twice."""

from __future__ import annotations

import pytest

from config.settings import REPO_ROOT, ClustersConfig
from cpn.bootstrap import build_service
from cpn.formats.throughput import ThroughputTable
from cpn.intake import parse_manifests
from cpn.jobs import JobState
from tests.kubernetes.conftest import lab_config, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

TENSORFLOW = REPO_ROOT / "examples" / "plan" / "volcano-tensorflow.yaml"


@pytest.fixture
def config(server, tmp_path) -> ClustersConfig:
    return lab_config(server, tmp_path)


def state(service, job_id: str) -> JobState:
    return service.store.get(job_id).state


def test_a_job_runs_to_its_end_and_a_restart_submits_nothing_twice(server, config, tmp_path):
    store = tmp_path / "jobs.db"
    table = ThroughputTable.load()
    service = build_service(config, store, "fifo", table, time_scale=1)
    service.start()
    (job,) = parse_manifests(TENSORFLOW.read_text())
    service.store.submit([job])
    assert service.scheduler.round().placed == 1
    assert state(service, job.job_id) == JobState.SUBMITTED
    workers = [
        p for p in server.pods_of("default", "tensorflow-dist-mnist") if "worker" in p["metadata"]["name"]
    ]
    assert len(workers) == 3
    wait_for(lambda: service.scheduler.round() and state(service, job.job_id) == JobState.RUNNING)
    posts = [p for m, p in server.requests if m == "POST"]
    service.close()

    # A restart on the same store: the job is found on the cluster, nothing is created again.
    restarted = build_service(config, store, "fifo", table, time_scale=1)
    restarted.start()
    server.finish("default", "tensorflow-dist-mnist")
    wait_for(lambda: restarted.scheduler.round() and state(restarted, job.job_id) == JobState.SUCCEEDED)
    assert [p for m, p in server.requests if m == "POST"] == posts
    restarted.close()
