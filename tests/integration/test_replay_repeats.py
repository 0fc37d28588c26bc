"""A replay is the same whatever the process's string hashing: two `cpn bench policies` runs of the
three-team example with preemption, in processes with different PYTHONHASHSEED, give the same figures.

Running jobs reached the policy in the order of a set of job ids, so ties among preemption victims were
broken differently from one process to the next (409 to 767 runs stopped on the whole example)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def replay(tmp_path: Path, seed: str) -> dict:
    out = tmp_path / f"run-{seed}.json"
    command = [
        sys.executable, "-m", "cli", "bench", "policies",
        "--clusters", "examples/clusters/gavel-36x3.yaml",
        "--trace", "examples/teams/three-teams.csv",
        "--teams", "examples/teams/teams.yaml",
        "--policies", "greedy", "--set", "preemption=true", "--no-forecast",
        "--json", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONHASHSEED": seed}
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    figures = json.loads(out.read_text())["policies"]["greedy(preemption=True)"]
    # Wall and CPU times differ (the totals and the round stages' `stage_wall`), and so do the predicted
    # starts of a replay without the forward look: they come only from the waits a policy explains (greedy's
    # wait for a faster type), and a replay explains at most every REPLAY_EXPLAIN_EVERY_S of wall time
    # (cpn.bootstrap), so which rounds give them depends on the machine.
    return {
        k: v
        for k, v in figures.items()
        if not k.endswith(("wall_s", "cpu_s"))
        and k not in ("forecast_s", "stage_wall")
        and not k.startswith("predicted_start")
    }


def test_a_replay_with_preemption_is_the_same_in_every_process(tmp_path):
    first, second = replay(tmp_path, "1"), replay(tmp_path, "2")
    assert first["preemptions"] > 0
    assert first == second
