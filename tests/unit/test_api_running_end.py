"""A running job's predicted end and its interval in the API (issue 27, item 4): `GET /jobs/{id}` and
`GET /jobs` give the run's start plus the estimate on the card it holds, ISO 8601 with the zone, as the
web UI's job page shows it; none for a service, a narrow interval, or a node of unknown GPU type."""

from __future__ import annotations

import re
import time
from datetime import datetime

from fastapi.testclient import TestClient

import cli.client
from cli import main
from cpn.api import create_app
from cpn.auth import ApiSecurity
from cpn.clock import SimClock
from cpn.decisions import Estimate
from cpn.engine.run_end import running_ends
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore

STARTED = 1_800_000_000.0  # 2027-01-15T08:00:00Z
NODE_GPU = {("c", "n"): "v100"}


class Runtimes:
    """An estimate source: 2 h on a V100 (+-10 %, or exact for `exact/*` jobs); it records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[str, ...], tuple[str, ...]]] = []

    def estimates(self, jobs, gpu_types):
        self.calls.append((tuple(j.job_id for j in jobs), tuple(gpu_types)))
        return {
            j.job_id: {g: Estimate(7200.0, uncertainty=0.0 if j.job_id.startswith("exact/") else 0.1)}
            for j in jobs
            for g in gpu_types
        }


def run(store: JobStore, job_id: str, node: str = "n") -> None:
    store.transition(job_id, JobState.ASSIGNED, cluster="c", node=node, placement=[(node, 1)])
    store.transition(job_id, JobState.SUBMITTED)
    store.transition(job_id, JobState.RUNNING, cluster="c", node=node)


def serve(store: JobStore, source: Runtimes) -> TestClient:
    return TestClient(
        create_app(
            store,
            security=ApiSecurity.no_auth(allowed_hosts={"testserver"}),
            running_ends=lambda records: running_ends(records, source, NODE_GPU),
        )
    )


def test_a_running_jobs_predicted_end_and_interval_are_iso_8601_with_the_zone(tmp_path):
    source = Runtimes()
    with JobStore(tmp_path / "jobs.db", SimClock(STARTED)) as store:
        store.submit([JobSpec("lab/a", "ResNet-50", num_gpus=1), JobSpec("lab/queued", "ResNet-50")])
        run(store, "lab/a")
        with serve(store, source) as client:
            job = client.get("/jobs/lab/a").json()
            listed = {j["job_id"]: j for j in client.get("/jobs").json()["jobs"]}
    assert job["clock"] == "wall"
    ends = [job[k] for k in ("predicted_end_at", "predicted_end_low_at", "predicted_end_high_at")]
    assert ends == ["2027-01-15T10:00:00.000Z", "2027-01-15T09:48:00.000Z", "2027-01-15T10:12:00.000Z"]
    assert all(datetime.fromisoformat(t).utcoffset() is not None for t in ends), "each names its zone"
    assert {k: listed["lab/a"][k] for k in job if k.startswith("predicted_end")} == {
        k: job[k] for k in job if k.startswith("predicted_end")
    }
    queued = listed["lab/queued"]
    assert (
        queued["predicted_end_at"]
        is queued["predicted_end_low_at"]
        is queued["predicted_end_high_at"]
        is None
    )
    assert source.calls[-1] == (("lab/a",), ("v100",)), "the page asks about its running jobs only"


def test_no_end_for_a_service_an_unknown_card_or_an_empty_interval(tmp_path):
    source = Runtimes()
    service = JobSpec("lab/svc", "ResNet-50", kind="inference", num_gpus=1)
    with JobStore(tmp_path / "jobs.db", SimClock(STARTED)) as store:
        store.submit([service, JobSpec("lab/elsewhere", "ResNet-50"), JobSpec("exact/a", "ResNet-50")])
        run(store, "lab/svc")
        run(store, "lab/elsewhere", node="unknown")
        run(store, "exact/a")
        with serve(store, source) as client:
            listed = {j["job_id"]: j for j in client.get("/jobs").json()["jobs"]}
    assert (
        listed["lab/svc"]["predicted_end_at"] is None and listed["lab/elsewhere"]["predicted_end_at"] is None
    )
    exact = listed["exact/a"]
    assert exact["predicted_end_at"] == "2027-01-15T10:00:00.000Z"
    assert exact["predicted_end_low_at"] is exact["predicted_end_high_at"] is None, "no empty interval"
    assert source.calls == [(("exact/a",), ("v100",))]


def test_cpn_job_with_server_prints_a_running_jobs_end_and_interval(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setenv("CPN_HOME", str(tmp_path / "home"))
    with JobStore(tmp_path / "jobs.db", SimClock(STARTED)) as store:
        store.submit([JobSpec("lab/a", "ResNet-50", num_gpus=1)])
        run(store, "lab/a")
        transport = serve(store, Runtimes())._transport
        monkeypatch.setattr(
            cli.client, "client_for", lambda server: cli.client.Client(server, None, transport)
        )
        assert main(["job", "lab/a", "--server", "http://testserver"]) == 0
    monkeypatch.undo()
    time.tzset()
    line = (
        r"^predicted end\s+2027-01-15 10:00:00 UTC \(in [\d.]+ \w+\); "
        r"between 2027-01-15 09:48:00 UTC and 2027-01-15 10:12:00 UTC$"
    )
    assert re.search(line, capsys.readouterr().out, re.MULTILINE)
