"""The live service on simulated clusters: restarts lose nothing and submit nothing twice, wherever the
process stops, and the loop wakes when a job arrives and stops after the round in progress."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from config.settings import ClustersConfig
from cpn.bootstrap import Service, build_service
from cpn.engine.live import LiveLoop
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.jobs import JobSpec, JobState
from cpn.sim.estimates import OracleEstimates
from cpn.sim.journal import SubmissionJournal
from cpn.store import JobStore

TABLE = ThroughputTable(
    [
        ThroughputRow("ResNet-18", 32, "v100", 1, 1.0),
        ThroughputRow("ResNet-18", 32, "v100", 2, 1.6),
        ThroughputRow("ResNet-18", 32, "k80", 1, 0.5),
        ThroughputRow("ResNet-18", 32, "k80", 2, 0.8),
    ]
)
CLUSTERS = ClustersConfig.model_validate(
    {
        "clusters": [
            {
                "name": "site-a",
                "node_groups": [
                    {
                        "name": "a",
                        "gpu_product": "Tesla-V100-SXM2-16GB",
                        "gpus_per_node": 2,
                        "gpu_memory_gb": 16,
                        "cpu_cores": 8,
                    }
                ],
            },
            {
                "name": "site-b",
                "node_groups": [
                    {
                        "name": "b",
                        "gpu_product": "Tesla-K80",
                        "gpus_per_node": 2,
                        "gpu_memory_gb": 12,
                        "cpu_cores": 8,
                    }
                ],
            },
        ],
        "wan_gbps": {"site-a": {"site-b": 10}},
    }
)
JOBS = [
    JobSpec(
        job_id=f"ns/j{i}",
        model="ResNet-18",
        batch_size=32,
        num_gpus=1 + i % 2,
        total_steps=600 + 100 * i,
        source_cluster="site-b" if i % 3 == 0 else None,
        data_size_gb=5.0,
    )
    for i in range(6)
]
TERMINAL = {JobState.SUCCEEDED, JobState.FAILED, JobState.SCHEDULE_FAILED}


class Wall:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


class Crash(Exception):
    """Stands for the process dying: nothing after it runs."""


def open_service(store: Path, wall: Wall) -> Service:
    return build_service(
        CLUSTERS, store, "greedy", TABLE, estimator=OracleEstimates(TABLE), time_scale=100.0, wall=wall
    )


def drive(service: Service, wall: Wall, rounds: int, step_s: float = 2.0) -> None:
    loop = LiveLoop(service.scheduler, 1.0, simulation=service.driver)
    for _ in range(rounds):
        wall.t += step_s
        loop.run_once()


def all_done(store: JobStore) -> bool:
    return all(r.state in TERMINAL for r in store.jobs())


def finish(store_path: Path, wall: Wall) -> JobStore:
    """Restart on the store and run until every job is done; returns the restarted service's store."""
    service = open_service(store_path, wall)
    service.start()
    for _ in range(400):
        if all_done(service.store):
            break
        drive(service, wall, 1, step_s=5.0)
    return service.store


def check_nothing_lost_or_doubled(store: JobStore, store_path: Path) -> None:
    records = store.jobs()
    assert sorted(r.job_id for r in records) == sorted(j.job_id for j in JOBS)
    assert {r.state for r in records} == {JobState.SUCCEEDED}, [(r.job_id, r.state) for r in records]
    submitted = [e[1].job_id for e in SubmissionJournal(f"{store_path}.sim-journal").entries()]
    assert sorted(submitted) == sorted(j.job_id for j in JOBS), "every job runs exactly once"
    for r in records:
        history = store.history(r.job_id)
        assert sum(t.to_state == JobState.RUNNING for t in history) == 1
        assert sum(t.to_state == JobState.SUCCEEDED for t in history) == 1


