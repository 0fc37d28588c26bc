"""The scheduler's facts survive a SIGKILL (issue #31): a live service (tests/e2e/preempting_service.py, `cpn
run`'s service, preemption on in its config folder's policy.yaml) has preempted jobs (their progress saved,
their runs deleted) and copies in flight when it is killed; a `schedule-round` flow run is made on the store
while it is down, and the service is started again. Every saved progress and copy is kept, a process that
starts anew estimates a preempted job from its checkpoint, nothing is copied twice, queued again or
submitted twice, and every job finishes.

The scene: `home` has one card, held by a job that may not be preempted; `far` has two, lent to team bulk
(quota 0), whose jobs checkpoint every minute. Team a (quota 2) then asks for two cards for jobs whose 200 GB
of data sit in `home`: bulk's jobs are preempted and a's copied to `far` (1,600 simulated seconds).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from config.settings import load_profile
from cpn.bootstrap import build_service
from cpn.decisions import RESTART_S
from cpn.jobs import Cause, JobSpec, JobState
from cpn.sim.estimates import OracleEstimates
from cpn.sim.journal import SubmissionJournal
from cpn.store import JobStore
from flows.schedule import schedule_round
from tests.e2e.preempting_service import TABLE

pytestmark = pytest.mark.e2e

TIME_SCALE = "150"
V100 = {"gpu_product": "Tesla-V100-SXM2-16GB", "gpu_memory_gb": 16, "cpu_cores": 8, "count": 1}
CLUSTERS = {
    "clusters": [
        {"name": "home", "node_groups": [{"name": "h", "gpus_per_node": 1, **V100}]},
        {"name": "far", "node_groups": [{"name": "f", "gpus_per_node": 2, **V100}]},
    ],
    "wan_gbps": {"home": {"far": 1}},
}
TEAMS = {
    "teams": [
        {"name": "a", "namespaces": ["a"], "quota": {"v100": 2}},
        {"name": "bulk", "namespaces": ["bulk"], "quota": {"v100": 0}},
    ]
}


def spec(job_id: str, steps: int, **kw) -> JobSpec:
    return JobSpec(job_id, "ResNet-18", batch_size=32, total_steps=steps, **kw)


STEPS_PER_S = 30
"""About ResNet-18's rate on a V100 (TABLE): the durations below are in simulated seconds."""
PIN = spec("pin/hold", 4000 * STEPS_PER_S, source_cluster="home", data_size_gb=50.0, preemptible=False)
BULK = [spec(f"bulk/j{i}", 3000 * STEPS_PER_S, checkpoint_interval_s=60.0) for i in (1, 2)]
TEAM_A = [spec(f"a/x{i}", 600 * STEPS_PER_S, source_cluster="home", data_size_gb=200.0) for i in (1, 2)]


