"""Jobs that give only the seed's annotations (model, data size, epochs): the predictor's typical-batch
path, its stated prior for a model it cannot turn into steps, and what completed runs teach it (models.work).

The synthetic world of test_predictor_support: ResNet-50 measured at batches 16, 32 and 64 and given 1,000
samples per GB; LM measured but with no samples per GB; densenet121 never measured."""

from __future__ import annotations

import math

import numpy as np
import pytest

from config.benchmarks import BenchmarksConfig
from cpn.engine.feedback import CompletedRun
from cpn.jobs import JobSpec
from models.benchmarks import BenchmarkCatalog
from models.features import PredictorInputError
from models.predictor import Predictor, fit_predictor
from models.retrain import run_steps
from models.work import (
    ONE_RUN_SPREAD,
    PRIOR_SPREAD,
    WorkObservation,
    WorkRatios,
    derived_steps,
    typical_batch,
)
from tests.unit.test_predictor_support import benchmarks_dict, catalog, law, rows

GPUS = ("k80", "p100", "v100")


@pytest.fixture(scope="module")
def predictor():
    return fit_predictor(rows(), catalog(), "rf", calibrate=False, n_estimators=20)


def seed_job(job_id: str, model: str, size: float = 2.5, epochs: int = 3, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model=model, data_size_gb=size, epochs=epochs, **kw)


def test_the_typical_batch_is_the_measured_one_nearest_their_geometric_mean():
    assert typical_batch(np.log([16, 32, 64])) == 32
    assert typical_batch(np.log([16, 32, 64, 128])) == 64  # 45 lies between 32 and 64: the larger
    assert typical_batch(np.log([20])) == 20


def test_a_known_model_without_a_batch_size_runs_at_its_typical_batch_with_a_wider_spread(predictor):
    job = seed_job("ns/r", "resnet50", num_gpus=2)
    est = predictor.estimate(job, "v100")
    # 2.5 GB x 1,000 samples/GB x 3 epochs = 7,500 samples in steps of the typical batch, 32.
    assert est.runtime_s == pytest.approx(7500 / 32 / law("ResNet-50", 32, "v100", 2), rel=0.05)
    assert est.explore is False
    with_batch = predictor.estimate(seed_job("ns/r", "resnet50", num_gpus=2, batch_size=32), "v100")
    assert est.uncertainty > with_batch.uncertainty


def test_a_model_never_seen_gets_the_reference_models_cost_per_gb_epoch_a_wide_spread_and_explore(predictor):
    row = predictor.estimates([seed_job("ns/d", "densenet121", size=20, epochs=100)], GPUS)["ns/d"]
    for gpu in GPUS:
        # The only reference model, ResNet-50 at its typical batch: 1,000 / 32 steps per GB-epoch.
        cost = 1000 / 32 / law("ResNet-50", 32, gpu, 1)
        assert row[gpu].runtime_s == pytest.approx(2000 * cost, rel=0.05)
        assert row[gpu].explore is True
        assert row[gpu].uncertainty >= math.expm1(PRIOR_SPREAD) - 1e-9
    assert row["v100"].runtime_s < row["p100"].runtime_s < row["k80"].runtime_s


def test_a_measured_model_whose_samples_per_gb_are_unknown_trains_the_references_steps_per_gb(predictor):
    # The reference's 1,000 / 32 steps per GB-epoch, at LM's own steps/s: its GPU types and counts keep
    # their own ratios.
    for gpu, n in (("p100", 1), ("k80", 4)):
        est = predictor.estimate(seed_job("ns/lm", "LM", batch_size=20, num_gpus=n), gpu)
        assert est.explore is True
        assert est.uncertainty >= math.expm1(PRIOR_SPREAD) - 1e-9
        assert est.runtime_s == pytest.approx(7.5 * 1000 / 32 / law("LM", 20, gpu, n), rel=0.05)


