"""`cpn jobs`, `cpn job` and `cpn job logs` with `--server`: the CLI as a client of the HTTP API (cli.client),
over the API's app in process (FastAPI's TestClient transport); logs from the simulated clusters' gateway."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

import cli.client
from cli import main
from cpn.api import create_app
from cpn.auth import ApiSecurity, Authenticator, create_token
from cpn.clock import SimClock
from cpn.decisions import Placement
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore
from tests.contract.test_gateway_contract import job, simulated
from tests.unit.test_api_security import HOSTS

SERVER = "http://testserver"


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A store with a team-a and a team-b job, the simulated clusters running team-a/train, and the CLI's
    `--server` answered by an API over them (simulated clock); returns (store, sim, alice's, bob's token)."""
    harness = simulated()
    sim = harness.gateway
    store = JobStore(tmp_path / "jobs.db", sim.clock)
    store.submit([job("team-a/train"), JobSpec("team-b/other", "m")])
    for state in (JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING):
        store.transition("team-a/train", state, cluster="east", node="gpu-0")
    sim.submit(job("team-a/train"), Placement("team-a/train", "east", "gpu-0", 1))
    sim.advance(10.0)
    tokens = tmp_path / "tokens.yaml"
    alice, bob = create_token(tokens, "alice", ["team-a"]), create_token(tokens, "bob", ["team-b"])
    security = ApiSecurity(Authenticator(tokens), allowed_hosts=HOSTS)
    app = create_app(store, security=security, logs=sim.logs, clock="simulated")
    transport = TestClient(app)._transport
    monkeypatch.setattr(
        cli.client, "client_for", lambda server: cli.client.Client(server, cli.client.token(), transport)
    )
    monkeypatch.setenv("CPN_HOME", str(tmp_path / "home"))
    yield store, sim, alice, bob
    store.close()


def test_a_namespace_token_lists_only_its_namespaces_jobs(served, monkeypatch, capsys):
    _, _, alice, bob = served
    monkeypatch.setenv("CPN_TOKEN", alice)
    assert main(["jobs", "--server", SERVER]) == 0
    out = capsys.readouterr().out
    assert "team-a/train" in out and "team-b" not in out and "simulated" in out
    monkeypatch.setenv("CPN_TOKEN", bob)
    assert main(["jobs", "--server", SERVER]) == 0
    out = capsys.readouterr().out
    assert "team-b/other" in out and "team-a" not in out


def test_the_token_file_in_cpn_home_is_used_without_cpn_token(served, monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("CPN_TOKEN", raising=False)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "token").write_text(served[2] + "\n")
    assert main(["job", "team-a/train", "--server", SERVER]) == 0
    assert "running" in capsys.readouterr().out


def test_logs_of_a_running_then_a_finished_job_come_from_the_cluster(served, monkeypatch, capsys):
    _, sim, alice, _ = served
    monkeypatch.setenv("CPN_TOKEN", alice)
    assert main(["job", "--server", SERVER, "--tail", "2", "logs", "team-a/train"]) == 0
    running = capsys.readouterr()
    assert "from its cluster" in running.err
    assert [line.split("/")[1] for line in running.out.splitlines()] == ["600", "600"]
    assert running.out.splitlines()[-1] != "step 600/600"
    sim.advance(1e6)
    assert main(["job", "--server", SERVER, "--tail", "2", "logs", "team-a/train"]) == 0
    assert capsys.readouterr().out.splitlines() == ["step 600/600", "[30.0s] succeeded"]


def test_a_finished_jobs_log_is_its_stored_tail_once_the_cluster_has_none(tmp_path):
    with JobStore(tmp_path / "jobs.db", SimClock(1.7e9)) as store:
        store.submit([JobSpec("ns/a", "m"), JobSpec("ns/queued", "m")])
        for state in (JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING):
            store.transition("ns/a", state)
        store.transition(
            "ns/a", JobState.FAILED, reason="Error", log_tail="loading\nHF_TOKEN=hf_secret\nboom"
        )
        app = create_app(store, security=ApiSecurity.no_auth(allowed_hosts={"testserver"}))
        with TestClient(app) as client:
            answer = client.get("/jobs/ns/a/logs", params={"tail": 2}).json()
            assert answer == {"job_id": "ns/a", "source": "store", "log": "HF_TOKEN=<redacted>\nboom"}
            none = client.get("/jobs/ns/queued/logs")
            assert none.status_code == 404 and "no log of ns/queued (state queued)" in none.json()["error"]
            job_ = client.get("/jobs/ns/a").json()
    assert job_["clock"] == "wall" and job_["accepted_at"] == "2023-11-14T22:13:20.000Z"
    assert "submitted_at" not in job_ and job_["history"][-1]["at"] == "2023-11-14T22:13:20.000Z"


def test_an_unknown_job_and_a_wrong_token_say_what_to_do(served, monkeypatch, capsys):
    monkeypatch.setenv("CPN_TOKEN", served[2])
    assert main(["job", "--server", SERVER, "logs", "team-a/nope"]) == 1
    assert "team-a/nope" in capsys.readouterr().err
    monkeypatch.setenv("CPN_TOKEN", "cpn_wrong")
    assert main(["jobs", "--server", SERVER]) == 1
    err = capsys.readouterr().err
    assert "unknown token" in err and "CPN_TOKEN" in err and "cpn token create" in err


def test_logs_without_a_server_and_store_with_server_are_refused(tmp_path, capsys):
    assert main(["job", "logs", "ns/a", "--store", str(tmp_path / "jobs.db")]) == 2
    assert "--server URL" in capsys.readouterr().err
    assert main(["jobs", "--server", SERVER, "--store", str(tmp_path / "jobs.db")]) == 2
