"""Re-planning: a job OOM-killed on a small card goes back to the queue knowing it needs more memory per
card, and runs on a larger one; a job killed again fails; a restarted gateway's repeat is not a kill."""

from __future__ import annotations

from cpn.adapters.gateway import OOM_REASON, JobEvent
from cpn.clock import SimClock
from cpn.engine.scheduler import Scheduler
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node
from cpn.jobs import JobSpec, JobState
from cpn.policies import make_policy
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.memory import gpu_memory_gb
from cpn.sim.replay import arrivals_from_jobs, replay
from cpn.sim.truth import GroundTruth
from cpn.store import JobStore

TABLE = ThroughputTable([ThroughputRow("A3C", 256, "k80", 1, 1.0), ThroughputRow("A3C", 256, "v100", 1, 2.0)])
K80 = Node("c", "k80-0", "Tesla-K80", 1, 12, 8, "training")
V100 = Node("c", "v100-0", "Tesla-V100-SXM2-16GB", 1, 16, 8, "training")
JOB = JobSpec(job_id="ns/a3c", model="A3C", batch_size=256, total_steps=100)  # declares no memory


def run(nodes, oom_retries=1):
    assert 12 < gpu_memory_gb("A3C", 256, 1) < 16, "the job fits a 16 GB card, not a 12 GB one"
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = SimulatedGateway(nodes, GroundTruth(TABLE), clock)
    scheduler = Scheduler(store, gateway, make_policy("fifo"), clock, oom_retries=oom_retries)
    replay(scheduler, gateway, clock, arrivals_from_jobs([JOB]))
    return store, gateway


def test_an_oom_killed_job_reruns_on_a_card_with_more_memory():
    store, gateway = run([K80, V100])
    record = store.get("ns/a3c")
    assert record.state == JobState.SUCCEEDED and record.node == "v100-0"
    assert record.needs_more_than_gb == 12
    reasons = [t.reason for t in store.history("ns/a3c")]
    assert f"{OOM_REASON} on c/k80-0 (12 GB cards): queued again, for cards of more than 12 GB" in reasons
    assert [e.node for e in gateway.executions] == ["k80-0", "v100-0"]


def test_a_job_killed_again_fails_and_without_retries_fails_at_once():
    store, _ = run([K80])
    assert store.get("ns/a3c").state == JobState.SCHEDULE_FAILED  # nothing left can hold it
    store, gateway = run([K80, V100], oom_retries=0)
    assert store.get("ns/a3c").state == JobState.FAILED and len(gateway.executions) == 1


def test_a_repeated_kill_report_is_not_a_second_kill():
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = SimulatedGateway([K80, V100], GroundTruth(TABLE), clock)
    scheduler = Scheduler(store, gateway, make_policy("fifo"), clock)
    store.submit([JOB])
    store.transition("ns/a3c", JobState.ASSIGNED, cluster="c", node="k80-0")
    store.transition("ns/a3c", JobState.SUBMITTED)
    scheduler.snapshot()
    kill = JobEvent("ns/a3c", "failed", 5.0, OOM_REASON)
    scheduler.apply_events([kill, kill])
    assert store.get("ns/a3c").state == JobState.QUEUED
    assert sum(t.reason.startswith(OOM_REASON) for t in store.history("ns/a3c")) == 1
