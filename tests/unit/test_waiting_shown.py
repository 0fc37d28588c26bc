"""Why a job waits, and when the plan starts it, as `cpn job` and `GET /jobs/{ns}/{name}` show it."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from cli import main
from cpn.api import create_app
from cpn.auth import ApiSecurity
from cpn.clock import SimClock
from cpn.decisions import Waiting
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore


def stored(path) -> JobStore:
    store = JobStore(path, clock=SimClock())
    store.submit([JobSpec(job_id="team/wide", model="m", num_gpus=8), JobSpec(job_id="team/ok", model="m")])
    store.set_waiting([Waiting("team/wide", "gang", "needs 8 cards on one node; at most 4 free", 3600.0)])
    store.transition("team/ok", JobState.ASSIGNED, cluster="c", node="n1", placement=[("n1", 1)])
    return store


def test_cpn_job_prints_the_waiting_reason_and_predicted_start(tmp_path, capsys):
    stored(tmp_path / "jobs.db").close()
    assert main(["job", "team/wide", "--store", str(tmp_path / "jobs.db")]) == 0
    out = capsys.readouterr().out
    assert "gang: needs 8 cards on one node; at most 4 free" in out
    assert re.search(r"^predicted start\s+3600\.0s$", out, re.MULTILINE)
    assert main(["job", "team/ok", "--store", str(tmp_path / "jobs.db")]) == 0
    out = capsys.readouterr().out
    assert "waiting" not in out and "n1:1" in out


def test_the_api_returns_the_waiting_reason_placement_and_predicted_start(tmp_path):
    store = stored(tmp_path / "jobs.db")
    app = create_app(store, security=ApiSecurity.no_auth(allowed_hosts={"testserver"}), clock="simulated")
    with TestClient(app) as client:
        wide = client.get("/jobs/team/wide").json()
        ok = client.get("/jobs/team/ok").json()
    assert wide["waiting"] == {"code": "gang", "detail": "needs 8 cards on one node; at most 4 free"}
    assert (wide["clock"], wide["predicted_start_at"], wide["gpus"]) == ("simulated", 3600.0, 0)
    assert ok["waiting"] is None and ok["placement"] == [{"node": "n1", "gpus": 1}] and ok["gpus"] == 1
