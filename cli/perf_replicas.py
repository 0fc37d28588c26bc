"""`cpn bench replicas`: two `cpn run` replicas on one PostgreSQL store, the leader SIGKILLed at random
moments; takeover times printed, the store checked for lost, twice-submitted and unfinished jobs."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from cpn.perf.replicas import TAKEOVER_LIMIT_S, bench_replicas
from cpn.store import StoreError

REPLICA_OPTIONS = ("--time-scale", "3600", "--estimates", "oracle", "--interval", "1", "--no-auth")
"""Each replica: the demo's simulated clusters, an hour of simulated time a second, the simulator's own
runtimes, a round a second."""


def register_bench(bench_sub: argparse._SubParsersAction) -> None:
    """Add `bench replicas` under `cpn bench`."""
    p = bench_sub.add_parser(
        "replicas",
        help="kill the leading `cpn run` replica again and again; time each takeover, check nothing is lost",
        description=(
            "Start two `cpn run` replicas (simulated demo clusters) on an empty PostgreSQL database with the "
            "lease's pid check off (CPN_LEASE_PID_CHECK=0, as across hosts), post --jobs generated jobs "
            "through both, SIGKILL the leader --kills times at random moments and time each takeover; "
            "then take the lease away from the leader (it must stand by), post the rest and wait for every "
            "job to end. Prints progress on standard error and the figures as JSON; exit 1 if a takeover "
            f"took over {TAKEOVER_LIMIT_S:g} s, or a job was lost, submitted twice or did not end."
        ),
    )
    p.add_argument(
        "--store", required=True, metavar="URL", help="an empty PostgreSQL database (postgresql://...)"
    )
    p.add_argument("--jobs", type=int, default=2000, help="jobs to post in all (default: %(default)s)")
    p.add_argument("--kills", type=int, default=10, help="SIGKILLs of the leader (default: %(default)s)")
    p.add_argument("--seed", type=int, default=2, help="seed of the queue and of the kill moments")
    p.add_argument(
        "--finish-timeout",
        type=float,
        default=1800.0,
        metavar="S",
        help="seconds to wait for the last jobs to end (default: %(default)s)",
    )
    p.add_argument("--json", help="write the figures as JSON here")
    p.set_defaults(func=run_bench_replicas)


def replica_command(port: int) -> list[str]:
    """`cpn run` on 127.0.0.1:`port` (its store in CPN_STORE, so that no password is on a command line)."""
    return [
        sys.executable,
        "-c",
        "import sys; from cli import main; sys.exit(main())",
        "run",
        "--port",
        str(port),
        *REPLICA_OPTIONS,
    ]


def run_bench_replicas(args: argparse.Namespace) -> int:
    """Run it and print the figures; exit 2 on bad arguments or a store that is not empty or not on a
    server, 1 if any check failed."""
    try:
        with tempfile.TemporaryDirectory(prefix="cpn-bench-replicas-") as tmp:
            result = bench_replicas(
                replica_command,
                args.store,
                Path(tmp),
                jobs=args.jobs,
                kills=args.kills,
                seed=args.seed,
                finish_timeout_s=args.finish_timeout,
                progress=lambda msg: print(msg, file=sys.stderr, flush=True),
            )
    except (ValueError, StoreError) as exc:
        print(f"cpn bench replicas: {exc}", file=sys.stderr)
        return 2
    figures = result.to_json()
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    failed = result.slow_takeovers or result.lost or result.duplicated or result.unfinished
    return 1 if failed else 0
