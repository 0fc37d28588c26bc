"""Reporting tasks."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from cpn.bench.report import write_run_report
from cpn.bootstrap import Service


@task(cache_policy=NO_CACHE)
def write_report(sim: Service, out_dir: str, title: str) -> dict:
    """summary.json and gantt.png of a finished run."""
    return write_run_report(
        sim.store,
        sim.simulator.executions,
        sim.nodes,
        out_dir,
        title=title,
        transfer_s_total=sim.migrator.total_s,
    )
