"""Benchmark tasks: benchmark job logs into a benchmarks file the predictor reads, and the benchmark loop's
steps (plan, run, ingest, record, log), each over plain code in cpn.benchmarking and models."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from config.benchmarking import BenchmarkingSettings
from config.benchmarks import BenchmarksConfig, dump_benchmarks, load_benchmarks
from cpn.benchmarking import (
    BenchmarkPlan,
    BenchmarkRun,
    BenchmarkTarget,
    FailureLog,
    plan_from_files,
    run_benchmarks,
)
from cpn.bootstrap import BenchmarkClusters
from models.benchmark_runs import Ingested, ingest_runs, log_benchmark_run
from models.benchmarks import BenchmarkResult, merge_results, parse_benchmark_log


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def read_benchmark_logs(paths: list[str]) -> list[BenchmarkResult]:
    """Every `CPN_BENCH` result in the logs (other lines ignored); BenchmarkError names file and line."""
    results = []
    for path in paths:
        results += parse_benchmark_log(Path(path).read_text(errors="replace"), source=path)
    return results


@task(cache_policy=NO_CACHE)
def merge_benchmarks(results: list[BenchmarkResult], base: str) -> BenchmarksConfig:
    """The benchmarks file `base` with the results folded in (per node, and medians per GPU product)."""
    return merge_results(results, load_benchmarks(base))


@task(cache_policy=NO_CACHE)
def write_benchmarks(config: BenchmarksConfig, out: str) -> str:
    """Write the merged benchmarks file; returns its path."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    dump_benchmarks(config, out)
    return out


@task(cache_policy=NO_CACHE)
def plan_benchmark_nodes(
    clusters: BenchmarkClusters, base: str, settings: BenchmarkingSettings, failures: str
) -> BenchmarkPlan:
    """The nodes to benchmark on the clusters now (cpn.benchmarking.plan_benchmarks)."""
    return plan_from_files(clusters.gateway.inventory(), base, settings, failures)


@task(cache_policy=NO_CACHE)
def run_benchmark_jobs(
    clusters: BenchmarkClusters, targets: tuple[BenchmarkTarget, ...], settings: BenchmarkingSettings
) -> list[BenchmarkRun]:
    """Submit the targets' benchmark jobs where a card is idle and follow them to their end."""
    return run_benchmarks(clusters.gateway, targets, settings, clusters.clock, clusters.wait)


@task(cache_policy=NO_CACHE)
def ingest_benchmark_runs(runs: list[BenchmarkRun], base: str, out: str, day: date) -> Ingested:
    """The runs' scores into the benchmarks store, with node, driver and day."""
    return ingest_runs(runs, base, out, day)


@task(cache_policy=NO_CACHE)
def record_benchmark_failures(runs: tuple[BenchmarkRun, ...], failures: str) -> dict[str, tuple[int, str]]:
    """Count failed and timed-out benchmarks (tried again later, then reported); clear succeeded types."""
    return FailureLog(failures).record(runs)


@task(cache_policy=NO_CACHE, retries=2, retry_delay_seconds=[2, 10])
def log_benchmark_round(ingested: Ingested, tracking_uri: str) -> str:
    """Record the round in MLflow; returns its run id."""
    return log_benchmark_run(ingested, tracking_uri)
