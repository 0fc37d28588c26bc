"""`cpn up` on a real local Prefect server: deployments, schedules and trigger applied from prefect.yaml,
`schedule-round` run through the worker to Completed, the retraining trigger firing after N completion
events and not before, and Ctrl-C stopping every process it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from cli.up import free_port
from config.settings import REPO_ROOT
from tasks.schedule import COMPLETED_EVENT

pytestmark = [pytest.mark.integration, pytest.mark.prefect_server, pytest.mark.timeout(900)]

READY_S = 400
"""How long `cpn up` may take here; the 2 shared cores are often busy (it takes ~60 s when quiet)."""

DEPLOYMENTS = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]


RETRYABLE = {429, 502, 503}
"""Statuses Prefect's own client retries: the server answers 503 when SQLite is busy (a loaded machine)."""


def api(base: str, method: str, path: str, body: object = None, attempts: int = 6) -> object:
    """One Prefect REST call, retried with backoff on the statuses Prefect's own client retries."""
    data = None if body is None else json.dumps(body).encode()
    for attempt in range(attempts):
        request = urllib.request.Request(
            f"{base}/api{path}", data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read()
            return json.loads(text) if text else None
        except urllib.error.HTTPError as error:
            if error.code not in RETRYABLE or attempt == attempts - 1:
                raise
            time.sleep(2**attempt)
    raise AssertionError("unreachable")


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_cpn_up(home: Path, *options: str) -> Iterator[tuple]:
    """`cpn up OPTIONS` on free ports with the cpn home `home`, until ready; yields (process, Prefect URL,
    ready seconds, ports, home, what it printed) and kills whatever is left afterwards."""
    ports = [free_port() for _ in range(3)]
    env = {**os.environ, "CPN_HOME": str(home)}
    for var in ("PREFECT_API_URL", "CPN_STORE", "CPN_TRACKING_URI", "CPN_API_TOKEN"):
        env.pop(var, None)
    argv = [sys.executable, "-c", "import sys; from cli import main; sys.exit(main())", "up", *options]
    argv += ["--prefect-port", str(ports[0]), "--mlflow-port", str(ports[1]), "--api-port", str(ports[2])]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("cpn up: ready after"):
            break
    else:
        pytest.fail("cpn up exited before it was ready:\n" + "".join(lines) + _logs(home))
    ready_s = time.monotonic() - started
    yield proc, f"http://127.0.0.1:{ports[0]}", ready_s, ports, home, "".join(lines)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory):
    """`cpn up` on free ports with a fresh cpn home; yields (process, Prefect URL, ready seconds, ports,
    home)."""
    for started in start_cpn_up(tmp_path_factory.mktemp("cpn-home")):
        yield started[:5]


def _logs(home: Path) -> str:
    return "".join(f"\n== {p.name}\n{p.read_text()[-3000:]}" for p in sorted((home / "logs").glob("*.log")))


def deployment(base: str, name: str) -> dict:
    (found,) = [d for d in api(base, "POST", "/deployments/filter", {}) if d["name"] == name]
    return found


