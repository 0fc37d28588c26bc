"""The `cpn` command line. Each sub-command lives in its own module with a `register(subparsers)`."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

COMMAND_MODULES = (
    "cli.demo",
    "cli.intake",
    "cli.tokens",
    "cli.predictor",
    "cli.bench",
    "cli.run",
    "cli.generate",
    "cli.metrics",
    "cli.migrate",
    "cli.plan",
    "cli.up",
    "cli.store",
    "cli.teams",
    "cli.benchmark",
    "cli.cluster",
)
"""Modules that add sub-commands; each adds its sub-commands."""


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every sub-command registered."""
    parser = argparse.ArgumentParser(
        prog="cpn",
        description="cpn: a wide-area scheduler for GPU jobs across Kubernetes clusters.",
        epilog="Run `cpn COMMAND --help` for a command's options. Start with `cpn demo`.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `cpn` console script; returns the exit status."""
    parser = build_parser()
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
