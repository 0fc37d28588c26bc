"""`cpn run`: the long-running service, the HTTP intake and the scheduling loop in one process."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING

from cli.intake import add_security_arguments, security_from_args
from cli.policy_options import add_policy_arguments, scheduler_policy
from config.runtime import job_store, runtime_settings
from config.settings import DEMO_DIR, ConfigError, Profile, load_profile
from cpn.bootstrap import PortWrappers, Service, build_service, service_teams
from cpn.engine.lease import holder_name
from cpn.engine.live import LiveLoop
from cpn.engine.scheduler import RoundResult
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputFormatError, ThroughputTable
from cpn.inventory import nodes_from_config
from cpn.sim.driver import Timeline
from cpn.store import StoreError
from cpn.views.team_board import TeamBoard

if TYPE_CHECKING:
    from cpn.engine.run_end import PredictedEnd
    from cpn.store import JobRecord
    from cpn.ui.capacity import Capacity

log = logging.getLogger("cpn.run")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `run` sub-command."""
    p = sub.add_parser(
        "run",
        help="run the service: HTTP intake and the scheduling loop, until stopped",
        description=(
            "Serve the job intake API and schedule queued jobs onto the configured clusters, a round every "
            "interval_s (loop.yaml) or as soon as a job arrives or a cluster event falls due. Clusters "
            "without a kube_context are simulated; --time-scale runs their time faster than the wall clock. "
            "Stop with Ctrl-C or SIGTERM: the round in progress finishes first. Starting again on the same "
            "store resumes: queued jobs stay queued, running ones are reconciled, nothing is submitted "
            "twice. The API needs bearer tokens as `cpn serve` does (docs/security.md), or --no-auth on "
            "loopback. One scheduler per store: while another process schedules a store file (its lease is "
            "renewed every round), `cpn run` refuses to start and names it; on a PostgreSQL store it starts "
            "as a standby replica instead: it serves the API, tries to take the lease every few seconds, "
            "and leads once the leader is gone (docs/service.md)."
        ),
    )
    p.add_argument("--config", default=str(DEMO_DIR), help="config folder (default: the built-in demo)")
    p.add_argument(
        "--store",
        help="job store: a file or a database URL, e.g. postgresql://USER@HOST/DB (default: $CPN_STORE, "
        "else jobs.db in $CPN_HOME, ~/.cpn by default)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="port of the HTTP API (default: %(default)s)")
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="simulated clusters run this many times faster than the wall clock (default: %(default)s)",
    )
    p.add_argument("--interval", type=float, help="seconds between rounds (default: loop.yaml's interval_s)")
    add_policy_arguments(p)
    p.add_argument(
        "--estimates",
        default="champion",
        help="runtime estimates: champion (the registered model; one is trained on the throughput table "
        "first if there is none, and the service retrains after every loop.yaml retrain_every_completions "
        "completed jobs), predictor, or the simulator's oracle or noisy:SIGMA, simulated clusters only "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--throughputs",
        default=str(GAVEL_ISOLATED),
        help="simulated clusters' ground truth, and the predictor's table (default: Gavel's)",
    )
    add_security_arguments(p)
    p.set_defaults(func=run_service)


def _on_round(result: RoundResult) -> None:
    if result.solver is not None:
        s = result.solver
        log.info(
            "t=%.0fs %s %s: objective %s, gap %s, %.3f s, %d jobs%s",
            result.time,
            s.solver,
            s.status,
            "-" if s.objective is None else f"{s.objective:.4g}",
            "-" if s.gap is None else f"{s.gap:.2%}",
            s.solve_s,
            s.jobs,
            f"; greedy's plan: {s.fallback}" if s.fallback else "",
        )
    if result.placed or result.migrating or result.rejected or result.events:
        log.info(
            "t=%.0fs events %d, started %d, migrating %d, rejected %d, refused %d, queued %d",
            result.time,
            result.events,
            result.placed,
            result.migrating,
            result.rejected,
            result.submit_refused,
            result.pending_after,
        )


def build(args: argparse.Namespace, profile: Profile, ports: PortWrappers | None = None) -> Service:
    """The service `args` and the loaded config folder describe, holding the store's scheduler lease, or, on
    a database server's store another process leads, a standby, its ports wrapped in `ports` (raises
    ThroughputFormatError, StoreError, StoreLeased naming the process that holds a store file's lease,
    ValueError)."""
    from models.sources import estimate_source

    policy = scheduler_policy(args, profile.policy)  # a bad setting fails before anything starts
    teams = service_teams(args.config, profile.clusters)  # so does a bad teams file
    table = ThroughputTable.load(args.throughputs)
    store = job_store(args.store)
    return build_service(
        profile.clusters,
        store,
        policy.settings,
        table,
        estimator=estimate_source(
            args.estimates,
            table,
            benchmarks=runtime_settings().predictor_benchmarks,
            clusters=profile.clusters,
        ),
        cpu_threshold=policy.cpu_threshold,
        time_scale=args.time_scale,
        purpose="cpn run",
        standby=True,
        teams=teams,
        ports=ports,
    )


def after_each_round(
    args: argparse.Namespace, profile: Profile, service: Service
) -> Callable[[RoundResult], None]:
    """What the loop does after each round: log it and, with champion estimates, count the completions
    towards the service's own retraining (models.learning)."""
    from models.learning import service_retraining

    every = profile.loop.retrain_every_completions
    retraining = service_retraining(service.scheduler, args.estimates, args.throughputs, every)
    if retraining is None:
        return _on_round

    def after(result: RoundResult) -> None:
        _on_round(result)
        retraining.after_round()

    return after


