"""Retraining: the measured table plus every completed job, tracked and registered in MLflow.

The deployment runs the flow nightly and whenever enough jobs completed (a trigger on the
`cpn.job.completed` events each scheduling round emits, prefect.yaml); each run retrains only when it is
due (after `every_completions` jobs completed since the last training, or `every_s` seconds after it)
or when forced. Each retraining publishes a table artifact linking its MLflow runs, with whether the
champion changed and by how much the held-out error moved.
"""

from __future__ import annotations

import time

from prefect import flow, get_run_logger
from prefect.states import Completed, State

from config.runtime import job_store, runtime_settings, store_exists
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.inventory import nodes_from_config
from tasks.config import load_settings
from tasks.predictor import collect_completions, last_predictor_training, retrain_predictor
from tasks.report import publish_retraining


@flow(name="cpn-retrain", log_prints=True)
def retrain(
    store: str | None = None,
    config_dir: str | None = None,
    throughputs: str | None = None,
    benchmarks: str | None = None,
    tracking_uri: str | None = None,
    every_completions: int = 50,
    every_s: float = 86_400.0,
    force: bool = False,
) -> list[dict] | State:
    """Retrain the runtime predictor when due (or `force`); the `champion` alias moves only if the new
    model is better. Returns one entry per estimator trained; when not due, none, in a `Skipped` state
    (of type Completed) whose message says why.

    `store`, `benchmarks` and `tracking_uri` default to this cpn home's ($CPN_HOME): its job store, its
    ingested benchmarks (else the shipped ones) and its MLflow store; `config_dir` to CPN_CONFIG (as
    `cpn up` sets it), else the built-in demo profile, `throughputs` to Gavel's measured table. A home with
    no job store yet (a fresh checkout) has no completions: the first run trains on the table alone.
    """
    from models.retrain import RetrainSchedule

    logger = get_run_logger()
    settings = runtime_settings()
    store_path = job_store(store)
    uri = tracking_uri or settings.mlflow_uri
    if benchmarks is None:
        benchmarks = str(settings.predictor_benchmarks)
    schedule = RetrainSchedule(every_completions, every_s)
    profile = load_settings(config_dir or str(runtime_settings().config_dir))
    if store_exists(store_path):
        runs = collect_completions(str(store_path), nodes_from_config(profile.clusters))
    else:
        logger.info("no job store at %s yet: no completed jobs to learn from", store_path)
        runs = []
    last = last_predictor_training(uri)
    due, why = schedule.decide(last, [r.finished_at for r in runs], time.time())
    if not (due or force):
        logger.info("not retraining: %s", why)
        # A state that says so on the run's page (a plain Completed reads as work done); its result is [].
        return Completed(name="Skipped", message=f"not retraining: {why}", data=[])
    logger.info(
        "retraining (%s) on the throughput table plus %d completed jobs",
        "forced" if force else why,
        len(runs),
    )
    table = ThroughputTable.load(throughputs or GAVEL_ISOLATED)
    results = retrain_predictor(runs, table, benchmarks, uri)
    publish_retraining(results, uri)
    for r in results:
        print(f"{r.estimator}: version {r.version}: {r.reason}")
    return [
        {"estimator": r.estimator, "version": r.version, "champion": r.champion, "reason": r.reason}
        for r in results
    ]
