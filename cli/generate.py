"""`cpn generate`: a seeded random queue of training jobs as manifests, to try cpn with."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from config.settings import DEMO_DIR, ConfigError, load_profile
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputFormatError, ThroughputTable
from cpn.sim.generated import generate_manifests


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `generate` sub-command."""
    p = sub.add_parser(
        "generate",
        help="write a seeded random queue of jobs as Volcano Job manifests",
        description=(
            "Draw N training jobs over the configurations the throughput table measures, sized for the "
            "config's clusters, and write them as one multi-document YAML file that `cpn submit` and "
            "POST /jobs accept. The same seed gives the same jobs."
        ),
    )
    p.add_argument("--config", default=str(DEMO_DIR), help="config folder (default: the built-in demo)")
    p.add_argument("--jobs", type=int, default=50, help="how many jobs (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed (default: %(default)s)")
    p.add_argument("--throughputs", default=str(GAVEL_ISOLATED), help="throughput table (default: Gavel's)")
    p.add_argument("--out", required=True, help="YAML file to write ('-' for standard output)")
    p.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    """Write the manifests; exit 2 on bad input."""
    if args.jobs < 1:
        print("cpn generate: --jobs must be >= 1", file=sys.stderr)
        return 2
    try:
        profile = load_profile(args.config)
        table = ThroughputTable.load(args.throughputs)
    except (ConfigError, ThroughputFormatError, FileNotFoundError) as exc:
        print(f"cpn generate: {exc}", file=sys.stderr)
        return 2
    manifests = generate_manifests(profile.clusters, table, args.jobs, args.seed)
    text = "---\n".join(manifest for _, manifest in manifests)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        print(f"wrote {len(manifests)} manifests to {args.out}", file=sys.stderr)
    return 0
