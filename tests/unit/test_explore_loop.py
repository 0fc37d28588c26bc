"""The pieces of the demo's closed loop (cpn.engine.explore) and the replay's per-round seam."""

from __future__ import annotations

import pytest

from cpn.clock import SimClock
from cpn.decisions import Estimate
from cpn.engine.explore import LEAST_FREQUENT, held_out_model, runtime_checks, table_without
from cpn.engine.feedback import CompletedRun
from cpn.engine.scheduler import Scheduler
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node
from cpn.jobs import JobSpec, JobState
from cpn.policies.fifo import FifoPolicy
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.replay import arrivals_from_jobs, replay
from cpn.sim.truth import GroundTruth
from cpn.store import JobStore


def job(job_id: str, model: str = "ResNet-18", steps: int = 100) -> JobSpec:
    return JobSpec(job_id=job_id, model=model, batch_size=32, num_gpus=1, total_steps=steps)


def test_the_least_frequent_model_is_held_out_ties_by_name():
    queue = [job("a", "LM"), job("b", "LM"), job("c", "A3C"), job("d", "Transformer"), job("e", "LM")]
    assert held_out_model(queue, LEAST_FREQUENT) == "A3C"  # A3C and Transformer once each: A3C first
    assert held_out_model(queue[:2] + queue[3:], LEAST_FREQUENT) == "Transformer"
    assert held_out_model(queue, "LM") == "LM"


def test_a_held_out_model_the_queue_never_runs_is_refused_by_name():
    with pytest.raises(ValueError, match="'BERT'.*no job of the queue runs it.*A3C"):
        held_out_model([job("a", "A3C")], "BERT")
    with pytest.raises(ValueError, match="queue is empty"):
        held_out_model([], LEAST_FREQUENT)


def test_the_table_without_a_model_keeps_every_other_row():
    table = ThroughputTable(
        [
            ThroughputRow("A3C", None, "k80", 1, 2.0),
            ThroughputRow("LM", 20, "k80", 1, 3.0),
            ThroughputRow("LM", 20, "v100", 1, 9.0),
        ]
    )
    rest = table_without(table, "A3C")
    assert [r.model for r in rest.rows] == ["LM", "LM"]
    assert rest.steps_per_sec("LM", 20, "v100", 1) == 9.0


class Fixed:
    """An estimate source that says every job runs `runtime_s` on every GPU type."""

    def __init__(self, runtime_s: float, explore: bool) -> None:
        self.runtime_s, self.explore = runtime_s, explore

    def estimates(self, jobs, gpu_types):
        return {
            j.job_id: {g: Estimate(runtime_s=self.runtime_s, explore=self.explore) for g in gpu_types}
            for j in jobs
        }


def test_runtime_checks_compare_the_estimate_on_the_gpu_type_it_ran_on_with_the_measured_run():
    runs = [
        CompletedRun("j1", "A3C", None, "k80", 1, 100, runtime_s=200.0, finished_at=300.0),
        CompletedRun("gone", "A3C", None, "k80", 1, 100, runtime_s=50.0, finished_at=60.0),
    ]
    (check,) = runtime_checks(Fixed(150.0, explore=True), runs, {"j1": job("j1", "A3C")})
    assert (check.job_id, check.gpu_type, check.measured_s, check.predicted_s) == ("j1", "k80", 200.0, 150.0)
    assert check.explore and check.error == pytest.approx(0.25)


def test_replay_runs_each_round_through_the_callable_it_is_given():
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    table = ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", 1, 1.0)])
    gateway = SimulatedGateway(
        [Node("a", "a-0", "Tesla-V100-SXM2-16GB", 1, 16, 32, "training")], GroundTruth(table), clock
    )
    scheduler = Scheduler(store, gateway, FifoPolicy(), clock)
    seen = []

    def one_round():
        result = scheduler.round()
        return ("mine", result.placed)

    result = replay(
        scheduler,
        gateway,
        clock,
        arrivals_from_jobs([job("x"), job("y")]),
        on_round=seen.append,
        run_round=one_round,
    )
    assert seen and all(tag == "mine" for tag, _ in seen), "on_round gets what the callable returned"
    assert len(seen) == result.rounds
    assert sum(placed for _, placed in seen) == 2  # one card: the two jobs one after the other
    assert store.counts()[JobState.SUCCEEDED] == 2 and clock.now() == pytest.approx(200.0)
