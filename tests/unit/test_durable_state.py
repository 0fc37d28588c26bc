"""The facts a round needs are in the store (cpn.store.facts), so a scheduler built again over the same store
(a restart, a `schedule-round` run, a standby taking over) decides as the one that wrote them: a copy in
flight is held, goes on and lands when it would have, once; nothing is queued again or copied twice."""

from __future__ import annotations

import pytest

from cpn.clock import SimClock
from cpn.engine.scheduler import Scheduler
from cpn.jobs import IllegalTransition, JobState
from cpn.policies import make_policy
from cpn.sim.estimates import OracleEstimates
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.migrator import SimulatedMigrator
from cpn.sim.truth import GroundTruth
from cpn.store import JobStore
from cpn.store.facts import CopyStarted, SavedProgress
from cpn.transfer import TransferTimes
from tests.unit.test_copy_once import CLUSTERS, NODES, TABLE, copies, job


def test_a_fact_is_written_with_the_move_that_makes_it_and_removed_with_the_one_that_ends_it(store_target):
    clock = SimClock()
    with JobStore(store_target, clock=clock) as store:
        store.submit([job("x", "a"), job("y", "a")])
        store.transition("x", JobState.ASSIGNED, cluster="b", node="b-0", placement=[("b-0", 1)])
        clock.advance_to(5.0)
        store.transition("x", JobState.MIGRATING, fact=CopyStarted("a", whole_cards=True))
        (copy,) = store.copies()
        assert (copy.record.job_id, copy.source, copy.started_at, copy.whole_cards) == ("x", "a", 5.0, True)
        assert (copy.placement.cluster, copy.placement.node, copy.placement.num_gpus) == ("b", "b-0", 1)
        store.transition("x", JobState.SUBMITTED)
        assert store.copies() == []

        store.transition("x", JobState.QUEUED, fact=SavedProgress(0.25))
        for state in (JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING):
            store.transition("x", state, cluster="a", node="a-0")
            assert store.saved_progress() == {"x": 0.25}, "kept while the job resumes"
        store.transition("x", JobState.SUCCEEDED)
        assert store.saved_progress() == {}


def test_a_fact_on_a_move_that_cannot_make_it_is_refused_and_nothing_is_written(store_target):
    with JobStore(store_target) as store:
        store.submit([job("x", "a")])
        with pytest.raises(
            ValueError, match="SavedProgress is recorded with a move to queued, not to assigned"
        ):
            store.transition("x", JobState.ASSIGNED, cluster="b", node="b-0", fact=SavedProgress(0.5))
        with pytest.raises(ValueError, match="work_left is a fraction of the job's work, 0 to 1, not 1.5"):
            SavedProgress(1.5)
        with pytest.raises(IllegalTransition):  # queued -> migrating: refused before its fact is written
            store.transition("x", JobState.MIGRATING, fact=CopyStarted("a"))
        assert store.get("x").state == JobState.QUEUED
        assert (store.copies(), store.saved_progress(), len(store.history("x"))) == ([], {}, 1)


def scheduler_over(store: JobStore, gateway: SimulatedGateway, clock: SimClock) -> Scheduler:
    """A scheduler as a new process builds it over `store` and the (still running) clusters: its own
    migrator, no memory of what the one before did."""
    transfers = TransferTimes(CLUSTERS)
    return Scheduler(
        store,
        gateway,
        make_policy("greedy"),
        clock,
        estimator=OracleEstimates(TABLE),
        transfers=transfers,
        migrator=SimulatedMigrator(transfers, clock),
    )


def test_a_copy_in_flight_is_held_and_lands_once_when_it_would_have_after_a_restart():
    """x (payload in a, whose card the blocker holds) is copied to b: 10 s. The process stops at 4 s; the
    next one holds b's card for x (y, arriving meanwhile, waits), goes on with the copy from when it began,
    copies nothing again, and submits x to b at 10 s, as the first process would have."""
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = SimulatedGateway(NODES[:2], GroundTruth(TABLE), clock)
    first = scheduler_over(store, gateway, clock)
    store.submit([job("blocker", "a", steps=1000), job("x", "a")])
    first.round()
    assert store.get("x").state == JobState.MIGRATING and copies(store, "x") == ["b"]
    assert first.migrator.total_s == pytest.approx(10.0)

    clock.advance_to(4.0)  # the first process is gone; y arrives
    store.submit([job("y", "b")])
    second = scheduler_over(store, gateway, clock)
    reconciled = second.reconcile(gateway.held_jobs())
    assert (reconciled.requeued, reconciled.copying) == ((), ("x",))
    second.round()
    held = {s.node.cluster: s for s in second.snapshot().nodes}["b"]
    assert held.free_gpus == 0 and "x" in held.running, "b's card stays x's"
    assert store.get("y").state == JobState.QUEUED and store.get("x").state == JobState.MIGRATING
    assert second.migrator.next_event_time() == pytest.approx(10.0), "the copy ends when it would have"
    assert second.migrator.total_s == 0, "nothing copied again"

    clock.advance_to(10.0)
    second.migrator.advance(10.0)
    second.round()
    record = store.get("x")
    assert (record.state, record.cluster, record.location) == (JobState.SUBMITTED, "b", "b")
    assert copies(store, "x") == ["b"] and store.history("x")[-1].time == pytest.approx(10.0)
    assert store.copies() == []
    assert [t.to_state for t in store.history("x")].count(JobState.QUEUED) == 1, "never queued again"


def test_a_read_only_scheduler_holds_the_cards_of_the_copies_the_store_has():
    """A dry run's scheduler (no lease, no reconcile) sees the copy in flight as the leader does."""
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = SimulatedGateway(NODES[:2], GroundTruth(TABLE), clock)
    scheduler_over(store, gateway, clock).round()
    store.submit([job("blocker", "a", steps=1000), job("x", "a")])
    scheduler_over(store, gateway, clock).round()
    assert store.get("x").state == JobState.MIGRATING
    looking = scheduler_over(store, gateway, clock)
    held = {s.node.cluster: s for s in looking.snapshot().nodes}["b"]
    assert held.free_gpus == 0 and "x" in held.running
