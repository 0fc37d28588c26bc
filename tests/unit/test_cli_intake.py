"""`cpn submit`, `cpn jobs`, `cpn job` and `cpn serve` through `cli.main`."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from cli import main
from cpn.decisions import Waiting
from cpn.jobs import JobState
from cpn.store import JobStore

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "manifests"
BAD = REPO / "tests" / "data" / "bad_manifests"


@pytest.fixture
def db(tmp_path, monkeypatch) -> Path:
    """A store path in a fresh folder, also set as CPN_STORE so commands can leave --store out."""
    path = tmp_path / "state" / "jobs.db"
    monkeypatch.setenv("CPN_STORE", str(path))
    return path


def stored_ids(path: Path) -> list[str]:
    with JobStore(path) as store:
        return [r.job_id for r in store.jobs()]


def test_submit_queues_every_file_and_reports_each_job(db, capsys):
    files = [str(EXAMPLES / n) for n in ("training-job.yaml", "queue.yaml")]
    assert main(["submit", "--store", str(db), *files]) == 0
    out = capsys.readouterr().out
    assert "queued  team-vision/resnet50-bs64" in out and "4 new job(s) queued" in out
    assert "read: 1 pod x 2 GPUs = 2 GPUs (resources.limits" in out
    assert stored_ids(db) == [
        "team-vision/resnet50-bs64",
        "default/lm-small",
        "default/recommendation-bs2048",
        "default/cyclegan",
    ]


def test_resubmit_is_harmless(db, capsys):
    main(["submit", str(EXAMPLES / "queue.yaml")])
    assert main(["submit", str(EXAMPLES / "queue.yaml")]) == 0
    assert "0 new job(s) queued, 3 already in" in capsys.readouterr().out
    assert len(stored_ids(db)) == 3


def test_bad_manifest_fails_names_the_field_and_stores_nothing(db, capsys):
    main(["submit", str(EXAMPLES / "training-job.yaml")])
    capsys.readouterr()
    status = main(["submit", str(EXAMPLES / "queue.yaml"), str(BAD / "missing-epoch.yaml")])
    assert status == 2
    err = capsys.readouterr().err
    assert "nothing was queued" in err
    assert "missing-epoch.yaml document 1 (Job Train_A): metadata.annotations.epoch: missing" in err
    assert stored_ids(db) == ["team-vision/resnet50-bs64"]


def test_conflict_fails_and_stores_nothing(db, tmp_path, capsys):
    main(["submit", str(EXAMPLES / "training-job.yaml")])
    changed = tmp_path / "changed.yaml"
    changed.write_text((EXAMPLES / "training-job.yaml").read_text().replace('epoch: "90"', 'epoch: "9"'))
    status = main(["submit", str(EXAMPLES / "queue.yaml"), str(changed)])
    assert status == 1
    assert "team-vision/resnet50-bs64 already exists" in capsys.readouterr().err
    assert stored_ids(db) == ["team-vision/resnet50-bs64"]


def test_same_job_in_two_files_is_refused(db, capsys):
    assert main(["submit", str(EXAMPLES / "queue.yaml"), str(EXAMPLES / "queue.yaml")]) == 2
    assert "default/lm-small is also defined in" in capsys.readouterr().err
    assert not db.exists()


def test_missing_file(db, capsys):
    assert main(["submit", "no-such-file.yaml"]) == 2
    assert "no-such-file.yaml: cannot read" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels"),
        ("built: 2024-02-30\nn: " + "1" * 5000 + "\n", "4300 digits"),
        ("# padding\n" * 200_000, "larger than 1,048,576 bytes"),
    ],
    ids=["deep-nesting", "huge-integer", "too-large"],
)
def test_hostile_files_exit_2_with_a_short_message(db, tmp_path, capsys, content, says):
    path = tmp_path / "hostile.yaml"
    path.write_text(content)
    assert main(["submit", str(path)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err) < 2_000
    assert not db.exists()


def test_submit_from_stdin(db, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO((EXAMPLES / "volcano-job.yaml").read_text()))
    assert main(["submit", "-"]) == 0
    assert stored_ids(db) == ["default/transformer-wmt"]


def test_default_store_is_the_one_in_cpn_home_whatever_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("CPN_STORE", raising=False)
    monkeypatch.setenv("CPN_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert main(["submit", str(EXAMPLES / "volcano-job.yaml")]) == 0
    assert stored_ids(tmp_path / "home" / "jobs.db") == ["default/transformer-wmt"]
    assert not (tmp_path / ".cpn").exists()


def test_jobs_lists_and_filters(db, capsys):
    main(["submit", str(EXAMPLES / "queue.yaml")])
    with JobStore(db) as store:
        store.transition("default/lm-small", JobState.ASSIGNED, cluster="bj-k80", node="bj-train-0")
        store.set_waiting([Waiting("default/cyclegan", "queue-order", "", 120.0)])
    capsys.readouterr()
    assert main(["jobs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines[1:-1]}
    assert rows["default/cyclegan"].endswith("t = 2.0 min (simulated)")  # an ETA with its unit and clock
    assert rows["default/lm-small"].endswith(" -")
    assert lines[0].split() == ["JOB", "STATE", "KIND", "MODEL", "GPUS", "CLUSTER", "NODE", "ACCEPTED", "ETA"]
    assert lines[1].split()[:7] == [
        "default/lm-small",
        "assigned",
        "training",
        "LM",
        "1",
        "bj-k80",
        "bj-train-0",
    ]
    assert lines[-1] == "3 job(s)"
    assert main(["jobs", "--state", "queued"]) == 0
    out = capsys.readouterr().out
    assert "default/lm-small" not in out and "default/cyclegan" in out and "2 job(s)" in out
    assert main(["jobs", "--state", "running"]) == 0
    assert capsys.readouterr().out.strip() == "no jobs in state running"


def test_jobs_without_a_store_yet(db, capsys):
    assert main(["jobs"]) == 0
    assert "no jobs" in capsys.readouterr().out
    assert not db.exists()


def test_jobs_rejects_an_unknown_state(db, capsys):
    with pytest.raises(SystemExit) as caught:
        main(["jobs", "--state", "done"])
    assert caught.value.code == 2
    assert "invalid choice: 'done'" in capsys.readouterr().err


def test_job_shows_spec_and_history(db, capsys):
    main(["submit", str(EXAMPLES / "volcano-job.yaml")])
    with JobStore(db) as store:
        store.transition(
            "default/transformer-wmt", JobState.SCHEDULE_FAILED, reason="no node has 4 free GPUs"
        )
    capsys.readouterr()
    assert main(["job", "transformer-wmt", "--manifest"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^state +schedule-failed$", out, re.M) and re.search(r"^num_gpus +4$", out, re.M)
    assert re.search(r"^read +1 pod x 4 GPUs = 4 GPUs \(annotation gpu_count: 4 per pod", out, re.M)
    assert "queued  schedule-failed" in out and "no node has 4 free GPUs" in out
    assert "kind: Job" in out.split("manifest:")[1]


def test_unknown_job_fails(db, capsys):
    main(["submit", str(EXAMPLES / "volcano-job.yaml")])
    assert main(["job", "default/nope"]) == 1
    assert "no job default/nope" in capsys.readouterr().err


def test_unusable_store_file(tmp_path, capsys):
    junk = tmp_path / "junk.db"
    junk.write_text("not a database" * 100)
    assert main(["jobs", "--store", str(junk)]) == 1
    assert "junk.db" in capsys.readouterr().err


@pytest.fixture
def served(monkeypatch) -> dict:
    """What `cpn serve` hands uvicorn, without serving; `served["probe"](app)`, if set, runs meanwhile."""
    served: dict = {}

    def fake_run(app, host, port, **options):
        served.update(routes={r.path for r in app.routes}, host=host, port=port)
        if "probe" in served:
            served["probe"](app)

    monkeypatch.setattr("uvicorn.run", fake_run)
    monkeypatch.delenv("CPN_API_TOKEN", raising=False)
    monkeypatch.delenv("CPN_TOKENS_FILE", raising=False)
    return served


def test_serve_runs_uvicorn_on_the_api_with_tokens(db, tmp_path, served, capsys):
    from fastapi.testclient import TestClient

    file_args = ["--tokens-file", str(tmp_path / "tokens.yaml")]
    assert main(["token", "create", "--name", "ci", "--namespace", "team-a", *file_args]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("cpn_") and token not in (tmp_path / "tokens.yaml").read_text()
    auth = {"authorization": f"Bearer {token}"}
    answers = []

    def probe(app):
        with TestClient(app, base_url="http://cpn.lab") as client:
            answers.append(client.get("/jobs").status_code)
            answers.append(client.get("/jobs", headers=auth).status_code)
            answers.append(client.get("/jobs", headers={"host": "evil.example", **auth}).status_code)

    served["probe"] = probe
    assert (
        main(["serve", "--host", "0.0.0.0", "--port", "9999", "--allowed-host", "cpn.lab", *file_args]) == 0
    )
    assert {"/jobs", "/jobs/{namespace}/{name}", "/healthz"} <= served["routes"]
    assert (served["host"], served["port"]) == ("0.0.0.0", 9999)
    assert answers == [401, 200, 421]
    assert db.exists()
    capsys.readouterr()
    assert main(["token", "list", *file_args]) == 0
    assert capsys.readouterr().out.startswith("ci\tteam-a\t")
    assert main(["token", "revoke", "ci", *file_args]) == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "no API token is configured"),
        (["--no-auth", "--host", "0.0.0.0", "--allowed-host", "x"], "loopback only"),
        (["--host", "0.0.0.0"], "--allowed-host"),
    ],
)
def test_serve_refuses_to_start_open(db, tmp_path, monkeypatch, served, capsys, args, says):
    monkeypatch.chdir(tmp_path)
    assert main(["serve", *args]) == 2
    assert says in capsys.readouterr().err and not served


def test_serve_no_auth_on_loopback_and_with_env_token(db, tmp_path, monkeypatch, served):
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--no-auth"]) == 0 and served["host"] == "127.0.0.1"
    monkeypatch.setenv("CPN_API_TOKEN", "operator-secret")
    assert main(["serve"]) == 0
