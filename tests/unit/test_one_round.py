"""One definition of a round (`run_stages`), one scheduler per store (the lease), and dry runs that
only read: a read-only service on a live store reconciles nothing and writes no byte."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cli import main
from cpn.adapters.gateway import JobEvent
from cpn.bootstrap import Service, build_service
from cpn.decisions import Decision, Placement, Rejection, Snapshot, Waiting
from cpn.engine.lease import LeaseLost
from cpn.engine.live import LiveLoop
from cpn.engine.scheduler import RoundResult, run_stages
from cpn.jobs import JobSpec, JobState
from cpn.sim.estimates import OracleEstimates
from cpn.store import JobStore, StoreLeased
from tests.unit.test_live_service import CLUSTERS, JOBS, TABLE, Wall, drive

PENDING = tuple(JobSpec(job_id=f"ns/p{i}", model="ResNet-18", batch_size=32, num_gpus=1) for i in range(4))
DECISION = Decision(
    placements=(Placement("ns/p0", "site-a", "a-0", 1), Placement("ns/p1", "site-b", "b-0", 1)),
    rejections=(Rejection("ns/p2", "too wide"),),
    waiting=(Waiting("ns/p3", "queue-order"),),
)


class RecordingStages:
    """Stages that answer with literal data and record which ran, in order."""

    def __init__(self, explain: bool = True) -> None:
        self.explain = explain
        self.ran: list[str] = []

    def collect(self) -> list[JobEvent]:
        self.ran.append("collect")
        return [JobEvent("ns/old", "succeeded", 5.0)]

    def cancel(self) -> int:
        self.ran.append("cancel")
        return 1

    def snapshot(self) -> Snapshot:
        self.ran.append("snapshot")
        return Snapshot(now=42.0, pending=PENDING, nodes=(), explain=self.explain)

    def decide(self, snapshot: Snapshot) -> Decision:
        self.ran.append("decide")
        return DECISION

    def assign(self, decision: Decision) -> tuple[list[Placement], list[Placement]]:
        self.ran.append("assign")
        return [decision.placements[1]], [decision.placements[0]]

    def migrate(self, placements: list[Placement]) -> int:
        self.ran.append("migrate")
        return len(placements)

    def submit(self, placements: list[Placement]) -> tuple[int, int]:
        self.ran.append("submit")
        return len(placements), 0

    def record_waiting(self, decision: Decision) -> int:
        self.ran.append("record_waiting")
        return len(decision.waiting)


def test_a_round_runs_every_stage_in_order_and_counts_what_each_did():
    stages = RecordingStages()
    result = run_stages(stages)
    assert stages.ran == [
        "collect",
        "cancel",
        "snapshot",
        "decide",
        "assign",
        "migrate",
        "submit",
        "record_waiting",
    ]
    assert result == RoundResult(
        time=42.0,
        events=1,
        placed=1,
        migrating=1,
        rejected=1,
        submit_refused=0,
        pending_after=1,
        pending=4,
        decided=2,
        cancelled=1,
    )


def test_a_round_that_does_not_explain_records_no_waiting_reasons():
    stages = RecordingStages(explain=False)
    run_stages(stages)
    assert "record_waiting" not in stages.ran


def test_a_dry_run_only_snapshots_and_decides():
    stages = RecordingStages()
    result = run_stages(stages, dry_run=True)
    assert stages.ran == ["snapshot", "decide"]
    assert (result.dry_run, result.events, result.placed, result.migrating) == (True, 0, 0, 0)
    assert (result.pending, result.decided, result.rejected, result.pending_after) == (4, 2, 1, 4)


def live(store: Path, wall: Wall, purpose: str = "cpn run", read_only: bool = False) -> Service:
    """A live service on `store`; its lease lasts 10 minutes, so that its keeper writes nothing to the store
    during a test (the files of a store are compared byte for byte across a dry run)."""
    return build_service(
        CLUSTERS,
        store,
        "greedy",
        TABLE,
        estimator=OracleEstimates(TABLE),
        time_scale=100.0,
        wall=wall,
        purpose=purpose,
        read_only=read_only,
        lease_ttl_s=600.0,
    )


def digests(store: Path) -> dict[str, str]:
    """Every file of the store: the database, its WAL, the simulated clusters' journal and timeline."""
    files = [store, *(Path(f"{store}{suffix}") for suffix in ("-wal", ".sim-journal", ".sim-time"))]
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files if f.exists()}


