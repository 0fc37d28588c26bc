"""`cpn benchmark`: benchmark the nodes of GPU types the benchmarks store has no scores of.

The clusters are the job store's cluster set (`--store`, default this cpn home's), so that a cluster
added while cpn runs (`cpn cluster add`) is benchmarked as soon as it joins; the config's clusters where
no service has run on the store yet. A dry run reads the clusters and the benchmarks store and prints
which nodes it would benchmark and why, starting nothing; without it the `benchmark-nodes` flow runs the
loop once (Prefect, imported only then).
"""

from __future__ import annotations

import argparse
import json

from config.benchmarking import load_benchmarking, store_paths
from config.runtime import job_store
from config.settings import DEMO_DIR, load_profile
from cpn.adapters.clusters import clusters_now
from cpn.benchmarking import plan_from_files
from cpn.bootstrap import build_benchmark_clusters
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `benchmark` command."""
    p = sub.add_parser(
        "benchmark",
        help="benchmark one node of every GPU type (and driver) the benchmarks store has no scores of",
        description="Chooses one node per unmeasured GPU type (every node with `every_node` in "
        "benchmarking.yaml), runs the benchmark job there when a card is idle, ingests its scores, logs the "
        "round in MLflow and retrains the predictor when scores changed.",
    )
    p.add_argument("--config", default=str(DEMO_DIR), help="config folder (default: the demo's)")
    p.add_argument(
        "--store",
        help="job store whose cluster set is benchmarked (default: $CPN_STORE, else this cpn home's jobs.db; "
        "the config's clusters where it has none)",
    )
    p.add_argument("--throughputs", help="simulated clusters' ground truth (default: Gavel's table)")
    p.add_argument("--dry-run", action="store_true", help="print the nodes it would benchmark and why")
    p.set_defaults(func=run_benchmark)


def run_benchmark(args: argparse.Namespace) -> int:
    """Print the plan (dry run) or run the `benchmark-nodes` flow once."""
    if not args.dry_run:
        from flows.benchmarks import benchmark_nodes

        summary = benchmark_nodes(config_dir=args.config, throughputs=args.throughputs, store=args.store)
        print(json.dumps(summary, indent=1))
        return 0
    profile, settings = load_profile(args.config), load_benchmarking(args.config)
    base, _, failures = store_paths(settings)
    clusters = build_benchmark_clusters(
        clusters_now(profile.clusters, job_store(args.store)),
        ThroughputTable.load(args.throughputs or GAVEL_ISOLATED),
    )
    try:
        plan = plan_from_files(clusters.gateway.inventory(), base, settings, failures)
    finally:
        clusters.close()
    print("\n".join(plan.lines()))
    return 0
