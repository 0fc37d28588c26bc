"""`cpn store copy SRC DEST`: copy a job store into a new database, e.g. a SQLite file into PostgreSQL.

SRC and DEST are store files or database URLs (`sqlite:///FILE`, `postgresql://USER@HOST/DATABASE`);
cpn.store.copier says what is copied and how an interrupted copy is finished (run the same command again).
Exit status: 0 copied and counted; 1 refused or failed (a message says why and what to do);
130 interrupted (DEST stays marked unfinished until the same command finishes it).
"""

from __future__ import annotations

import argparse
import sys

from cpn.store import StoreError
from cpn.store.copier import BATCH, copy_store


def register(sub: argparse._SubParsersAction) -> None:
    """Add `store` and its sub-command `copy`."""
    store = sub.add_parser("store", help="manage job stores: copy one into another database")
    store_sub = store.add_subparsers(dest="store", metavar="ACTION", required=True)
    p = store_sub.add_parser(
        "copy",
        help="copy every job and transition of a store into a new, empty one (e.g. SQLite to PostgreSQL)",
        description=(
            "Copy every job (state, placement, waiting reason) and every transition of the store SRC into "
            "the empty store DEST, in batches, then check that both hold as many jobs per state and as "
            "many transitions. Stop every cpn that uses SRC first. Until the copy has finished, cpn "
            "refuses to use DEST; running the same command again finishes an interrupted copy."
        ),
        epilog="Example: cpn store copy ~/.cpn/jobs.db postgresql://cpn@db.example.org/cpn",
    )
    p.add_argument("source", metavar="SRC", help="the store to copy: a file or a database URL")
    p.add_argument("destination", metavar="DEST", help="the new store: a file or a database URL")
    p.add_argument("--batch", type=int, default=BATCH, help="rows per transaction (default: %(default)s)")
    p.set_defaults(func=run_copy)


def _progress(table: str, done: int, total: int) -> None:
    print(f"{table}: {done:,} of {total:,} copied", file=sys.stderr, flush=True)


def run_copy(args: argparse.Namespace) -> int:
    """Copy the store and print what was copied."""
    try:
        result = copy_store(args.source, args.destination, batch=args.batch, progress=_progress)
    except (StoreError, ValueError) as exc:
        print(f"cpn store copy: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"cpn store copy: interrupted; {args.destination} stays unusable until this command "
            "finishes the copy: run it again",
            file=sys.stderr,
        )
        return 130
    again = " (finishing an interrupted copy)" if result.resumed else ""
    print(
        f"copied {result.jobs:,} jobs and {result.transitions:,} transitions into {result.destination}"
        f"{again}; the counts match"
    )
    return 0