def test_a_restart_mid_run_resumes_every_job_once(tmp_path):
    wall, store_path = Wall(), tmp_path / "jobs.db"
    service = open_service(store_path, wall)
    service.start()
    service.store.submit(JOBS)
    drive(service, wall, 3)
    states = {r.state for r in service.store.jobs()}
    assert JobState.RUNNING in states and not all_done(service.store), "stopped with work in progress"
    service.close()  # the process stops; the simulated clusters "keep running" while it is down
    wall.t += 30.0
    check_nothing_lost_or_doubled(finish(store_path, wall), store_path)


def count_transitions(tmp_path: Path) -> int:
    wall, store_path = Wall(), tmp_path / "clean.db"
    service = open_service(store_path, wall)
    service.store.submit(JOBS)
    while not all_done(service.store):
        drive(service, wall, 1, step_s=5.0)
    return sum(len(service.store.history(j.job_id)) - 1 for j in JOBS)


def test_a_crash_at_any_transition_of_a_round_loses_and_doubles_nothing(tmp_path):
    """Kill the service at its k-th state transition, for every k of a clean run, then restart."""
    total = count_transitions(tmp_path)
    assert total >= 6 * 4
    for k in range(1, total + 1):
        wall, store_path = Wall(), tmp_path / f"crash-{k}.db"
        service = open_service(store_path, wall)
        service.start()
        service.store.submit(JOBS)
        real, calls = service.store.transition, [0]

        def dying(*args, _real=real, _calls=calls, _k=k, **kw):
            _calls[0] += 1
            if _calls[0] == _k:
                raise Crash
            return _real(*args, **kw)

        service.store.transition = dying
        with pytest.raises(Crash):
            for _ in range(400):
                drive(service, wall, 1, step_s=5.0)
        service.close()
        check_nothing_lost_or_doubled(finish(store_path, wall), store_path)


def test_a_round_whose_journal_write_fails_is_settled_by_the_next_and_loses_nothing(tmp_path):
    """The store fails once, at the k-th submission's journal entry, and the service goes on (no restart):
    the job the failed round assigned is neither left `assigned` nor run unjournaled."""
    for k in range(1, len(JOBS) + 1):
        wall, store_path = Wall(), tmp_path / f"fail-{k}.db"
        service = open_service(store_path, wall)
        service.start()
        service.store.submit(JOBS)
        journal = service.journal.journal
        real, calls = journal.record, [0]

        def failing(*args, _real=real, _calls=calls, _k=k):
            _calls[0] += 1
            if _calls[0] == _k:
                raise OSError("the journal's disk is gone for a moment")
            return _real(*args)

        journal.record = failing
        loop = LiveLoop(service.scheduler, 1.0, simulation=service.driver)
        for _ in range(400):
            if all_done(service.store):
                break
            wall.t += 5.0
            try:
                loop.run_once()
            except OSError:
                pass
        assert calls[0] > k, "the failure happened mid-run"
        check_nothing_lost_or_doubled(service.store, store_path)
        service.close()


def test_the_loop_wakes_on_arrival_and_stops_after_its_round(tmp_path):
    service = build_service(CLUSTERS, tmp_path / "jobs.db", "fifo", TABLE, time_scale=1.0)
    service.start()
    loop = LiveLoop(service.scheduler, interval_s=60.0, simulation=service.driver)
    runner = threading.Thread(target=loop.run)
    runner.start()
    try:
        for _ in range(100):
            if loop.stats.rounds:
                break
            threading.Event().wait(0.01)
        rounds_before = loop.stats.rounds
        service.store.submit(JOBS[:1])  # wakes the loop long before its 60 s interval
        for _ in range(300):
            if service.store.get("ns/j0").state != JobState.QUEUED:
                break
            threading.Event().wait(0.01)
        assert service.store.get("ns/j0").state != JobState.QUEUED
        assert loop.stats.rounds > rounds_before
    finally:
        loop.stop()
        runner.join(timeout=5)
    assert not runner.is_alive()
    service.close()
