"""Retraining: the measured table plus every completed job, tracked and registered in MLflow.

The deployment runs the flow often (prefect.yaml); each run retrains only when it is due: after
`every_completions` jobs completed since the last training, or `every_s` seconds after it.
"""

from __future__ import annotations

import time

from prefect import flow, get_run_logger

from config.benchmarks import BENCHMARKS_YAML
from config.settings import DEMO_DIR
from cpn.formats.throughput import GAVEL_ISOLATED
from cpn.inventory import nodes_from_config
from models.registry import DEFAULT_TRACKING_URI
from models.retrain import RetrainSchedule
from tasks.config import load_settings
from tasks.predictor import collect_completions, last_predictor_training, retrain_predictor


@flow(name="cpn-retrain", log_prints=True)
def retrain(
    store: str = ".cpn/jobs.db",
    config_dir: str = str(DEMO_DIR),
    throughputs: str = str(GAVEL_ISOLATED),
    benchmarks: str = str(BENCHMARKS_YAML),
    tracking_uri: str = DEFAULT_TRACKING_URI,
    every_completions: int = 50,
    every_s: float = 86_400.0,
    force: bool = False,
) -> list[dict]:
    """Retrain the runtime predictor when due (or `force`); the `champion` alias moves only if the new
    model is better. Returns one entry per estimator trained (none when not due)."""
    logger = get_run_logger()
    schedule = RetrainSchedule(every_completions, every_s)
    profile = load_settings(config_dir)
    runs = collect_completions(store, nodes_from_config(profile.clusters))
    due, why = schedule.decide(
        last_predictor_training(tracking_uri), [r.finished_at for r in runs], time.time()
    )
    if not (due or force):
        logger.info("not retraining: %s", why)
        return []
    logger.info(
        "retraining (%s) on the throughput table plus %d completed jobs",
        "forced" if force else why,
        len(runs),
    )
    results = retrain_predictor(runs, throughputs, benchmarks, tracking_uri)
    for r in results:
        print(f"{r.estimator}: version {r.version}: {r.reason}")
    return [
        {"estimator": r.estimator, "version": r.version, "champion": r.champion, "reason": r.reason}
        for r in results
    ]
