"""Cancel from the HTTP API (`DELETE /jobs/{ns}/{name}`) and the shell (`cpn job cancel`): who may, what
each answer says, and that a refused or unknown cancel changes nothing. What the scheduler does with a
cancel is the gateway contract's (tests/contract/test_cancel_contract.py)."""

from __future__ import annotations

from cli import main
from cpn.intake import parse_manifests
from cpn.jobs import JobState
from cpn.store import JobStore
from tests.unit.test_api_security import bearer, manifest


def test_cancel_answers_by_state_and_is_idempotent(client, store, tokens):
    _, alice, _ = tokens
    body = manifest("queued") + "---\n" + manifest("running")
    assert client.post("/jobs", content=body, headers=bearer(alice)).status_code == 201
    for state in (JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING):
        store.transition("team-a/running", state)

    first = client.delete("/jobs/team-a/queued", headers=bearer(alice))
    assert first.status_code == 200
    assert first.json() == {
        "job_id": "team-a/queued",
        "status": "cancelled",
        "state": "cancelled",
        "message": "cancelled: it has left the queue",
    }
    again = client.delete("/jobs/team-a/queued", headers=bearer(alice))
    assert again.status_code == 200 and again.json()["status"] == "finished"
    assert "already ended (cancelled); nothing changed" in again.json()["message"]

    for _ in range(2):
        on_cluster = client.delete("/jobs/team-a/running", headers=bearer(alice))
        assert on_cluster.status_code == 202
        assert (on_cluster.json()["status"], on_cluster.json()["state"]) == ("requested", "running")
    assert [(r.job_id, r.requested_by) for r in store.cancel_requests()] == [("team-a/running", "alice")]
    history = client.get("/jobs/team-a/queued", headers=bearer(alice)).json()["history"]
    assert (history[-1]["to"], history[-1]["reason"]) == ("cancelled", "cancelled by alice")


def test_cancel_with_another_namespaces_token_is_403_and_an_unknown_job_404(client, store, tokens):
    _, alice, bob = tokens
    assert client.post("/jobs", content=manifest("a"), headers=bearer(alice)).status_code == 201
    refused = client.delete("/jobs/team-a/a", headers=bearer(bob))
    assert refused.status_code == 403 and "team-a" in refused.json()["error"]
    assert client.delete("/jobs/team-a/nope", headers=bearer(alice)).status_code == 404
    assert client.delete("/jobs/team-a/a", headers={"authorization": "Bearer cpn_wrong"}).status_code == 401
    cross_site = client.delete("/jobs/team-a/a", headers=bearer(alice, origin="https://evil.example"))
    assert cross_site.status_code == 403
    assert store.get("team-a/a").state == JobState.QUEUED and store.cancel_requests() == []


def test_cpn_job_cancel_cancels_in_the_store_and_says_what_happened(tmp_path, capsys):
    db = tmp_path / "jobs.db"
    with JobStore(db) as s:
        s.submit(parse_manifests(manifest("a"), "test"))
    assert main(["job", "--store", str(db), "cancel", "team-a/a"]) == 0
    assert "team-a/a: cancelled: it has left the queue" in capsys.readouterr().out
    assert main(["job", "--store", str(db), "cancel", "team-a/a"]) == 0
    assert "already ended (cancelled)" in capsys.readouterr().out
    assert main(["job", "--store", str(db), "cancel", "team-a/nope"]) == 1
    assert "no job team-a/nope" in capsys.readouterr().err
    assert main(["job", "--store", str(db), "show", "team-a/a"]) == 2
    with JobStore(db) as s:
        (last,) = s.history("team-a/a")[-1:]
    assert last.to_state == JobState.CANCELLED and "(cpn job cancel)" in last.reason
