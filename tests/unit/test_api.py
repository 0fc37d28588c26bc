"""The HTTP intake via FastAPI's TestClient: status codes, JSON errors, the store untouched on errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cpn.api import create_app
from cpn.auth import ApiSecurity
from cpn.jobs import JobState

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "manifests"
BAD = REPO / "tests" / "data" / "bad_manifests"
YAML = {"content-type": "application/yaml"}


@pytest.fixture
def client(store):
    with TestClient(create_app(store, security=ApiSecurity.no_auth(allowed_hosts={"testserver"}))) as c:
        yield c


def post_file(client: TestClient, name: str, folder: Path = EXAMPLES):
    return client.post("/jobs", content=(folder / name).read_bytes(), headers=YAML)


def outcomes(response) -> list[dict]:
    """Each job's id and status in a POST /jobs answer (each also says what was read: `read`)."""
    return [{"job_id": j["job_id"], "status": j["status"]} for j in response.json()["jobs"]]


def test_post_yaml_creates_jobs(client, store):
    response = post_file(client, "queue.yaml")
    assert response.status_code == 201
    assert list(response.json()) == ["jobs"]
    assert outcomes(response) == [
        {"job_id": "default/lm-small", "status": "created"},
        {"job_id": "default/recommendation-bs2048", "status": "created"},
        {"job_id": "default/cyclegan", "status": "created"},
    ]
    assert store.counts()[JobState.QUEUED] == 3


def test_the_answer_says_what_was_read_of_each_job(client):
    lm_small, _, cyclegan = post_file(client, "queue.yaml").json()["jobs"]
    assert lm_small["read"] == {
        "kind": "training",
        "pods": 1,
        "gpus_per_pod": [1],
        "gpus": 1,
        "gpus_from": 'resources.limits["nvidia.com/gpu"] of the pods\' containers',
        "gpu_products": [],
        "node_pools": ["hybrid", "training"],
        "priority": 0,
        "gpu_share": None,
        "gpu_mem_gb": None,
        "gpu_memory_min_gb": None,
        "cpu": 1.0,
        "notes": [],
        "workload": "batch/v1 Job",
        "name_from": "",
    }
    assert cyclegan["read"]["gpus_from"] == (
        "annotation gpu_count: 1 per pod of spec.tasks[0].template, no nvidia.com/gpu limit"
    )
    shown = client.get("/jobs/default/cyclegan").json()["read"]
    assert shown == cyclegan["read"]


def test_reposting_is_200_with_already_exists(client, store):
    post_file(client, "training-job.yaml")
    again = post_file(client, "training-job.yaml")
    assert again.status_code == 200
    assert outcomes(again) == [{"job_id": "team-vision/resnet50-bs64", "status": "already_exists"}]
    assert len(store.history("team-vision/resnet50-bs64")) == 1


def test_json_body_with_manifest(client, store):
    text = (EXAMPLES / "volcano-job.yaml").read_text()
    response = client.post("/jobs", json={"manifest": text})
    assert response.status_code == 201
    assert store.get("default/transformer-wmt").spec.num_gpus == 4


@pytest.mark.parametrize(
    "content_type", ["text/plain; charset=utf-8", "application/x-www-form-urlencoded", ""]
)
def test_types_a_web_page_can_send_unasked_are_415(client, store, content_type):
    text = (EXAMPLES / "inference-deployment.yaml").read_text()
    response = client.post("/jobs", content=text, headers={"content-type": content_type})
    assert response.status_code == 415 and "application/yaml" in response.json()["error"]
    assert store.jobs() == []


def test_yaml_content_types(client):
    text = (EXAMPLES / "inference-deployment.yaml").read_text()
    response = client.post("/jobs", content=text, headers={"content-type": "text/yaml; charset=utf-8"})
    assert response.status_code == 201


def test_bad_document_is_422_with_problems_and_stores_nothing(client, store):
    response = post_file(client, "one-bad-document.yaml", BAD)
    assert response.status_code == 422
    body = response.json()
    assert "nothing was stored" in body["error"]
    assert [(p["document"], p["name"], p["field"]) for p in body["problems"]] == [
        (2, "train-a", "metadata.annotations.epoch"),
        (3, "train-b", "metadata.annotations.gpu_count"),
    ]
    assert store.jobs() == []


