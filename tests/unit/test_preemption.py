"""Preemption on literal snapshots (cpn.policies.preemption): victim order, a job marked not preemptible,
a job that never checkpointed, a team within its quota left alone; the simulator keeping a stopped run's
checkpoint and charging a restart; the scheduler queueing a preempted job again with its cause."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from cpn.clock import SimClock
from cpn.decisions import RESTART_S, Decision, Preemption, RunningJob, Team
from cpn.engine.scheduler import Scheduler
from cpn.intake import parse_manifests
from cpn.jobs import Cause, JobSpec, JobState
from cpn.policies import make_policy
from cpn.policies.fifo import FifoPolicy
from cpn.policies.preemption import GRACE_S
from cpn.sim.estimates import OracleEstimates
from cpn.sim.gateway import SimulatedGateway, Stopped
from cpn.sim.truth import LOAD_S, GroundTruth
from cpn.store import JobStore
from tests.unit.test_policies import job, node, snap, state
from tests.unit.test_sim import TABLE, V100, make, place
from tests.unit.test_sim import job as sim_job
from tests.unit.test_teams import teams

N = node("n0", gpus=4)
CFG = teams(Team("a", quota=(("v100", 2),)), Team("bulk", quota=(("v100", 0),)))
"""Team a is entitled to 2 cards and holds none; bulk to none, so every card it holds is borrowed."""


def bulk(**jobs: RunningJob):
    return MappingProxyType({f"bulk/{name}": run for name, run in jobs.items()})


def run(started: float, checkpoints: float | None = None, priority: int = 0, preemptible: bool = True):
    return RunningJob(1e9, ((N.key, 1),), started, priority, checkpoints, preemptible)


def decide(running, pending=("a/j1", "a/j2"), policy="greedy"):
    s = snap([job(j) for j in pending], [state(N, free=0)], running=running, teams=CFG)
    return make_policy(policy, preemption="true").decide(replace(s, now=1000.0))


@pytest.mark.parametrize("policy", ["fifo", "greedy", "milp"])
def test_victims_lowest_priority_then_least_work_lost(policy):
    """Four borrowed cards: the high-priority job is spared; of the others the two losing least go, the
    one that never checkpointed (lost everything since it started) is spared."""
    running = bulk(
        high=run(0.0, checkpoints=600.0, priority=1),  # loses 400 s, but has priority
        lost_100=run(0.0, checkpoints=300.0),  # 1000 % 300 = 100 s lost
        lost_50=run(850.0, checkpoints=100.0),  # 150 % 100 = 50 s lost
        never=run(900.0),  # never checkpoints: its 100 s since start are lost
    )
    decision = decide(running, policy=policy)
    reason = "team a is below its quota: reclaiming cards team bulk borrowed"
    assert decision.preemptions == (
        Preemption("bulk/lost_50", "a/j1", reason, ((N.key, 1),), 50 / 3600, GRACE_S),
        Preemption("bulk/lost_100", "a/j2", reason, ((N.key, 1),), 100 / 3600, GRACE_S),
    )
    waits = {w.job_id: (w.code, w.detail) for w in decision.waiting}
    detail = "waiting for reclaimed cards: preempting bulk/lost_50 (expected end 1030)"
    assert waits["a/j1"] == ("reclaiming", detail)


def test_a_job_that_never_checkpointed_goes_after_one_that_did():
    """Same priority: a job that never checkpointed loses all its work since it started. Started 100 s ago
    it loses less than one 400 s past its last checkpoint and goes first; started at 0 (1,000 s lost) it is
    spared for the checkpointer."""
    decision = decide(bulk(never=run(900.0), ckpt=run(0.0, checkpoints=600.0)), pending=("a/j1",))
    assert [(p.job_id, p.lost_gpu_hours) for p in decision.preemptions] == [("bulk/never", 100 / 3600)]
    decision = decide(bulk(never=run(0.0), ckpt=run(0.0, checkpoints=600.0)), pending=("a/j1",))
    assert [(p.job_id, p.lost_gpu_hours) for p in decision.preemptions] == [("bulk/ckpt", 400 / 3600)]


def test_a_job_marked_not_preemptible_keeps_its_cards():
    running = bulk(keep=run(0.0, checkpoints=60.0, preemptible=False), other=run(0.0, checkpoints=60.0))
    decision = decide(running)
    assert [(p.job_id, p.for_job) for p in decision.preemptions] == [("bulk/other", "a/j1")]


def test_a_team_within_its_quota_is_not_preempted_and_off_means_off():
    within = teams(Team("a", quota=(("v100", 2),)), Team("bulk", quota=(("v100", 2),)))
    running = bulk(x=run(0.0, checkpoints=60.0), y=run(0.0, checkpoints=60.0))
    s = snap([job("a/j1")], [state(N, free=0)], running=running, teams=within)
    assert make_policy("greedy", preemption="true").decide(s).preemptions == ()
    s = snap([job("a/j1")], [state(N, free=0)], running=running, teams=CFG)
    assert make_policy("greedy").decide(s).preemptions == ()


def test_the_simulator_resumes_from_the_last_checkpoint_after_a_restart():
    """ResNet-18 on a V100 trains 10 steps/s: stopped at 250 s with checkpoints every 100 s it keeps 2,000
    steps; its next run loads again (LOAD_S) and trains the 1,000 left."""
    gw, clock = make((V100,))
    spec = sim_job("j", steps=3000, checkpoint_interval_s=100.0)
    gw.submit(spec, place(spec, V100))
    gw.advance(250.0)
    gw.delete("j", grace_s=30.0)
    assert gw.checkpointed == {"j": 2000.0}
    assert gw.preempted == [Stopped("j", 250.0, 1, 200.0, 50.0)]
    gw.submit(spec, place(spec, V100))
    assert gw.next_event_time() == pytest.approx(250.0 + LOAD_S + 100.0)
    never = sim_job("n", steps=3000)
    gw.submit(never, place(never, V100))
    gw.advance(400.0)
    gw.delete("n")
    assert gw.checkpointed["n"] == 0.0  # never checkpointed: it starts over


def test_intake_reads_the_checkpoint_interval_and_a_job_marked_not_preemptible():
    manifest = """
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: bulk
  annotations:
    {model_name: resnet18, data_size: 1, epoch: 1, checkpoint_interval_s: "600", preemptible: "false"}
