"""`cpn teams`: each team's quota, cards in use, borrowed cards and waiting jobs (docs/teams.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from config.runtime import job_store
from config.settings import DEMO_DIR, ClustersConfig, ConfigError, load_model
from config.teams import TEAMS_FILE, TeamsConfig, folder_teams, load_teams, quota_warnings
from cpn.adapters.clusters import clusters_now
from cpn.inventory import nodes_from_config
from cpn.policies.teams import quota_cards, teams_of
from cpn.store import JobStore, StoreError
from cpn.views.team_board import TeamBoard


def register(sub: argparse._SubParsersAction) -> None:
    """Add `teams`."""
    p = sub.add_parser(
        "teams",
        help="each team's quota, cards in use, borrowed cards and waiting jobs",
        description="Read the teams file and the job store: per team, its quota, the whole cards its jobs on "
        "the clusters hold, how many of them are borrowed beyond its quota, and its queued jobs.",
    )
    p.add_argument(
        "--config", default=str(DEMO_DIR), help="config folder with clusters.yaml (default: the demo)"
    )
    p.add_argument(
        "--teams",
        help="teams file (default: teams.yaml in --config; none: every namespace in the default team)",
    )
    p.add_argument(
        "--store", help="job store: a file or a database URL (default: $CPN_STORE, else CPN_HOME's)"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run_teams)


def run_teams(args: argparse.Namespace) -> int:
    """Print the teams' standing; exit 2 on a bad file."""
    try:
        if args.teams:
            config = load_teams(args.teams)
        elif (config := folder_teams(args.config)) is None:
            print(
                f"cpn teams: no {TEAMS_FILE} in {args.config}: every namespace is in the default team; give "
                "--config the folder your service was started with (or --teams FILE) to see its teams",
                file=sys.stderr,
            )
            config = TeamsConfig(teams=[])
        configured = load_model(Path(args.config) / "clusters.yaml", ClustersConfig)
        nodes = nodes_from_config(clusters_now(configured, job_store(args.store)))
    except ConfigError as exc:
        print(f"cpn teams: {exc}", file=sys.stderr)
        return 2
    for line in quota_warnings(config, quota_cards(nodes)):
        print(f"warning: {line}", file=sys.stderr)
    try:
        store = JobStore(job_store(args.store), read_only=True)
    except StoreError as exc:
        print(f"cpn teams: {exc}", file=sys.stderr)
        return 2
    try:
        rows = TeamBoard(teams_of(config), nodes).rows(store)
    finally:
        store.close()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'team':<16}{'weight':>7}{'cards':>7}{'borrowed':>9}{'waiting':>9}  quota")
    for r in rows:
        quota = ", ".join(f"{k}={v}" for k, v in sorted(r["quota"].items())) or "-"
        limit = "" if r["borrowing_limit"] is None else f" (borrowing limit {r['borrowing_limit']})"
        print(
            f"{r['team']:<16}{r['weight']:>7g}{r['cards']:>7}{r['borrowed']:>9}{r['waiting']:>9}"
            f"  {quota}{limit}"
        )
    return 0
