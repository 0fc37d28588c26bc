"""`cpn run` as a user runs it: 50 manifests POSTed to a live service on the demo's simulated clusters at
600x, the process killed with SIGKILL mid-run and started again on the same store; every accepted job is
present exactly once and reaches a terminal state, and SIGTERM stops the service cleanly."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

TERMINAL = {"succeeded", "failed", "schedule-failed"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FAST_ORACLE = ("--time-scale", "600", "--estimates", "oracle")
"""Simulated time 600x the wall clock and the simulator's own runtimes, as the timings below assume."""


def start(
    home: Path, port: int, log: Path, options: Sequence[str] = FAST_ORACLE, timeout_s: float = 90.0
) -> subprocess.Popen:
    """`cpn run` on the cpn home `home` with `options`, once its API answers (within `timeout_s`)."""
    env = {**os.environ, "CPN_HOME": str(home)}
    cmd = [sys.executable, "-m", "cli", "run", "--port", str(port), "--no-auth", *options]
    proc = subprocess.Popen(cmd, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, log.read_text()
        time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"cpn run did not answer /healthz in {timeout_s:g} s:\n{log.read_text()}")


def states(port: int) -> dict[str, str]:
    out, cursor = {}, None
    while True:
        params = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"http://127.0.0.1:{port}/jobs", params=params, timeout=10).json()
        out.update({j["job_id"]: j["state"] for j in page["jobs"]})
        cursor = page.get("next_cursor")
        if not cursor:
            return out


def submit_generated(port: int, folder: Path, jobs: int, seed: int) -> set[str]:
    """POST a generated queue (`cpn generate --jobs JOBS --seed SEED`) to `cpn run` on `port`; returns the
    ids it accepted."""
    manifests = folder / f"queue-{seed}.yaml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "cli",
            "generate",
            "--jobs",
            str(jobs),
            "--seed",
            str(seed),
            "--out",
            str(manifests),
        ],
        check=True,
    )
    reply = httpx.post(
        f"http://127.0.0.1:{port}/jobs",
        content=manifests.read_bytes(),
        headers={"content-type": "application/yaml"},
        timeout=30,
    )
    assert reply.status_code == 201, reply.text
    return {j["job_id"] for j in reply.json()["jobs"]}


def test_cpn_run_takes_50_jobs_survives_kill_9_and_finishes_them_all(tmp_path):
    home, port, log = tmp_path / "home", free_port(), tmp_path / "run.log"
    started = time.monotonic()
    proc = start(home, port, log)
    # Seed 2's queue takes 11.6 simulated hours under greedy (about 70 s at 600x), so 3 minutes of wall
    # time leave room for two start-ups; seed 3's takes 26.3 h, which 600x cannot fit in 3 minutes.
    accepted = submit_generated(port, tmp_path, jobs=50, seed=2)
    assert len(accepted) == 50
    while not any(s == "running" for s in states(port).values()):
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc = start(home, port, log)
    try:
        deadline = started + 180
        while time.monotonic() < deadline:
            seen = states(port)
            if set(seen.values()) <= TERMINAL:
                break
            time.sleep(1)
        assert set(seen) == accepted, "every accepted job is present"
        assert set(seen.values()) <= TERMINAL, f"not done within 3 minutes: {seen}"
        assert list(seen.values()).count("succeeded") >= 45, seen
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    assert "stopped after" in log.read_text()
    print(f"50 jobs done in {time.monotonic() - started:.0f} s of wall time, one kill -9 included")
