"""How `cpn bench policies` measures predicted starts: the first prediction, the one at half the wait, the
naive estimate made in the same run, and copies per job; on literal snapshots and timelines."""

from __future__ import annotations

import math

import pytest

from cpn.decisions import Decision, Estimate, Snapshot, Waiting
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec, JobState
from cpn.perf.recorder import RecordingPolicy, start_errors
from cpn.perf.report import JobTimeline, copies_per_job
from cpn.policies.base import Traits


def state(name: str, gpus: int, usage: str = "training") -> NodeState:
    node = Node("a", name, "Tesla-V100-SXM2-16GB", gpus, 16.0, 64.0, usage)
    return NodeState(node, free_gpus=0)


class Scripted:
    """A policy that says, each round, the predicted starts it is given."""

    name = "scripted"
    traits = Traits()

    def __init__(self) -> None:
        self.starts: dict[str, float] = {}

    def decide(self, snapshot: Snapshot) -> Decision:
        return Decision(
            waiting=tuple(
                Waiting(j.job_id, "queue-order", "", self.starts.get(j.job_id)) for j in snapshot.pending
            )
        )


def snapshot(
    now: float, jobs: tuple[JobSpec, ...], runtime_s: float, nodes: tuple[NodeState, ...]
) -> Snapshot:
    estimates = {j.job_id: {"v100": Estimate(runtime_s)} for j in jobs}
    return Snapshot(now=now, pending=jobs, nodes=nodes, estimates=estimates)


def decide(recorder: RecordingPolicy, snap: Snapshot) -> None:
    """One round as the scheduler runs it for the benchmark: the decision, then its predictions recorded."""
    recorder.observe(snap, recorder.decide(snap))


def line(job_id: str, queued: float, started: float | None, copies: tuple[str, ...] = ()) -> JobTimeline:
    return JobTimeline(job_id, 1, queued, started, None, JobState.RUNNING, copies=copies)


def test_first_and_half_wait_predictions_are_measured_against_the_actual_wait():
    policy = Scripted()
    recorder = RecordingPolicy(policy)
    job = JobSpec("a", "resnet50")
    nodes = (state("n1", 2),)
    policy.starts = {"a": 100.0}
    decide(recorder, snapshot(0.0, (job,), 50.0, nodes))
    policy.starts = {"a": 150.0}  # said at t=60, before half of the 200 s wait
    decide(recorder, snapshot(60.0, (job,), 50.0, nodes))
    policy.starts = {"a": 190.0}  # said at t=150, after half the wait: not the half-wait prediction
    decide(recorder, snapshot(150.0, (job,), 50.0, nodes))
    errors = start_errors(recorder, [line("a", 0.0, 200.0)])
    assert errors.jobs == 1
    assert errors.median == pytest.approx(0.5)  # |100 - 200| / 200
    assert errors.half_wait_median == pytest.approx(0.25)  # |150 - 200| / 200


def test_a_prediction_repeated_unchanged_is_kept_once_with_when_it_was_first_said():
    policy = Scripted()
    recorder = RecordingPolicy(policy)
    job = JobSpec("a", "resnet50")
    policy.starts = {"a": 100.0}
    for now in (0.0, 10.0, 20.0):
        decide(recorder, snapshot(now, (job,), 50.0, (state("n1", 1),)))
    assert recorder.predictions["a"] == [(0.0, 100.0)]


def test_naive_estimate_is_queue_position_times_mean_runtime_over_usable_cards():
    recorder = RecordingPolicy(Scripted())
    jobs = tuple(JobSpec(f"j{i}", "resnet50") for i in range(3))
    # 4 training cards usable; the inference node's 4 cards are not a training job's
    nodes = (state("n1", 4), state("n2", 4, usage="inference"))
    decide(recorder, snapshot(10.0, jobs, 100.0, nodes))
    assert recorder.naive["j0"] == pytest.approx(10.0)
    assert recorder.naive["j2"] == pytest.approx(10.0 + 2 * 100.0 / 4)
    late = JobSpec("j3", "resnet50")  # arrives later: only the new job is estimated
    decide(recorder, snapshot(20.0, (*jobs[1:], late), 100.0, nodes))
    assert recorder.naive["j3"] == pytest.approx(20.0 + 2 * 100.0 / 4)
    assert recorder.naive["j0"] == pytest.approx(10.0)


def test_naive_position_counts_jobs_of_at_least_the_same_priority():
    recorder = RecordingPolicy(Scripted())
    jobs = (JobSpec("low", "resnet50"), JobSpec("high", "resnet50", priority=5))
    decide(recorder, snapshot(0.0, jobs, 100.0, (state("n1", 1),)))
    assert recorder.naive["high"] == pytest.approx(0.0)
    assert recorder.naive["low"] == pytest.approx(100.0)


def test_jobs_that_never_waited_are_left_out_and_counted():
    recorder = RecordingPolicy(Scripted())
    recorder.predictions = {"a": [(0.0, 0.0)], "b": [(0.0, 30.0)]}
    recorder.naive = {"a": 0.0, "b": 60.0}
    errors = start_errors(recorder, [line("a", 0.0, 0.0), line("b", 0.0, 40.0), line("c", 0.0, None)])
    assert errors.never_waited == 1
    assert errors.jobs == 1
    assert errors.median == pytest.approx(0.25)
    assert errors.naive_median == pytest.approx(0.5)


def test_no_policy_predictions_still_measure_the_naive_estimate():
    recorder = RecordingPolicy(Scripted())
    recorder.naive = {"a": 50.0, "b": math.inf}
    errors = start_errors(recorder, [line("a", 0.0, 100.0), line("b", 0.0, 100.0)])
    assert errors.median is None and errors.jobs == 0
    assert errors.naive_median == math.inf  # a job with no usable card gets no finite naive estimate
    recorder.naive = {"a": 50.0}
    assert start_errors(recorder, [line("a", 0.0, 100.0)]).naive_median == pytest.approx(0.5)


def test_copies_per_job_counts_copies_back_to_a_cluster():
    lines = [
        line("a", 0, 1, copies=("gz", "bj", "gz")),
        line("b", 0, 1, copies=("sh",)),
        line("c", 0, 1),
    ]
    figures = copies_per_job(lines)
    assert figures["copied_jobs"] == 2
    assert figures["copies_per_copied_job_mean"] == pytest.approx(2.0)
    assert figures["copies_per_copied_job_max"] == 3
    assert figures["copies_to_a_cluster_again"] == 1
