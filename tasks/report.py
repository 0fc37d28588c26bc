"""Reporting tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from config.runtime import hide_password, runtime_settings
from cpn.bootstrap import Service
from cpn.engine.scheduler import EstimateSource
from cpn.perf.report import write_run_report

if TYPE_CHECKING:
    from models.registry import RunResult


@task(cache_policy=NO_CACHE)
def write_report(sim: Service, out_dir: str, title: str, oracle: EstimateSource | None = None) -> dict:
    """summary.json and gantt.png of a finished run; with `oracle` (the ground truth's runtimes) the
    makespan's lower bound and the last job's check too (write_run_report)."""
    return write_run_report(
        sim.store,
        sim.simulator.executions,
        sim.nodes,
        out_dir,
        title=title,
        transfer_s_total=sim.migrator.total_s,
        oracle=oracle,
    )


@task(cache_policy=NO_CACHE)
def publish_retraining(results: list[RunResult], tracking_uri: str) -> str:
    """A markdown artifact (key `retraining`, models.retraining_report): links to the session's MLflow runs
    (when the MLflow UI's address is known, $CPN_MLFLOW_UI) and to their comparison, each estimator's
    held-out error, and whether it took the champion alias and why; returns the artifact id."""
    from mlflow.tracking import MlflowClient

    from models.retraining_report import retraining_markdown

    ui = runtime_settings().mlflow_ui
    experiment = MlflowClient(tracking_uri).get_run(results[0].run_id).info.experiment_id if results else None
    markdown = retraining_markdown(results, hide_password(tracking_uri), ui, experiment)
    return str(create_markdown_artifact(key="retraining", markdown=markdown))
