"""Explaining waits costs time in proportion to the queue: a replay asks only now and then, the live
service every round."""

from __future__ import annotations

from cpn.clock import SimClock
from cpn.engine.scheduler import Scheduler
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec, JobState
from cpn.policies import make_policy
from cpn.store import JobStore

NODE = Node("c", "n0", "Tesla-V100-SXM2-16GB", 1, 16, 8, "training")


class Busy:
    """A one-card cluster whose card is taken."""

    def inventory(self):
        return (NodeState(NODE, free_gpus=0, running=("other",)),)

    def submit(self, job, placement) -> None:
        raise AssertionError("nothing can be submitted to a full cluster")

    def poll_events(self):
        return []

    def held_jobs(self):
        return frozenset()


def scheduler(explain_every_s: float) -> Scheduler:
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    store.submit([JobSpec(job_id="ns/a", model="m"), JobSpec(job_id="ns/b", model="m")])
    # The forward look (on by default) predicts starts every round; the throttle is about explaining.
    policy = make_policy("fifo")
    return Scheduler(store, Busy(), policy, clock, explain_every_s=explain_every_s, forecast=False)


def test_every_round_explains_by_default():
    s = scheduler(0.0)
    for _ in range(3):
        snapshot = s.snapshot()
        assert snapshot.explain
        assert {w.job_id for w in s.decide(snapshot).waiting} == {"ns/a", "ns/b"}


def test_a_throttled_scheduler_explains_the_first_round_only_and_keeps_what_it_recorded():
    s = scheduler(3600.0)
    s.round()
    assert s.store.get("ns/a").waiting.code == "no-gpu-type"
    snapshot = s.snapshot()
    assert not snapshot.explain
    assert s.decide(snapshot).waiting == ()
    s.round()
    assert s.store.get("ns/b").waiting.code == "no-gpu-type"
    assert s.store.get("ns/b").state == JobState.QUEUED


def test_the_throttle_reads_the_clocks_wall_time_not_the_machines():
    wall = [100.0]
    clock = SimClock(wall=lambda: wall[0])
    store = JobStore(":memory:", clock=clock)
    store.submit([JobSpec(job_id="ns/a", model="m")])
    s = Scheduler(store, Busy(), make_policy("fifo"), clock, explain_every_s=10.0)
    assert s.snapshot().explain
    wall[0] = 109.9
    assert not s.snapshot().explain
    wall[0] = 110.0
    assert s.snapshot().explain
    clock.advance_to(1e6)  # simulated time jumping ahead costs no wall time: no new explanation
    assert not s.snapshot().explain
