"""`collect-metrics`: every cluster's live load, read through its Prometheus (deployment: every minute)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from config.runtime import runtime_settings
from tasks.config import load_settings
from tasks.metrics import publish_metrics, sample_metrics


@flow(name="collect-metrics", log_prints=True)
def collect_metrics(config_dir: str | None = None) -> dict[str, str]:
    """Read each cluster of `config_dir` (default: CPN_CONFIG, else the built-in demo profile) once and
    publish the table; returns cluster -> health."""
    profile = load_settings(config_dir or str(runtime_settings().config_dir))
    metrics = sample_metrics(profile.clusters)
    publish_metrics(metrics)
    health = {name: m.health for name, m in metrics.items()}
    for name, m in sorted(metrics.items()):
        get_run_logger().info("%s: %s%s", name, m.health, f" ({m.detail})" if m.detail else "")
    return health
