"""A job goes where its image went (issue #18): a finished copy is followed by a submission to the cards
held for it, a cluster holding the image costs no transfer, and no image is copied to a holder again."""

from __future__ import annotations

import pytest

from cpn.clock import SimClock
from cpn.decisions import Decision, Placement, Snapshot
from cpn.engine.scheduler import Scheduler
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node
from cpn.jobs import JobSpec, JobState
from cpn.policies import make_policy
from cpn.policies.base import Traits
from cpn.sim.estimates import OracleEstimates
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.migrator import SimulatedMigrator
from cpn.sim.truth import GroundTruth
from cpn.store import JobStore
from cpn.transfer import TransferTimes
from tests.unit.test_migration_flow import one_card_sites

TABLE = ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", 1, 1.0)])
# 12.5 GB of payload: 10 s between a and b, 10 s a -> c, 100 s b -> c.
CLUSTERS = one_card_sites({"a": {"b": 10, "c": 10}, "b": {"c": 1}})
NODES = [Node(c, f"{c}-0", "Tesla-V100-SXM2-16GB", 1, 16, 4, "training") for c in ("a", "b", "c")]


def job(job_id: str, source: str, steps: int = 100) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        model="ResNet-18",
        batch_size=32,
        total_steps=steps,
        source_cluster=source,
        image="registry.a:5000/team/train:v1",
        image_size_gb=2.5,
        data_size_gb=10,
    )


class PlaceOn:
    """Places every queued job on the one card of `cluster` (a literal decision, to test the scheduler)."""

    name = "place-on"
    traits = Traits()

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster

    def decide(self, snapshot: Snapshot) -> Decision:
        return Decision(
            placements=tuple(
                Placement(j.job_id, self.cluster, f"{self.cluster}-0", 1) for j in snapshot.pending
            )
        )


def service(nodes, policy):
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = SimulatedGateway(nodes, GroundTruth(TABLE), clock)
    transfers = TransferTimes(CLUSTERS)
    migrator = SimulatedMigrator(transfers, clock)
    scheduler = Scheduler(
        store,
        gateway,
        policy,
        clock,
        estimator=OracleEstimates(TABLE),
        transfers=transfers,
        migrator=migrator,
    )
    return clock, store, gateway, migrator, scheduler


def copies(store: JobStore, job_id: str) -> list[str | None]:
    return [t.cluster for t in store.history(job_id) if t.to_state == JobState.MIGRATING]


def test_a_finished_copy_is_submitted_to_the_cards_held_for_it_not_copied_elsewhere():
    # a's card runs the blocker, so x (payload in a) is copied to b (10 s). y, local to b, arrives at 1 s
    # while the copy runs: b's card is held for x, so y waits and x runs on b when its copy lands.
    clock, store, gateway, migrator, scheduler = service(NODES[:2], make_policy("greedy"))
    store.submit([job("blocker", "a", steps=1000), job("x", "a")])
    scheduler.round()
    assert store.get("x").state == JobState.MIGRATING and copies(store, "x") == ["b"]
    clock.advance_to(1.0)
    store.submit([job("y", "b")])
    scheduler.round()
    held = {s.node.cluster: s for s in scheduler.snapshot().nodes}["b"]
    assert held.free_gpus == 0 and "x" in held.running
    assert store.get("y").state == JobState.QUEUED
    clock.advance_to(migrator.next_event_time())
    migrator.advance(clock.now())
    scheduler.round()
    record = store.get("x")
    assert (record.state, record.cluster, record.location) == (JobState.SUBMITTED, "b", "b")
    assert copies(store, "x") == ["b"]
    assert store.history("x")[-1].time == pytest.approx(10.0)
    assert store.get("y").state == JobState.QUEUED


def copied_to_b_and_back_in_the_queue(store: JobStore) -> None:
    """x, from a, was copied to b and queued again there (as after a refused submission)."""
    store.submit([job("x", "a")])
    store.transition("x", JobState.ASSIGNED, cluster="b", node="b-0", placement=[("b-0", 1)])
    store.transition("x", JobState.MIGRATING)
    store.transition("x", JobState.QUEUED, location="b", reason="migrated to b; submit refused: busy")


@pytest.mark.parametrize("cluster", ["a", "b"])
def test_an_image_is_not_copied_again_to_a_cluster_that_holds_it(cluster):
    _, store, gateway, migrator, scheduler = service(NODES, PlaceOn(cluster))
    copied_to_b_and_back_in_the_queue(store)
    scheduler.round()
    assert copies(store, "x") == ["b"], "only the copy made before"
    assert migrator.total_s == 0
    record = store.get("x")
    assert (record.state, record.cluster) == (JobState.SUBMITTED, cluster)


def test_transfer_to_a_cluster_holding_the_image_is_zero_and_a_copy_comes_from_the_nearest():
    _, store, _, migrator, scheduler = service(NODES, PlaceOn("c"))
    copied_to_b_and_back_in_the_queue(store)
    assert scheduler.snapshot().transfer_s["x"] == pytest.approx({"a": 0.0, "b": 0.0, "c": 10.0})
    scheduler.round()
    assert store.history("x")[-1].reason == "a -> c", "from a (10 Gbit/s), not from b (1 Gbit/s)"
    assert migrator.total_s == pytest.approx(10.0)


def test_transfer_row_is_zero_where_the_payload_is_and_from_the_nearest_holder_elsewhere():
    transfers = TransferTimes(CLUSTERS)
    x = job("x", "a")
    assert transfers.row(x, "b", "a") == pytest.approx({"a": 0.0, "b": 0.0, "c": 10.0})
    assert transfers.row(x, "b") == pytest.approx({"a": 10.0, "b": 0.0, "c": 100.0})
    assert transfers.nearest(x, {"a", "b"}, "c") == ("a", pytest.approx(10.0))
    assert transfers.nearest(x, set(), "c") == (None, 0.0)


def test_a_restart_records_a_copied_job_the_cluster_holds_as_submitted():
    _, store, _, _, scheduler = service(NODES, PlaceOn("b"))
    store.submit([job("x", "a"), job("z", "a")])
    for job_id in ("x", "z"):
        store.transition(job_id, JobState.ASSIGNED, cluster="b", node="b-0", placement=[("b-0", 1)])
        store.transition(job_id, JobState.MIGRATING)
    reconciled = scheduler.reconcile(held=frozenset({"x"}))
    assert (reconciled.submitted, reconciled.requeued) == (("x",), ("z",))
    assert store.get("x").state == JobState.SUBMITTED and store.get("z").state == JobState.QUEUED


def test_copies_reported_in_a_round_that_fails_half_way_are_applied_the_next_round(monkeypatch):
    """x and y are copied to b and c; both copies end before one round, whose first submission fails (the
    store went away): the next round submits both to their held cards, none stays migrating."""
    _, store, gateway, migrator, scheduler = service(NODES, PlaceOn("a"))
    store.submit([job("x", "b"), job("y", "c")])
    scheduler.round()
    assert copies(store, "x") == ["a"] and copies(store, "y") == ["a"]
    scheduler.clock.advance_to(migrator.next_event_time() + 100.0)
    migrator.advance(scheduler.clock.now())
    real_submit = gateway.submit

    def down_once(job_spec, placement):
        monkeypatch.setattr(gateway, "submit", real_submit)
        raise RuntimeError("the store is unreachable")

    monkeypatch.setattr(gateway, "submit", down_once)
    with pytest.raises(RuntimeError):
        scheduler.round()
    scheduler.round()
    states = {j: store.get(j).state for j in ("x", "y")}
    assert JobState.MIGRATING not in states.values(), states
