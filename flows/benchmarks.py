"""`ingest-benchmarks`: benchmark job logs into this cpn home's benchmarks file (weekly deployment);
`benchmark-nodes`: the benchmark loop over a config's clusters (daily deployment, `cpn benchmark`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from prefect import flow, get_run_logger

from config.benchmarking import load_benchmarking, store_paths
from config.benchmarks import BENCHMARKS_YAML
from config.runtime import job_store, runtime_settings
from config.settings import load_profile
from cpn.adapters.clusters import clusters_now
from cpn.bootstrap import build_benchmark_clusters
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from flows.retrain import retrain
from tasks.benchmarks import (
    ingest_benchmark_runs,
    log_benchmark_round,
    merge_benchmarks,
    plan_benchmark_nodes,
    read_benchmark_logs,
    record_benchmark_failures,
    run_benchmark_jobs,
    write_benchmarks,
)

INGESTED = "ingested"
"""Subfolder of the logs folder that ingested logs move to, so that no log is counted twice."""


@flow(name="ingest-benchmarks", log_prints=True)
def ingest_benchmarks(logs: str | None = None, base: str | None = None, out: str | None = None) -> dict:
    """Fold every `*.log` in `logs` (default `$CPN_HOME/benchmark-logs`) into the scores of `base`
    (default: `out` if it exists, else the shipped config/benchmarks.yaml) and write `out` (default
    `$CPN_HOME/benchmarks.yaml`); ingested logs move to `logs/ingested/`."""
    logger = get_run_logger()
    settings = runtime_settings()
    folder = Path(logs) if logs else settings.benchmark_logs
    target = Path(out) if out else settings.benchmarks_path
    start = Path(base) if base else (target if target.exists() else BENCHMARKS_YAML)
    files = sorted(folder.glob("*.log")) if folder.is_dir() else []
    if not files:
        logger.info("no benchmark logs in %s: nothing to ingest", folder)
        return {"logs": 0, "results": 0, "out": None}
    results = read_benchmark_logs([str(f) for f in files])
    written = write_benchmarks(merge_benchmarks(results, str(start)), str(target))
    done = folder / INGESTED
    done.mkdir(exist_ok=True)
    for f in files:
        f.rename(done / f.name)
    nodes = sorted({r.node for r in results})
    print(f"wrote {written}: {len(results)} results from {len(files)} logs, nodes {', '.join(nodes)}")
    return {"logs": len(files), "results": len(results), "out": written}


@flow(name="benchmark-nodes", log_prints=True)
def benchmark_nodes(
    config_dir: str | None = None,
    throughputs: str | None = None,
    tracking_uri: str | None = None,
    dry_run: bool = False,
    training_table: str | None = None,
    store: str | None = None,
) -> dict:
    """Benchmark every node of an unmeasured GPU type (docs/predictor.md): plan, run the jobs where cards
    are idle, ingest the scores into the benchmarks store, record failures, log the round in MLflow and,
    when scores changed, retrain the predictor. `config_dir` (default CPN_CONFIG, else the demo's) holds
    clusters.yaml and the optional benchmarking.yaml; `throughputs` is the simulated clusters' truth
    (default Gavel's table), `training_table` the predictor's (default: `throughputs`; another where the
    simulated world has card types no measured table has). The clusters are the job store's cluster set
    (`store`, default this cpn home's: one added while cpn runs is benchmarked as soon as it joins), the
    config's where no service has run on it. A dry run prints the plan and stops."""
    logger = get_run_logger()
    folder = config_dir or str(runtime_settings().config_dir)
    profile, settings = load_profile(folder), load_benchmarking(folder)
    base, out, failures = store_paths(settings)
    table = ThroughputTable.load(throughputs or GAVEL_ISOLATED)
    clusters = build_benchmark_clusters(clusters_now(profile.clusters, job_store(store)), table)
    try:
        plan = plan_benchmark_nodes(clusters, str(base), settings, str(failures))
        for line in plan.lines():
            print(line)
        summary: dict = {
            "planned": [t.node.key for t in plan.targets],
            "reported": [r.type_key for r in plan.reported],
        }
        if dry_run or not plan.targets:
            return summary
        runs = run_benchmark_jobs(clusters, plan.targets, settings)
    finally:
        clusters.close()
    ingested = ingest_benchmark_runs(runs, str(base), str(out), datetime.now(UTC).date())
    record_benchmark_failures(ingested.runs, str(failures))
    uri = tracking_uri or runtime_settings().mlflow_uri
    log_benchmark_round(ingested, uri)
    for run in ingested.runs:
        print(f"{run.target.node.key}: {run.outcome} {run.detail}".rstrip())
    summary |= {
        "outcomes": {r.target.node.key: r.outcome for r in ingested.runs},
        "changed": ingested.changed,
        "store": ingested.store,
    }
    if ingested.changed:
        logger.info("scores changed in %s: retraining the predictor", ingested.store)
        retrain(
            config_dir=folder,
            throughputs=training_table or throughputs,
            benchmarks=ingested.store,
            tracking_uri=uri,
            force=True,
        )
    return summary
