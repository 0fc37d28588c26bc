"""No orphans: however a supervising command ends, every process it started (and theirs) goes too."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cpn.processes import ServiceFailed, Supervisor, _group_members

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# A service that starts a grandchild of its own and records both pids, then sleeps.
SERVICE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(sys.argv[1], "w") as f:
        f.write(f"{os.getpid()} {grandchild.pid}")
    time.sleep(600)
    """
)

# The supervising command: starts the service, says it is ready, and waits to be stopped.
PARENT = textwrap.dedent(
    """
    import sys, time
    from cpn.processes import Supervisor, stop_on_signals
    with stop_on_signals(), Supervisor(grace_s=2) as sup:
        keeper = sup.start("sleeper", [sys.executable, "-c", sys.argv[1], sys.argv[2]])
        print(keeper.pid, flush=True)
        time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def start_parent(tmp_path: Path) -> tuple[subprocess.Popen, list[int]]:
    pids_file = tmp_path / "pids"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, SERVICE, str(pids_file)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the test's signals reach the parent only, as a `kill PID` would
        cwd=Path(__file__).resolve().parents[2],
    )
    keeper = int(parent.stdout.readline())
    deadline = time.monotonic() + 20
    while not (pids_file.exists() and len(pids_file.read_text().split()) == 2):
        assert time.monotonic() < deadline, "the service never started"
        time.sleep(0.05)
    service, grandchild = map(int, pids_file.read_text().split())
    return parent, [keeper, service, grandchild]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_every_process_goes_when_the_parent_is_stopped_or_killed(tmp_path, sig):
    parent, pids = start_parent(tmp_path)
    assert all(alive(p) for p in pids)
    parent.send_signal(sig)
    parent.wait(timeout=15)
    assert wait_gone(pids) == [], f"left running after {sig.name} to the parent"


def test_a_service_that_exits_takes_its_group_along_and_is_reported(tmp_path):
    code = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
    code += f"open({str(tmp_path / 'gc')!r}, 'w').write('x'); sys.exit(3)"
    with Supervisor(grace_s=1) as sup:
        service = sup.start("crasher", [sys.executable, "-c", code])
        assert service.keeper.wait(timeout=15) == 3
        assert sup.failed() == [service]
        assert "crasher exited with status 3" in service.describe_exit()
        with pytest.raises(ServiceFailed, match="crasher exited with status 3"):
            sup.wait_ready(service, "http://127.0.0.1:9/", timeout_s=5)
    assert not any(alive(p) for p in _pids_in_group(service.pid))


def test_a_service_that_ignores_sigterm_is_stopped_with_its_own_signal(tmp_path):
    # Like a Prefect process worker: deaf to SIGTERM, stopped by SIGINT.
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    with Supervisor(grace_s=30) as sup:
        service = sup.start("worker", [sys.executable, "-c", code], stop_signal=signal.SIGINT)
        time.sleep(0.5)
        started = time.monotonic()
    assert not service.running()
    assert time.monotonic() - started < 10, "it waited for the grace period instead of using SIGINT"


def _pids_in_group(pgid: int) -> list[int]:
    return sorted(_group_members(pgid))