def test_a_first_run_teaches_the_models_seconds_per_gb_epoch_on_every_gpu_type(predictor):
    # Calibrated floors as a fitted predictor has them: another GPU type is less sure than the same one.
    predictor = Predictor(predictor.estimator, predictor.memory, 1.0, {"count": 0.2, "gpu": 0.4})
    first = seed_job("ns/d1", "densenet121", size=10, epochs=1)
    prior = predictor.estimates([first], GPUS)["ns/d1"]
    measured = prior["v100"].runtime_s * 1.7  # the model is 1.7x slower than the prior said
    run = CompletedRun(
        "ns/d1",
        "densenet121",
        None,
        "Tesla-V100-SXM2-16GB",
        1,
        None,
        measured,
        100.0,
        data_size_gb=10,
        epochs=1,
    )
    learnt = predictor.learn_work([run])
    second = seed_job("ns/d2", "densenet121", size=5, epochs=6)  # 30 GB-epochs, 3x the first
    after = learnt.estimates([second], GPUS)["ns/d2"]
    assert after["v100"].runtime_s == pytest.approx(3 * measured, rel=1e-6)
    assert after["k80"].runtime_s == pytest.approx(3 * 1.7 * prior["k80"].runtime_s, rel=1e-6)
    assert not any(e.explore for e in after.values())
    assert after["v100"].uncertainty == pytest.approx(math.expm1(ONE_RUN_SPREAD))
    assert after["v100"].uncertainty < after["k80"].uncertainty < prior["k80"].uncertainty
    assert predictor.estimate(second, "v100").explore is True, "learning returns a copy"


def test_work_ratios_prefer_runs_on_the_same_type_and_count():
    ratios = WorkRatios(
        [
            WorkObservation("m", "v100", 1, 0.2),
            WorkObservation("m", "v100", 1, 0.4),
            WorkObservation("m", "v100", 2, 1.0),
            WorkObservation("m", "k80", 1, -1.0),
        ]
    )
    same = ratios.correction("m", "v100", 1)
    assert (same.kind, same.runs, same.log_ratio) == ("seen", 2, pytest.approx(0.3))
    assert same.spread == pytest.approx(np.std([0.2, 0.4], ddof=1))
    assert ratios.correction("m", "v100", 4).kind == "count"
    other = ratios.correction("m", "p100", 1)
    assert (other.kind, other.runs, other.log_ratio) == ("gpu", 4, pytest.approx(0.15))
    assert ratios.correction("n", "v100", 1) is None
    assert len(ratios) == 4


@pytest.mark.parametrize(
    ("size", "epochs", "message"),
    [(0.0, 3, "`data_size` a positive number of GB"), (2.0, 0, "`epoch` a positive whole number")],
)
def test_a_job_with_neither_steps_nor_work_is_refused_naming_the_annotation(predictor, size, epochs, message):
    with pytest.raises(PredictorInputError, match=f"job ns/x: no total_steps.*{message}"):
        predictor.estimate(seed_job("ns/x", "densenet121", size=size, epochs=epochs), "v100")


def test_without_any_reference_model_the_error_says_what_to_add():
    bare = BenchmarkCatalog(BenchmarksConfig.model_validate(benchmarks_dict() | {"samples_per_gb": {}}))
    predictor = fit_predictor(rows(), bare, "baseline", calibrate=False)
    with pytest.raises(PredictorInputError, match="no measured model has samples_per_gb"):
        predictor.estimate(seed_job("ns/y", "densenet121"), "v100")


def test_retraining_derives_steps_where_it_can_and_keeps_the_rest_as_work():
    cat = catalog()
    given = CompletedRun("a", "ResNet-50", 64, "v100", 1, 500, 10.0, 1.0)
    derived = CompletedRun("b", "ResNet-50", 64, "v100", 1, None, 10.0, 1.0, data_size_gb=2.5, epochs=3)
    work = CompletedRun("c", "densenet121", 64, "v100", 1, None, 10.0, 1.0, data_size_gb=2.5, epochs=3)
    assert run_steps(given, cat) == 500
    assert run_steps(derived, cat) == derived_steps(3, 2.5, 1000, 64) == 3 * math.ceil(2500 / 64)
    assert run_steps(work, cat) is None


def test_a_job_with_steps_but_no_batch_size_runs_at_its_models_typical_batch(predictor):
    job = JobSpec(job_id="ns/s", model="ResNet-50", total_steps=7_000)
    est = predictor.estimate(job, "v100")
    assert est.runtime_s == pytest.approx(7_000 / law("ResNet-50", 32, "v100", 1), rel=0.05)
    given = predictor.estimate(
        JobSpec(job_id="ns/s", model="ResNet-50", batch_size=32, total_steps=7_000), "v100"
    )
    assert est.uncertainty > given.uncertainty and est.explore is False