spec:
  template:
    spec:
      containers:
        - name: main
          image: registry.local/train:1
          resources: {limits: {nvidia.com/gpu: 1}}
      restartPolicy: Never
"""
    (spec,) = parse_manifests(manifest)
    assert (spec.checkpoint_interval_s, spec.preemptible) == (600.0, False)


class _Generations(SimulatedGateway):
    """The simulated clusters, recording the name generation of every spec submitted."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.generations: list[tuple[str, int]] = []

    def submit(self, job: JobSpec, placement) -> None:
        self.generations.append((job.job_id, job.generation))
        super().submit(job, placement)


def test_the_scheduler_stops_a_victim_once_and_resubmits_it_once_under_its_next_generation():
    """Stopped at 250 s (checkpoints every 100 s) the run keeps 2,000 of its 3,000 steps; the job is queued
    again with cause `preempted`, a second preemption of it while queued deletes nothing, the deleted run's
    end is no transition of the job's, and the next round submits it once, as generation 1. A scheduler
    built again on the same store (a restart) still knows all of it: the generation, and the progress saved,
    so it estimates the job from its checkpoint (a third of its work and the restart) and predicts the
    resumed run's end as the simulator has it."""
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = _Generations((V100,), GroundTruth(TABLE), clock)
    oracle = OracleEstimates(TABLE)
    scheduler = Scheduler(store, gateway, FifoPolicy(), clock, estimator=oracle, forecast=False)
    spec = sim_job("bulk/j", steps=3000, checkpoint_interval_s=100.0)
    store.submit([spec])
    assert scheduler.round().placed == 1
    gateway.advance(250.0)
    scheduler.collect()  # running
    assert "bulk/j" in scheduler.snapshot().running  # what the round's decision sees
    stop = Preemption("bulk/j", "a/x", "team a reclaims", ((f"{V100.cluster}/{V100.name}", 1),), 0.01, 30.0)
    assert scheduler.preempt(Decision(preemptions=(stop,))) == 1
    assert scheduler.preempt(Decision(preemptions=(stop,))) == 0  # queued now: nothing to delete
    last = store.history("bulk/j")[-1]
    assert (last.to_state, last.cause) == (JobState.QUEUED, Cause.PREEMPTED)
    assert last.reason.startswith("preempted for a/x: team a reclaims; cards b/v100-0 x1; 0.010 GPU-hours")
    assert gateway.checkpointed == {"bulk/j": 2000.0}
    assert store.saved_progress() == {"bulk/j": pytest.approx(1 / 3)}

    restarted = Scheduler(store, gateway, FifoPolicy(), clock, estimator=oracle, forecast=False)
    whole = oracle.estimates((spec,), ("v100",))["bulk/j"]["v100"].runtime_s
    assert whole == pytest.approx(300.0)
    queued = restarted.snapshot().estimates["bulk/j"]["v100"].runtime_s
    assert queued == pytest.approx(RESTART_S + whole / 3), "1,000 of its 3,000 steps left, and the restart"
    assert restarted.round().placed == 1
    assert gateway.generations == [("bulk/j", 0), ("bulk/j", 1)]
    restarted.collect()
    predicted = restarted.snapshot().running["bulk/j"].end
    assert predicted == pytest.approx(gateway.next_event_time()) == pytest.approx(250.0 + LOAD_S + 100.0)
    gateway.advance(gateway.next_event_time())
    restarted.round()
    states = [t.to_state for t in store.history("bulk/j")]
    assert states == [
        JobState.QUEUED,
        JobState.ASSIGNED,
        JobState.SUBMITTED,
        JobState.RUNNING,
        JobState.QUEUED,
        JobState.ASSIGNED,
        JobState.SUBMITTED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
    ]
    assert store.get("bulk/j").updated_at == pytest.approx(250.0 + LOAD_S + 100.0)
    assert store.saved_progress() == {}, "forgotten once the job ended"


