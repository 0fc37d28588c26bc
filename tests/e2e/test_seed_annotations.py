"""Jobs as people write them, through the commands: the seed's example job (densenet121, data_size 20,
epoch 100, one GPU, a Volcano Job; no batch size, no steps) is placed by `cpn plan` and flagged explore,
runs under `cpn run` on the demo's simulated clusters, and once it completed a second densenet121 job gets
an estimate within 25% of its measured runtime; every file of examples/manifests runs under `cpn run`.

`cpn run` is started as a user starts it (a subprocess on a fresh cpn home, the champion estimates, its
first champion trained at start-up); simulated time runs 100,000x the wall clock (an hour in 36 ms)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
import yaml

from cli import main
from config.settings import DEMO_DIR, REPO_ROOT, load_profile
from cpn.engine.explore import runtime_checks
from cpn.engine.feedback import completed_runs
from cpn.intake import parse_manifests
from cpn.inventory import nodes_from_config
from cpn.store import JobStore
from models.registry import ChampionLoader, champion_version
from tests.e2e.test_cpn_run import TERMINAL, free_port, start, states

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

SEED_JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: {name}
  annotations: {{model_name: "densenet121", data_size: "{size}", epoch: "{epochs}"}}
spec:
  schedulerName: volcano
  minAvailable: 1
  tasks:
    - replicas: 1
      name: worker
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: main
              image: registry.example.com/train/densenet:1.0
              resources: {{limits: {{nvidia.com/gpu: 1}}}}
"""
FAST = ("--time-scale", "100000")
STARTUP_S = 240.0
"""A first champion is trained at start-up when the store has none: minutes on a loaded machine."""
EXAMPLES = sorted((REPO_ROOT / "examples" / "manifests").glob("*.yaml"))


def config_folder(tmp_path: Path) -> Path:
    """The demo profile, retraining after every completed job."""
    config = tmp_path / "config"
    shutil.copytree(DEMO_DIR, config)
    (config / "loop.yaml").write_text("retrain_every_completions: 1\n")
    return config


def post(port: int, text: str) -> list[str]:
    reply = httpx.post(
        f"http://127.0.0.1:{port}/jobs",
        content=text,
        headers={"content-type": "application/yaml"},
        timeout=30,
    )
    assert reply.status_code == 201, reply.text
    return [j["job_id"] for j in reply.json()["jobs"]]


def wait_for(check, what: str, timeout_s: float = 120.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout_s:g} s")


def test_the_seeds_example_is_placed_explored_run_and_learnt(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("CPN_HOME", str(home))
    monkeypatch.delenv("CPN_STORE", raising=False)
    monkeypatch.delenv("CPN_TRACKING_URI", raising=False)
    config = config_folder(tmp_path)
    first = tmp_path / "densenet.yaml"
    first.write_text(SEED_JOB.format(name="densenet", size=20, epochs=100))

    out = tmp_path / "plan"
    assert main(["plan", "--config", str(config), "--out", str(out), str(first)]) == 0
    (planned,) = json.loads((out / "plan.json").read_text())["jobs"]
    assert planned["outcome"] == "placed" and planned["gpus"] == 1
    assert planned["explore"] is True and planned["uncertainty"] >= 1.0

    uri = f"sqlite:///{home / 'mlflow.db'}"
    assert champion_version(uri) == "1", "cpn plan trained the first champion"
    port, log = free_port(), tmp_path / "run.log"
    proc = start(home, port, log, ("--config", str(config), *FAST), timeout_s=STARTUP_S)
    try:
        (first_id,) = post(port, first.read_text())
        wait_for(lambda: states(port)[first_id] in TERMINAL, "the first job ends")
        assert states(port)[first_id] == "succeeded"
        wait_for(lambda: champion_version(uri) == "2", "the retrained champion", timeout_s=180)
        (second_id,) = post(port, SEED_JOB.format(name="densenet-2", size=7.5, epochs=30))
        wait_for(lambda: states(port)[second_id] in TERMINAL, "the second job ends")
        assert states(port)[second_id] == "succeeded"
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log.read_text()

    profile = load_profile(config)
    with JobStore(home / "jobs.db") as store:
        runs = {r.job_id: r for r in completed_runs(store, nodes_from_config(profile.clusters))}
        specs = {j: store.get(j).spec for j in (first_id, second_id)}
    assert set(runs) == {first_id, second_id}
    assert runs[second_id].total_steps is None and runs[second_id].data_size_gb == 7.5
    (check,) = runtime_checks(ChampionLoader(uri), [runs[second_id]], specs)
    print(
        f"second densenet121 job on {check.gpu_type}: estimated {check.predicted_s:.0f} s, "
        f"measured {check.measured_s:.0f} s, error {check.error:.1%}"
    )
    assert check.explore is False
    assert check.error < 0.25


def test_every_example_manifest_runs_under_cpn_run(tmp_path):
    home, port, log = tmp_path / "home", free_port(), tmp_path / "run.log"
    jobs = [j for f in EXAMPLES for j in parse_manifests(f.read_text(), f.name)]
    services = {j.job_id for j in jobs if j.is_service}
    proc = start(home, port, log, FAST, timeout_s=STARTUP_S)
    try:
        accepted = [i for f in EXAMPLES for i in post(port, f.read_text())]
        assert sorted(accepted) == sorted(j.job_id for j in jobs)
        training = set(accepted) - services

        def done() -> dict[str, str] | None:
            seen = states(port)
            over = all(seen[j] in TERMINAL for j in training) and all(seen[j] == "running" for j in services)
            return seen if over else None

        seen = wait_for(done, "every example job ends (services run)", timeout_s=240)
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0, log.read_text()
    assert {j: seen[j] for j in training} == dict.fromkeys(training, "succeeded"), yaml.safe_dump(seen)
    assert services and all(seen[j] == "running" for j in services), "a service runs until deleted"
