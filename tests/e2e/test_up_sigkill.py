"""`cpn up` killed with SIGKILL mid-run and started again on the same cpn home (issue 27, item 3): the run
it left `Running` holds its deployment's only concurrency slot in Prefect's database; the next `cpn up`
cancels it (saying why) before its worker starts, and every deployment's next scheduled run, brought
forward to now, completes: none waits in `AwaitingConcurrencySlot`.

Two starts of `cpn up` (~40 s each on a quiet machine) and five flow runs through the worker: minutes."""

from __future__ import annotations

import os
import re
import signal
import time
from datetime import UTC, datetime

import pytest

from tests.integration.test_prefect_server import (
    DEPLOYMENTS,
    alive,
    api,
    deployment,
    descendants,
    start_cpn_up,
    wait_for_run,
)

pytestmark = [pytest.mark.e2e, pytest.mark.prefect_server, pytest.mark.timeout(1500)]

SCHEDULED = [d["name"] for d in DEPLOYMENTS if any(s.get("active", True) for s in d.get("schedules", []))]
"""The deployments whose schedules are on (schedule-round's is off by default, the demo has none)."""


def wait_for_state(base: str, run_id: str, types: set[str], timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while (run := api(base, "GET", f"/flow_runs/{run_id}"))["state"]["type"] not in types:
        assert time.monotonic() < deadline, f"flow run {run_id} still {run['state']['type']}"
        time.sleep(1)
    return run


def next_scheduled_run(base: str, deployment_id: str, timeout_s: float = 180) -> dict:
    """The deployment's earliest run its schedule made that has not run yet (Prefect's scheduler makes
    them ahead, every minute)."""
    deadline = time.monotonic() + timeout_s
    while True:
        runs = api(
            base,
            "POST",
            "/flow_runs/filter",
            {
                "deployments": {"id": {"any_": [deployment_id]}},
                "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}},
                "sort": "EXPECTED_START_TIME_ASC",
                "limit": 5,
            },
        )
        made = [r for r in runs if r["auto_scheduled"]]
        if made:
            return made[0]
        assert time.monotonic() < deadline, f"no scheduled run of deployment {deployment_id}"
        time.sleep(3)


def bring_forward(base: str, run_id: str) -> None:
    """Move a scheduled run's start to now: the worker picks it up at its next poll."""
    now = datetime.now(UTC).isoformat()
    state = {"type": "SCHEDULED", "name": "Scheduled", "state_details": {"scheduled_time": now}}
    api(base, "POST", f"/flow_runs/{run_id}/set_state", {"state": state, "force": True})


def test_a_cpn_up_killed_mid_run_leaves_no_deployment_stuck(tmp_path):
    home = tmp_path / "home"
    first = start_cpn_up(home)
    proc, base, *_ = next(first)
    try:
        retrain = deployment(base, "retrain")
        run = api(
            base, "POST", f"/deployments/{retrain['id']}/create_flow_run", {"parameters": {"force": True}}
        )
        wait_for_state(base, run["id"], {"RUNNING"}, 300)  # training: tens of seconds more
        below = descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while any(alive(p) for p in below):  # the servers go with it (cpn.processes), freeing the database
            assert time.monotonic() < deadline, "cpn up's processes outlived it"
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    again = start_cpn_up(home)
    proc, base, _, _, _, printed = next(again)
    try:
        said = re.search(r"cpn up: cancelled (\d+) flow run\(s\) a stopped cpn up left .*: (.*)", printed)
        assert said is not None and run["name"] in said[2], printed  # collect-metrics' may be there too
        left = api(base, "GET", f"/flow_runs/{run['id']}")["state"]
        assert (left["type"], left["message"]) == (
            "CANCELLED",
            "cancelled by cpn up at start: left Running by a cpn up that stopped before it ended",
        )
        runs = {}
        for name in SCHEDULED:
            runs[name] = next_scheduled_run(base, deployment(base, name)["id"])
            bring_forward(base, runs[name]["id"])
        for name, scheduled in runs.items():
            done = wait_for_run(base, scheduled["id"], 400)
            assert done["state"]["type"] == "COMPLETED", (name, done["state"])
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