def wait_for_run(base: str, run_id: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run = api(base, "GET", f"/flow_runs/{run_id}")
        if run["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
            return run
        time.sleep(2)
    raise AssertionError(f"flow run {run_id} still {run['state']['type']} after {timeout_s} s")


def test_every_service_answers_within_the_limit(control_plane):
    proc, base, ready_s, ports, home = control_plane
    print(f"cpn up ready after {ready_s:.1f} s")
    assert ready_s < READY_S
    for port, path in ((ports[0], "/api/health"), (ports[1], "/health"), (ports[2], "/healthz")):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            assert r.status == 200


def test_each_deployment_its_schedules_and_the_retraining_trigger_exist(control_plane):
    _, base, *_ = control_plane
    for spec in DEPLOYMENTS:
        applied = deployment(base, spec["name"])
        assert applied["work_pool_name"] == "cpn"
        assert len(applied["schedules"]) == len(spec.get("schedules", [])), spec["name"]
    assert deployment(base, "schedule-round")["global_concurrency_limit"]["limit"] == 1
    retrain = deployment(base, "retrain")
    automations = api(base, "GET", f"/automations/related-to/prefect.deployment.{retrain['id']}")
    (automation,) = automations
    assert automation["trigger"]["expect"] == [COMPLETED_EVENT]
    assert automation["trigger"]["threshold"] == 50


def test_schedule_round_runs_through_the_worker_to_completed(control_plane):
    _, base, *_ = control_plane
    d = deployment(base, "schedule-round")
    started = time.monotonic()
    run = api(base, "POST", f"/deployments/{d['id']}/create_flow_run", {"parameters": {"dry_run": True}})
    done = wait_for_run(base, run["id"], 400)
    print(f"schedule-round through the worker: {time.monotonic() - started:.1f} s to {done['state']['type']}")
    assert done["state"]["type"] == "COMPLETED", done["state"]
    stages = {"snapshot-and-estimates", "optimise", "publish-decisions"}  # a dry run collects nothing
    deadline = time.monotonic() + 60  # task runs are recorded from their events, a little after the run
    while True:
        tasks = api(base, "POST", "/task_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
        recorded = {t["name"].rsplit("-", 1)[0] for t in tasks}
        if stages <= recorded or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert stages <= recorded
    assert not recorded & {"collect", "assign", "submit"}, recorded  # a dry run only reads


def completion_events(n: int) -> list[dict]:
    now = datetime.now(UTC).isoformat()
    return [
        {
            "id": str(uuid.uuid4()),
            "occurred": now,
            "event": COMPLETED_EVENT,
            "resource": {"prefect.resource.id": f"cpn.job.default/job-{uuid.uuid4().hex[:8]}"},
            "payload": {},
        }
        for _ in range(n)
    ]


def triggered_runs(base: str, deployment_id: str) -> list[dict]:
    """Runs of the deployment not made by its schedule (the nightly cron adds scheduled ones)."""
    runs = api(base, "POST", "/flow_runs/filter", {"deployments": {"id": {"any_": [deployment_id]}}})
    return [r for r in runs if not r["auto_scheduled"]]


def test_retraining_is_triggered_after_n_completion_events_and_not_before(control_plane):
    _, base, *_ = control_plane
    # Runs stay scheduled: this test is about the trigger, not about training.
    api(base, "PATCH", "/work_pools/cpn", {"is_paused": True})
    d = deployment(base, "retrain")
    threshold = 50
    assert triggered_runs(base, d["id"]) == []
    api(base, "POST", "/events", completion_events(threshold - 1))
    time.sleep(20)
    assert triggered_runs(base, d["id"]) == [], "fired before the threshold"
    api(base, "POST", "/events", completion_events(1))
    deadline = time.monotonic() + 120
    while not triggered_runs(base, d["id"]):
        assert time.monotonic() < deadline, "no retraining run after the threshold was reached"
        time.sleep(2)
    (run,) = triggered_runs(base, d["id"])
    assert run["parameters"]["force"] is True
    api(base, "DELETE", f"/flow_runs/{run['id']}")


IMG = REPO_ROOT / "docs" / "img"
BROWSER_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]


def shoot(page, url: str, path: Path, expect: str, close_panels: bool = False) -> None:
    """Open `url`, wait until `expect` shows, close side panels if asked (MLflow's assistant), and save
    a screenshot to `path`."""
    page.goto(url, wait_until="load", timeout=120_000)
    page.get_by_text(expect, exact=False).first.wait_for(timeout=120_000)
    page.wait_for_timeout(1500)  # let charts and fonts settle
    if close_panels:
        closers = page.locator("button[aria-label*='lose']")
        for i in range(closers.count()):
            closers.nth(i).click(timeout=5_000)
        page.wait_for_timeout(500)
    page.screenshot(path=str(path))
    assert path.stat().st_size > 20_000, f"{path.name} looks blank"


def test_screenshots_of_the_pages_the_docs_show(control_plane):
    """docs/prefect.md's pictures, taken from the running control plane in a real headless browser."""
    from mlflow.tracking import MlflowClient
    from playwright.sync_api import sync_playwright

    proc, base, ready_s, ports, home = control_plane
    env = {**os.environ, "CPN_HOME": str(home), "MLFLOW_DISABLE_TELEMETRY": "true"}
    env.pop("CPN_TRACKING_URI", None)
    main = [sys.executable, "-c", "import sys; from cli import main; sys.exit(main())"]
    subprocess.run([*main, "predictor", "train"], cwd=REPO_ROOT, env=env, check=True, capture_output=True)
    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cpn-predictor").experiment_id
    newest = {}  # the newest run of each estimator (search_runs lists the newest first)
    for r in client.search_runs([experiment], order_by=["attributes.start_time DESC"]):
        newest.setdefault(r.data.params.get("estimator"), r.info.run_id)
    assert {"rf", "xgb"} <= set(newest)
    run_ids = json.dumps([newest["rf"], newest["xgb"]])
    mlflow_ui = f"http://127.0.0.1:{ports[1]}"
    schedule_round = deployment(base, "schedule-round")["id"]
    IMG.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        shoot(page, f"{base}/deployments", IMG / "prefect-deployments.png", "ingest-benchmarks")
        shoot(
            page,
            f"{base}/deployments/deployment/{schedule_round}/run",
            IMG / "prefect-run-schedule-round.png",
            "dry_run",
        )
        page.set_viewport_size({"width": 1400, "height": 1700})  # down to the metrics of both runs
        shoot(
            page,
            f"{mlflow_ui}/#/compare-runs?runs={run_ids}&experiments={json.dumps([experiment])}",
            IMG / "mlflow-compare-rf-xgb.png",
            "Comparing 2 Runs",
            close_panels=True,
        )
        browser.close()


def test_ctrl_c_stops_every_process_cpn_up_started(control_plane):
    proc, *_ = control_plane
    started = descendants(proc.pid)
    assert len(started) >= 8, "keepers, Prefect server, worker, MLflow and cpn run"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 0
    deadline = time.monotonic() + 30
    while any(alive(p) for p in started):
        assert time.monotonic() < deadline, f"left running: {[p for p in started if alive(p)]}"
        time.sleep(0.2)
