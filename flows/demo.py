"""The end-to-end demo: the pipeline's stages on simulated clusters, from intake to retraining.

collect-metrics (the clusters' Prometheus) -> generated manifests through intake -> (predictor estimates:
ingest-benchmarks, the GPU scores) -> estimates ->
scheduling rounds driven by the replay (cpn.sim.replay), each stage of a round a task of the
schedule-round flow (flows.schedule.run_round: collect, track-completions, cancel, snapshot-and-estimates,
optimise, publish-decisions, assign, migrate, submit, record-waiting) -> completion feedback -> with
predictor estimates, retrain-predictor on the measured runs -> report.
"""

from __future__ import annotations

import json
import shutil
from logging import Logger
from pathlib import Path

from prefect import flow, get_run_logger

from config.benchmarks import BENCHMARKS_YAML
from config.policies import run_name
from config.runtime import runtime_settings, sqlite_uri
from config.settings import DEMO_DIR
from cpn.bootstrap import build_simulation, service_teams
from cpn.engine.explore import RuntimeCheck, held_out_model, table_without
from cpn.engine.scheduler import Scheduler
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.perf.report import format_summary
from cpn.sim.estimates import OracleEstimates
from cpn.sim.replay import arrivals_from_jobs, replay
from flows.benchmarks import ingest_benchmarks
from flows.metrics import collect_metrics
from flows.schedule import run_round
from tasks.config import load_settings
from tasks.intake import accept_manifests, generate_manifests
from tasks.predictor import (
    check_runtimes,
    collect_completions,
    estimate_source,
    load_champion,
    retrain_predictor,
)
from tasks.report import publish_retraining, write_report

DEMO_ESTIMATORS = ("rf",)
"""What the demo retrains: the default random forest only, and no cross-validated splits logged. XGBoost and
the splits (what the retrain deployment logs) would each add several more fits to the demo."""


class Rounds:
    """The replay's round: at most once per `every_s` simulated seconds, each stage a task of the
    schedule-round flow (run_round); in between, the same stages in one call (Scheduler.round)."""

    def __init__(self, scheduler: Scheduler, every_s: float, logger: Logger) -> None:
        self.scheduler = scheduler
        self.every_s = every_s
        self.logger = logger
        self.as_tasks = 0
        """Rounds run as stage tasks so far."""
        self.in_one_call = 0
        """Rounds run by Scheduler.round so far."""
        self._next_at = float("-inf")

    def __call__(self) -> None:
        now = self.scheduler.clock.now()
        if now >= self._next_at:
            self._next_at = now + self.every_s
            self.as_tasks += 1
            result = run_round(self.scheduler)
        else:
            self.in_one_call += 1
            result = self.scheduler.round()
        if result.decided or result.rejected:
            self.logger.info(
                "t=%8.0fs placed %d, rejected %d, still queued %d",
                now,
                result.decided,
                result.rejected,
                result.pending_after,
            )


