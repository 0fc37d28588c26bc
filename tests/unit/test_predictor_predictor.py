"""The scheduler-facing Predictor, the memory model and the retraining inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cpn.engine.feedback import CompletedRun
from cpn.formats.throughput import ThroughputRow
from cpn.jobs import JobSpec
from models.features import EXTRAPOLATION_KINDS, PredictorInputError, Query
from models.folds import out_of_fold
from models.memory import MemoryModel, MemorySample
from models.predictor import (
    CALIBRATION_FOLDS,
    CALIBRATION_SPLITS,
    calibration_from,
    fit_predictor,
    log_errors,
    served_spread,
)
from models.retrain import RetrainSchedule, memory_sample, training_row
from tests.unit.test_predictor_support import catalog, law, rows


@pytest.fixture(scope="module")
def predictor():
    memory = [MemorySample("ResNet-50", 32, 6.0), MemorySample("ResNet-50", 64, 10.0)]
    return fit_predictor(rows(), catalog(), "rf", memory, n_estimators=50)


def test_runtime_is_total_steps_over_predicted_throughput(predictor):
    job = JobSpec(job_id="ns/a", model="ResNet-50", batch_size=32, num_gpus=2, total_steps=10_000)
    est = predictor.estimate(job, "Tesla-V100-SXM2-16GB")
    assert est.runtime_s == pytest.approx(10_000 / law("ResNet-50", 32, "v100", 2), rel=0.05)
    assert est.gpu_mem_gb == 6.0
    assert 0 <= est.uncertainty < 0.5
    assert est.explore is False


def test_steps_from_epochs_and_data_size(predictor):
    job = JobSpec(job_id="ns/b", model="resnet50", batch_size=64, epochs=3, data_size_gb=2.5)
    # samples_per_gb of ResNet-50 is 1000 in the test benchmarks: 2,500 samples, 40 steps an epoch.
    assert predictor.steps(job) == 3 * math.ceil(2500 / 64)
    est = predictor.estimate(job, "p100")
    assert est.runtime_s == pytest.approx(120 / law("ResNet-50", 64, "p100", 1), rel=0.05)


@pytest.mark.parametrize(
    "job",
    [
        JobSpec(job_id="ns/c", model="ResNet-50", batch_size=32, epochs=2, data_size_gb=0.0),
        JobSpec(job_id="ns/c", model="ResNet-50", batch_size=None, epochs=0, data_size_gb=1.0),
    ],
)
def test_a_job_without_steps_or_work_to_estimate_it_by_is_rejected(predictor, job):
    # Without a batch size or samples per GB it is estimated by its work (tests/unit/test_work_estimates.py).
    with pytest.raises(PredictorInputError, match="job ns/c: no total_steps"):
        predictor.estimate(job, "v100")


def test_bad_job_fields_name_the_job(predictor):
    with pytest.raises(PredictorInputError, match="job ns/d: .*num_gpus must be a positive integer"):
        predictor.estimate(
            JobSpec(job_id="ns/d", model="LM", batch_size=20, num_gpus=0, total_steps=5), "v100"
        )
    with pytest.raises(PredictorInputError, match="total_steps must be a positive integer"):
        predictor.estimate(JobSpec(job_id="ns/d", model="LM", batch_size=20, total_steps=-5), "v100")
    with pytest.raises(PredictorInputError, match="unknown GPU type 'mi300x'"):
        predictor.estimate(JobSpec(job_id="ns/d", model="LM", batch_size=20, total_steps=5), "mi300x")


def test_unseen_model_is_explored(predictor):
    job = JobSpec(job_id="ns/e", model="densenet121", batch_size=32, total_steps=1000)
    est = predictor.estimate(job, "v100")
    assert est.explore is True
    assert est.gpu_mem_gb is None
    assert est.runtime_s > 0 and math.isfinite(est.runtime_s)


def test_estimate_many_covers_every_pair_and_agrees_with_estimate(predictor):
    jobs = [
        JobSpec(job_id=f"ns/{i}", model=m, batch_size=b, total_steps=100)
        for i, (m, b) in enumerate([("LM", 20), ("A3C", None), ("bert", 8)])
    ]
    many = predictor.estimate_many(jobs, ["k80", "p100", "v100"])
    assert {j: set(g) for j, g in many.items()} == {j.job_id: {"k80", "p100", "v100"} for j in jobs}
    single = predictor.estimate(jobs[0], "v100")
    assert many["ns/0"]["v100"].runtime_s == pytest.approx(single.runtime_s)
    assert many["ns/0"]["v100"].uncertainty == pytest.approx(single.uncertainty)
    assert [many[j.job_id]["k80"].explore for j in jobs] == [False, False, True]


def test_a_new_catalog_adds_gpu_types_without_retraining(predictor):
    bigger = predictor.with_catalog(
        catalog({"k80": 1.0, "p100": 4.0, "v100": 7.0, "NVIDIA-H100-80GB-HBM3": 20.0})
    )
    job = JobSpec(job_id="ns/f", model="LM", batch_size=20, total_steps=1000)
    assert bigger.estimate(job, "NVIDIA H100 80GB HBM3").runtime_s < bigger.estimate(job, "v100").runtime_s


def test_memory_model_rules():
    memory = MemoryModel(
        [
            MemorySample("LM", 10, 4.0),
            MemorySample("LM", 10, 4.5),
            MemorySample("LM", 30, 8.0),
            MemorySample("A3C", None, 2.0),
            MemorySample("ResNet-50", 32, 6.0),
        ]
    )
    assert memory.predict("LM", 10) == 4.5  # the largest measured at that batch
    assert memory.predict("lm", 20) == pytest.approx(6.25)  # the line through (10, 4.5) and (30, 8)
    assert memory.predict("LM", 1) == 4.5  # never below the smallest measurement
    assert memory.predict("ResNet-50", 64) == 12.0  # one batch seen: scaled up in proportion
    assert memory.predict("ResNet-50", 16) == 6.0
    assert memory.predict("A3C", None) == 2.0
    assert memory.predict("bert", 8) is None
    with pytest.raises(PredictorInputError, match="gpu_mem_gb must be a positive number"):
        MemorySample("LM", 10, 0.0)


def test_memory_follows_the_gpu_count_where_it_was_measured():
    """A gang keeps gradient buckets and NCCL buffers a one-card run does not: a one-card job is served
    the one-card figure, a count never measured the largest figure of any count (an upper bound)."""
    memory = MemoryModel([MemorySample("LM", 10, 4.0, num_gpus=1), MemorySample("LM", 10, 4.6, num_gpus=4)])
    assert memory.predict("LM", 10, 1) == 4.0
    assert memory.predict("LM", 10, 4) == 4.6
    assert memory.predict("LM", 10, 2) == 4.6
    assert memory.predict("LM", 10) == 4.6
    assert memory.predict("LM", 20, 1) == 8.0  # one batch seen at that count: scaled in proportion


def test_a_completed_run_becomes_a_row_and_a_memory_sample():
    run = CompletedRun("ns/lm", "LM", 20, "Tesla-V100-SXM2-16GB", 2, 6000, 120.0, 500.0, gpu_mem_gb=7.5)
    row = training_row(run)
    assert (row.gpu_type, row.steps_per_sec, row.consolidated) == ("v100", 50.0, True)
    assert memory_sample(run) == MemorySample("LM", 20, 7.5, num_gpus=2)
    assert memory_sample(CompletedRun("ns/lm", "LM", 20, "v100", 2, 6000, 120.0, 500.0)) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"runtime_s": 0}, "runtime_s must be a positive number"),
        ({"runtime_s": float("nan")}, "runtime_s must be a positive number"),
        ({"total_steps": 0}, "total_steps must be a positive integer"),
        ({"num_gpus": 0}, "num_gpus must be a positive integer"),
        ({"gpu_mem_gb": -1.0}, "gpu_mem_gb must be a positive number"),
    ],
)
def test_malformed_completed_runs_are_rejected(kwargs, message):
    args = {
        "job_id": "ns/lm",
        "model": "LM",
        "batch_size": 20,
        "gpu_type": "v100",
        "num_gpus": 1,
        "total_steps": 10,
        "runtime_s": 5.0,
        "finished_at": 60.0,
    }
    run = CompletedRun(**(args | kwargs))
    with pytest.raises(PredictorInputError, match=message):
        training_row(run)
        memory_sample(run)


def test_retrain_schedule_fires_on_completions_or_time():
    schedule = RetrainSchedule(every_completions=20, every_s=3600)
    assert not schedule.due(completions_since_last=19, seconds_since_last=3599)
    assert schedule.due(completions_since_last=20, seconds_since_last=0)
    assert schedule.due(completions_since_last=0, seconds_since_last=3600)
    with pytest.raises(ValueError):
        RetrainSchedule(every_completions=0)


def _noisy() -> list[ThroughputRow]:
    return [
        ThroughputRow(
            r.model, r.batch_size, r.gpu_type, r.num_gpus, r.steps_per_sec * math.exp(0.3 * ((i * 7) % 5 - 2))
        )
        for i, r in enumerate(rows())
    ]


def test_spread_is_calibrated_per_kind_on_out_of_fold_errors():
    noisy = _noisy()
    params = {"n_estimators": 60, "members": 2}
    # The fitted predictor's own calibration (calibrate_spread, run by fit_predictor) is what is checked:
    # its scale, floors and slopes must cover 68% of the out-of-fold errors of each kind.
    predictor = fit_predictor(noisy, catalog(), "xgb", **params)
    scale, floor, slope = predictor.spread_scale, predictor.spread_floor, predictor.spread_slope
    errors, raw, kinds, distance = [], [], [], []
    for split in CALIBRATION_SPLITS:
        oof = out_of_fold(noisy, catalog(), "xgb", split, params=params, max_folds=CALIBRATION_FOLDS)
        errors.append(log_errors(noisy, oof))
        raw.append(oof.log_spread)
        kinds.append(oof.kind)
        distance.append(oof.distance)
    errors, raw, kinds, distance = (np.concatenate(x) for x in (errors, raw, kinds, distance))
    stated = served_spread(raw, kinds, scale, floor, distance, slope)
    for i, kind in enumerate(EXTRAPOLATION_KINDS):
        if (kinds == i).sum() >= 20:
            assert (errors[kinds == i] <= stated[kinds == i]).mean() == pytest.approx(0.68, abs=0.05), kind
    assert scale > 1  # members agree more than their errors warrant
    assert floor["seen"] == 0 and all(v >= 0 for v in floor.values())

    queries = [Query("LM", 20, "v100", 1), Query("LM", 30, "v100", 1)]
    raw = predictor.estimator.predict(queries).log_spread
    assert slope["batch"] == 0  # no distance: no slope
    expected = [raw[0] * scale, math.hypot(raw[1] * scale, floor["batch"])]
    assert predictor.throughput(queries).log_spread == pytest.approx(expected)
    uncalibrated = fit_predictor(noisy, catalog(), "xgb", calibrate=False, **params)
    assert uncalibrated.spread_scale == 1.0 and set(uncalibrated.spread_floor.values()) == {0.0}


def test_each_kind_of_extrapolation_gets_a_wider_spread_than_a_measured_configuration():
    def left_out(r: ThroughputRow) -> bool:
        if r.model != "ResNet-50":
            return False
        on_p100 = r.gpu_type == "p100" and ((r.batch_size == 64 and r.num_gpus == 2) or r.num_gpus == 4)
        return on_p100 or r.gpu_type == "v100"

    predictor = fit_predictor([r for r in _noisy() if not left_out(r)], catalog(), "rf", n_estimators=60)
    queries = [
        Query("ResNet-50", 32, "p100", 2),  # measured
        Query("ResNet-50", 64, "p100", 2),  # batch size never measured on p100 x 2
        Query("ResNet-50", 32, "p100", 4),  # GPU count never measured on p100
        Query("ResNet-50", 32, "v100", 2),  # GPU type never measured for the model
    ]
    pred = predictor.throughput(queries)
    assert [EXTRAPOLATION_KINDS[k] for k in pred.kind] == ["seen", "batch", "count", "gpu"]
    # Each is wider than the same trees' agreement would give a measured configuration.
    as_measured = predictor.estimator.predict(queries).log_spread * predictor.spread_scale
    assert pred.log_spread[0] == pytest.approx(as_measured[0])
    assert (pred.log_spread[1:] > as_measured[1:]).all()
    assert all(predictor.spread_floor[k] > 0 for k in ("batch", "count", "gpu"))
    assert predictor.trained_on(queries).tolist() == [True, False, False, False]


def test_retraining_is_due_after_enough_new_completions_or_enough_time():
    from models.registry import LastTraining

    schedule = RetrainSchedule(every_completions=3, every_s=3600)
    finished = [10.0, 20.0, 30.0, 40.0, 50.0]
    assert schedule.decide(None, [], now_s=0.0) == (True, "no model trained yet")
    # The last training saw completions up to t=30: two came after, 10 minutes ago.
    due, why = schedule.decide(LastTraining(started_s=1000.0, completions_until=30.0), finished, now_s=1600.0)
    assert not due and why.startswith("2 new completions (retrain at 3)")
    due, _ = schedule.decide(LastTraining(1000.0, 30.0), [*finished, 60.0], now_s=1600.0)
    assert due
    assert schedule.decide(LastTraining(1000.0, 50.0), finished, now_s=1000.0 + 3600)[0], "an hour passed"
    # Trained on the table alone: every completion is new.
    assert schedule.decide(LastTraining(1000.0, None), finished, now_s=1600.0)[0]


def test_the_spread_of_an_unseen_gpu_type_widens_with_its_distance_from_the_data():
    # Errors of unseen GPU types that grow with the distance: the calibration learns a slope, and each
    # band of distance gets about 68% of its errors within the stated spread, near and far alike.
    rng = np.random.default_rng(0)
    n = 600
    distance = rng.uniform(0.0, 2.0, n)
    errors = np.abs(rng.normal(0.0, 0.05 + 0.3 * distance))
    kinds = np.full(n, EXTRAPOLATION_KINDS.index("gpu"))
    raw = np.full(n, 0.01)
    # Measured-like rows (another kind, at distance 0) whose errors the raw spread explains set the scale.
    batch = np.full(200, EXTRAPOLATION_KINDS.index("batch"))
    scale, floor, slope = calibration_from(
        np.concatenate([errors, np.abs(rng.normal(0.0, 0.01, 200))]),
        np.concatenate([raw, np.full(200, 0.01)]),
        np.concatenate([kinds, batch]),
        np.concatenate([distance, np.zeros(200)]),
    )
    assert slope["gpu"] > 0 and slope["seen"] == 0
    stated = served_spread(raw, kinds, scale, floor, distance, slope)
    for band in ((0.0, 0.5), (1.5, 2.0)):
        inside = (distance >= band[0]) & (distance < band[1])
        assert (errors[inside] <= stated[inside]).mean() == pytest.approx(0.68, abs=0.08), band
    # One floor for every distance would cover the near far more and the far far less.
    flat_scale, flat_floor, _ = calibration_from(
        np.concatenate([errors, np.abs(rng.normal(0.0, 0.01, 200))]),
        np.concatenate([raw, np.full(200, 0.01)]),
        np.concatenate([kinds, batch]),
    )
    flat = served_spread(raw, kinds, flat_scale, flat_floor)
    far = distance >= 1.5
    assert (errors[far] <= flat[far]).mean() < 0.55


def test_distance_from_the_data_orders_unseen_gpu_types_and_models():
    from models.estimators import make_estimator

    speeds = {"k80": 1.0, "p100": 4.0, "v100": 7.0, "h100": 30.0}
    trained = make_estimator("baseline", catalog(speeds)).fit(rows(gpus=("k80", "p100")))
    queries = [
        Query("ResNet-50", 32, "p100", 1),  # measured
        Query("ResNet-50", 32, "v100", 1),  # unseen type, near p100
        Query("ResNet-50", 32, "h100", 1),  # unseen type, far beyond
        Query("densenet121", 32, "p100", 1),  # unseen model, a CNN like ResNet-50
        Query("ncf", 32, "p100", 1),  # unseen model, of a family none measured is in
        Query("no-such-model", 32, "p100", 1),  # uncatalogued
    ]
    pred = trained.predict(queries)
    assert [EXTRAPOLATION_KINDS[k] for k in pred.kind] == ["seen", "gpu", "gpu", "model", "model", "model"]
    d = pred.distance
    assert d[0] == 0 and 0 < d[1] < d[2]
    assert 0 <= d[3] < min(d[4], d[5])  # a CNN like the measured ResNet-50 is nearest


def test_answers_are_computed_once_per_configuration_and_not_stored(predictor):
    import pickle

    queries = [
        Query("ResNet-50", 32, "p100", 2),
        Query("LM", 20, "v100", 1),
        Query("ResNet-50", 48, "k80", 4),
    ]
    fresh = pickle.loads(pickle.dumps(predictor))
    first = fresh.throughput(queries)
    calls = []
    predict = fresh.estimator.predict
    fresh.estimator.predict = lambda qs: calls.append(list(qs)) or predict(qs)
    again = fresh.throughput([queries[2], queries[0], Query("LM", 40, "k80", 2), queries[2]])
    assert calls == [[Query("LM", 40, "k80", 2)]]  # only the new configuration is computed
    assert again.log_steps_per_sec[[0, 1, 3]] == pytest.approx(first.log_steps_per_sec[[2, 0, 2]])
    assert again.log_spread[[0, 1]] == pytest.approx(first.log_spread[[2, 0]])
    assert again.seen[1] and again.kind.dtype.kind == "i" and again.seen.dtype == bool
    del fresh.estimator.predict
    uncached = fresh.estimator.predict(queries)  # the estimator itself: the same answers
    assert first.log_steps_per_sec == pytest.approx(uncached.log_steps_per_sec)
    assert "_answers" not in pickle.loads(pickle.dumps(fresh)).__dict__
    with pytest.raises(PredictorInputError, match="no queries"):
        fresh.throughput([])


def test_the_answer_cache_starts_afresh_beyond_its_size(predictor, monkeypatch):
    import pickle

    import models.predictor as served

    monkeypatch.setattr(served, "ANSWER_CACHE_SIZE", 2)
    fresh = pickle.loads(pickle.dumps(predictor))
    queries = [Query("ResNet-50", 32, "p100", 2), Query("LM", 20, "v100", 1), Query("LM", 40, "k80", 2)]
    whole = fresh.throughput(queries)
    later = [Query("Transformer", 64, "k80", 1), Query("ResNet-50", 16, "v100", 4)]
    fresh.throughput(later)  # 3 kept + 2 new > 2: the cache starts afresh with the 2 new ones
    assert set(fresh.__dict__["_answers"]) == set(later)
    again = fresh.throughput(queries[:1])  # computed again, the same answer
    assert again.log_steps_per_sec[0] == pytest.approx(whole.log_steps_per_sec[0])
