"""The scheduler lease renews itself on its own thread, and a leader that loses it stands by again instead
of exiting (cpn.engine.lease, cpn.engine.live.LiveLoop.serve)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import update

from cpn.engine.lease import LEASE_TTL_S, SchedulerLease
from cpn.engine.live import LiveLoop
from cpn.engine.scheduler import RoundResult
from cpn.store import LEASE, JobStore, LeaseLost, StoreLeased


def test_the_keeper_renews_the_lease_however_long_a_round_takes_and_stops_when_released(tmp_path):
    assert LEASE_TTL_S + 2.0 <= 10.0, "a standby retrying every 2 s takes over within 10 s"
    with JobStore(tmp_path / "jobs.db") as store:
        lease = SchedulerLease(store, "cpn run", ttl_s=0.1)
        time.sleep(0.25)  # a round that takes more than twice the lease's term, renewing nothing itself
        lease.check()
        assert store.lease().expires_at > time.time(), "renewed meanwhile by its keeper"
        with pytest.raises(StoreLeased):
            store.acquire_lease("elsewhere:7:cpn run", 1.0)
        lease.release()
        assert store.acquire_lease("elsewhere:7:cpn run", 1.0) == lease.term + 1


def test_a_lease_taken_over_is_lost_at_the_next_check_naming_the_new_holder(tmp_path):
    with JobStore(tmp_path / "jobs.db") as store:
        lease = SchedulerLease(store, "cpn run", ttl_s=60.0)
        store.release_lease(lease.holder, lease.term)  # as if it had lapsed
        store.acquire_lease("elsewhere:7:cpn run", 60.0)
        with pytest.raises(
            LeaseLost, match=r"lost the scheduler lease of term 1 to elsewhere:7:cpn run \(term 2\)"
        ):
            lease.check()
        lease.release()
        assert store.lease().holder == "elsewhere:7:cpn run", "releasing a lost lease frees nothing"


def test_the_keeper_that_finds_the_lease_taken_over_says_so_at_once(tmp_path):
    """So that a loop waiting for its next round wakes and stands by (LiveLoop.serve sets `on_lost`)."""
    with JobStore(tmp_path / "jobs.db") as store:
        lease, found = SchedulerLease(store, "cpn run", ttl_s=0.3), threading.Event()
        lease.on_lost = found.set
        with store._database.write() as db:  # another holder takes it in one step, as a lapse allows
            db.execute(update(LEASE).values(holder="elsewhere:7:cpn run", term=LEASE.c.term + 1))
        assert found.wait(2.0)
        with pytest.raises(LeaseLost, match="to elsewhere:7:cpn run"):
            lease.check()
        lease.release()


class _Store:
    def add_listener(self, listener) -> None:
        pass


class _Rounds:
    """A scheduler whose first round finds the lease lost, and whose second stops the loop."""

    store, lease = _Store(), None

    def __init__(self) -> None:
        self.rounds = 0
        self.loop: LiveLoop | None = None

    def round(self) -> RoundResult:
        self.rounds += 1
        if self.rounds == 1:
            raise LeaseLost("another process took the store")
        self.loop.stop()
        return RoundResult(0.0, 0, 0, 0, 0, 0, 0)


class _Leadership:
    def __init__(self) -> None:
        self.leads, self.calls, self.refusals = True, [], 2

    def try_lead(self) -> bool:
        self.calls.append("try_lead")
        self.refusals -= 1
        self.leads = self.refusals < 0
        return self.leads

    def start(self) -> None:
        self.calls.append("start")

    def step_down(self) -> None:
        self.calls.append("step_down")
        self.leads = False


def test_a_leader_that_loses_the_lease_stands_by_and_leads_again_once_it_is_free():
    rounds, leadership = _Rounds(), _Leadership()
    loop = LiveLoop(rounds, interval_s=0.01)
    rounds.loop = loop
    stats = loop.serve(leadership, every_s=0.01)
    assert leadership.calls == ["step_down", "try_lead", "try_lead", "try_lead", "start"]
    assert (rounds.rounds, stats.rounds, stats.errors) == (2, 1, 0)


def test_with_the_pid_check_off_a_gone_holder_is_taken_over_once_its_lease_expires(tmp_path, monkeypatch):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    holder = f"{socket.gethostname()}:{int(gone.stdout)}:cpn run"
    with JobStore(tmp_path / "jobs.db") as store:
        store.acquire_lease(holder, 600.0)
        monkeypatch.setenv("CPN_LEASE_PID_CHECK", "0")  # as across hosts: the pid says nothing
        with pytest.raises(StoreLeased, match=holder):
            SchedulerLease(store, "cpn run")
        monkeypatch.delenv("CPN_LEASE_PID_CHECK")
        lease = SchedulerLease(store, "cpn run")  # on by default: the gone holder is taken over at once
        assert lease.term == 2
        lease.release()
        store.acquire_lease(holder, 0.2)
        with pytest.raises(StoreLeased):
            SchedulerLease(store, "cpn run", pid_check=False)
        time.sleep(0.25)
        lease = SchedulerLease(store, "cpn run", pid_check=False)  # expired: taken over
        assert lease.term == 4
        lease.release()
