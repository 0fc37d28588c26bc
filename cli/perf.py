"""`cpn bench ...`: benchmarks that print measured figures."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from config.policies import parse_overrides, policy_settings
from config.settings import ClustersConfig, ConfigError, load_model
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputFormatError, ThroughputTable
from cpn.formats.trace_csv import TraceFormatError
from cpn.policies import POLICIES


def register(sub: argparse._SubParsersAction) -> None:
    """Add `bench` and its sub-commands."""
    bench = sub.add_parser(
        "bench", help="benchmarks: policies on a trace, solver rounds, the predictor's accuracy, intake load"
    )
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCHMARK", required=True)
    p = bench_sub.add_parser(
        "policies",
        help="replay one job trace under several policies on simulated clusters",
        description=(
            "Replay a job trace under each policy on simulated clusters built from a cluster description, "
            "with ground truth from a throughput table, and compare completion times, waits, makespan "
            "(also as a ratio to a lower bound), OOMs and GPU utilisation. Formats: docs/formats.md."
        ),
    )
    p.add_argument(
        "--clusters", required=True, help="cluster description YAML (e.g. config/demo/clusters.yaml)"
    )
    p.add_argument(
        "--throughputs",
        default=str(GAVEL_ISOLATED),
        help="throughput table CSV (default: Gavel's measured one)",
    )
    p.add_argument("--trace", required=True, help="job trace: CSV, Gavel .trace, or a folder of .trace files")
    p.add_argument(
        "--policies",
        default="fifo-naive,fifo,sjf,greedy",
        help=f"comma-separated, from: {', '.join(POLICIES)}",
    )
    p.add_argument("--limit", type=int, help="replay only the first N jobs by arrival (a cut)")
    p.add_argument("--seed", type=int, default=0, help="seed for noisy estimates (default: %(default)s)")
    p.add_argument(
        "--estimates",
        default="oracle",
        help="runtime estimates the policies see: oracle (ground truth), noisy:SIGMA (ground truth x "
        "log-normal error), or predictor (the random forest trained on --throughputs) (default: %(default)s)",
    )
    p.add_argument(
        "--benchmarks",
        help="benchmark scores and specs per GPU type for --estimates predictor, for GPU types cpn does not "
        "ship scores for (default: config/benchmarks.yaml; format: docs/predictor.md)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a policy setting, given to every listed policy that has it (repeatable): e.g. "
        "objective=makespan, solver=cbc, time_limit_s=2, reservation=false, window=200 (milp; all in "
        "docs/optimiser.md); preemption=true, rebalance=true, makespan_slack=0.01 (every policy; "
        "docs/teams.md); or cpu_threshold=0.8 (the scheduler's node CPU cap, default 0.7)",
    )
    p.add_argument(
        "--teams",
        help="teams file (format: docs/teams.md): the policies share the cards among teams by it, and each "
        "run reports the teams' shares, waits and fairness error",
    )
    p.add_argument(
        "--no-forecast",
        action="store_true",
        help="replay without the forward look (the engine's own cost; predicted starts only where a policy's "
        "own plan gives them, as the milp's)",
    )
    p.add_argument("--json", help="write the figures as JSON here")
    p.add_argument("--plots", help="write JCT CDF, utilisation and per-cluster Gantt PNGs to this folder")
    p.set_defaults(func=run_policies)
    s = bench_sub.add_parser(
        "solver",
        help="time an optimising policy's rounds on generated queues",
        description=(
            "Generate a queue of --jobs jobs on --gpus cards (three sites: K80, P100, V100, 8-card nodes), "
            "run --rounds scheduling rounds on simulated clusters, topping the queue up after each, and "
            "report the median and max time of a round's decision and the rounds that fell back to "
            "greedy's plan."
        ),
    )
    s.add_argument("--jobs", type=int, required=True, help="jobs kept queued")
    s.add_argument("--gpus", type=int, required=True, help="cards in the generated clusters")
    s.add_argument("--rounds", type=int, default=10, help="rounds to time (default: %(default)s)")
    s.add_argument("--policy", default="milp", help=f"one of {', '.join(POLICIES)} (default: %(default)s)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a policy setting")
    s.add_argument("--seed", type=int, default=0, help="queue generator seed (default: %(default)s)")
    s.add_argument(
        "--throughputs", default=str(GAVEL_ISOLATED), help="throughput table CSV (default: Gavel's)"
    )
    s.add_argument("--json", help="write the figures as JSON here")
    s.set_defaults(func=run_solver)
    sc = bench_sub.add_parser(
        "scale",
        help="how a replay's cost grows with the jobs replayed: generated queues of two or more sizes",
        description=(
            "Replay generated queues of each --jobs size under one policy on simulated clusters, jobs "
            "arriving --gap-s seconds apart on average (the same load for longer), and print each "
            "replay's wall and CPU time and the ratio of the largest size's to the smallest's."
        ),
    )
    sc.add_argument("--clusters", required=True, help="cluster description YAML")
    sc.add_argument(
        "--jobs", default="10000,100000", help="comma-separated queue sizes (default: %(default)s)"
    )
    sc.add_argument("--policy", default="greedy", help=f"one of {', '.join(POLICIES)} (default: %(default)s)")
    sc.add_argument(
        "--gap-s",
        type=float,
        default=180.0,
        help="mean seconds between arrivals (default: %(default)s, about what the generated jobs keep 240 "
        "GPUs busy with)",
    )
    sc.add_argument("--seed", type=int, default=0, help="queue generator seed (default: %(default)s)")
    sc.add_argument(
        "--throughputs", default=str(GAVEL_ISOLATED), help="throughput table CSV (default: Gavel's)"
    )
    sc.set_defaults(func=run_scale)
    g = bench_sub.add_parser(
        "gateway",
        help="API calls per job of the Kubernetes gateway's live path, against a fake API server",
        description=(
            "Start a fake Kubernetes API server holding --nodes GPU nodes and --pods pods of other users, "
            "start the Kubernetes gateway on it, submit --jobs one-card jobs and wait until its watches "
            "report them all running; print the API calls and listed objects per job after the warm-up "
            "(as the fake counted them) and the wall time."
        ),
    )
    g.add_argument("--nodes", type=int, default=1000, help="GPU nodes (default: %(default)s)")
    g.add_argument("--pods", type=int, default=10000, help="other users' pods (default: %(default)s)")
    g.add_argument("--jobs", type=int, default=1000, help="jobs submitted (default: %(default)s)")
    g.set_defaults(func=run_gateway)
    from cli.perf_intake import register_bench as register_intake_bench

    register_intake_bench(bench_sub)
    from cli.perf_replicas import register_bench as register_replicas_bench

    register_replicas_bench(bench_sub)
    from cli.predictor import register_bench

    register_bench(bench_sub)


def _estimator_for(args: argparse.Namespace):
    """Each replay's estimate source, as `--estimates` names it (models.sources): a trained predictor is
    trained once and shared; an oracle, noisy or not, is made afresh (the same seed) for each policy."""
    from models.sources import estimate_source

    def make(table: ThroughputTable):
        return estimate_source(args.estimates, table, seed=args.seed, benchmarks=args.benchmarks)

    if args.estimates in ("predictor", "champion"):
        print(f"loading the {args.estimates} estimates ...", file=sys.stderr, flush=True)
        shared = make(ThroughputTable.load(args.throughputs))
        return lambda table: shared
    make(ThroughputTable.load(args.throughputs))  # a bad --estimates fails before any replay
    return make


def run_solver(args: argparse.Namespace) -> int:
    """Time the policy's rounds; exit 2 on bad input."""
    from cpn.perf.solver import bench_solver

    try:
        if args.jobs < 1 or args.gpus < 1 or args.rounds < 1:
            raise ValueError("--jobs, --gpus and --rounds must be at least 1")
        settings = policy_settings(args.policy, **parse_overrides(args.set))
        result = bench_solver(
            settings, args.jobs, args.gpus, ThroughputTable.load(args.throughputs), args.rounds, args.seed
        )
    except (ThroughputFormatError, ValueError, FileNotFoundError) as exc:
        print(f"cpn bench solver: {exc}", file=sys.stderr)
        return 2
    out = result.to_json()
    print(
        f"{args.policy}: {out['jobs']:,} queued jobs on {out['gpus']:,} GPUs, {out['rounds']} rounds: median "
        f"{out['median_s']:.3f} s, max {out['max_s']:.3f} s, {out['fallbacks']} on greedy's plan; "
        f"forward look median {out['forecast_median_s']:.3f} s (CPU {out['forecast_cpu_median_s']:.3f} s), "
        f"max {out['forecast_max_s']:.3f} s"
    )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def run_scale(args: argparse.Namespace) -> int:
    """Replay generated queues of each size and print their times; exit 2 on bad input."""
    from cpn.perf.scale import bench_scale

    try:
        sizes = [int(n) for n in args.jobs.split(",") if n.strip()]
    except ValueError:
        print(f"cpn bench scale: --jobs {args.jobs}: give comma-separated whole numbers", file=sys.stderr)
        return 2
    try:
        runs = bench_scale(
            policy_settings(args.policy),
            sizes,
            load_model(args.clusters, ClustersConfig),
            ThroughputTable.load(args.throughputs),
            seed=args.seed,
            gap_s=args.gap_s,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
    except (ConfigError, ThroughputFormatError, ValueError, FileNotFoundError) as exc:
        print(f"cpn bench scale: {exc}", file=sys.stderr)
        return 2
    for run in runs:
        jct = "-" if run.mean_jct_s is None else f"{run.mean_jct_s / 3600:.2f} h"
        print(
            f"{args.policy}: {run.jobs:,} jobs: wall {run.wall_s:.1f} s, CPU {run.cpu_s:.1f} s; "
            f"makespan {run.makespan_s / 3600:.1f} h, mean JCT {jct}"
        )
    if len(runs) > 1:
        small, large = min(runs, key=lambda r: r.jobs), max(runs, key=lambda r: r.jobs)
        print(
            f"{large.jobs:,} vs {small.jobs:,} jobs ({large.jobs / small.jobs:g}x): wall "
            f"{large.wall_s / small.wall_s:.2f}x, CPU {large.cpu_s / small.cpu_s:.2f}x"
        )
    return 0


def run_policies(args: argparse.Namespace) -> int:
    """Run the policy benchmark; exit 2 on bad input."""
    from cpn.perf.policies import bench_policies
    from cpn.perf.policies_report import format_table, to_json, write_plots
    from cpn.perf.progress import ReplayProgress

    def to_stderr(text: str) -> None:
        sys.stderr.write(text)
        sys.stderr.flush()

    tty = sys.stderr.isatty()

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    try:
        if args.benchmarks and args.estimates != "predictor":
            raise ValueError("--benchmarks is for --estimates predictor")
        result = bench_policies(
            args.clusters,
            args.throughputs,
            args.trace,
            policies,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
            estimator_for=_estimator_for(args),
            limit=args.limit,
            overrides=parse_overrides(args.set),
            teams_path=args.teams,
            forecast=not args.no_forecast,
            watch_for=lambda name, total: ReplayProgress(name, total, to_stderr, tty),
        )
    except (ConfigError, ThroughputFormatError, TraceFormatError, ValueError, FileNotFoundError) as exc:
        print(f"cpn bench policies: {exc}", file=sys.stderr)
        return 2
    print(format_table(result))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(to_json(result), indent=2) + "\n")
        print(f"wrote {args.json}")
    if args.plots:
        written = write_plots(result, args.clusters, args.plots)
        print(f"wrote {len(written)} plots to {args.plots}")
    return 0


def run_gateway(args: argparse.Namespace) -> int:
    """Run `cpn bench gateway` and print its figures."""
    from cpn.perf.gateway import bench_gateway

    for name in ("nodes", "pods", "jobs"):
        if getattr(args, name) < (0 if name == "pods" else 1):
            print(f"cpn bench gateway: --{name} must be positive", file=sys.stderr)
            return 2
    try:
        f = bench_gateway(args.nodes, args.pods, args.jobs)
    except (ValueError, TimeoutError) as exc:
        print(f"cpn bench gateway: {exc}", file=sys.stderr)
        return 1
    print(f"{f.jobs} jobs on {f.nodes} nodes with {f.pods} other pods")
    print(f"warm-up: {f.warmup_calls} calls, {f.warmup_listed} objects listed, {f.warmup_s:.2f} s")
    print(f"after it: {f.calls_per_job:.3f} API calls per job, {f.listed_per_job:.3f} objects listed per job")
    for call, n in f.calls.items():
        print(f"  {call}: {n}")
    print(f"  watch (re)opens: {f.watch_opens}")
    print(f"submitting: {f.submit_s:.2f} s; until all reported running: {f.running_s:.2f} s")
    return 0