@flow(name="cpn-demo", log_prints=True)
def demo(
    config_dir: str | None = None,
    out: str = "out/demo",
    policy: str | None = None,
    jobs: int | None = None,
    seed: int | None = None,
    estimates: str = "oracle",
    tracking_uri: str | None = None,
    settings: dict[str, str] | None = None,
) -> dict:
    """Run the whole pipeline on the simulated clusters of `config_dir` (default: the built-in demo
    profile), by its teams (`teams.yaml`) when it has them, and write a report to `out`.

    `policy`, `settings` (`--set` pairs), `jobs` and `seed` override the profile's policy.yaml and
    demo.yaml. `estimates` is what the policy believes about runtimes: `oracle`, `predictor` or `champion`
    (tasks.predictor), the champion read from `tracking_uri` (default: this cpn home's MLflow store). With
    `predictor`, the loop closes: the predictor starts without one model of the queue (demo.yaml
    `held_out_model`), whose jobs are then estimated `explore`; after the rounds it is retrained on the
    completed runs (MLflow store `out/mlflow.db`) and the explore jobs' runtime errors before and after are
    printed.
    """
    logger = get_run_logger()
    config = config_dir or str(DEMO_DIR)
    profile = load_settings(config)
    chosen = profile.policy.overridden(policy, settings)
    n_jobs = profile.demo.jobs if jobs is None else jobs
    run_seed = profile.demo.seed if seed is None else seed
    table = ThroughputTable.load(GAVEL_ISOLATED)

    collect_metrics(config)
    manifests = generate_manifests(profile.clusters, table, n_jobs, run_seed, profile.demo.arrival_window_s)
    accepted = accept_manifests(manifests)
    logger.info("intake accepted %d of %d generated manifests", len(accepted), len(manifests))

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    store_path = out_dir / "jobs.db"
    mlflow_db = out_dir / "mlflow.db"
    for stale in (store_path, mlflow_db, out_dir / "explore.json"):  # each run starts afresh
        stale.unlink(missing_ok=True)
    shutil.rmtree(out_dir / "mlruns", ignore_errors=True)
    unseen = held_out_model(accepted, profile.demo.held_out_model) if estimates == "predictor" else None
    known = table_without(table, unseen) if unseen else table
    benchmarks = str(BENCHMARKS_YAML)
    if unseen:
        logger.info("the predictor starts without %s: the throughput table less its rows", unseen)
        # The predictor's GPU benchmark scores: benchmark job logs put in OUT/benchmark-logs are folded
        # into OUT/benchmarks.yaml (else the shipped scores serve; the demo's simulated clusters run no
        # benchmark job, so out of the box there is nothing to ingest).
        scores = out_dir / "benchmarks.yaml"
        ingest_benchmarks(logs=str(out_dir / "benchmark-logs"), out=str(scores))
        benchmarks = str(scores if scores.exists() else BENCHMARKS_YAML)
    estimator = estimate_source(estimates, known, tracking_uri or runtime_settings().mlflow_uri, benchmarks)
    sim = build_simulation(
        profile.clusters,
        store_path,
        chosen.settings,
        table,
        cpu_threshold=chosen.cpu_threshold,
        estimator=estimator,
        teams=service_teams(config, profile.clusters),  # the config folder's, as `cpn run` reads them
    )
    rounds = Rounds(sim.scheduler, profile.demo.stage_rounds_every_s, logger)
    result = replay(
        sim.scheduler,
        sim.simulator,
        sim.clock,
        arrivals_from_jobs(accepted),
        migrator=sim.migrator,
        run_round=rounds,
    )
    logger.info(
        "%d rounds: %d as stage tasks (at most one per %g simulated s), %d in one call",
        result.rounds,
        rounds.as_tasks,
        profile.demo.stage_rounds_every_s,
        rounds.in_one_call,
    )
    if result.stuck:
        logger.warning("%d jobs could never be placed: %s", len(result.stuck), ", ".join(result.stuck[:5]))

    # Completion feedback: what the finished jobs measured, the data the next retraining learns from
    # (`cpn-retrain` with store=OUT/jobs.db trains on it).
    measured = collect_completions(str(store_path), sim.nodes)
    logger.info("%d completed jobs measured their run time for the predictor", len(measured))

    label = run_name(chosen.settings)
    title = f"cpn demo: {len(accepted)} jobs, policy {label}, {estimates} estimates, seed {run_seed}"
    summary = write_report(sim, str(out_dir), title, OracleEstimates(table))
    print(format_summary(summary, title=title))
    if unseen:
        specs = {job.job_id: job for job in accepted}
        explored = [run for run in measured if run.model == unseen]
        before = check_runtimes(estimator, explored, specs)
        uri = sqlite_uri(mlflow_db)
        retrained = retrain_predictor(measured, known, benchmarks, uri, DEMO_ESTIMATORS, ())
        publish_retraining(retrained, uri)
        after = check_runtimes(load_champion(uri), explored, specs)
        (out_dir / "explore.json").write_text(json.dumps(explore_figures(unseen, before, after), indent=2))
        print(explore_report(unseen, before, after, len(measured), uri))
    print(f"wrote {out_dir / 'summary.json'}, {out_dir / 'gantt.png'} and the job store {store_path}")
    return summary


def explore_figures(model: str, before: list[RuntimeCheck], after: list[RuntimeCheck]) -> dict:
    """explore.json: the held-out model and, per completed job of it, the runtime predicted before and
    after retraining, the measured one, the relative errors and the explore flags."""
    return {
        "model": model,
        "jobs": [
            {
                "job": b.job_id,
                "gpu_type": b.gpu_type,
                "gpus": b.num_gpus,
                "measured_s": b.measured_s,
                "predicted_before_s": b.predicted_s,
                "predicted_after_s": a.predicted_s,
                "error_before": b.error,
                "error_after": a.error,
                "explore_before": b.explore,
                "explore_after": a.explore,
            }
            for b, a in zip(before, after, strict=True)
        ],
    }


def explore_report(
    model: str, before: list[RuntimeCheck], after: list[RuntimeCheck], runs: int, uri: str
) -> str:
    """The loop closing on `model`: each of its completed jobs' runtime error before and after retraining."""
    if not before:
        return f"explore: no job of {model} completed, so retraining had nothing of it to learn from"
    lines = [
        f"explore: {model} was left out of the starting predictor; retrained on {runs} completed runs "
        f"({uri}). Its jobs, |predicted - measured| / measured runtime on the GPU type they ran on:",
    ]
    for b, a in zip(before, after, strict=True):
        flag = "flagged explore" if b.explore else "NOT flagged explore"
        lines.append(
            f"  {b.job_id}: {flag}, ran on {b.num_gpus} whole {b.gpu_type} card(s) for "
            f"{b.measured_s:,.0f} s; "
            f"predicted {b.predicted_s:,.0f} s before ({b.error:.1%}), {a.predicted_s:,.0f} s after "
            f"retraining ({a.error:.1%})" + ("; still unseen after retraining" if a.explore else "")
        )
    return "\n".join(lines)
