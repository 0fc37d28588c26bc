"""Completion feedback reaches the predictor: the demo's finished jobs retrain it in MLflow."""

from __future__ import annotations

import pytest

from cpn.jobs import JobSpec
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
    found = client.search_runs([client.get_experiment_by_name("cpn-predictor").experiment_id])
    runs = [r for r in found if "estimator" in r.data.params]  # one top-level run per estimator
    assert len(runs) == 2 and len(found) == 2, "two estimators' runs, no parent run to expand"
    assert len({r.data.tags["cpn.training"] for r in runs}) == 1, "one training id ties them together"
    assert all(r.data.params["data"] == "table + 12 completed jobs" for r in runs)
    from models.registry import REGISTERED_MODEL

    champion = client.get_model_version_by_alias(REGISTERED_MODEL, "champion")
    assert str(champion.version) in {str(r["version"]) for r in results if r["champion"]}

    # The deployment runs the flow every 15 minutes: right after training it is not due, even at a
    # threshold of one completion, since every completion in the store was trained on.
    from models.registry import COMPLETIONS_UNTIL_TAG

    assert all(COMPLETIONS_UNTIL_TAG in r.data.tags for r in runs)
    again = retrain(
        store=str(tmp_path / "demo" / "jobs.db"), tracking_uri=uri, every_completions=1, return_state=True
    )
    assert again.result() == [], "no job completed since the last training"
    assert (again.type.value, again.name) == ("COMPLETED", "Skipped") and "not retraining" in again.message

    # The demo's clusters measured each finished job's GPU memory; the champion now predicts memory for
    # those models, never below what a run of the same model and batch size used.
    from config.settings import load_profile
    from cpn.engine.feedback import completed_runs
    from cpn.inventory import nodes_from_config
    from cpn.store import JobStore
    from models.registry import load_champion

    nodes = nodes_from_config(load_profile().clusters)
    with JobStore(tmp_path / "demo" / "jobs.db") as store:
        finished = completed_runs(store, nodes)
    assert finished and all(r.gpu_mem_gb for r in finished)
    predictor = load_champion(uri)
    for run in finished:
        spec = JobSpec(
            job_id=run.job_id,
            model=run.model,
            batch_size=run.batch_size,
            num_gpus=run.num_gpus,
            total_steps=run.total_steps,
        )
        assert predictor.estimate(spec, run.gpu_type).gpu_mem_gb >= run.gpu_mem_gb - 1e-9, spec

    # The scheduler then plans with the champion it loads by alias.
    summary = demo(out=str(tmp_path / "again"), jobs=12, seed=2, estimates="champion", tracking_uri=uri)
    assert summary["succeeded"] == 12 and summary["oom"] == 0


def test_retrain_on_a_fresh_home_trains_on_the_table_and_links_its_runs(
    prefect_harness, tmp_path, monkeypatch
):
    """The `retrain` deployment on a fresh checkout: no job store yet, MLflow store in $CPN_HOME."""
    import asyncio

    from prefect.client.orchestration import get_client

    monkeypatch.setenv("CPN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CPN_MLFLOW_UI", "http://127.0.0.1:5000")
    for var in ("CPN_STORE", "CPN_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    state = retrain(return_state=True)
    results = state.result()
    assert {r["estimator"] for r in results} == {"rf", "xgb"}
    assert (tmp_path / "home" / "mlflow.db").exists(), "the MLflow store lives in the cpn home"
    assert not (tmp_path / "home" / "jobs.db").exists(), "retraining reads the store, never creates it"

    async def artifact():
        async with get_client() as client:
            found = await client.read_artifacts()
            return [
                a for a in found if a.key == "retraining" and a.flow_run_id == state.state_details.flow_run_id
            ]

    (published,) = asyncio.run(artifact())
    assert "champion changed" in published.data
    assert published.data.count("http://127.0.0.1:5000/#/experiments/") == 2
