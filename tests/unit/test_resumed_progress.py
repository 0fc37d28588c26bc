"""The progress a preempted job's checkpoint kept, as the scheduler tracks it (issue #21) against the
simulated clusters: its queued estimates count the restart and the work left, its resumed run's predicted
end is the simulator's, and a job moved in one decision (stopped and placed again) is not failed by the end
the cluster reports for the run it deleted."""

from __future__ import annotations

import pytest

from cpn.clock import SimClock
from cpn.decisions import RESTART_S, Decision, Placement, Preemption, Snapshot
from cpn.engine.scheduler import Scheduler
from cpn.jobs import JobState
from cpn.policies.base import Traits
from cpn.sim.estimates import OracleEstimates
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import LOAD_S, GroundTruth
from cpn.store import JobStore
from tests.unit.test_sim import K80, TABLE, V100, place
from tests.unit.test_sim import job as sim_job

JOB = sim_job("bulk/j", steps=30_000, checkpoint_interval_s=360.0)
"""ResNet-18: 3,000 s on a V100 (10 steps/s), 15,000 s on a K80 (2 steps/s); a checkpoint every 360 s."""
WHOLE = {"v100": 3000.0, "k80": 15_000.0}
LEFT = 1 - 720 / 15_000
"""Stopped on the K80 after 1,000 s of training it keeps two checkpoints, 720 s: 1,440 of its 30,000 steps."""


class _Scripted:
    """A policy that returns the decision a test sets for the next round, then nothing; it decides with
    nothing queued too (`rebalances`), as a policy that moves running jobs does."""

    name = "scripted"
    traits = Traits(rebalances=True)

    def __init__(self) -> None:
        self.next = Decision()

    def decide(self, snapshot: Snapshot) -> Decision:
        decision, self.next = self.next, Decision()
        return decision


def running_on_the_k80_for_1000_s() -> tuple[Scheduler, SimulatedGateway, _Scripted, JobStore]:
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = SimulatedGateway((K80, V100), GroundTruth(TABLE), clock)
    policy = _Scripted()
    scheduler = Scheduler(store, gateway, policy, clock, estimator=OracleEstimates(TABLE), forecast=False)
    store.submit([JOB])
    policy.next = Decision(placements=(place(JOB, K80),))
    assert scheduler.round().placed == 1
    gateway.advance(1000.0)
    scheduler.collect()
    assert store.get(JOB.job_id).state == JobState.RUNNING
    assert scheduler.snapshot().running[JOB.job_id].end == pytest.approx(WHOLE["k80"])  # a first run
    return scheduler, gateway, policy, store


def stop(for_job: str) -> Preemption:
    return Preemption(JOB.job_id, for_job, "test", ((K80.key, 1),), 280 / 3600, 30.0)


def resumed_end_matches_the_simulators(scheduler: Scheduler, gateway: SimulatedGateway) -> None:
    """The resumed run's predicted end is the simulator's actual one (oracle estimates), within a second:
    1,000 s + the restart + the 95.2% of 3,000 s left on the V100."""
    predicted = scheduler.snapshot().running[JOB.job_id].end
    assert predicted == pytest.approx(1000.0 + RESTART_S + LEFT * WHOLE["v100"])
    actual = gateway.next_event_time()
    assert actual is not None and abs(predicted - actual) < 1.0


def test_a_preempted_job_is_queued_with_the_work_its_checkpoint_left_and_resumes_as_predicted():
    assert RESTART_S == LOAD_S  # the scheduler charges the restart the simulator does
    scheduler, gateway, policy, store = running_on_the_k80_for_1000_s()
    assert scheduler.preempt(Decision(preemptions=(stop("a/x"),))) == 1
    assert gateway.checkpointed == {JOB.job_id: 1440.0}  # the simulator keeps what the scheduler counts

    queued = scheduler.snapshot()
    assert [j.job_id for j in queued.pending] == [JOB.job_id]
    runtimes = {gpu: e.runtime_s for gpu, e in queued.estimates[JOB.job_id].items()}
    assert runtimes == pytest.approx({gpu: RESTART_S + LEFT * t for gpu, t in WHOLE.items()})

    policy.next = Decision(placements=(place(JOB, V100),))
    assert scheduler.round().placed == 1
    scheduler.collect()
    assert store.get(JOB.job_id).state == JobState.RUNNING
    resumed_end_matches_the_simulators(scheduler, gateway)
    gateway.advance(gateway.next_event_time())
    scheduler.round()
    assert store.get(JOB.job_id).state == JobState.SUCCEEDED


def test_a_job_moved_in_one_decision_is_not_failed_by_the_end_of_the_run_it_left():
    """Stopped for itself and placed on the V100 in one round, the job is submitted again before the K80's
    run's end (`failed`, reason deleted) is collected: that report ends a run, not the job."""
    scheduler, gateway, policy, store = running_on_the_k80_for_1000_s()
    policy.next = Decision(
        placements=(Placement(JOB.job_id, V100.cluster, V100.name, 1),), preemptions=(stop(JOB.job_id),)
    )
    assert scheduler.round().placed == 1
    assert gateway.running_jobs() == (JOB.job_id,)
    scheduler.collect()  # the deleted run's end, then the new run's start
    assert store.get(JOB.job_id).state == JobState.RUNNING
    resumed_end_matches_the_simulators(scheduler, gateway)
    gateway.advance(gateway.next_event_time())
    scheduler.round()
    states = [t.to_state for t in store.history(JOB.job_id)]
    assert states[-5:] == [
        JobState.QUEUED,
        JobState.ASSIGNED,
        JobState.SUBMITTED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
    ]


def test_after_a_restart_the_end_of_the_run_a_job_left_is_still_not_its_end():
    """As above, but the process stops before it collects that end: the scheduler built again over the store
    knows from the job's history that the run was deleted on purpose (a simulator replaying its journal
    reports that end again, and it is skipped alike), and from the progress stored with the preemption when
    the resumed run ends."""
    scheduler, gateway, policy, store = running_on_the_k80_for_1000_s()
    policy.next = Decision(
        placements=(Placement(JOB.job_id, V100.cluster, V100.name, 1),), preemptions=(stop(JOB.job_id),)
    )
    assert scheduler.round().placed == 1
    restarted = Scheduler(
        store, gateway, policy, scheduler.clock, estimator=OracleEstimates(TABLE), forecast=False
    )
    restarted.collect()
    assert store.get(JOB.job_id).state == JobState.RUNNING
    resumed_end_matches_the_simulators(restarted, gateway)
