"""Estimators and their evaluation on a synthetic world whose law is known."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import yaml

from cli.predictor import register_bench
from cpn.formats.throughput import ThroughputRow
from models.estimators import ESTIMATORS, Prediction, make_estimator
from models.evaluation import bench, metrics
from models.features import PredictorInputError, Query
from models.folds import config_key, folds, out_of_fold
from tests.unit.test_predictor_support import benchmarks_dict, catalog, law, rows, write_csv

FAST = {"rf": {"n_estimators": 50}, "xgb": {"n_estimators": 100, "members": 2}, "baseline": {}}


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_every_estimator_predicts_a_new_gpu_type_from_its_benchmark_scores(name):
    """Train without v100, the fastest GPU: the relative target must still extrapolate to it."""
    est = make_estimator(name, catalog(), **FAST[name]).fit(rows(gpus=("k80", "p100")))
    queries = [Query("ResNet-50", 32, "v100", 2), Query("LM", 20, "v100", 4)]
    pred = est.predict(queries)
    truth = np.array([law("ResNet-50", 32, "v100", 2), law("LM", 20, "v100", 4)])
    assert np.abs(pred.steps_per_sec / truth - 1).max() < 0.05
    assert pred.seen.all() and (pred.log_spread >= 0).all()


def test_baseline_scales_the_same_configuration_by_benchmark_speed():
    est = make_estimator("baseline", catalog()).fit([r for r in rows() if r.gpu_type == "k80"])
    pred = est.predict([Query("Transformer", 64, "v100", 4)])
    assert pred.steps_per_sec[0] == pytest.approx(law("Transformer", 64, "v100", 4))


def test_forest_learns_what_benchmark_scores_cannot_explain():
    """Transformer is 40% slower on v100 than its scores say: the baseline cannot know, RF learns much."""
    data = rows(affinity=0.4)
    held = {
        config_key(r)
        for r in data
        if r.model == "Transformer" and r.gpu_type == "v100" and r.batch_size == 64
    }
    train = [r for r in data if config_key(r) not in held]
    test = [r for r in data if config_key(r) in held]
    actual = np.array([r.steps_per_sec for r in test])
    errors = {}
    for name in ("rf", "baseline"):
        est = make_estimator(name, catalog(), **FAST[name]).fit(train)
        pred = est.predict([Query(r.model, r.batch_size, r.gpu_type, r.num_gpus) for r in test])
        errors[name] = float(np.mean(np.abs(pred.steps_per_sec / actual - 1)))
    assert errors["baseline"] == pytest.approx(0.4)
    assert errors["rf"] < errors["baseline"] / 2


def test_unseen_model_is_flagged_with_a_wider_spread():
    est = make_estimator("rf", catalog(), n_estimators=50).fit(rows())
    pred = est.predict([Query("bert", 32, "v100", 1), Query("LM", 20, "v100", 1)])
    assert pred.seen.tolist() == [False, True]
    assert pred.log_spread[0] > pred.log_spread[1]


def test_unknown_estimator_and_empty_queries_are_rejected():
    with pytest.raises(PredictorInputError, match="unknown estimator 'svm'; known: rf, xgb, baseline"):
        make_estimator("svm", catalog())
    with pytest.raises(PredictorInputError, match="no queries"):
        make_estimator("baseline", catalog()).fit(rows()).predict([])


def test_random_folds_keep_a_configuration_together_and_cover_every_row():
    data = rows() + rows()[:5]  # repeated measurements of five configurations
    seen_test = []
    for train, test in folds(data, "random"):
        train_keys = {config_key(data[i]) for i in train}
        assert not train_keys & {config_key(data[i]) for i in test}
        seen_test += test.tolist()
    assert sorted(seen_test) == list(range(len(data)))


def test_leave_out_folds_hold_out_one_gpu_type_or_model_each():
    data = rows()
    gpu_folds = folds(data, "leave_gpu_out")
    assert sorted({data[i].gpu_type for _, test in gpu_folds for i in test}) == ["k80", "p100", "v100"]
    assert all(len({data[i].gpu_type for i in test}) == 1 for _, test in gpu_folds)
    assert len(folds(data, "leave_model_out")) == 4
    assert folds([r for r in data if r.gpu_type == "k80"], "leave_gpu_out") == []
    with pytest.raises(ValueError, match="unknown split"):
        folds(data, "by_vibes")


def test_metrics_on_known_values():
    actual = np.array([1.0, 2.0, 4.0, 8.0])
    predicted = np.array([1.1, 2.0, 3.0, 8.0])
    pred = Prediction(np.log(predicted), np.array([0.2, 0.0, 0.1, 0.0]), np.ones(4, bool))
    m = metrics(actual, pred, ["a", "a", "b", "b"])
    assert m["mape"] == pytest.approx((0.1 + 0 + 0.25 + 0) / 4)
    assert m["median_ape"] == pytest.approx(0.05)
    assert m["per_gpu"] == pytest.approx({"a": 0.05, "b": 0.125})
    assert m["spread_coverage"] == pytest.approx(0.75)
    assert 0.9 < m["r2"] < 1.0


def test_out_of_fold_predictions_never_see_their_row():
    data = rows(affinity=0.4)
    pred = out_of_fold(data, catalog(), "baseline", "leave_gpu_out")
    actual = np.array([r.steps_per_sec for r in data])
    wrong = np.abs(pred.steps_per_sec / actual - 1) > 0.2
    # Only the affinity the other GPU types cannot reveal is missed.
    assert {(data[i].model, data[i].gpu_type) for i in np.flatnonzero(wrong)} == {("Transformer", "v100")}


# Slow (trains every estimator on every split of the shipped table): outside the one-minute unit run.
@pytest.mark.integration
def test_bench_report_shape_and_targets():
    report = bench(rows(affinity=0.2), catalog(), estimators=("rf", "baseline"), test_rows=rows())
    assert set(report["splits"]) == {"random", "leave_gpu_out", "leave_model_out", "external"}
    for split in report["splits"].values():
        for m in split.values():
            assert {"mape", "median_ape", "r2"} <= set(m)
    assert set(report["train_s"]) == set(report["predict_1000_ms"]) == {"rf", "baseline"}
    assert report["splits"]["random"]["rf"]["mape"] < 0.1
    by_name = {t["name"]: t for t in report["targets"]}
    assert list(by_name)[0] == "random MAPE" and len(by_name) == 9
    first = by_name["1,000 predictions, first call (ms)"]  # later calls are cached: the first is judged too
    assert first["value"] == report["predict_1000_first_ms"]["rf"] and first["limit"] == 50
    assert by_name["leave-one-GPU-type-out MAPE (3 types)"]["limit"] == 0.25  # issue 29: 25% through 3 types
    coverage = by_name["leave-one-GPU-type-out coverage of the stated spread"]
    assert coverage["low"] == 0.60 and coverage["limit"] == 0.80
    # A3C is not catalogued: the catalogued figure is over the other three models' rows only.
    lmo = report["splits"]["leave_model_out"]["rf"]
    assert set(lmo["per_model"]) == {"resnet50", "transformer", "lm", "a3c"}
    catalogued = [v for k, v in lmo["per_model"].items() if k != "a3c"]
    assert min(catalogued) <= lmo["catalogued_mape"] <= max(catalogued)
    assert by_name["leave-one-model-out MAPE, catalogued models"]["value"] == lmo["catalogued_mape"]
    assert 0 <= report["splits"]["leave_gpu_out"]["rf"]["calibrated_coverage"] <= 1
    assert report["predict_1000_first_ms"]["rf"] > 0


def _bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cpn")
    bench_cmd = parser.add_subparsers(dest="command").add_parser("bench")
    register_bench(bench_cmd.add_subparsers(dest="what"))
    return parser


def test_cpn_bench_predictor_writes_json_for_a_user_table_and_gpu_types(tmp_path, capsys):
    table = write_csv(tmp_path / "t.csv", rows(gpus=("k80", "v100")))
    test = write_csv(tmp_path / "t2.csv", rows(gpus=("p100",)))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(benchmarks_dict()))
    out = tmp_path / "out" / "bench.json"
    argv = f"bench predictor --data {table} --test {test} --benchmarks {tmp_path / 'b.yaml'} --json {out}"
    args = _bench_parser().parse_args([*argv.split(), "--estimators", "baseline"])
    assert args.func(args) == 0
    report = json.loads(out.read_text())
    assert report["splits"]["external"]["baseline"]["mape"] < 0.01
    assert "targets for the default estimator" in capsys.readouterr().out


def test_cpn_bench_predictor_runs_on_the_shipped_data(tmp_path):
    args = _bench_parser().parse_args(
        ["bench", "predictor", "--json", str(tmp_path / "b.json"), "--estimators", "baseline"]
    )
    assert args.func(args) == 0
    report = json.loads((tmp_path / "b.json").read_text())
    assert set(report["splits"]["leave_gpu_out"]["baseline"]["per_gpu"]) == {"k80", "p100", "v100"}


def test_cpn_bench_predictor_rejects_unknown_gpu_types_clearly(tmp_path, capsys):
    h100 = [ThroughputRow(r.model, r.batch_size, "h100", r.num_gpus, 1.0) for r in rows()]
    table = write_csv(tmp_path / "t.csv", rows() + h100)
    args = _bench_parser().parse_args(
        ["bench", "predictor", "--data", str(table), "--estimators", "baseline"]
    )
    assert args.func(args) == 2
    assert "unknown GPU type 'h100'" in capsys.readouterr().err