def start(config: Path, store: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tests.e2e.preempting_service", str(config), str(store), TIME_SCALE]
    proc = subprocess.Popen(cmd, stdout=log.open("a"), stderr=subprocess.STDOUT)
    wait_for(lambda: "started" in log.read_text(), 60, "the service did not start", log, proc)
    return proc


def wait_for(done, timeout_s: float, what: str, log: Path, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert proc is None or proc.poll() is None, log.read_text()[-4000:]
        assert time.monotonic() < deadline, f"{what} in {timeout_s:g} s:\n{log.read_text()[-4000:]}"
        time.sleep(0.1)


def in_state(store: JobStore, jobs: list[JobSpec], states: set[JobState]) -> bool:
    return all(store.get(j.job_id).state in states for j in jobs)


def test_a_killed_service_and_a_flow_run_between_keep_every_saved_progress_and_copy(
    tmp_path, monkeypatch, prefect_harness
):
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    monkeypatch.delenv("CPN_STORE", raising=False)
    config = tmp_path / "config"
    config.mkdir()
    (config / "clusters.yaml").write_text(yaml.safe_dump(CLUSTERS))
    (config / "teams.yaml").write_text(yaml.safe_dump(TEAMS))
    (config / "policy.yaml").write_text("name: greedy\npreemption: true\n")  # as `cpn run` reads it
    path, log = tmp_path / "jobs.db", tmp_path / "service.log"
    store = JobStore(path)
    proc = start(config, path, log)
    try:
        store.submit([PIN])
        wait_for(lambda: in_state(store, [PIN], {JobState.RUNNING}), 30, "pin/hold did not run", log, proc)
        store.submit(BULK)
        wait_for(lambda: in_state(store, BULK, {JobState.RUNNING}), 30, "bulk did not run", log, proc)
        store.submit(TEAM_A)
        wait_for(lambda: len(store.copies()) == 2, 30, "team a's jobs were not copied", log, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

        # What the killed process left: both bulk jobs preempted with their progress, both copies in flight.
        saved, copies = store.saved_progress(), {c.placement.job_id: c for c in store.copies()}
        assert sorted(saved) == [j.job_id for j in BULK] and all(0 < left < 1 for left in saved.values())
        assert sorted(copies) == [j.job_id for j in TEAM_A]
        assert {(c.source, c.placement.cluster) for c in copies.values()} == {("home", "far")}
        for job in BULK:
            last = store.history(job.job_id)[-1]
            assert (last.to_state, last.cause) == (JobState.QUEUED, Cause.PREEMPTED)

        # A process that starts anew estimates the preempted jobs from their checkpoints (a dry run's).
        whole = OracleEstimates(TABLE).estimates(tuple(BULK), ("v100",))
        looking = build_service(
            load_profile(config).clusters,
            path,
            "greedy",
            TABLE,
            estimator=OracleEstimates(TABLE),
            time_scale=1.0,
            read_only=True,
        )
        try:
            estimates = looking.scheduler.snapshot().estimates
        finally:
            looking.close()
        for job in BULK:
            resumed = RESTART_S + saved[job.job_id] * whole[job.job_id]["v100"].runtime_s
            assert estimates[job.job_id]["v100"].runtime_s == pytest.approx(resumed)

        # A schedule-round run while the service is down goes on with the copies: none queued again.
        schedule_round(policy="greedy", config_dir=str(config), estimates="oracle")
        assert store.saved_progress() == saved
        for job in TEAM_A:
            moves = [t.to_state for t in store.history(job.job_id)]
            assert moves.count(JobState.MIGRATING) == 1 and moves.count(JobState.QUEUED) == 1, moves
        for c in store.copies():
            assert (c.source, c.started_at) == (
                copies[c.placement.job_id].source,
                copies[c.placement.job_id].started_at,
            )

        proc = start(config, path, log)
        every = [PIN, *BULK, *TEAM_A]
        wait_for(
            lambda: in_state(store, every, {JobState.SUCCEEDED}), 90, "not every job succeeded", log, proc
        )
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    histories = {j.job_id: store.history(j.job_id) for j in every}
    for job in TEAM_A:
        moves = [t.to_state for t in histories[job.job_id]]
        assert moves.count(JobState.MIGRATING) == 1, f"{job.job_id} copied once: {moves}"
        assert [t.cluster for t in histories[job.job_id] if t.to_state == JobState.SUBMITTED] == ["far"]
    restarts = [t.reason for h in histories.values() for t in h if t.reason.startswith("restart:")]
    assert not [r for r in restarts if "queued again" in r], restarts
    for job in BULK:
        preempted = [t for t in histories[job.job_id] if t.cause == Cause.PREEMPTED]
        assert len(preempted) == 1 and histories[job.job_id][-1].to_state == JobState.SUCCEEDED
    journaled = Counter(e.job.job_id for e in SubmissionJournal(f"{path}.sim-journal").entries() if e.job)
    recorded = Counter(t.job_id for h in histories.values() for t in h if t.to_state == JobState.SUBMITTED)
    assert journaled == recorded, "every submission the clusters got is recorded once, and none twice"
    assert store.saved_progress() == {} and store.copies() == []
    store.close()
