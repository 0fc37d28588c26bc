"""MLflow: runs for both estimators, the registered champion loads and predicts, the champion rule,
the fallback when the tracking store is unreachable, retraining from completed jobs.

Uses a SQLite tracking store in a temporary folder: no server.
"""

from __future__ import annotations

import logging
import shutil
import socket
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from cpn.engine.feedback import CompletedRun
from cpn.jobs import JobSpec
from models.features import PredictorInputError
from models.registry import (
    CHAMPION,
    ChampionLoader,
    PredictorUnavailable,
    load_champion,
    queries_frame,
    train_and_register,
)
from models.retrain import retrain
from tests.unit.test_predictor_support import SPEED, benchmarks_dict, catalog, rows

pytestmark = pytest.mark.integration

NAME = "cpn-predictor-test"
SMALL = {"rf": {"n_estimators": 40}, "xgb": {"n_estimators": 60, "members": 2}}
POOR = {"rf": {"n_estimators": 1, "min_samples_leaf": 10_000, "neighbours": False}}
"""A forest of one single-leaf tree: the prior plus a constant, blind to what the scores miss."""


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory) -> Path:
    """A fresh MLflow SQLite database, created once (creating one takes seconds)."""
    db = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def store(empty_store, tmp_path, monkeypatch):
    """A tracking URI of this test's own copy of the empty store."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(empty_store, tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _train(store, estimators, params, seed=0, splits=()):
    return train_and_register(
        rows(affinity=0.5),
        catalog(),
        estimators=estimators,
        params=params,
        tracking_uri=store,
        model_name=NAME,
        splits=splits,
        seed=seed,
    )


def _runs(store):
    client = MlflowClient(tracking_uri=store)
    return client.search_runs([client.get_experiment_by_name("cpn-predictor").experiment_id])


def test_runs_for_both_estimators_and_a_champion_that_loads_and_predicts(store):
    results = _train(store, ["rf", "xgb"], SMALL, splits=("leave_gpu_out", "random"))
    client = MlflowClient(tracking_uri=store)
    runs = _runs(store)
    children = [r for r in runs if "estimator" in r.data.params]
    assert sorted(r.data.params["estimator"] for r in children) == ["rf", "xgb"] and len(runs) == 2
    # One training session, two top-level runs the experiment page compares directly: no parent to
    # expand; one `cpn.training` id ties them together.
    assert not any("mlflow.parentRunId" in r.data.tags for r in runs)
    (training,) = {r.data.tags["cpn.training"] for r in children}
    assert training.startswith("train-")
    for run in children:
        assert {"holdout_mape", "holdout_median_ape", "holdout_r2", "leave_gpu_out_mape", "train_s"} <= set(
            run.data.metrics
        )
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"predicted_vs_actual.png", "feature_importances.json", "holdout.json"} <= artifacts
        assert run.data.tags["mlflow.note.content"].endswith(run.data.tags["champion_decision"])
    # The MLflow UI compares them side by side: the same metric names for RF and XGBoost.
    assert set(children[0].data.metrics) == set(children[1].data.metrics)
    # The first is the first champion; the second is registered only if it beat it.
    assert results[0].champion and results[0].version == "1"
    assert results[1].version == ("2" if results[1].champion else None)
    versions = client.search_model_versions(f"name='{NAME}'")
    assert len(versions) == sum(r.champion for r in results)
    for v in versions:
        assert v.tags["estimator"] == next(r.estimator for r in results if r.version == str(v.version))
        files = {a.path.rsplit("/", 1)[-1] for a in client.list_artifacts(v.run_id, "model")}
        assert not files & {"uv.lock", "pyproject.toml"}, files
    champion = client.get_model_version_by_alias(NAME, CHAMPION)
    assert str(champion.version) == max(r.version for r in results if r.version)

    model = mlflow.pyfunc.load_model(f"models:/{NAME}@{CHAMPION}")
    assert model.metadata.signature is not None
    unseen = pd.DataFrame({"model": ["bert"], "batch_size": [8.0], "gpu_type": ["v100"], "num_gpus": [1]})
    frame = pd.concat([queries_frame(rows()[:3]), unseen])
    out = model.predict(frame)
    assert list(out.columns) == ["steps_per_sec", "uncertainty", "explore"]
    assert (out["steps_per_sec"] > 0).all()
    assert out["explore"].tolist() == [False, False, False, True]
    with pytest.raises(PredictorInputError, match="batch_size must be a whole number"):
        model.predict(unseen.assign(batch_size=[8.5]))


def test_a_worse_model_does_not_take_the_alias(store):
    first = _train(store, ["rf"], POOR)[0]
    assert first.champion and "first champion" in first.reason
    better = _train(store, ["rf"], SMALL)[0]
    assert better.champion, better.reason
    worse = _train(store, ["rf"], POOR)[0]
    assert not worse.champion and worse.reason.startswith("not champion")
    assert worse.version is None  # nothing registered for a run that lost
    client = MlflowClient(tracking_uri=store)
    assert str(client.get_model_version_by_alias(NAME, CHAMPION).version) == better.version
    assert len(client.search_model_versions(f"name='{NAME}'")) == 2
    lost = client.get_run(worse.run_id).data.tags
    assert lost["cpn.champion"] == "false" and lost["champion_decision"] == worse.reason
    assert "rows it did not train on" in worse.reason


def test_a_model_that_scores_a_gpu_type_the_champion_lacks_wins_though_worse(store):
    """A card type just benchmarked: the champion cannot estimate it at all, so a candidate whose
    benchmarks score it takes the alias even with a worse held-out error; without the new type the same
    candidate loses."""
    old = {g: s for g, s in SPEED.items() if g != "v100"}

    def train(params, gpus):
        table = rows(affinity=0.5, gpus=tuple(gpus))
        return train_and_register(
            table,
            catalog(gpus),
            estimators=["rf"],
            params=params,
            tracking_uri=store,
            model_name=NAME,
            splits=(),
        )[0]

    assert train(SMALL, old).champion
    assert not train(POOR, old).champion
    new = train(POOR, SPEED)
    assert new.champion and "cannot estimate (v100)" in new.reason, new.reason
    client = MlflowClient(tracking_uri=store)
    assert str(client.get_model_version_by_alias(NAME, CHAMPION).version) == new.version == "2"
    assert (
        load_champion(store, NAME)
        .estimate(JobSpec(job_id="ns/a", model="LM", batch_size=20, total_steps=1000), "v100")
        .runtime_s
        > 0
    )


def test_the_champion_is_judged_only_on_rows_it_did_not_train_on(store):
    """A champion trained on every row (another seed's hold-out) is compared on the rows it never saw."""
    all_rows = rows(affinity=0.5)
    train_and_register(
        all_rows[: len(all_rows) // 2],
        catalog(),
        estimators=["rf"],
        params=SMALL,
        tracking_uri=store,
        model_name=NAME,
        splits=(),
    )
    second = _train(store, ["rf"], SMALL, seed=1)[0]
    fair = int(second.reason.split(" on the ")[1].split(" of ")[0])
    held_out = int(second.reason.split(" of ")[-1].split(" held-out")[0])
    assert 0 < fair < held_out, second.reason  # the rows of the first half were left out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_store_keeps_the_last_good_model(store, monkeypatch, caplog):
    _train(store, ["rf"], SMALL)
    loader = ChampionLoader(store, NAME)
    good = loader.load()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    loader.tracking_uri = f"http://127.0.0.1:{_closed_port()}"
    with caplog.at_level(logging.WARNING, logger="models.registry"):
        assert loader.load() is good
    assert "keeping version 1" in caplog.text
    job = JobSpec(job_id="ns/a", model="LM", batch_size=20, total_steps=1000)
    assert loader.load().estimate(job, "v100").runtime_s > 0

    with pytest.raises(PredictorUnavailable, match="cannot load models:/cpn-predictor-test@champion"):
        ChampionLoader(loader.tracking_uri, NAME).load()


def test_load_champion_explores_an_unseen_model(store):
    _train(store, ["rf"], SMALL)
    predictor = load_champion(store, NAME)
    seen = JobSpec(job_id="ns/a", model="Transformer", batch_size=64, total_steps=1000)
    unseen = JobSpec(job_id="ns/b", model="densenet121", batch_size=64, total_steps=1000)
    assert predictor.estimate(seen, "p100").explore is False
    assert predictor.estimate(unseen, "p100").explore is True


def test_cpn_predictor_train_records_the_completions_it_trained_on(store, tmp_path):
    """The next retraining counts only jobs completed after a `cpn predictor train` as new."""
    from cli import main
    from config.settings import load_profile
    from cpn.engine.feedback import completed_runs
    from cpn.inventory import nodes_from_config
    from cpn.jobs import JobState
    from cpn.store import JobStore
    from models.registry import last_training
    from models.retrain import RetrainSchedule

    jobs = tmp_path / "jobs.db"
    with JobStore(jobs) as js:
        js.submit([JobSpec(job_id="ns/a", model="ResNet-50", batch_size=32, num_gpus=1, total_steps=3000)])
        js.transition("ns/a", JobState.ASSIGNED, cluster="gz-v100", node="gz-hybrid-0", at=10.0)
        js.transition("ns/a", JobState.SUBMITTED, at=11.0)
        js.transition("ns/a", JobState.RUNNING, at=20.0)
        js.transition("ns/a", JobState.SUCCEEDED, at=120.0)
        runs = completed_runs(js, nodes_from_config(load_profile().clusters))
    assert len(runs) == 1
    table, bench = tmp_path / "t.csv", tmp_path / "b.yaml"
    lines = [f"{r.model},{r.batch_size or ''},{r.gpu_type},{r.num_gpus},{r.steps_per_sec}" for r in rows()]
    table.write_text("\n".join(["model,batch_size,gpu_product,num_gpus,steps_per_sec", *lines]) + "\n")
    bench.write_text(yaml.safe_dump(benchmarks_dict()))
    argv = ["predictor", "train", "--tracking-uri", store, "--model-name", NAME, "--estimators", "rf"]
    assert main([*argv, "--data", str(table), "--benchmarks", str(bench), "--store", str(jobs)]) == 0
    last = last_training(store)
    assert last.completions_until == 120.0
    due, why = RetrainSchedule(every_completions=1).decide(
        last, [r.finished_at for r in runs], last.started_s
    )
    assert not due, why


def test_retrain_learns_completed_jobs(store):
    runs = [
        CompletedRun(
            "ns/a", "densenet121", 32, "Tesla-V100-SXM2-16GB", 1, 3000, 100.0, 200.0, gpu_mem_gb=9.0
        ),
        CompletedRun("ns/b", "densenet121", 32, "p100", 1, 3000, 175.0, 300.0, gpu_mem_gb=9.0),
    ]
    options = {"estimators": ["rf"], "params": SMALL, "model_name": NAME, "splits": ()}
    results = retrain(runs, rows(), catalog(), store, **options)
    assert results[0].champion
    run = MlflowClient(tracking_uri=store).get_run(results[0].run_id)
    assert run.data.params["rows"] == str(len(rows()) + 2)
    est = load_champion(store, NAME).estimate(
        JobSpec(job_id="ns/c", model="densenet121", batch_size=32, total_steps=3000), "v100"
    )
    assert est.gpu_mem_gb == 9.0
    assert est.runtime_s == pytest.approx(100.0, rel=0.5)


def test_the_scheduler_follows_the_champion_alias_as_it_moves(store):
    """A loader used as the scheduler's estimate source picks up a new champion at its next look."""
    _train(store, ["rf"], POOR)
    following, fixed = ChampionLoader(store, NAME, refresh_s=0), ChampionLoader(store, NAME, refresh_s=3600)
    job = JobSpec(job_id="ns/a", model="Transformer", batch_size=64, num_gpus=1, total_steps=1000)
    before = following.estimates([job], ["v100"])["ns/a"]["v100"].runtime_s
    fixed.estimates([job], ["v100"])
    better = _train(store, ["rf"], SMALL)[0]
    assert better.champion, better.reason
    after = following.estimates([job], ["v100"])["ns/a"]["v100"].runtime_s
    assert following.last_good_version == better.version and after != before
    assert fixed.estimates([job], ["v100"])["ns/a"]["v100"].runtime_s == before, "not looked again yet"
    assert fixed.last_good_version == "1"
