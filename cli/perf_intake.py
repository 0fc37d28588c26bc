"""`cpn bench intake`: load on the HTTP intake of real `cpn serve` processes; the store checked afterwards."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from config.runtime import hide_password
from cpn.perf.intake import IntakeBenchResult, bench_intake
from cpn.store import StoreError


def register_bench(bench_sub: argparse._SubParsersAction) -> None:
    """Add `bench intake` under `cpn bench`."""
    p = bench_sub.add_parser(
        "intake",
        help="post N jobs from C clients to a real `cpn serve` on loopback; check nothing is lost",
        description=(
            "Start `cpn serve` (uvicorn) on a fresh store with a fresh token in a subprocess, post --jobs "
            "generated Jobs in batches of --batch from --clients keep-alive clients, then check the store: "
            "every acknowledged job stored once. Prints (and with --json writes) jobs_per_s, p99_ms, "
            "acknowledged, stored, lost, duplicated. --store benches an empty database (or file) instead, "
            "with --replicas servers on it; --compare URL runs the fresh SQLite store and then URL with "
            "--replicas (default 2) servers, and prints both and their ratio."
        ),
    )
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=5000, help="jobs to post in all (default: %(default)s)")
    p.add_argument("--batch", type=int, default=1, help="jobs per request (default: %(default)s)")
    p.add_argument(
        "--store",
        metavar="URL",
        help="bench this store (postgresql://..., or a file) instead of a fresh SQLite file; it must hold "
        "no job",
    )
    p.add_argument(
        "--replicas",
        type=int,
        metavar="N",
        help="`cpn serve` processes on the store, the clients spread over them in turn (default: 1; "
        "with --compare, on the compared store: 2)",
    )
    p.add_argument(
        "--compare",
        metavar="URL",
        help="also bench this empty PostgreSQL database (postgresql://...) with --replicas servers, after a "
        "fresh SQLite store with one; print both and the ratio PostgreSQL / SQLite",
    )
    p.add_argument("--json", help="write the figures as JSON here")
    p.set_defaults(func=run_bench_intake)


def _serve_command(tokens: Path, port: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from cli import main; sys.exit(main())",
        "serve",
        "--tokens-file",
        str(tokens),
        "--port",
        str(port),
        "--no-access-log",
    ]


def run_bench_intake(args: argparse.Namespace) -> int:
    """Run the load and print the figures; exit 2 on bad arguments or a store that is not empty, 1 if a
    job was lost or duplicated."""
    refusal = _refusal(args)
    if refusal:
        print(f"cpn bench intake: {refusal}", file=sys.stderr)
        return 2
    replicas = (2 if args.compare else 1) if args.replicas is None else args.replicas
    try:
        if args.compare:
            compared = _bench(args, args.compare, replicas)  # first: a store with jobs is refused at once
            results = [_bench(args, None, 1), compared]
        else:
            results = [_bench(args, args.store, replicas)]
    except (ValueError, StoreError) as exc:
        print(f"cpn bench intake: {exc}", file=sys.stderr)
        return 2
    figures = _comparison(*results, replicas) if args.compare else results[0].to_json()
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 1 if any(r.lost or r.duplicated for r in results) else 0


def _refusal(args: argparse.Namespace) -> str | None:
    """Why these options cannot run together; None: they can."""
    if args.compare and args.store:
        return "--compare URL benches a fresh SQLite store and URL: give no --store with it"
    if args.compare and not args.compare.startswith("postgresql"):
        return f"--compare {hide_password(args.compare)}: not a PostgreSQL URL (postgresql://...)"
    return None


def _bench(args: argparse.Namespace, store: str | None, replicas: int) -> IntakeBenchResult:
    return bench_intake(
        _serve_command,
        clients=args.clients,
        jobs=args.jobs,
        batch=args.batch,
        store=store,
        replicas=replicas,
        progress=lambda msg: print(msg, file=sys.stderr, flush=True),
    )


def _comparison(sqlite: IntakeBenchResult, postgresql: IntakeBenchResult, replicas: int) -> dict:
    """Both runs' figures, each with its number of servers, and PostgreSQL's jobs/s and p99 over SQLite's;
    a line of them on standard error."""
    figures = {"sqlite": {"replicas": 1} | sqlite.to_json(), "postgresql": {"replicas": replicas}}
    figures["postgresql"] |= postgresql.to_json()
    ratio = {
        key: round(figures["postgresql"][key] / figures["sqlite"][key], 3) if figures["sqlite"][key] else None
        for key in ("jobs_per_s", "p99_ms")
    }
    figures["ratio_postgresql_to_sqlite"] = ratio
    print(
        f"sqlite, 1 server: {sqlite.jobs_per_s:,} jobs/s, p99 {sqlite.p99_ms} ms; postgresql, "
        f"replicas {replicas}: {postgresql.jobs_per_s:,} jobs/s, p99 {postgresql.p99_ms} ms; "
        f"PostgreSQL / SQLite: jobs/s x{ratio['jobs_per_s']}, p99 x{ratio['p99_ms']}",
        file=sys.stderr,
    )
    return figures
