"""`cpn migrate image`: copy one image to another registry by hand, as the migrator does for a job.

Exit status: 0 copied or already there; 1 every attempt failed; 2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from config.settings import ConfigError, load_profile
from cpn.adapters.registry import CopyFailed, ImageRef, copy_image


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `migrate` command group (`migrate image`)."""
    group = sub.add_parser("migrate", help="move images between clusters' registries")
    group_sub = group.add_subparsers(dest="migrate_command", metavar="SUBCOMMAND", required=True)
    p = group_sub.add_parser(
        "image",
        help="copy an image to a registry with skopeo (skipped when the digest is there)",
        description=(
            "Copy SRC_REF (host[:port]/path[:tag]) to DEST_REGISTRY under the same path and tag with "
            "`skopeo copy --all --preserve-digests`, so the destination serves the same digest; retried "
            "with backoff. Prints skopeo's progress on standard error and the result as JSON: "
            '{"source", "destination" (pinned by digest), "digest", "bytes", "seconds", "skipped", '
            '"attempts"}.'
        ),
        epilog="Exit status: 0 copied or already there; 1 the copy failed; 2 bad arguments or config.",
    )
    p.add_argument("source", metavar="SRC_REF", help="image to copy, e.g. registry-a:5000/team/app:v1")
    p.add_argument("destination", metavar="DEST_REGISTRY", help="registry host[:port] to copy to")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="plain HTTP / unverified TLS on both registries (loopback test registries)",
    )
    p.add_argument(
        "--config",
        metavar="DIR",
        help="config folder: a registry marked `registry_insecure: true` there is talked to insecurely",
    )
    p.add_argument("--retries", type=int, default=3, help="attempts after the first (default 3)")
    p.add_argument("--backoff", type=float, default=1.0, help="seconds before the first retry, doubling")
    p.add_argument("--json", metavar="OUT", help="also write the result to OUT")
    p.set_defaults(func=run_image)


def run_image(args: argparse.Namespace) -> int:
    """Copy, print progress and the JSON result."""
    try:
        src = ImageRef.parse(args.source)
        insecure = set()
        if args.config:
            insecure = {
                c.registry for c in load_profile(args.config).clusters.clusters if c.registry_insecure
            }
    except (ValueError, ConfigError) as exc:
        print(f"cpn migrate image: {exc}", file=sys.stderr)
        return 2
    if not src.registry:
        print(f"cpn migrate image: {args.source!r} names no registry host", file=sys.stderr)
        return 2
    destination = str(src.moved_to(args.destination))
    try:
        result = copy_image(
            args.source,
            destination,
            src_insecure=args.insecure or src.registry in insecure,
            dest_insecure=args.insecure or args.destination in insecure,
            retries=args.retries,
            backoff_s=args.backoff,
            progress=lambda line: print(line, file=sys.stderr, flush=True),
        )
    except CopyFailed as exc:
        print(f"cpn migrate image: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(result.to_json(), indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0
