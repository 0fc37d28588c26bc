"""The web UI in a real headless Chromium (Debian's, driven by Playwright) against the real app served by
uvicorn: log in with a token, filter the queue, read why a job waits and when it starts, cancel a queued
job and see it leave the queue, read a running job's transfer time, predicted and measured runtime and
log, open the clusters page (metrics health, learnt bandwidth, Gantt); another namespace's token sees
none of it. The screenshots go to docs/img/ for docs/ui.md."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from cpn.adapters.gateway import NoLog
from cpn.adapters.metrics import ClusterMetrics
from cpn.api import create_app
from cpn.auth import ApiSecurity, Authenticator, create_token
from cpn.decisions import Estimate, Waiting
from cpn.intake import parse_manifests
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore
from cpn.ui.capacity import Capacity
from cpn.ui.pages import mount_ui
from tests.unit.test_api_security import manifest

pytestmark = pytest.mark.integration

IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
BROWSER_ARGS = ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]
V100 = Node("east", "gpu-0", "Tesla-V100-SXM2-16GB", 4, 16, 32, "training")
P100 = Node("west", "gpu-0", "Tesla-P100-PCIE-16GB", 2, 16, 4, "hybrid")
NORTH = Node("north", "gpu-0", "Tesla-V100-SXM2-16GB", 4, 16, 32, "training")
"""A cordoned cluster still running team-b's job: shown, marked cordoned; team-a's token never sees it."""


class HourLong:
    """An estimate source that predicts one hour, +-10%, for every job on every GPU type."""

    def estimates(self, jobs: tuple[JobSpec, ...], gpu_types: tuple[str, ...]) -> dict:
        return {j.job_id: {g: Estimate(3600.0, uncertainty=0.1) for g in gpu_types} for j in jobs}


def cluster_log(job_id: str, lines: int) -> str:
    """The log the clusters hold: only of the running job."""
    if job_id != "team-a/train-5":
        raise NoLog(job_id)
    return "epoch 3 loss 0.41\nWANDB_API_KEY=hunter2"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path):
    """(base URL, store, team-a token, team-b token) of a live server over a store with jobs in both."""
    store = JobStore(tmp_path / "jobs.db")
    store.submit(parse_manifests("---\n".join(manifest(f"train-{i}") for i in range(6)), "a"))
    store.submit(parse_manifests(manifest("secret-b", "team-b"), "b"))
    now = time.time()
    store.set_waiting(
        [
            Waiting("team-a/train-0", "memory", "needs 40 GB per card; the largest free has 16", now + 7200),
            Waiting("team-a/train-1", "queue-order", "behind team-a/train-0", now + 9000),
            Waiting("team-a/train-2", "memory", "needs 24 GB per card", None),
        ]
    )
    for state in (JobState.ASSIGNED, JobState.MIGRATING, JobState.SUBMITTED, JobState.RUNNING):
        store.transition("team-a/train-5", state, cluster="east", node="gpu-0", placement=[("gpu-0", 1)])
    capacity = Capacity(cpu_threshold=0.9)
    capacity.record(
        (NodeState(V100, 4), NodeState(P100, 2), NodeState(NORTH, 2, 8, ("team-b/secret-b",))), now - 600
    )
    capacity.record(
        (
            NodeState(V100, 3, 2, ("team-a/train-5",)),
            NodeState(P100, 2, cpu_used=4),
            NodeState(NORTH, 2, 8, ("team-b/secret-b",)),
        ),
        now,
        {
            "east": ClusterMetrics("east", now - 4, "ok", age_s=4.0),
            "west": ClusterMetrics(
                "west", now - 300, "unknown", age_s=300.0, detail="latest reading 300 s old"
            ),
        },
        {("west", "east"): 2.5},
        cordoned={"north"},
    )
    tokens = tmp_path / "tokens.yaml"
    alice, bob = create_token(tokens, "alice", ["team-a"]), create_token(tokens, "bob", ["team-b"])
    security = ApiSecurity(Authenticator(tokens))
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            mount_ui(
                create_app(store, security=security, logs=cluster_log),
                store,
                security,
                capacity.view,
                logs=cluster_log,
                estimates=HourLong(),
            ),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", store, alice, bob
    server.should_exit = True
    thread.join(10)
    store.close()


def log_in(page, base: str, token: str) -> None:
    page.goto(f"{base}/ui/queue")
    assert page.url.endswith("/ui/login")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/ui/queue")


def queue_ids(page) -> list[str]:
    return page.locator("#queue tbody tr[data-job]").evaluate_all("rows => rows.map(r => r.dataset.job)")


def test_the_ui_in_a_real_browser(served):
    from playwright.sync_api import sync_playwright

    base, store, alice, bob = served
    IMG.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        log_in(page, base, alice)
        assert queue_ids(page) == [f"team-a/train-{i}" for i in range(6)]
        (cookie,) = page.context.cookies()
        assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")

        page.select_option("select[name=state]", "queued")
        page.select_option("select[name=reason]", "memory")
        page.click("form.filters button")
        assert queue_ids(page) == ["team-a/train-0", "team-a/train-2"]
        page.select_option("select[name=state]", "")
        page.select_option("select[name=reason]", "")
        page.select_option("select[name=gpu]", "v100")
        page.click("form.filters button")
        assert queue_ids(page) == ["team-a/train-5"]
        page.select_option("select[name=gpu]", "")
        page.select_option("select[name=state]", "queued")
        page.click("form.filters button")
        page.screenshot(path=str(IMG / "ui-queue.png"))

        page.click("a[href='/ui/jobs/team-a/train-0']")
        assert "needs 40 GB per card" in page.inner_text("#reason")
        assert "(in 2.0 h)" in page.inner_text("#predicted-start")
        page.screenshot(path=str(IMG / "ui-job.png"), full_page=True)

        page.goto(f"{base}/ui/jobs/team-a/train-5")
        assert "copying its image and data" in page.inner_text("#transfer")
        runtime = page.inner_text("#runtime")
        assert "predicted 1.0 h (±10%) on v100" in runtime and "so far (running since" in runtime
        assert ", between " in page.inner_text("#predicted-end")  # its end, with the estimate's spread
        assert page.inner_text("#log") == "epoch 3 loss 0.41\nWANDB_API_KEY=<redacted>"

        page.goto(f"{base}/ui/jobs/team-a/train-3")
        page.click("#cancel")
        assert "cancelled: it has left the queue" in page.inner_text("#message")
        assert page.inner_text("#state") == "cancelled"
        page.goto(f"{base}/ui/queue?state=queued")
        assert "team-a/train-3" not in queue_ids(page) and "team-a/train-4" in queue_ids(page)
        assert store.get("team-a/train-3").state == JobState.CANCELLED

        page.goto(f"{base}/ui/clusters")
        rows = page.locator("#cards tbody tr").all_inner_texts()
        assert [r.split("\t") for r in rows] == [  # free, used, unusable: CPU, pool, memory; cordoned, total
            ["east", "v100", "3", "1", "0", "0", "0", "0", "4"],
            ["north cordoned", "v100", "0", "2", "0", "0", "0", "2", "4"],
            ["west", "p100", "0", "0", "2", "0", "0", "0", "2"],
        ]
        assert page.locator("svg polyline").count() == 3
        assert "on the cluster now" in page.inner_text("#gantt-legend")
        assert "team-b/secret-b" not in page.content()  # the cordoned cluster's job is team-b's
        health = [r.split("\t") for r in page.locator("#health tbody tr").all_inner_texts()]
        assert health == [
            ["east", "ok", "4 s", "-"],
            ["west", "unknown", "5.0 min", "latest reading 300 s old"],
        ]
        assert page.locator("#bandwidth tbody tr").all_inner_texts() == ["west\teast\t2.50"]
        bars = page.locator("svg.gantt[data-cluster=east] rect.bar")
        assert bars.evaluate_all("bs => bs.map(b => b.dataset.job)") == ["team-a/train-5"]
        page.screenshot(path=str(IMG / "ui-clusters.png"), full_page=True)

        other = browser.new_page()
        log_in(other, base, bob)
        assert queue_ids(other) == ["team-b/secret-b"]
        other.goto(f"{base}/ui/jobs/team-a/train-0")
        assert "may not read namespace team-a" in other.content()
        other.goto(f"{base}/ui/clusters")
        north = other.locator("svg.gantt[data-cluster=north] rect.bar")
        assert north.evaluate_all("bs => bs.map(b => b.dataset.job)") == ["team-b/secret-b"]
        assert "team-a/train-5" not in other.content()
        browser.close()


def test_a_cross_site_form_post_is_refused(served):
    import httpx

    base, store, alice, _ = served
    response = httpx.post(
        f"{base}/ui/jobs/team-a/train-4/cancel",
        headers={"origin": "https://evil.example", "cookie": f"cpn_token={alice}"},
    )
    assert response.status_code == 403 and store.get("team-a/train-4").state == JobState.QUEUED
    same_site = httpx.post(
        f"{base}/ui/jobs/team-a/train-4/cancel",
        headers={"origin": base, "cookie": f"cpn_token={alice}"},
    )
    assert same_site.status_code == 303
    assert store.get("team-a/train-4").state == JobState.CANCELLED
