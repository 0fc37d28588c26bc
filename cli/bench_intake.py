"""`cpn bench intake`: load on the HTTP intake of a real `cpn serve`, with the store checked afterwards."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cpn.bench.intake import bench_intake


def register_bench(bench_sub: argparse._SubParsersAction) -> None:
    """Add `bench intake` under `cpn bench`."""
    p = bench_sub.add_parser(
        "intake",
        help="post N jobs from C clients to a real `cpn serve` on loopback; check nothing is lost",
        description=(
            "Start `cpn serve` (uvicorn) on a fresh store with a fresh token in a subprocess, post --jobs "
            "generated Jobs in batches of --batch from --clients keep-alive clients, then check the store: "
            "every acknowledged job stored once. Prints (and with --json writes) jobs_per_s, p99_ms, "
            "acknowledged, stored, lost, duplicated."
        ),
    )
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (default: %(default)s)")
    p.add_argument("--jobs", type=int, default=5000, help="jobs to post in all (default: %(default)s)")
    p.add_argument("--batch", type=int, default=1, help="jobs per request (default: %(default)s)")
    p.add_argument("--json", help="write the figures as JSON here")
    p.set_defaults(func=run_bench_intake)


def _serve_command(store: Path, tokens: Path, port: int) -> list[str]:
    return [
        sys.executable,
        "-c",
        "import sys; from cli import main; sys.exit(main())",
        "serve",
        "--store",
        str(store),
        "--tokens-file",
        str(tokens),
        "--port",
        str(port),
        "--no-access-log",
    ]


def run_bench_intake(args: argparse.Namespace) -> int:
    """Run the load and print the figures; exit 2 on bad arguments, 1 if a job was lost or duplicated."""
    try:
        result = bench_intake(
            _serve_command,
            clients=args.clients,
            jobs=args.jobs,
            batch=args.batch,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
    except ValueError as exc:
        print(f"cpn bench intake: {exc}", file=sys.stderr)
        return 2
    figures = result.to_json()
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 1 if result.lost or result.duplicated else 0
