"""`ingest-benchmarks`: benchmark job logs into this cpn home's benchmarks file (weekly deployment)."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from config.benchmarks import BENCHMARKS_YAML
from config.runtime import runtime_settings
from tasks.benchmarks import merge_benchmarks, read_benchmark_logs, write_benchmarks

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
