"""`cpn metrics check`: is every cluster's Prometheus serving fresh GPU and node series?
`cpn metrics serve-sim`: a simulated cluster's exporters, for a real Prometheus to scrape.

Exit status of `check`: 0 every cluster ok; 1 some cluster degraded (a series missing, stale or frozen) or
unknown (Prometheus unreachable, or no `prometheus_url`); 2 the config cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

import yaml

from config.settings import ConfigError, load_profile
from cpn.adapters.metrics import ClusterMetrics
from cpn.inventory import nodes_from_config
from cpn.sim.exporter import SimExporter


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `metrics` command group (`metrics check`)."""
    group = sub.add_parser("metrics", help="live metrics from the clusters' Prometheus")
    group_sub = group.add_subparsers(dest="metrics_command", metavar="SUBCOMMAND", required=True)
    p = group_sub.add_parser(
        "check",
        help="check every cluster's required series (ok, missing, stale, frozen, unreachable)",
        description=(
            "Query each cluster's prometheus_url with its configured PromQL and print, per cluster, each "
            "required series, its state and the age of its newest sample."
        ),
        epilog="Exit status: 0 all clusters ok; 1 some cluster is not ok; 2 the config cannot be read.",
    )
    p.add_argument("--config", required=True, metavar="DIR", help="config folder with clusters.yaml")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT")
    p.set_defaults(func=run_check)

    p = group_sub.add_parser(
        "serve-sim",
        help="serve a simulated cluster's dcgm-exporter and node-exporter series for a real Prometheus",
        description=(
            "Serve the DCGM and node-exporter series of one configured cluster's nodes (idle, as the "
            "simulator starts them) over HTTP until interrupted, and write the Prometheus config that "
            "scrapes them at the cluster's scrape interval."
        ),
    )
    p.add_argument("--config", required=True, metavar="DIR", help="config folder with clusters.yaml")
    p.add_argument("--cluster", required=True, help="which cluster's nodes to export")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    p.add_argument("--prometheus-config", metavar="OUT", help="write a prometheus.yml scraping it to OUT")
    p.set_defaults(func=run_serve_sim)


def report(metrics: dict[str, ClusterMetrics]) -> dict:
    """The JSON report: cluster -> health, detail, series states and ages, nodes read, frozen cards."""
    return {
        "ok": all(m.health == "ok" for m in metrics.values()),
        "clusters": {
            name: {
                "health": m.health,
                "detail": m.detail,
                "series": [
                    {
                        "name": s.name,
                        "state": s.state,
                        "age_s": None if s.age_s is None else round(s.age_s, 3),
                    }
                    for s in m.series
                ],
                "nodes": len(m.nodes),
                "frozen_cards": [{"node": node, "gpu": gpu} for node, gpu in m.frozen],
            }
            for name, m in metrics.items()
        },
    }


def _rounded(age: float | None) -> float | None:
    return None if age is None else round(age, 3)


def run_check(args: argparse.Namespace) -> int:
    """Print the per-cluster table; exit 1 when any cluster is not ok."""
    from cpn.adapters.prometheus import PrometheusMetrics

    try:
        profile = load_profile(args.config)
    except ConfigError as exc:
        print(f"cpn metrics check: {exc}", file=sys.stderr)
        return 2
    source = PrometheusMetrics(profile.clusters.clusters)
    try:
        metrics = source.sample()
    finally:
        source.close()
    for name, m in metrics.items():
        url = profile.clusters.cluster(name).prometheus_url or "-"
        print(f"{name}  {m.health}  {url}  ({len(m.nodes)} nodes with readings)")
        for s in m.series:
            age = "-" if s.age_s is None else f"{s.age_s:.1f} s"
            print(f"  {s.state:<12} {age:>9}  {s.name}")
        if m.detail:
            print(f"  {m.detail}")
    data = report(metrics)
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0 if data["ok"] else 1


def run_serve_sim(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    try:
        profile = load_profile(args.config)
        cluster = profile.clusters.cluster(args.cluster)
    except (ConfigError, KeyError) as exc:
        print(f"cpn metrics serve-sim: {exc}", file=sys.stderr)
        return 2
    nodes = [n for n in nodes_from_config(profile.clusters) if n.cluster == cluster.name]
    exporter = SimExporter(nodes)
    address = exporter.start(args.host, args.port)
    interval = f"{cluster.metrics.scrape_interval_s:g}s"
    if args.prometheus_config:
        config = {
            "global": {"scrape_interval": interval, "scrape_timeout": interval},
            "scrape_configs": exporter.scrape_configs(address),
        }
        Path(args.prometheus_config).write_text(yaml.safe_dump(config))
    print(f"serving {len(nodes)} nodes of {cluster.name} at http://{address}/metrics", flush=True)
    try:
        threading.Event().wait()
    finally:
        exporter.stop()
    return 0
