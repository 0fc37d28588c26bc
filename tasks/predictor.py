"""Predictor tasks: collect completion feedback, retrain, register."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from cpn.engine.estimates import OracleEstimates
from cpn.engine.feedback import CompletedRun, completed_runs
from cpn.engine.scheduler import EstimateSource
from cpn.formats.throughput import ThroughputTable
from cpn.inventory import Node
from cpn.store import JobStore
from models.benchmarks import BenchmarkCatalog
from models.features import training_rows
from models.predictor import fit_predictor
from models.registry import LastTraining, RunResult, champion_loader, last_training
from models.retrain import observations_from_runs, retrain


@task(cache_policy=NO_CACHE)
def collect_completions(store_path: str, nodes: tuple[Node, ...]) -> list[CompletedRun]:
    """Every succeeded job's measured run time from the job store."""
    with JobStore(store_path) as store:
        return completed_runs(store, nodes)


@task(cache_policy=NO_CACHE)
def last_predictor_training(tracking_uri: str) -> LastTraining | None:
    """The newest training run in the MLflow store (None if none yet)."""
    return last_training(tracking_uri)


@task(cache_policy=NO_CACHE)
def retrain_predictor(
    runs: list[CompletedRun], throughputs: str, benchmarks: str, tracking_uri: str
) -> list[RunResult]:
    """Train RF and XGBoost on the table plus completions; the champion rule decides what serves."""
    return retrain(
        observations_from_runs(runs),
        ThroughputTable.load(throughputs),
        BenchmarkCatalog.load(benchmarks),
        tracking_uri=tracking_uri,
        completions_until=max((r.finished_at for r in runs), default=None),
    )


@task(cache_policy=NO_CACHE)
def estimate_source(kind: str, table: ThroughputTable, tracking_uri: str) -> EstimateSource:
    """What the policy believes about runtimes: `oracle` (the simulator's truth), `predictor` (a random
    forest trained now on the table, no MLflow), or `champion` (the registered champion, loaded by alias
    now, so that a missing model fails the run at once, and followed as the alias moves)."""
    if kind == "oracle":
        return OracleEstimates(table)
    if kind == "predictor":
        return fit_predictor(training_rows(table), BenchmarkCatalog.load())
    if kind == "champion":
        loader = champion_loader(tracking_uri)
        loader.load()
        return loader
    raise ValueError(f"estimates {kind!r}: use oracle, predictor or champion")
