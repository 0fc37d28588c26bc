"""Scheduled retraining: the measured table plus every completed job, tracked and registered in MLflow."""

from __future__ import annotations

from prefect import flow, get_run_logger

from config.benchmarks import BENCHMARKS_YAML
from config.settings import DEMO_DIR
from cpn.inventory import nodes_from_config
from cpn.throughput import GAVEL_ISOLATED
from models.registry import DEFAULT_TRACKING_URI
from tasks.config import load_settings
from tasks.predictor import collect_completions, retrain_predictor


@flow(name="cpn-retrain", log_prints=True)
def retrain(
    store: str = ".cpn/jobs.db",
    config_dir: str = str(DEMO_DIR),
    throughputs: str = str(GAVEL_ISOLATED),
    benchmarks: str = str(BENCHMARKS_YAML),
    tracking_uri: str = DEFAULT_TRACKING_URI,
) -> list[dict]:
    """Retrain the runtime predictor; the `champion` alias moves only if the new model is better."""
    logger = get_run_logger()
    profile = load_settings(config_dir)
    runs = collect_completions(store, nodes_from_config(profile.clusters))
    logger.info("training on the throughput table plus %d completed jobs", len(runs))
    results = retrain_predictor(runs, throughputs, benchmarks, tracking_uri)
    for r in results:
        print(f"{r.estimator}: version {r.version}: {r.reason}")
    return [
        {"estimator": r.estimator, "version": r.version, "champion": r.champion, "reason": r.reason}
        for r in results
    ]
