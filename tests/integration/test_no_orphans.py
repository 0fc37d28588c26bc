"""No orphans: `cpn demo` and `cpn up` stopped in any way (SIGINT, SIGTERM, kill -9) leave no process of
theirs running. (`cpn run` starts no process: its HTTP API is a thread; it stops on SIGINT/SIGTERM.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from cli.up import free_port
from config.settings import REPO_ROOT
from tests.integration.test_prefect_server import alive, descendants

pytestmark = [pytest.mark.integration, pytest.mark.prefect_server, pytest.mark.timeout(600)]

MAIN = [sys.executable, "-c", "import sys; from cli import main; sys.exit(main())"]


def start(argv: list[str], home, least: int) -> tuple[subprocess.Popen, set[int]]:
    """Start `cpn ARGV` in a session of its own; wait until it has `least` processes below it."""
    env = {**os.environ, "CPN_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen(
        [*MAIN, *argv], cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    seen: set[int] = set()
    while len(seen) < least:
        assert proc.poll() is None, f"cpn {argv[0]} exited early with {proc.returncode}"
        assert time.monotonic() < deadline, f"only {len(seen)} processes below cpn {argv[0]}"
        seen |= descendants(proc.pid)
        time.sleep(0.5)
    time.sleep(3)  # let the servers spawn what they spawn
    return proc, seen | descendants(proc.pid)


def assert_all_gone(proc: subprocess.Popen, started: set[int], sig: signal.Signals) -> None:
    proc.send_signal(sig)
    proc.wait(timeout=120)
    deadline = time.monotonic() + 60
    while any(alive(p) for p in started):
        if time.monotonic() > deadline:
            left = [p for p in started if alive(p)]
            for p in left:
                os.kill(p, signal.SIGKILL)
            pytest.fail(f"cpn left {len(left)} processes running after {sig.name}: {left}")
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_cpn_demo_leaves_no_prefect_server_behind(tmp_path, sig):
    # The keeper and the Prefect API server under it.
    proc, started = start(["demo", "--jobs", "5", "--out", str(tmp_path / "out")], tmp_path, least=2)
    assert_all_gone(proc, started, sig)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_cpn_up_leaves_nothing_behind_while_starting(tmp_path, sig):
    # Three keepers and what they started: Prefect server, MLflow server, cpn run.
    ports = [str(free_port()) for _ in range(3)]
    argv = ["up", "--prefect-port", ports[0], "--mlflow-port", ports[1], "--api-port", ports[2]]
    proc, started = start(argv, tmp_path, least=6)
    assert_all_gone(proc, started, sig)