def test_malformed_yaml_is_422(client, store):
    response = client.post("/jobs", content=b"kind: Job\nmetadata: [\n", headers=YAML)
    assert response.status_code == 422
    (problem,) = response.json()["problems"]
    assert problem["document"] == 1 and "not valid YAML" in problem["reason"]
    assert store.jobs() == []


@pytest.mark.parametrize(
    ("content", "headers"),
    [
        (b"\xff\xfe\x00bad", YAML),
        (b"{not json", {"content-type": "application/json"}),
        (b'{"yaml": "x"}', {"content-type": "application/json"}),
        (b"[" * 100_000, {"content-type": "application/json"}),  # deeper than json's recursion limit
    ],
)
def test_unreadable_body_is_400(client, store, content, headers):
    response = client.post("/jobs", content=content, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]
    assert store.jobs() == []


def test_conflict_is_409_and_stores_nothing(client, store):
    post_file(client, "training-job.yaml")
    changed = (EXAMPLES / "training-job.yaml").read_text().replace('epoch: "90"', 'epoch: "91"')
    both = (EXAMPLES / "volcano-job.yaml").read_text() + "\n---\n" + changed
    response = client.post("/jobs", content=both, headers=YAML)
    assert response.status_code == 409
    body = response.json()
    assert body["job_id"] == "team-vision/resnet50-bs64"
    assert "epochs" in body["differing"] and "team-vision/resnet50-bs64" in body["error"]
    assert [r.job_id for r in store.jobs()] == ["team-vision/resnet50-bs64"]
    assert store.get("team-vision/resnet50-bs64").spec.epochs == 90


def test_get_job_with_history(client, store):
    post_file(client, "training-job.yaml")
    store.transition("team-vision/resnet50-bs64", JobState.ASSIGNED, cluster="bj-k80", node="bj-train-0")
    response = client.get("/jobs/team-vision/resnet50-bs64")
    assert response.status_code == 200
    body = response.json()
    assert (body["state"], body["cluster"], body["node"]) == ("assigned", "bj-k80", "bj-train-0")
    assert body["spec"]["num_gpus"] == 2 and "kind: Job" in body["spec"]["manifest"]
    # The server's clock is the wall clock: times are UTC ISO 8601 (the store's clock read 42 s).
    assert body["clock"] == "wall" and body["accepted_at"] == "1970-01-01T00:00:42.000Z"
    assert [(h["from"], h["to"], h["at"]) for h in body["history"]] == [
        (None, "queued", "1970-01-01T00:00:42.000Z"),
        ("queued", "assigned", "1970-01-01T00:00:42.000Z"),
    ]


def test_unknown_job_is_404_json(client):
    response = client.get("/jobs/default/nope")
    assert response.status_code == 404
    assert "default/nope" in response.json()["error"]


def test_list_jobs_by_state(client, store):
    post_file(client, "queue.yaml")
    store.transition("default/cyclegan", JobState.SCHEDULE_FAILED, reason="too big")
    queued = client.get("/jobs", params={"state": "queued"}).json()["jobs"]
    assert [j["job_id"] for j in queued] == ["default/lm-small", "default/recommendation-bs2048"]
    page = client.get("/jobs").json()
    assert page["next_cursor"] is None
    every = page["jobs"]
    assert [j["state"] for j in every] == ["queued", "queued", "schedule-failed"]
    several = client.get("/jobs", params=[("state", "schedule-failed"), ("state", "running")]).json()["jobs"]
    assert [j["job_id"] for j in several] == ["default/cyclegan"]


def test_list_jobs_with_unknown_state_is_422_json(client):
    response = client.get("/jobs", params={"state": "done"})
    assert response.status_code == 422
    assert "queued" in response.json()["error"]


def test_healthz_counts_jobs(client):
    post_file(client, "queue.yaml")
    body = client.get("/healthz").json()
    assert body["status"] == "ok" and body["jobs"]["queued"] == 3 and body["jobs"]["running"] == 0
