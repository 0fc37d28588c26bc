"""Who may use the HTTP API and how much it takes: tokens per namespace, Host and Origin, paging, redaction,
limits, a failing store. Each test goes through the real app with FastAPI's TestClient."""

from __future__ import annotations

import logging
import os

import pytest
import yaml
from fastapi.testclient import TestClient

from cpn.api import REDACTED, create_app
from cpn.auth import ApiSecurity, Authenticator, TokenFileError, create_token, load_tokens, revoke_token
from cpn.intake import parse_manifests
from cpn.jobs import JobState
from tests.unit.conftest import HOSTS

REQUIRED = {"model_name": "ResNet-50", "data_size": "20", "epoch": "10"}


def manifest(name: str, namespace: str = "team-a", env: list | None = None) -> str:
    container: dict = {
        "name": "main",
        "image": "registry.example.com/train:1",
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    if env is not None:
        container["env"] = env
    return yaml.safe_dump(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "annotations": REQUIRED},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
        }
    )


YAML = {"content-type": "application/yaml"}


def bearer(token: str, **extra: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", **YAML, **extra}


def test_tokens_file_keeps_only_hashes_and_is_private(tokens):
    path, alice, bob = tokens
    text = path.read_text()
    assert alice not in text and bob not in text
    assert [(e.name, e.namespaces) for e in load_tokens(path)] == [
        ("alice", ("team-a",)),
        ("bob", ("team-b",)),
    ]
    assert os.stat(path).st_mode & 0o077 == 0


@pytest.mark.parametrize("headers", [{}, {"authorization": "Bearer cpn_wrong"}, {"authorization": "Basic x"}])
def test_no_or_wrong_token_is_401_for_reads_and_writes(client, store, headers):
    for response in (
        client.post("/jobs", content=manifest("a"), headers={**YAML, **headers}),
        client.get("/jobs", headers=headers),
        client.get("/jobs/team-a/a", headers=headers),
    ):
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
    assert store.jobs() == []


def test_failed_authentication_is_logged_without_the_token(client, caplog):
    with caplog.at_level(logging.WARNING, logger="cpn.api"):
        client.get("/jobs", headers={"authorization": "Bearer cpn_not-a-real-token-123"})
    assert "unknown token" in caplog.text and "cpn_not-a-real-token-123" not in caplog.text


def test_a_token_writes_and_reads_only_its_namespaces(client, store, tokens):
    _, alice, bob = tokens
    assert client.post("/jobs", content=manifest("a"), headers=bearer(alice)).status_code == 201
    assert client.post("/jobs", content=manifest("b", "team-b"), headers=bearer(bob)).status_code == 201
    # alice may not write team-b, not even alongside a team-a job: nothing stored
    both = manifest("a2") + "---\n" + manifest("squat", "team-b")
    response = client.post("/jobs", content=both, headers=bearer(alice))
    assert response.status_code == 403 and "team-b" in response.json()["error"]
    assert sorted(r.job_id for r in store.jobs()) == ["team-a/a", "team-b/b"]
    # reads: alice lists and gets only team-a
    listed = client.get("/jobs", headers=bearer(alice)).json()["jobs"]
    assert [j["job_id"] for j in listed] == ["team-a/a"]
    assert client.get("/jobs/team-b/b", headers=bearer(alice)).status_code == 403
    assert client.get("/jobs/team-a/a", headers=bearer(alice)).status_code == 200


def test_revoked_and_rotated_tokens_apply_without_restart(client, tokens, monkeypatch):
    path, alice, _ = tokens
    monkeypatch.setattr(Authenticator, "RELOAD_EVERY_S", 0.0)
    assert client.get("/jobs", headers=bearer(alice)).status_code == 200
    revoke_token(path, "alice")
    assert client.get("/jobs", headers=bearer(alice)).status_code == 401
    fresh = create_token(path, "alice-2", ["team-a"])
    assert client.get("/jobs", headers=bearer(fresh)).status_code == 200


def test_env_token_may_use_every_namespace(store, monkeypatch):
    security = ApiSecurity(Authenticator(env_token="s3cret-operator-token"), allowed_hosts=HOSTS)
    with TestClient(create_app(store, security=security)) as c:
        ok = c.post("/jobs", content=manifest("x", "anything"), headers=bearer("s3cret-operator-token"))
        assert ok.status_code == 201
        assert c.get("/healthz").json() == {"status": "ok"}  # no token: up, but no counts
        counts = c.get("/healthz", headers=bearer("s3cret-operator-token")).json()["jobs"]
        assert counts["queued"] == 1


def test_token_file_errors_name_the_entry(tmp_path):
    bad = tmp_path / "t.yaml"
    bad.write_text("tokens:\n  - {name: x, sha256: abc, namespaces: [a]}\n")
    with pytest.raises(TokenFileError, match="token 1 \\(x\\): `sha256`"):
        load_tokens(bad)
    with pytest.raises(TokenFileError, match="not a namespace"):
        create_token(tmp_path / "u.yaml", "x", ["Team_A"])


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "evil.example.com"},  # DNS rebinding: a foreign name resolving to us
        {"origin": "https://evil.example.com"},  # a web page calling the API
        {"sec-fetch-site": "cross-site"},
    ],
)
def test_foreign_host_and_cross_site_requests_are_refused(client, store, tokens, headers):
    _, alice, _ = tokens
    response = client.post("/jobs", content=manifest("a"), headers=bearer(alice, **headers))
    assert response.status_code in (403, 421) and response.json()["error"]
    assert client.get("/jobs", headers=bearer(alice, **headers)).status_code in (403, 421)
    assert store.jobs() == []


