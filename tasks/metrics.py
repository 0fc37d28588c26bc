"""Metrics tasks: every cluster's live GPU and CPU load through the metrics-source port."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from config.settings import ClustersConfig
from cpn.adapters.metrics import ClusterMetrics
from cpn.adapters.prometheus import PrometheusMetrics


@task(cache_policy=NO_CACHE, retries=3, retry_delay_seconds=[1, 5, 15], timeout_seconds=120)
def sample_metrics(clusters: ClustersConfig) -> dict[str, ClusterMetrics]:
    """Each cluster's Prometheus read once (a cluster without one is `unknown`: scheduled on inventory)."""
    source = PrometheusMetrics(clusters.clusters)
    try:
        return source.sample()
    finally:
        source.close()


@task(cache_policy=NO_CACHE)
def publish_metrics(metrics: dict[str, ClusterMetrics]) -> str:
    """A table artifact (key `cluster-metrics`): health, nodes reporting and mean GPU use per cluster."""
    rows = []
    for name, m in sorted(metrics.items()):
        utils = [g.utilization for n in m.nodes.values() for g in n.gpus if g.utilization is not None]
        rows.append(
            {
                "cluster": name,
                "health": m.health,
                "nodes_reporting": len(m.nodes),
                "cards_reporting": len(utils),
                "mean_gpu_utilization": round(sum(utils) / len(utils), 3) if utils else None,
                "detail": m.detail,
            }
        )
    return str(create_table_artifact(key="cluster-metrics", table=rows, description="Live load per cluster"))