def before_each_round(args: argparse.Namespace, service: Service) -> Callable[[], None] | None:
    """What the loop does before each round: with champion estimates, serve the champion the alias names
    now (models.learning.ChampionFollower), so one promoted elsewhere serves from the next round."""
    from models.learning import champion_follower

    follower = champion_follower(service.scheduler, args.estimates)
    return None if follower is None else follower.before_round


def ends_of(
    service: Service, capacity: Capacity
) -> Callable[[Sequence[JobRecord]], Mapping[str, PredictedEnd]] | None:
    """Predicted ends of running jobs for the API: by the scheduler's estimate source on the GPU type of the
    node each runs on (the latest inventory); None without an estimate source."""
    from cpn.engine.run_end import running_ends

    source = service.scheduler.estimator
    if source is None:
        return None
    return lambda records: running_ends(records, source, capacity.view().node_gpu or {})


def _interval(args: argparse.Namespace, profile: Profile) -> float:
    """Seconds between rounds (checked before the service takes the store's lease)."""
    if args.interval is not None and args.interval <= 0:
        raise ValueError(f"--interval must be a positive number of seconds, not {args.interval:g}")
    return args.interval or profile.loop.interval_s


def wall_of(timeline: Timeline) -> Callable[[float], float]:
    """Simulated time -> the wall-clock time it falls on, by a live simulation's timeline (the web UI
    shows both)."""
    return lambda t: timeline.wall_anchor + (t - timeline.sim_anchor) / timeline.scale


def run_service(args: argparse.Namespace) -> int:
    """Run until SIGINT/SIGTERM, leading the store's scheduling or standing by while another replica does
    (a leader that loses the lease stands by again, LiveLoop.serve); exit 2 on bad configuration or while
    another process schedules a store file."""
    import uvicorn

    from cpn.api import create_app
    from cpn.clock import SimClock
    from cpn.engine.live_load import MeasuredLoad
    from cpn.telemetry import PortCounts, Telemetry
    from cpn.ui.capacity import Capacity
    from cpn.ui.pages import mount_ui

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        security = security_from_args(args)
        profile = load_profile(args.config)
        interval = _interval(args, profile)
        counts = PortCounts()  # submissions and copies, counted at the ports the service is built with
        service = build(args, profile, counts)
        capacity = Capacity(service.scheduler.cpu_threshold)
        after = after_each_round(args, profile, service)
        telemetry = Telemetry(service.store, holder_name(service.purpose), counts)
        load = service.scheduler.node_load
        health = load.health if isinstance(load, MeasuredLoad) else None

        def after_and_record(result: RoundResult) -> None:
            after(result)  # then the inventory for the web UI's clusters page, on the loop's own thread
            transfers = service.scheduler.transfers
            capacity.record(
                service.gateway.every_node(),
                service.clock.now(),
                load.latest if isinstance(load, MeasuredLoad) else None,
                transfers.learned() if transfers is not None else None,
                service.gateway.cordoned,
                service.scheduler.queue.pending(),
            )
            view = capacity.view()
            telemetry.after_round(result, view.counts, health, view.cordoned)  # what /metrics serves

        loop = LiveLoop(
            service.scheduler,
            interval,
            simulation=service.driver,
            on_round=after_and_record,
            before_round=before_each_round(args, service),
        )
        teams = service.scheduler.teams
        board = None if teams is None else TeamBoard(teams, nodes_from_config(service.clusters))
    except (ConfigError, ThroughputFormatError, StoreError, ValueError, FileNotFoundError) as exc:
        print(f"cpn run: {exc}", file=sys.stderr)
        return 2
    try:
        if service.leads:  # reconciled before the API serves
            service.start()
        server = uvicorn.Server(
            uvicorn.Config(
                mount_ui(
                    create_app(
                        service.store,
                        security=security,
                        metrics=telemetry.registry,
                        logs=service.gateway.logs,
                        clock="simulated" if isinstance(service.clock, SimClock) else "wall",
                        leader=lambda: service.leads,
                        teams=board,
                        running_ends=ends_of(service, capacity),
                    ),
                    service.store,
                    security,
                    capacity.view,
                    service.clock.now,
                    logs=service.gateway.logs,
                    estimates=service.scheduler.estimator,
                    teams=board,
                    wall_of=None if service.driver is None else wall_of(service.driver.timeline),
                ),
                host=args.host,
                port=args.port,
                log_level="warning",
            )
        )
        http = threading.Thread(target=server.run, name="http", daemon=True)
        http.start()
        while not server.started and http.is_alive():
            time.sleep(0.05)
        if not http.is_alive():
            print(f"cpn run: the HTTP API could not start on {args.host}:{args.port}", file=sys.stderr)
            return 2

        def stop(signum: int, frame: FrameType | None) -> None:
            log.info("%s: finishing the round in progress, then stopping", signal.Signals(signum).name)
            loop.stop()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        scale = f", simulated time x{args.time_scale:g}" if service.driver is not None else ""
        print(
            f"cpn run: {len(service.gateway.clusters)} clusters, {service.total_gpus} GPUs, policy "
            f"{service.scheduler.policy.name}{scale}; API on http://{args.host}:{args.port} "
            f"(store {service.store.path}); Ctrl-C stops",
            flush=True,
        )
        stats = loop.serve(service)
        server.should_exit = True
        http.join(timeout=10)
    finally:
        service.close()
    print(f"cpn run: stopped after {stats.rounds} rounds, {stats.placed} jobs started", flush=True)
    return 0