def test_an_allowed_origin_is_served(store, tokens):
    path, alice, _ = tokens
    security = ApiSecurity(
        Authenticator(path), allowed_hosts=HOSTS, allowed_origins=frozenset({"https://ui.lab"})
    )
    with TestClient(create_app(store, security=security)) as c:
        response = c.post("/jobs", content=manifest("a"), headers=bearer(alice, origin="https://ui.lab"))
        assert response.status_code == 201


def test_a_body_over_the_limit_is_413_before_parsing(client, store, tokens):
    _, alice, _ = tokens
    big = manifest("a") + "#" * 70_000 + "\n"
    assert client.post("/jobs", content=big, headers=bearer(alice)).status_code == 413

    def chunks():  # no Content-Length: counted while reading
        yield manifest("a").encode()
        for _ in range(20):
            yield b"#" * 5_000 + b"\n"

    response = client.post("/jobs", content=chunks(), headers=bearer(alice))
    assert response.status_code == 413 and "64,000 bytes" in response.json()["error"]
    assert store.jobs() == []


def test_paging_walks_every_job_once(client, store, tokens):
    _, alice, bob = tokens
    docs = [manifest(f"j{i}", "team-a" if i % 3 else "team-b") for i in range(25)]
    store.submit([s for d in docs for s in parse_manifests(d)])
    seen, cursor = [], None
    while True:
        params = {"limit": 4, **({"cursor": cursor} if cursor else {})}
        page = client.get("/jobs", params=params, headers=bearer(alice)).json()
        assert len(page["jobs"]) <= 4
        seen += [j["job_id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"team-a/j{i}" for i in range(25) if i % 3]
    assert client.get("/jobs", params={"limit": 5000}, headers=bearer(alice)).status_code == 422
    assert client.get("/jobs", params={"cursor": "x"}, headers=bearer(alice)).status_code == 422
    assert "manifest" not in client.get("/jobs", headers=bearer(bob)).json()["jobs"][0]


def test_env_values_and_secret_looking_fields_are_never_returned(client, tokens):
    _, alice, _ = tokens
    env = [
        {"name": "WANDB_API_KEY", "value": "planted-secret-1"},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}},
    ]
    text = manifest("a", env=env).replace("model_name:", "db_password: planted-secret-2\n    model_name:")
    assert client.post("/jobs", content=text, headers=bearer(alice)).status_code == 201
    response = client.get("/jobs/team-a/a", headers=bearer(alice))
    assert "planted-secret" not in response.text
    returned = yaml.safe_load(response.json()["spec"]["manifest"])
    container = returned["spec"]["template"]["spec"]["containers"][0]
    assert container["env"][0] == {"name": "WANDB_API_KEY", "value": REDACTED}
    assert container["env"][1]["valueFrom"]["secretKeyRef"]["name"] == "creds"
    assert returned["metadata"]["annotations"]["db_password"] == REDACTED


def test_store_disk_full_is_503_and_nothing_is_half_written(client, store, tokens):
    _, alice, _ = tokens
    assert client.post("/jobs", content=manifest("first"), headers=bearer(alice)).status_code == 201
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")  # the database may not grow: SQLITE_FULL
    many = "---\n".join(manifest(f"j{i}", env=[{"name": "PAD", "value": "x" * 2000}]) for i in range(20))
    response = client.post("/jobs", content=many, headers=bearer(alice))
    assert response.status_code == 503 and response.json()["kind"] == "disk-full"
    assert response.headers["retry-after"]
    assert [r.job_id for r in store.jobs()] == ["team-a/first"]
    assert len(store.transitions_all()) == 1
    store._db.execute("PRAGMA max_page_count = 1073741823")  # space again: the same request now succeeds
    assert client.post("/jobs", content=many, headers=bearer(alice)).status_code == 201
    assert store.counts()[JobState.QUEUED] == 21 and len(store.transitions_all()) == 21


def test_store_read_only_is_503(client, store, tokens):
    _, alice, _ = tokens
    store._db.execute("PRAGMA query_only = ON")  # SQLite refuses every write: SQLITE_READONLY
    response = client.post("/jobs", content=manifest("a"), headers=bearer(alice))
    assert response.status_code == 503 and response.json()["kind"] == "read-only"
    store._db.execute("PRAGMA query_only = OFF")
    assert store.jobs() == []