@pytest.fixture
def running(tmp_path):
    """A live service with jobs migrating, running and queued, holding its store's lease."""
    wall = Wall()
    service = live(tmp_path / "jobs.db", wall)
    service.start()
    service.store.submit(JOBS)
    drive(service, wall, 1)
    yield service, wall
    service.close()


def test_the_running_service_holds_the_lease_and_a_second_scheduler_is_refused_before_writing(running):
    service, wall = running
    store = Path(service.store.path)
    assert service.store.lease().holder == f"{socket.gethostname()}:{os.getpid()}:cpn run"
    before, history = digests(store), service.store.transitions_all()
    with pytest.raises(StoreLeased, match=":cpn run"):
        live(store, wall, purpose="schedule-round")
    after = digests(store)
    assert {n: after[n] for n in before if n.endswith(("journal", "time"))} == {
        n: before[n] for n in before if n.endswith(("journal", "time"))
    }
    assert service.store.transitions_all() == history
    service.close()
    second = live(store, wall, purpose="schedule-round")
    assert (second.lease.term, second.store.lease().holder.endswith(":schedule-round")) == (2, True)
    second.close()


def unmoved(decision: Decision) -> Decision:
    """`decision` without why each predicted start moved."""
    return replace(decision, waiting=tuple(replace(w, moved="") for w in decision.waiting))


def test_a_read_only_service_reconciles_nothing_writes_nothing_and_decides_as_the_live_one(running):
    service, wall = running
    store = Path(service.store.path)
    states = {r.job_id: r.state for r in service.store.jobs()}
    assert JobState.MIGRATING in states.values() and JobState.QUEUED in states.values()
    assert {".sim-journal", ".sim-time"} <= {name.removeprefix("jobs.db") for name in digests(store)}
    before = digests(store)
    dry = live(store, wall, purpose="schedule-round", read_only=True)
    dry.start()  # a reconcile here would queue the migrating jobs again: its simulated copies are gone
    result = run_stages(dry.scheduler, dry_run=True)
    mine = service.scheduler.decide(service.scheduler.snapshot())
    theirs = dry.scheduler.decide(dry.scheduler.snapshot())
    # why a predicted start moved is each service's own history of forward looks (cpn.engine.forecast)
    assert unmoved(theirs) == unmoved(mine)
    assert result.decided == len(mine.placements)
    assert result.pending == sum(s == JobState.QUEUED for s in states.values())
    dry.close()
    assert {r.job_id: r.state for r in service.store.jobs()} == states
    assert digests(store) == before


def test_a_scheduler_that_lost_its_lease_stops_before_writing_and_the_loop_ends(running):
    service, wall = running
    with JobStore(service.store.path) as other:  # its lease ran out, and another process took the store
        other.release_lease(service.lease.holder, service.lease.term)
        other.acquire_lease("elsewhere:7:cpn run", 60.0)
    history = service.store.transitions_all()
    wall.t += 60.0  # events and finished copies are due
    with pytest.raises(LeaseLost, match="elsewhere:7:cpn run"):
        service.scheduler.round()
    loop = LiveLoop(service.scheduler, 1.0, simulation=service.driver)
    with pytest.raises(LeaseLost):
        loop.run()
    assert loop.stats.errors == 0
    assert service.store.transitions_all() == history


def test_the_lease_of_a_process_gone_from_this_host_is_taken_over_at_once(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    with JobStore(tmp_path / "jobs.db") as store:
        store.acquire_lease(f"{socket.gethostname()}:{int(gone.stdout)}:cpn run", 600.0)
    service = live(tmp_path / "jobs.db", Wall())
    assert service.lease.term == 2
    service.close()
    with JobStore(tmp_path / "jobs.db") as store:  # a holder that still runs (this test's parent) is not
        store.acquire_lease(f"{socket.gethostname()}:{os.getppid()}:cpn run", 600.0)
    with pytest.raises(StoreLeased):
        live(tmp_path / "jobs.db", Wall())


def test_cpn_run_refuses_a_store_another_process_schedules_and_names_it(tmp_path, capsys):
    store = tmp_path / "jobs.db"
    with JobStore(store) as held:
        held.acquire_lease("otherhost:99:cpn run", 600.0)
    assert main(["run", "--store", str(store), "--estimates", "oracle", "--no-auth", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "otherhost:99:cpn run" in err and "stop that process" in err
