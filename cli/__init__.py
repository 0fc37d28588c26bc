"""The `cpn` command line. Each sub-command lives in its own module with a `register(subparsers)`."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Iterable

COMMANDS = {
    "demo": "cli.demo",
    "submit": "cli.intake",
    "jobs": "cli.intake",
    "job": "cli.intake",
    "serve": "cli.intake",
    "token": "cli.tokens",
    "predictor": "cli.predictor",
    "bench": "cli.perf",
    "run": "cli.run",
    "generate": "cli.generate",
    "metrics": "cli.metrics",
    "migrate": "cli.migrate",
    "plan": "cli.plan",
    "up": "cli.up",
    "store": "cli.store",
    "teams": "cli.teams",
    "benchmark": "cli.benchmark",
    "cluster": "cli.cluster",
}
"""Each sub-command and the module that adds it (`register(subparsers)`), in `cpn --help`'s order. A command
imports only its own module: `cpn jobs` need not load what `cpn up` or the predictor import."""


def build_parser(modules: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with the sub-commands of `modules` (default: every one) registered."""
    parser = argparse.ArgumentParser(
        prog="cpn",
        description="cpn: a wide-area scheduler for GPU jobs across Kubernetes clusters.",
        epilog="Run `cpn COMMAND --help` for a command's options. Start with `cpn demo`.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in dict.fromkeys(COMMANDS.values()) if modules is None else modules:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `cpn` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    module = COMMANDS.get(argv[0]) if argv else None
    parser = build_parser(None if module is None else [module])  # `cpn`, `cpn --help`: every command
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`cpn jobs | head`): stop quietly, as a shell command cut off by a pipe does;
        # stdout goes to /dev/null so that the interpreter's last flush does not fail again (ValueError:
        # a stdout with no file, io.UnsupportedOperation).
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