def test_the_forward_look_replays_the_policy_a_preempting_one_wraps():
    """The look carries out placements, never preemptions: it replays the inner policy, which places alike."""
    clock = SimClock()
    policy = make_policy("greedy", preemption="true")
    scheduler = Scheduler(
        JobStore(":memory:", clock=clock), SimulatedGateway((V100,), GroundTruth(TABLE), clock), policy, clock
    )
    assert scheduler.forecaster.policy is policy.inner


def test_a_job_within_its_checkpoint_interval_since_it_started_is_not_stopped_again():
    """Resumed 300 s ago with a 600 s interval: stopping it again would lose all it did since; the job that
    has trained past its checkpoint goes instead."""
    running = bulk(resumed=run(700.0, checkpoints=600.0), older=run(0.0, checkpoints=600.0))
    decision = decide(running, pending=("a/j1",))
    assert [p.job_id for p in decision.preemptions] == ["bulk/older"]
    assert decide(bulk(resumed=run(700.0, checkpoints=600.0)), pending=("a/j1",)).preemptions == ()


def test_hysteresis_no_team_is_taken_below_its_quota_nor_reclaims_past_its_own():
    """Teams a and b, 2 cards each of 4: b holds 3 (one borrowed) as a 2-card and a 1-card job, a holds 1.
    a's waiting 1-card job takes b's 1-card job, never the 2-card one (b would fall below its quota and
    take the cards back); a waiting 2-card job of a reclaims nothing (a would hold 3 of its 2)."""
    cfg = teams(Team("a", quota=(("v100", 2),)), Team("b", quota=(("v100", 2),)))
    running = MappingProxyType(
        {
            "a/r": RunningJob(1e9, ((N.key, 1),), 0.0, 0, 600.0),
            "b/wide": RunningJob(1e9, ((N.key, 2),), 0.0, 0, 60.0),  # loses least: still spared
            "b/one": RunningJob(1e9, ((N.key, 1),), 0.0, 0, 600.0),
        }
    )

    def reclaimed(pending: JobSpec) -> list[str]:
        s = snap([pending], [state(N, free=0)], running=running, teams=cfg)
        return [
            p.job_id
            for p in make_policy("greedy", preemption="true").decide(replace(s, now=1000.0)).preemptions
        ]

    assert reclaimed(job("a/j1")) == ["b/one"]
    assert reclaimed(job("a/j2", gpus=2)) == []
