"""Predictor tasks: collect completion feedback, retrain, register.

scikit-learn, XGBoost and MLflow are imported inside the tasks that use them, so that importing a flow
(what a Prefect worker does before every run) stays fast.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cpn.engine.explore import RuntimeCheck, runtime_checks
from cpn.engine.feedback import CompletedRun, completed_runs
from cpn.engine.scheduler import EstimateSource
from cpn.formats.throughput import ThroughputTable
from cpn.inventory import Node
from cpn.jobs import JobSpec
from cpn.store import JobStore

if TYPE_CHECKING:
    from models.predictor import Predictor
    from models.registry import LastTraining, RunResult

MODEL_LOGGERS = ("models",)
"""Loggers of the predictor (training progress, registry decisions) shown in the Prefect UI."""


@contextmanager
def predictor_logs_in_prefect() -> Iterator[None]:
    """Within the block, what the predictor logs (`models.*` loggers, INFO and up) goes to the task
    run's logger too, so the Prefect UI shows training progress and the champion decisions."""
    run_logger = get_run_logger()

    class _ToRun(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            run_logger.log(record.levelno, "%s", record.getMessage())

    handler = _ToRun(level=logging.INFO)
    loggers = [logging.getLogger(name) for name in MODEL_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        if lg.getEffectiveLevel() > logging.INFO:
            lg.setLevel(logging.INFO)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def collect_completions(store_path: str, nodes: tuple[Node, ...]) -> list[CompletedRun]:
    """Every succeeded job's measured run time from the job store."""
    with JobStore(store_path) as store:
        return completed_runs(store, nodes)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def last_predictor_training(tracking_uri: str) -> LastTraining | None:
    """The newest training run in the MLflow store (None if none yet)."""
    from models.registry import last_training

    return last_training(tracking_uri)


@task(name="retrain-predictor", cache_policy=NO_CACHE, timeout_seconds=3600)
def retrain_predictor(
    runs: list[CompletedRun],
    table: ThroughputTable,
    benchmarks: str,
    tracking_uri: str,
    estimators: tuple[str, ...] = ("rf", "xgb"),
    splits: tuple[str, ...] | None = None,
) -> list[RunResult]:
    """Train `estimators` on the table plus completions; the champion rule decides what serves.

    `splits`: the cross-validated splits logged to MLflow (None: all of models.folds.SPLITS).
    """
    from models.benchmarks import BenchmarkCatalog
    from models.retrain import retrain

    options = {} if splits is None else {"splits": splits}
    with predictor_logs_in_prefect():
        return retrain(
            runs,
            table,
            BenchmarkCatalog.load(benchmarks),
            tracking_uri=tracking_uri,
            estimators=estimators,
            **options,
        )


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def load_champion(tracking_uri: str) -> Predictor:
    """The model registered as `champion` in the MLflow store at `tracking_uri`."""
    from models.registry import load_champion as champion_of

    return champion_of(tracking_uri)


@task(cache_policy=NO_CACHE)
def check_runtimes(
    source: EstimateSource, runs: list[CompletedRun], jobs: dict[str, JobSpec]
) -> list[RuntimeCheck]:
    """What `source` estimates for each completed run next to its measured run time
    (cpn.engine.explore.runtime_checks)."""
    return runtime_checks(source, runs, jobs)


@task(cache_policy=NO_CACHE)
def estimate_source(
    kind: str, table: ThroughputTable, tracking_uri: str, benchmarks: str | None = None
) -> EstimateSource:
    """What the policy believes about runtimes, by name (models.sources): `oracle`, `noisy:SIGMA`,
    `predictor` (trained now on the table, with the GPU scores of `benchmarks`, default the shipped
    file) or `champion` (loaded from `tracking_uri` now, so that a missing model fails the run at once,
    and followed as the alias moves)."""
    from models.sources import estimate_source as source_named

    return source_named(kind, table, tracking_uri=tracking_uri, benchmarks=benchmarks)
