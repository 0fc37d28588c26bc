"""Fencing: a leader's assignments, submissions and simulated-cluster journal entries carry its lease's term,
and the store refuses them once another process took the lease over. On SQLite and PostgreSQL
(`store_target`, tests/conftest.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from cpn.decisions import Placement
from cpn.engine.lease import LeaseLost, SchedulerLease
from cpn.jobs import JobSpec, JobState
from cpn.sim.journal import StoreJournal
from cpn.store import TRANSITIONS, JobStore, StaleTerm

OLD = "host-a:100:cpn run"
NEW = "host-b:200:cpn run"


def job(name: str) -> JobSpec:
    return JobSpec(
        job_id=f"default/{name}", model="ResNet-50", num_gpus=1, epochs=1, manifest=f"name: {name}\n"
    )


@pytest.fixture
def stores(store_target):
    """Two processes' stores on one database: the old leader's and its successor's."""
    with JobStore(store_target) as old, JobStore(store_target) as new:
        yield old, new


def test_an_assignment_carries_the_leaders_term(stores):
    old, _ = stores
    old.submit([job("a")])
    old.fence(old.acquire_lease(OLD, 30.0))
    old.transition("default/a", JobState.ASSIGNED, cluster="c1", node="n1")
    t = TRANSITIONS.c
    raw = old._database.read(select(t.to_state, t.term).order_by(t.seq))
    assert [tuple(r) for r in raw] == [("queued", None), ("assigned", 1)]


def test_a_stale_leader_can_neither_assign_nor_submit_nor_journal(stores):
    old, new = stores
    old.submit([job("a"), job("b")])
    old.fence(old.acquire_lease(OLD, 30.0))
    old.transition("default/b", JobState.ASSIGNED, cluster="c1", node="n1")
    old.release_lease(OLD, 1)  # as an expiry would: the lease is free for the next holder
    new.fence(new.acquire_lease(NEW, 30.0))
    before = old.transitions_all()
    with pytest.raises(StaleTerm, match=r"term 1 was refused.*term 2, held by host-b:200:cpn run"):
        old.transition("default/a", JobState.ASSIGNED, cluster="c1", node="n1")
    with pytest.raises(StaleTerm):
        old.transition("default/b", JobState.SUBMITTED)
    with pytest.raises(StaleTerm):
        StoreJournal(old).record(5.0, job("a"), Placement("default/a", "c1", "n1", 1))
    assert old.transitions_all() == before and old.journal() == []
    # the new leader's writes go through, and unfenced moves (a cancel, an event) still do for anyone
    new.transition("default/a", JobState.ASSIGNED, cluster="c2", node="n2")
    old.transition("default/b", JobState.QUEUED, reason="back")
    assert (new.get("default/a").cluster, new.get("default/b").state) == ("c2", JobState.QUEUED)


def test_the_journal_in_the_store_is_read_back_by_another_replica(stores):
    old, new = stores
    placement = Placement("default/a", "c1", "n1", 1, (("n2", 1),))
    StoreJournal(old).record(5.0, job("a"), placement)
    StoreJournal(old).record_delete(9.0, "default/a")
    entries = StoreJournal(new).entries()
    assert [(e.time, e.job, e.placement, e.deleted) for e in entries] == [
        (5.0, job("a"), placement, None),
        (9.0, None, None, "default/a"),
    ]


def test_a_scheduler_lease_fences_its_store_and_a_lost_one_is_lease_lost(stores):
    old, new = stores
    old.submit([job("a")])
    lease = SchedulerLease(old, "cpn run", 30.0)
    old.release_lease(lease.holder, lease.term)
    new.acquire_lease(NEW, 30.0)
    with pytest.raises(LeaseLost):
        old.transition("default/a", JobState.ASSIGNED, cluster="c1", node="n1")
    lease.release()  # lifts the fence: this process no longer leads
    assert old.lease().holder == NEW
