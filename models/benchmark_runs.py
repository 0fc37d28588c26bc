"""The predictor's side of the benchmark loop: a run's logs into the benchmarks store, and into MLflow.

`ingest_runs` parses the `CPN_BENCH` lines of every benchmark job that succeeded (cpn.benchmarking) and
folds them into the store with the node, its driver and the day (models.benchmarks.merge_results, which
refuses results of another method than the store's); a job that succeeded without usable result lines
counts as failed. `log_benchmark_run` records the run in MLflow (one run per benchmark round: the nodes,
their outcomes, every score as a metric), so a retraining's inputs can be traced to the jobs that
measured them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from config.benchmarks import BenchmarksConfig, dump_benchmarks, load_benchmarks
from cpn.benchmarking import BenchmarkRun
from models.benchmarks import BenchmarkError, BenchmarkResult, merge_results, parse_benchmark_log

BENCHMARK_EXPERIMENT = "cpn-benchmarks"
"""MLflow experiment the benchmark rounds are logged to."""


@dataclass(frozen=True)
class Ingested:
    """What a benchmark round added to the store."""

    runs: tuple[BenchmarkRun, ...]
    """The round's runs, a succeeded one whose log was unusable turned `failed` (its detail says why)."""
    results: tuple[BenchmarkResult, ...]
    changed: bool
    """Whether any score of the store changed (retraining is due)."""
    store: str
    """The benchmarks file written (or left as it was)."""


def ingest_runs(runs: Sequence[BenchmarkRun], base: Path | str, out: Path | str, day: date) -> Ingested:
    """Fold the results of the succeeded runs into the benchmarks file `base`, written to `out` when a score
    changed (see the module doc)."""
    checked, results = [], []
    for run in runs:
        if run.outcome == "succeeded":
            try:
                found = parse_benchmark_log(run.log, source=run.job_id)
            except BenchmarkError as exc:
                run = dataclasses.replace(run, outcome="failed", detail=str(exc))
            else:
                results += found
        checked.append(run)
    before = load_benchmarks(base)
    merged: BenchmarksConfig = merge_results(results, before, measured=day) if results else before
    changed = merged.gpus != before.gpus or merged.nodes != before.nodes
    if changed or Path(out) != Path(base):
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        dump_benchmarks(merged, out)
    return Ingested(tuple(checked), tuple(results), changed, str(out))


def log_benchmark_run(ingested: Ingested, tracking_uri: str) -> str:
    """Record the round in MLflow (experiment BENCHMARK_EXPERIMENT); returns the MLflow run id."""
    import mlflow
    from mlflow.tracking import MlflowClient

    from models.registry import _experiment_id

    client = MlflowClient(tracking_uri=tracking_uri)
    mlflow.set_tracking_uri(tracking_uri)
    with mlflow.start_run(experiment_id=_experiment_id(client, tracking_uri, BENCHMARK_EXPERIMENT)) as run:
        mlflow.set_tags({"store": ingested.store, "changed": str(ingested.changed)})
        for r in ingested.runs:
            node = r.target.node
            mlflow.set_tag(
                f"node.{node.cluster}.{node.name}", f"{r.target.type_key}: {r.outcome} {r.detail}"[:500]
            )
        for res in ingested.results:
            mlflow.log_metric(f"{res.node}.{res.workload}", res.score)
        mlflow.log_dict(
            {
                "runs": [
                    {"job": r.job_id, "outcome": r.outcome, "detail": r.detail, "log": r.log}
                    for r in ingested.runs
                ]
            },
            "benchmark-runs.json",
        )
        return run.info.run_id
