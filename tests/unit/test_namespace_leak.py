"""A namespace token sees its namespaces' jobs only, on every surface that names jobs: `GET /jobs`, a job's
answer (its waiting reason, why its prediction moved, its transitions), `GET /teams`, and the web UI's
queue, job and clusters pages (the Gantt). Each surface is read with two namespaces' tokens: neither
answer body holds the other namespace's job ids, while a token for every namespace sees them all."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from cpn.api import create_app
from cpn.auth import HIDDEN_JOB, ApiSecurity, Authenticator, Principal, create_token, hide_other_jobs
from cpn.decisions import Team, Teams, Waiting
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec, JobState
from cpn.ui.capacity import Capacity
from cpn.ui.pages import mount_ui
from cpn.views.team_board import TeamBoard
from tests.unit.conftest import HOSTS

NODE = Node("c1", "n-0", "Tesla-V100-SXM2-16GB", 4, 16, 32, "training")
A_JOBS = ("team-a/train-1", "team-a/wait-1")
B_JOBS = ("team-b/train-7", "team-b/wait-7")


def _story(store) -> None:
    """Each namespace has a job running on c1/n-0 and one waiting whose texts name the other's jobs."""
    store.submit([JobSpec(j, "ResNet-50", num_gpus=1) for j in A_JOBS + B_JOBS])
    for running, other in (("team-a/train-1", "team-b/train-7"), ("team-b/train-7", "team-a/train-1")):
        store.transition(running, JobState.ASSIGNED, cluster="c1", node="n-0", placement=[("n-0", 1)])
        store.transition(running, JobState.SUBMITTED)
        store.transition(running, JobState.RUNNING, reason=f"started beside {other} on c1/n-0")
    store.set_waiting(
        [
            Waiting(
                "team-a/wait-1",
                "reserved",
                "the cards it could use are held for team-b/wait-7",
                100.0,
                moved="team-b/wait-7 arrived with higher priority; "
                "the predicted end of team-a/train-1 changed",
            ),
            Waiting("team-b/wait-7", "reserved", "the cards it could use are held for team-a/wait-1", 90.0),
        ]
    )


@pytest.fixture
def app_and_tokens(store, tmp_path):
    _story(store)
    path = tmp_path / "tokens.yaml"
    tokens = {
        "a": create_token(path, "alice", ["team-a"]),
        "b": create_token(path, "bob", ["team-b"]),
        "all": create_token(path, "ops", ["*"]),
    }
    security = ApiSecurity(Authenticator(path), allowed_hosts=HOSTS)
    capacity = Capacity()
    for t in (10.0, 20.0):
        capacity.record((NodeState(NODE, 2, running=("team-a/train-1", "team-b/train-7")),), t)
    teams = Teams(
        (Team("a", quota=(("v100", 2),)), Team("b", quota=(("v100", 2),)), Team("default")),
        {"team-a": "a", "team-b": "b"},
    )
    board = TeamBoard(teams, (NODE,))
    app = create_app(store, security=security, teams=board)
    mount_ui(app, store, security, capacity.view, now=lambda: 50.0, teams=board)
    with TestClient(app) as client:
        yield client, tokens


SURFACES = {
    "api list": lambda ns: "/jobs",
    "api job": lambda ns: f"/jobs/team-{ns}/wait-{'1' if ns == 'a' else '7'}",
    "api running job": lambda ns: f"/jobs/team-{ns}/train-{'1' if ns == 'a' else '7'}",
    "api teams": lambda ns: "/teams",
    "ui queue": lambda ns: "/ui/queue",
    "ui job": lambda ns: f"/ui/jobs/team-{ns}/wait-{'1' if ns == 'a' else '7'}",
    "ui running job": lambda ns: f"/ui/jobs/team-{ns}/train-{'1' if ns == 'a' else '7'}",
    "ui clusters": lambda ns: "/ui/clusters",
}


@pytest.mark.parametrize("surface", SURFACES)
def test_a_namespace_token_never_sees_another_namespaces_job_ids(app_and_tokens, surface):
    client, tokens = app_and_tokens
    for mine, others, own_jobs in (("a", B_JOBS, A_JOBS), ("b", A_JOBS, B_JOBS)):
        path = SURFACES[surface](mine)
        response = client.get(path, headers={"authorization": f"Bearer {tokens[mine]}"})
        assert response.status_code == 200, response.text
        leaked = [j for j in others if j in response.text]
        assert leaked == [], f"{surface} shows {leaked} to team-{mine}'s token"
        if surface != "api teams":  # a teams row names no job at all
            assert any(j in response.text for j in own_jobs)


@pytest.mark.parametrize("surface", ["api job", "ui job", "ui clusters", "api list"])
def test_a_token_for_every_namespace_sees_every_job(app_and_tokens, surface):
    client, tokens = app_and_tokens
    text = client.get(SURFACES[surface]("a"), headers={"authorization": f"Bearer {tokens['all']}"}).text
    assert "team-b/wait-7" in text or "team-b/train-7" in text


def test_the_hidden_ids_read_as_another_namespaces_job_and_a_cluster_node_stays(app_and_tokens):
    client, tokens = app_and_tokens
    job = client.get("/jobs/team-a/wait-1", headers={"authorization": f"Bearer {tokens['a']}"}).json()
    assert job["waiting"]["detail"] == f"the cards it could use are held for {HIDDEN_JOB}"
    assert job["prediction_moved"].startswith(f"{HIDDEN_JOB} arrived with higher priority")
    assert "team-a/train-1" in job["prediction_moved"]  # its own job stays named
    running = client.get("/jobs/team-a/train-1", headers={"authorization": f"Bearer {tokens['a']}"}).json()
    assert running["history"][-1]["reason"] == f"started beside {HIDDEN_JOB} on c1/n-0"


def test_hide_other_jobs_hides_only_ids_the_store_knows_outside_the_callers_namespaces():
    known = {"vision/train-3", "nlp/bert.v2"}
    alice = Principal("alice", frozenset({"nlp"}))
    text = "preempted for vision/train-3: cards gpu-east/node-1 x2; nlp/bert.v2 waits; vision/train-3."
    assert hide_other_jobs(text, alice, lambda ids: [i for i in ids if i in known]) == (
        f"preempted for {HIDDEN_JOB}: cards gpu-east/node-1 x2; nlp/bert.v2 waits; {HIDDEN_JOB}."
    )
    everyone = Principal("ops", None)
    assert hide_other_jobs(text, everyone, lambda ids: known) == text
