"""Why a job waits, and when the plan starts it (the forward look's interval and end with it), as `cpn job`
and `GET /jobs/{ns}/{name}` show it."""

from __future__ import annotations

import math
import re
import time

import pytest
from fastapi.testclient import TestClient

import cli.client
from cli import main
from cpn.api import create_app
from cpn.auth import ApiSecurity
from cpn.clock import SimClock
from cpn.decisions import Estimate, Waiting
from cpn.engine.scheduler import Scheduler
from cpn.inventory import Node
from cpn.jobs import JobSpec, JobState
from cpn.policies import make_policy
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import GroundTruth
from cpn.store import JobStore
from cpn.ui.pages import mount_ui
from tests.unit.test_scheduler import TABLE


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
    assert re.search(r"^predicted start\s+t = 1\.0 h \(simulated\)$", out, re.MULTILINE)
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


class Spread:
    """Every job runs 1,000 s on every GPU type, give or take 25%."""

    def estimates(self, jobs, gpu_types):
        return {j.job_id: {t: Estimate(1000.0, uncertainty=0.25) for t in gpu_types} for j in jobs}


def job(name: str, priority: int = 0) -> JobSpec:
    return JobSpec(
        job_id=f"team/{name}", model="ResNet-18", batch_size=32, total_steps=100, priority=priority
    )


def rounds(path, *arrivals: tuple[JobSpec, ...]) -> JobStore:
    """A round of greedy (a policy the forward look replays: the default milp keeps its own plan and gives
    no predicted end) on one simulated card per batch of `arrivals`, all at time 0."""
    clock = SimClock()
    store = JobStore(path, clock=clock)
    card = Node("a", "a-0", "Tesla-V100-SXM2-16GB", 1, 16, 32, "training")
    scheduler = Scheduler(
        store,
        SimulatedGateway([card], GroundTruth(TABLE), clock),
        make_policy("greedy"),
        clock,
        estimator=Spread(),
    )
    for batch in arrivals:
        store.submit(batch)
        scheduler.round()
    return store


@pytest.mark.parametrize("where", ["--store", "--server"])
def test_cpn_job_prints_the_predicted_start_its_interval_and_end_and_why_it_moved(
    where, tmp_path, monkeypatch, capsys
):
    path = tmp_path / "jobs.db"
    store = rounds(path, (job("first"), job("second")), (job("urgent", priority=5),))
    assert store.get("team/first").state is JobState.RUNNING  # the card is busy until 1000 s
    app = create_app(store, security=ApiSecurity.no_auth(allowed_hosts={"testserver"}), clock="simulated")
    transport = TestClient(app)._transport
    monkeypatch.setattr(cli.client, "client_for", lambda server: cli.client.Client(server, None, transport))
    target = str(path) if where == "--store" else "http://testserver"
    with store:
        assert main(["job", "team/second", where, target]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"^predicted start\s+t = 33\.3 min \(simulated\); between t = 26\.7 min \(simulated\) and "
        r"t = 41\.7 min \(simulated\), ends t = 50\.0 min \(simulated\)$",
        out,
        re.MULTILINE,
    )
    assert re.search(r"^moved\s+team/urgent arrived with higher priority$", out, re.MULTILINE)


def test_the_api_returns_the_predicted_interval_and_end_of_a_waiting_job_only(tmp_path):
    store = rounds(tmp_path / "jobs.db", (job("first"), job("second")))
    app = create_app(store, security=ApiSecurity.no_auth(allowed_hosts={"testserver"}), clock="simulated")
    with TestClient(app) as client:
        second = client.get("/jobs/team/second").json()
        first = client.get("/jobs/team/first").json()
    assert (second["predicted_start_at"], second["predicted_end_at"]) == (1000.0, 2000.0)
    assert (second["predicted_start_low_at"], second["predicted_start_high_at"]) == (800.0, 1250.0)
    assert second["prediction_moved"] is None
    keys = ("predicted_end_at", "predicted_start_low_at", "predicted_start_high_at", "prediction_moved")
    assert [first[k] for k in keys] == [None] * 4


def test_on_the_wall_clock_the_interval_is_in_utc_and_a_service_never_ends_in_the_api_and_the_ui(tmp_path):
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    store = JobStore(tmp_path / "jobs.db", clock=SimClock(now))
    store.submit([JobSpec(job_id="team/svc", model="m", kind="inference")])
    why = "team/x ended later than predicted"
    store.set_waiting(
        [Waiting("team/svc", "capacity", "all busy", now + 600, math.inf, now + 480, now + 750, why)]
    )
    security = ApiSecurity.no_auth(allowed_hosts={"testserver"})
    app = mount_ui(create_app(store, security=security), store, security, now=lambda: now)
    with TestClient(app) as client:
        svc = client.get("/jobs/team/svc").json()
        page = client.get("/ui/jobs/team/svc").text
    assert (svc["clock"], svc["predicted_start_at"]) == ("wall", "2023-11-14T22:23:20.000Z")
    low_high = (svc["predicted_start_low_at"], svc["predicted_start_high_at"])
    assert low_high == ("2023-11-14T22:21:20.000Z", "2023-11-14T22:25:50.000Z")
    assert (svc["predicted_end_at"], svc["prediction_moved"]) == (None, why)
    local = "%Y-%m-%d %H:%M:%S %Z"  # pages show local time with its zone
    low, high = (time.strftime(local, time.localtime(now + d)) for d in (480, 750))
    assert f'<dd id="start-interval">between {low} and {high}</dd>' in page
    assert '<dd id="predicted-end">never</dd>' in page and f'<dd id="prediction-moved">{why}</dd>' in page
