"""`cpn demo`: the end-to-end pipeline on the built-in simulated clusters."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cli.policy_options import add_policy_arguments, scheduler_policy
from config.policies import parse_overrides
from config.settings import DEMO_DIR, ConfigError, load_profile
from config.tracking import DEFAULT_TRACKING_URI


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `demo` sub-command."""
    p = sub.add_parser(
        "demo",
        help="run the whole pipeline on simulated clusters (no cluster needed)",
        description=(
            "Generate a queue of jobs, submit them through intake, schedule them round by round on "
            "three simulated clusters until the queue drains, and write a report: summary.json "
            "(jobs done/failed/OOM, makespan, JCT, waits, GPU utilisation) and gantt.png. Runs as a "
            "Prefect flow on $PREFECT_API_URL if set, else on a local Prefect API it starts and stops."
        ),
    )
    p.add_argument("--out", default="out/demo", help="output folder (default: %(default)s)")
    p.add_argument(
        "--config", default=str(DEMO_DIR), help="config folder (default: the built-in demo profile)"
    )
    add_policy_arguments(p)
    p.add_argument("--jobs", type=int, help="number of generated jobs (default: the profile's)")
    p.add_argument("--seed", type=int, help="seed of the generated queue (default: the profile's)")
    p.add_argument(
        "--estimates",
        choices=("oracle", "predictor", "champion"),
        default="oracle",
        help="runtimes the policy sees: the simulator's truth, a random forest trained now on the "
        "throughput table less one model of the queue (demo.yaml held_out_model), whose jobs explore "
        "and which is retrained on the completed runs after the rounds, or the MLflow champion "
        "(`cpn predictor train` first) (default: %(default)s)",
    )
    p.add_argument(
        "--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow store for --estimates champion"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo flow; exit 2 on invalid config.

    Without $PREFECT_API_URL the flow runs against a Prefect API server this command starts and
    supervises (cpn.processes): stopping the demo in any way, `kill -9` included, stops it too.
    """
    from cli.up import TELEMETRY_OFF, free_port, prefect_server_argv
    from cpn.processes import ServiceFailed, Stopped, Supervisor, stop_on_signals

    try:  # a bad setting fails before any server starts
        scheduler_policy(args, load_profile(args.config).policy)
    except (ConfigError, ValueError) as exc:
        print(f"cpn demo: invalid config: {exc}", file=sys.stderr)
        return 2
    for key, value in TELEMETRY_OFF.items():
        os.environ.setdefault(key, value)
    try:
        with stop_on_signals(), Supervisor(grace_s=5) as sup:
            if os.environ.get("PREFECT_API_URL"):
                return _run_flow(args)
            port = free_port()
            log_path = Path(args.out) / "prefect-api.log"
            server = sup.start("prefect-api", prefect_server_argv(port, ui=False), log_path=log_path)
            sup.wait_ready(server, f"http://127.0.0.1:{port}/api/health", timeout_s=300)
            from prefect.settings import PREFECT_API_URL, temporary_settings

            with temporary_settings(updates={PREFECT_API_URL: f"http://127.0.0.1:{port}/api"}):
                try:
                    return _run_flow(args)
                finally:
                    _send_pending_logs_and_events()
    except ServiceFailed as exc:
        print(f"cpn demo: {exc}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, Stopped):
        print("cpn demo: stopped", file=sys.stderr)
        return 130


def _send_pending_logs_and_events(timeout_s: float = 10) -> None:
    """Let Prefect's background workers send what they hold while the API server still runs."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=timeout_s)
    EventsWorker.drain_all(timeout=timeout_s)


def _run_flow(args: argparse.Namespace) -> int:
    from flows.demo import demo

    try:
        demo(
            config_dir=args.config,
            out=args.out,
            policy=args.policy,
            settings=parse_overrides(args.set),
            jobs=args.jobs,
            seed=args.seed,
            estimates=args.estimates,
            tracking_uri=args.tracking_uri,
        )
    except ConfigError as exc:
        print(f"cpn demo: invalid config: {exc}")
        return 2
    return 0
