"""The end-to-end demo: generated jobs -> intake -> scheduling rounds on simulated clusters -> report."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from config.runtime import runtime_settings
from config.settings import DEMO_DIR
from cpn.bench.report import format_summary
from cpn.bootstrap import build_simulation
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from tasks.config import load_settings
from tasks.intake import accept_manifests, generate_manifests
from tasks.predictor import collect_completions, estimate_source
from tasks.report import write_report
from tasks.simulate import schedule_until_drained


@flow(name="cpn-demo", log_prints=True)
def demo(
    config_dir: str | None = None,
    out: str = "out/demo",
    policy: str | None = None,
    jobs: int | None = None,
    seed: int | None = None,
    estimates: str = "oracle",
    tracking_uri: str | None = None,
) -> dict:
    """Run the whole pipeline on the simulated clusters of `config_dir` (default: the built-in demo
    profile) and write a report to `out`.

    `policy`, `jobs` and `seed` override the profile's policy.yaml and demo.yaml. `estimates` is what
    the policy believes about runtimes: `oracle`, `predictor` or `champion` (tasks.predictor), the
    champion read from `tracking_uri` (default: this cpn home's MLflow store).
    """
    logger = get_run_logger()
    profile = load_settings(config_dir or str(DEMO_DIR))
    policy_name = policy or profile.policy.name
    n_jobs = profile.demo.jobs if jobs is None else jobs
    run_seed = profile.demo.seed if seed is None else seed
    table = ThroughputTable.load(GAVEL_ISOLATED)

    manifests = generate_manifests(profile.clusters, table, n_jobs, run_seed, profile.demo.arrival_window_s)
    accepted = accept_manifests(manifests)
    logger.info("intake accepted %d of %d generated manifests", len(accepted), len(manifests))

    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    store_path = out_dir / "jobs.db"
    store_path.unlink(missing_ok=True)
    sim = build_simulation(
        profile.clusters,
        store_path,
        policy_name,
        table,
        cpu_threshold=profile.policy.cpu_threshold,
        estimator=estimate_source(estimates, table, tracking_uri or runtime_settings().mlflow_uri),
    )
    result = schedule_until_drained(sim, accepted)
    if result.stuck:
        logger.warning("%d jobs could never be placed: %s", len(result.stuck), ", ".join(result.stuck[:5]))

    # Completion feedback: what the finished jobs measured, the data the next retraining learns from
    # (`cpn-retrain` with store=OUT/jobs.db trains on it).
    measured = collect_completions(str(store_path), sim.nodes)
    logger.info("%d completed jobs measured their run time for the predictor", len(measured))

    title = f"cpn demo: {len(accepted)} jobs, policy {policy_name}, {estimates} estimates, seed {run_seed}"
    summary = write_report(sim, str(out_dir), title)
    print(format_summary(summary, title=title))
    print(f"wrote {out_dir / 'summary.json'}, {out_dir / 'gantt.png'} and the job store {store_path}")
    return summary
