"""The simulated clusters time jobs that give only a data size and epochs (cpn.sim.work), and the oracle
estimates them alike; jobs with total_steps run as before."""

from __future__ import annotations

import math

import pytest

from cpn.clock import SimClock
from cpn.decisions import Placement
from cpn.engine.feedback import completed_runs
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node
from cpn.jobs import JobSpec
from cpn.sim.estimates import OracleEstimates
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import LOAD_S, GroundTruth
from cpn.sim.work import TRUTH_MODELS
from tests.unit.test_scheduler import NODE_A, run

V100 = Node("b", "v100-0", "Tesla-V100-SXM2-16GB", 4, 16, 16, "training")
TABLE = ThroughputTable(
    [
        ThroughputRow("ResNet-50", 64, "v100", 1, 4.0),
        ThroughputRow("ResNet-50", 64, "k80", 1, 1.0),
        ThroughputRow("LM", 20, "v100", 1, 50.0),
    ]
)


def seed_job(job_id: str, model: str, size: float, epochs: int, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model=model, data_size_gb=size, epochs=epochs, **kw)


def test_a_model_the_table_lacks_trains_at_the_reference_rate_scaled_by_compute_per_sample():
    truth = GroundTruth(TABLE)
    job = seed_job("ns/d", "densenet121", 20, 100)
    densenet, resnet = TRUTH_MODELS["densenet121"], TRUTH_MODELS["resnet50"]
    samples = 20 * densenet.samples_per_gb * 100
    samples_per_s = 4.0 * 64 * resnet.gflops_per_sample / densenet.gflops_per_sample
    outcome = truth.outcome(job, "v100", 1, 16.0)
    assert outcome.succeeded
    assert outcome.duration_s == pytest.approx(samples / samples_per_s, rel=1e-4)
    assert outcome.steps == math.ceil(samples / 64)
    assert truth.outcome(job, "k80", 1, 12.0).duration_s == pytest.approx(4 * outcome.duration_s, rel=1e-6)


def test_a_table_model_trains_its_data_at_the_tables_rate_at_its_usual_or_given_batch():
    truth = GroundTruth(TABLE)
    lm = TRUTH_MODELS["lm"]
    outcome = truth.outcome(seed_job("ns/lm", "LM", 0.01, 2), "v100", 1, 16.0)
    steps = math.ceil(0.01 * lm.samples_per_gb * 2 / lm.batch_size)
    assert (outcome.steps, outcome.duration_s) == (steps, pytest.approx(steps / 50.0))
    given = truth.outcome(seed_job("ns/lm", "LM", 0.01, 2, batch_size=40), "v100", 1, 16.0)
    assert not given.succeeded and "no measured throughput for LM batch 40" in given.reason


def test_a_model_the_simulated_world_does_not_know_fails_its_run_saying_so():
    outcome = GroundTruth(TABLE).outcome(seed_job("ns/x", "nobody-knows-me", 1, 1), "v100", 1, 16.0)
    assert (outcome.succeeded, outcome.duration_s) == (False, LOAD_S)
    assert "does not know model 'nobody-knows-me'" in outcome.reason


def test_the_gateway_runs_such_a_job_to_its_end_and_the_oracle_agrees():
    clock = SimClock()
    gw = SimulatedGateway([V100], GroundTruth(TABLE), clock)
    job = seed_job("ns/d", "densenet121", 0.5, 2)
    gw.submit(job, Placement(job.job_id, "b", "v100-0", 1))
    end = gw.next_event_time()
    gw.advance(end)
    assert [e.kind for e in gw.poll_events()] == ["running", "succeeded"]
    assert "step " in gw.logs("ns/d", 2)
    assert OracleEstimates(TABLE).estimate(job, "v100").runtime_s == pytest.approx(end)


def test_a_replayed_job_without_steps_feeds_back_its_work_and_measured_runtime():
    spec = seed_job("s", "ResNet-18", 0.001, 2, batch_size=32)  # 2 x 368 samples: 2 x 12 steps at 1 step/s
    store, _, _, _ = run([NODE_A], [spec])
    (done,) = completed_runs(store, [NODE_A])
    assert (done.job_id, done.total_steps, done.data_size_gb, done.epochs) == ("s", None, 0.001, 2)
    steps = math.ceil(0.001 * TRUTH_MODELS["resnet18"].samples_per_gb * 2 / 32)
    assert done.runtime_s == pytest.approx(steps / 1.0)
