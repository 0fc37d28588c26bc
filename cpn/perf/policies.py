"""`cpn bench policies`: replay one trace under several policies on simulated clusters and compare.

Each policy runs through the production Scheduler and the replay driver, on a
fresh in-memory job store and fresh simulated clusters, so the figures are
those the live service would record.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from config.policies import (
    DEFAULT_CPU_THRESHOLD,
    POLICY_NAMES,
    PolicySettings,
    cpu_threshold_of,
    policy_settings,
    run_name,
    setting_keys,
)
from config.settings import DATA_DIR, ClustersConfig, load_model
from config.teams import load_teams
from cpn.bootstrap import build_simulation
from cpn.decisions import Teams
from cpn.engine.scheduler import EstimateSource, RoundResult
from cpn.formats.gavel_trace import load_gavel_trace
from cpn.formats.throughput import ThroughputTable
from cpn.formats.trace_csv import load_trace_csv
from cpn.inventory import nodes_from_config
from cpn.jobs import FINISHED, JobSpec, JobState
from cpn.perf.bound import LowerBound, lower_bound
from cpn.perf.progress import ReplayProgress
from cpn.perf.recorder import RecordingPolicy, solver_summary, start_errors
from cpn.perf.report import JobTimeline, busy_of, copies_per_job, summarize, timelines
from cpn.perf.teams import team_figures, work_figures
from cpn.policies import make_policy
from cpn.policies.teams import teams_of
from cpn.sim.estimates import OracleEstimates
from cpn.sim.gateway import Execution
from cpn.sim.replay import arrivals_from_jobs, replay

PEER_FIGURES = DATA_DIR / "gavel" / "peer_figures.csv"
"""Gavel's own simulator's figures on the peer traces (data/gavel/peer/README.md)."""


@dataclass(frozen=True)
class PolicyRun:
    """One policy's replay of the trace."""

    name: str
    summary: dict
    timelines: tuple[JobTimeline, ...]
    executions: tuple[Execution, ...]
    settings: PolicySettings | None = None


@dataclass(frozen=True)
class PeerFigure:
    """A published or measured figure of another scheduler on the same trace."""

    policy: str
    jct_h: float
    makespan_h: float | None
    jct_jobs: tuple[int, int] | None
    """Mean JCT is over jobs first..last in arrival order (0-based, inclusive); None = all jobs."""


@dataclass
class BenchResult:
    """Everything `cpn bench policies` reports."""

    trace: str
    jobs: int
    total_gpus: int
    lower_bound: LowerBound
    runs: list[PolicyRun] = field(default_factory=list)
    peer: list[PeerFigure] = field(default_factory=list)
    teams: Teams | None = None
    """The teams the policies shared the cards among (`--teams`), if any."""


def load_jobs(path: Path | str) -> list[JobSpec]:
    """A trace CSV, a Gavel `.trace` file, or a folder of `.trace` files (one per virtual cluster)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.trace"))
        if not files:
            raise ValueError(f"{path}: no .trace files in this folder")
        jobs = [job for f in files for job in load_gavel_trace(f)]
    elif path.suffix == ".trace":
        jobs = load_gavel_trace(path)
    else:
        jobs = load_trace_csv(path)
    return sorted(jobs, key=lambda j: j.arrival_s)


def run_policy(
    settings: PolicySettings,
    jobs: Sequence[JobSpec],
    clusters: ClustersConfig,
    table: ThroughputTable,
    estimator: EstimateSource,
    cpu_threshold: float = DEFAULT_CPU_THRESHOLD,
    teams: Teams | None = None,
    forecast: bool = True,
    watch: ReplayProgress | None = None,
) -> PolicyRun:
    """Replay `jobs` under the policy `settings` name on fresh simulated clusters; returns its figures,
    with the median error of its predicted starts and its solver's rounds (cpn.perf.recorder), and with
    `teams`, the policy ordering and limiting by them and the teams' figures (cpn.perf.teams).
    `forecast` False replays without the forward look (as plain replays run): the engine's own cost, and
    predicted starts only where the policy's own plan gives them. `watch` is told of every round, and
    asks how many jobs finished when it reports. The summary has the replay's wall and CPU seconds and,
    in `stage_wall`, the wall seconds its rounds spent in each stage (RoundResult.stage_s): where a replay's
    time goes."""
    recorder = RecordingPolicy(make_policy(settings))
    sim = build_simulation(
        clusters,
        ":memory:",
        recorder,
        table,
        cpu_threshold,
        estimator,
        teams=teams,
        on_decision=recorder.observe,
        forecast=forecast,
    )
    forecaster = sim.scheduler.forecaster
    stage_s: dict[str, float] = {}

    def finished() -> int:
        return sum(n for state, n in sim.store.counts().items() if state in FINISHED)

    def on_round(result: RoundResult) -> None:
        for stage, seconds in result.stage_s:
            stage_s[stage] = stage_s.get(stage, 0.0) + seconds
        if watch is not None:
            watch.tick(finished)

    started, cpu = time.perf_counter(), time.process_time()
    replay(sim.scheduler, sim.simulator, sim.clock, arrivals_from_jobs(jobs), on_round, migrator=sim.migrator)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    if watch is not None:
        watch.close()
    lines = tuple(timelines(sim.store))
    summary = summarize(lines, busy_of(sim.simulator.executions), sim.total_gpus, sim.migrator.total_s)
    summary["sim_wall_s"], summary["sim_cpu_s"], summary["stage_wall"] = wall, cpu, stage_s
    if forecaster is not None:
        summary["forecast_s"], summary["forecast_looks"] = forecaster.spent_s, forecaster.looks
    summary.update(start_errors(recorder, lines).as_summary())
    summary.update(copies_per_job(lines))
    summary.update(solver_summary(recorder.solver_rounds))
    summary.update(work_figures(sim.simulator.executions, sim.simulator.preempted))
    if teams is not None:
        summary.update(team_figures(teams, lines, sim.simulator.executions))
    sim.store.close()
    return PolicyRun(run_name(settings), summary, lines, tuple(sim.simulator.executions), settings)


def policy_runs(policies: Sequence[str], overrides: dict[str, str]) -> tuple[list[PolicySettings], float]:
    """Each policy's settings with the `--set` overrides it takes, and the CPU threshold (a scheduler
    setting, `cpu_threshold`). ValueError naming a key no listed policy takes."""
    overrides = dict(overrides)
    cpu = overrides.pop("cpu_threshold", None)
    cpu_threshold = cpu_threshold_of(cpu, "--set cpu_threshold") if cpu is not None else DEFAULT_CPU_THRESHOLD
    settings = []
    used: set[str] = set()
    for name in policies:
        keys = set(setting_keys(name)) if name in POLICY_NAMES else set()
        mine = {k: v for k, v in overrides.items() if k in keys}
        used |= set(mine)
        settings.append(policy_settings(name, **mine))
    unknown = sorted(set(overrides) - used)
    if unknown:
        known = sorted({k for name in policies for k in setting_keys(name)} | {"cpu_threshold"})
        raise ValueError(
            f"--set {', '.join(unknown)}: no listed policy has such a setting; known: {', '.join(known)}"
        )
    return settings, cpu_threshold


def peer_figures(trace: Path | str, path: Path = PEER_FIGURES) -> list[PeerFigure]:
    """Gavel's figures for a trace of the same name, if any."""
    stem = Path(trace).stem
    out = []
    with path.open(newline="") as fh:
        for row in csv.DictReader(line for line in fh if not line.startswith("#")):
            if row["trace"] != stem:
                continue
            window = None
            if row["jct_jobs"] != "all":
                first, last = row["jct_jobs"].split("-")
                window = (int(first), int(last))
            makespan = float(row["makespan_h"]) if row["makespan_h"] else None
            out.append(PeerFigure(row["gavel_policy"], float(row["jct_h"]), makespan, window))
    return out


