"""`cpn cluster list | add FILE | cordon NAME | uncordon NAME | remove NAME`: the cluster set while cpn runs.

The set lives in the job store (cpn.adapters.clusters), seeded from the config on the first start; the
leader of `cpn run` applies a change at its next round, with no restart. A store with no set yet gets the
config's (`--config`) first. Bad input (an unknown cluster, a cluster file that fails validation,
removing the last cluster or one with jobs on it without `--force`) exits 2 and changes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from config.runtime import job_store
from config.settings import DEMO_DIR, ClustersConfig, ConfigError, load_model
from cpn.adapters.clusters import cluster_summary, cluster_to_add, stored_clusters
from cpn.store import ClusterRefused, JobStore, StoreError


def register(sub: argparse._SubParsersAction) -> None:
    """Add `cluster` and its sub-commands."""
    p = sub.add_parser(
        "cluster",
        help="list, add, cordon, uncordon or remove clusters while cpn runs",
        description="Change the cluster set in the job store; the scheduling leader applies it at its next "
        "round. A cordoned cluster gets no new jobs and its running ones run to their end; a removed one "
        "must have no jobs on it, or --force marks them lost and queues them again.",
    )
    p.add_argument(
        "--config",
        default=str(DEMO_DIR),
        help="config folder with clusters.yaml, seeding a store with no set",
    )
    p.add_argument(
        "--store", help="job store: a file or a database URL (default: $CPN_STORE, else CPN_HOME's)"
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="the clusters, their state, nodes, cards and jobs on them")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add = actions.add_parser("add", help="add the cluster a YAML or JSON file describes")
    add.add_argument(
        "file",
        help="one cluster as clusters.yaml lists them (name, node_groups or kube_context, ...) and wan_gbps: "
        "Gbit/s to each cluster of the set",
    )
    for name, text in (("cordon", "give the cluster no new jobs"), ("uncordon", "give it new jobs again")):
        actions.add_parser(name, help=text).add_argument("name", help="the cluster")
    remove = actions.add_parser("remove", help="remove a cluster with no jobs on it")
    remove.add_argument("name", help="the cluster")
    remove.add_argument(
        "--force",
        action="store_true",
        help="remove it with jobs on it: they are marked lost and queued again",
    )
    p.set_defaults(func=run_cluster)


def run_cluster(args: argparse.Namespace) -> int:
    """Carry out the action; exit 2 on bad input (nothing changed)."""
    try:
        config = load_model(Path(args.config) / "clusters.yaml", ClustersConfig)
        with JobStore(job_store(args.store)) as store:
            rows = stored_clusters(store, config)
            if args.action == "list":
                return _list(store, args.json)
            if args.action == "add":
                name, spec = cluster_to_add([r for r in rows if r.state != "removed"], _read(args.file))
                store.add_cluster(name, spec)
                print(f"added cluster {name}: it gets jobs from the scheduler's next round")
            elif args.action in ("cordon", "uncordon"):
                state = "cordoned" if args.action == "cordon" else "active"
                changed = store.set_cluster_state(args.name, state)
                print(f"cluster {args.name} is {state}" + ("" if changed else " already"))
            else:
                lost = store.remove_cluster(args.name, force=args.force)
                print(
                    f"removed cluster {args.name}"
                    + (
                        f"; {lost} job(s) on it are marked lost and queued again"
                        " at the scheduler's next round"
                        if lost
                        else ""
                    )
                )
    except (ConfigError, ClusterRefused, StoreError) as exc:
        print(f"cpn cluster {args.action}: {exc}", file=sys.stderr)
        return 2
    return 0


def _read(file: str) -> object:
    """The YAML (or JSON) document in `file`; ConfigError naming the file otherwise."""
    try:
        return yaml.safe_load(Path(file).read_text())
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML or JSON: {exc}") from None


def _list(store: JobStore, as_json: bool) -> int:
    """Print the set: name, state, kind, nodes and cards (`-` for a real cluster: its API lists them), how
    many jobs are on it, when added."""
    rows = cluster_summary(store)
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'cluster':<20}{'state':<10}{'kind':<11}{'nodes':>6}{'cards':>7}{'jobs on it':>11}  added")
    for r in rows:
        added = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(r["added_at"]))
        kind = "simulated" if r["simulated"] else "kubernetes"
        nodes, cards = ("-" if r[k] is None else r[k] for k in ("nodes", "cards"))
        print(f"{r['name']:<20}{r['state']:<10}{kind:<11}{nodes:>6}{cards:>7}{r['jobs_on']:>11}  {added}")
    return 0
