"""Completion feedback reaches the predictor: the demo's finished jobs retrain it in MLflow."""

from __future__ import annotations

import pytest

from flows.demo import demo
from flows.retrain import retrain

pytestmark = pytest.mark.e2e


def test_retrain_flow_learns_from_the_demo_store(prefect_harness, tmp_path):
    demo(out=str(tmp_path / "demo"), jobs=12, seed=1)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    results = retrain(store=str(tmp_path / "demo" / "jobs.db"), tracking_uri=uri)
    assert {r["estimator"] for r in results} == {"rf", "xgb"}
    assert results[0]["champion"], "the first model trained on an empty registry becomes champion"

    import mlflow

    client = mlflow.MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("cpn-predictor").experiment_id])
    assert len(runs) == 2
    assert all(r.data.params["data"] == "table + 12 completed jobs" for r in runs)
    from models.registry import REGISTERED_MODEL

    champion = client.get_model_version_by_alias(REGISTERED_MODEL, "champion")
    assert str(champion.version) in {str(r["version"]) for r in results if r["champion"]}

    # The scheduler then plans with the champion it loads by alias.
    summary = demo(out=str(tmp_path / "again"), jobs=12, seed=2, estimates="champion", tracking_uri=uri)
    assert summary["succeeded"] == 12 and summary["oom"] == 0