def mean_jct_in_window(run: PolicyRun, window: tuple[int, int] | None) -> float | None:
    """Mean JCT (s) over jobs first..last in arrival order, the way the peer averaged it."""
    ordered = sorted(run.timelines, key=lambda t: (t.queued_at, t.job_id))
    if window is not None:
        ordered = ordered[window[0] : window[1] + 1]
    jcts = [t.ended_at - t.queued_at for t in ordered if t.state == JobState.SUCCEEDED]
    return sum(jcts) / len(jcts) if jcts else None


def bench_policies(
    clusters_path: Path | str,
    throughputs_path: Path | str,
    trace_path: Path | str,
    policies: Sequence[str],
    progress: Callable[[str], None] = print,
    estimator_for: Callable[[ThroughputTable], EstimateSource] = OracleEstimates,
    limit: int | None = None,
    overrides: dict[str, str] | None = None,
    teams_path: Path | str | None = None,
    forecast: bool = True,
    watch_for: Callable[[str, int], ReplayProgress] | None = None,
) -> BenchResult:
    """Replay one trace under each policy; figures, lower bound and peer figures in one result.

    `estimator_for` gives each policy's run its estimate source from the table (default: the oracle;
    the command line asks models.sources for the one `--estimates` names);
    `limit` keeps only the first jobs by arrival (a cut of a long trace); `overrides` are `--set`
    pairs, each given to the listed policies that have such a setting (`cpu_threshold` to the
    scheduler, replacing `cpu_threshold`); `teams_path` a teams file (config.teams) the policies order and
    limit by, and whose figures each run reports; `forecast` False replays without the forward look;
    `watch_for` (a policy's run name, the jobs replayed) gives what reports each replay's progress.
    """
    settings, cpu_threshold = policy_runs(policies, overrides or {})
    teams = teams_of(load_teams(teams_path)) if teams_path is not None else None
    clusters = load_model(clusters_path, ClustersConfig)
    table = ThroughputTable.load(throughputs_path)
    jobs = load_jobs(trace_path)[:limit]
    nodes = nodes_from_config(clusters)
    oracle = OracleEstimates(table)
    result = BenchResult(
        trace=str(trace_path),
        jobs=len(jobs),
        total_gpus=sum(n.gpu_count for n in nodes),
        lower_bound=lower_bound(jobs, nodes, oracle),
        peer=peer_figures(trace_path),
        teams=teams,
    )
    progress(f"{len(jobs):,} jobs on {result.total_gpus} GPUs in {len(clusters.clusters)} clusters")
    for policy in settings:
        progress(f"replaying under {run_name(policy)} ...")
        watch = None if watch_for is None else watch_for(run_name(policy), len(jobs))
        estimator = estimator_for(table)
        run = run_policy(policy, jobs, clusters, table, estimator, cpu_threshold, teams, forecast, watch)
        progress(
            f"  {run.name}: {run.summary['succeeded']} succeeded, {run.summary['unfinished']} unfinished, "
            f"in {run.summary['sim_wall_s']:.1f} s"
        )
        result.runs.append(run)
    return result
