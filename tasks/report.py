"""Reporting tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from config.runtime import hide_password, runtime_settings
from cpn.bench.report import write_run_report
from cpn.bootstrap import Service
from cpn.engine.scheduler import EstimateSource

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
    """A markdown artifact (key `retraining`): each estimator's MLflow run (linked when the MLflow UI's
    address is known, $CPN_MLFLOW_UI), its held-out error, and whether it took the champion alias and
    why (by how much the error moved); returns the artifact id."""
    from mlflow.tracking import MlflowClient

    ui = runtime_settings().mlflow_ui
    client = MlflowClient(tracking_uri)
    lines = [
        "| estimator | version | held-out MAPE | champion | why | MLflow run |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        run = r.run_id
        if ui:
            experiment = client.get_run(r.run_id).info.experiment_id
            run = f"[{r.run_id[:8]}]({ui.rstrip('/')}/#/experiments/{experiment}/runs/{r.run_id})"
        champion = "yes (alias moved)" if r.champion else "no"
        lines.append(
            f"| {r.estimator} | {r.version} | {r.holdout_mape:.1%} | {champion} | {r.reason} | {run} |"
        )
    changed = any(r.champion for r in results)
    store = hide_password(tracking_uri)
    head = f"Retraining on {store}: the champion {'changed' if changed else 'stayed'}.\n\n"
    return str(create_markdown_artifact(key="retraining", markdown=head + "\n".join(lines)))
