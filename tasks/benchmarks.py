"""Benchmark ingestion tasks: benchmark job logs into a benchmarks file the predictor reads."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from config.benchmarks import BenchmarksConfig, dump_benchmarks, load_benchmarks
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
