"""What `cpn bench policies` prints and writes: a table, JSON, and plots."""

from __future__ import annotations

from pathlib import Path

from config.settings import ClustersConfig, load_model
from cpn.inventory import nodes_from_config
from cpn.jobs import JobState
from cpn.perf.plots import busy_fraction, gantt, jct_cdf, team_shares, utilization_over_time
from cpn.perf.policies import BenchResult, mean_jct_in_window

COLUMNS = (
    ("succeeded", "done", "{:,}"),
    ("failed", "failed", "{:,}"),
    ("oom", "oom", "{:,}"),
    ("rejected", "rejected", "{:,}"),
    ("stuck", "stuck", "{:,}"),
    ("unfinished", "unfin.", "{:,}"),
    ("makespan_s", "makespan h", "{:,.1f}"),
    ("mean_jct_s", "mean JCT h", "{:,.2f}"),
    ("p50_jct_s", "p50 JCT h", "{:,.2f}"),
    ("p99_jct_s", "p99 JCT h", "{:,.2f}"),
    ("mean_wait_s", "wait h", "{:,.2f}"),
    ("p99_wait_s_large", "p99 wait >=4 GPU h", "{:,.2f}"),
    ("p99_wait_s_small", "p99 wait 1 GPU h", "{:,.2f}"),
    ("gpu_utilization", "GPU util", "{:.3f}"),
    ("transfer_s_total", "transfer h", "{:,.1f}"),
    ("predicted_start_median_error", "start err", "{:.2f}"),
    ("predicted_start_p90_error", "p90", "{:.2f}"),
    ("predicted_start_median_error_naive", "naive", "{:.2f}"),
    ("copies_per_copied_job_mean", "copies/job", "{:.2f}"),
    ("preemptions_per_job", "stops/job", "{:.2f}"),
    ("max_preemptions_of_a_job", "max stops", "{:,}"),
    ("lost_gpu_hours", "lost GPU-h", "{:,.1f}"),
    ("sim_wall_s", "wall s", "{:.1f}"),
)


def _cell(key: str, value: float | int | None, fmt: str) -> str:
    if value is None:
        return "-"
    if (key.endswith("_s") or "_s_" in key) and key != "sim_wall_s":
        value = value / 3600
    return fmt.format(value)


def over_bound(makespan_s: float, bound_s: float) -> float | None:
    """Makespan over the lower bound; None when the bound is 0 (no job could be timed)."""
    return makespan_s / bound_s if bound_s > 0 else None


def to_json(result: BenchResult) -> dict:
    """`{"lower_bound_makespan_s": X, "policies": {name: metrics}, ...}` as the issue specifies."""
    out: dict = {
        "trace": result.trace,
        "jobs": result.jobs,
        "total_gpus": result.total_gpus,
        "lower_bound_makespan_s": result.lower_bound.makespan_s,
        "lower_bound": {
            "longest_job_s": result.lower_bound.longest_job_s,
            "work_over_capacity_s": result.lower_bound.work_over_capacity_s,
            "jobs_covered": result.lower_bound.jobs_covered,
            "jobs_total": result.lower_bound.jobs_total,
        },
        "policies": {},
    }
    for run in result.runs:
        metrics = dict(run.summary)
        metrics["makespan_over_lower_bound"] = over_bound(
            run.summary["makespan_s"], result.lower_bound.makespan_s
        )
        if run.settings is not None:
            metrics["settings"] = run.settings.model_dump()
        out["policies"][run.name] = metrics
    if result.peer:
        window = result.peer[0].jct_jobs
        ours = {}
        for run in result.runs:
            jct = mean_jct_in_window(run, window)
            ours[run.name] = {
                "mean_jct_h_same_window": jct / 3600 if jct is not None else None,
                "makespan_h": run.summary["makespan_s"] / 3600,
            }
        out["peer"] = {
            "source": "Gavel's simulator, data/gavel/peer/README.md",
            "jct_jobs": list(window) if window else "all",
            "figures": {p.policy: {"mean_jct_h": p.jct_h, "makespan_h": p.makespan_h} for p in result.peer},
            "ours": ours,
        }
    return out


def format_table(result: BenchResult) -> str:
    """The comparison as aligned text, makespans also as a ratio to the lower bound."""
    lb = result.lower_bound
    header = ["policy", *(label for _, label, _ in COLUMNS), "makespan/LB"]
    rows = [header]
    for run in result.runs:
        cells = [run.name, *(_cell(k, run.summary.get(k), f) for k, _, f in COLUMNS)]
        ratio = over_bound(run.summary["makespan_s"], lb.makespan_s)
        cells.append("-" if ratio is None else f"{ratio:.2f}")
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [
        f"trace {result.trace}: {result.jobs:,} jobs, {result.total_gpus} GPUs",
        f"makespan lower bound {lb.makespan_s / 3600:,.1f} h (longest job {lb.longest_job_s / 3600:,.1f} h, "
        f"GPU-work / capacity {lb.work_over_capacity_s / 3600:,.1f} h), over the {lb.jobs_covered:,} of "
        f"{lb.jobs_total:,} jobs the throughput table times",
        "",
    ]
    for r in rows:
        lines.append(
            "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )
    lines += _outcome_lines(result) + _solver_lines(result) + _stop_lines(result) + _team_lines(result)
    if result.peer:
        lines += ["", "Peer: Gavel's simulator on this trace (preemptive, no memory limit, no transfers)"]
        lines.append(f"  {'gavel policy':<28}{'mean JCT h':>11}{'makespan h':>11}")
        for p in result.peer:
            ms = f"{p.makespan_h:,.1f}" if p.makespan_h is not None else "-"
            lines.append(f"  {p.policy:<28}{p.jct_h:>11,.2f}{ms:>11}")
        window = result.peer[0].jct_jobs
        note = f" (JCT over jobs {window[0]}-{window[1]}, as Gavel averages it)" if window else ""
        lines.append(f"  ours vs Gavel's best JCT / best makespan{note}:")
        best_jct = min(p.jct_h for p in result.peer)
        makespans = [p.makespan_h for p in result.peer if p.makespan_h is not None]
        for run in result.runs:
            jct = mean_jct_in_window(run, window)
            jct_txt = f"{jct / 3600:,.2f} h = {jct / 3600 / best_jct:.2f}x" if jct and best_jct else "-"
            ms_txt = "-"
            if makespans and min(makespans) > 0:
                ms_h = run.summary["makespan_s"] / 3600
                ms_txt = f"{ms_h:,.1f} h = {ms_h / min(makespans):.2f}x"
            lines.append(f"  {run.name:<28} JCT {jct_txt}; makespan {ms_txt}")
    return "\n".join(lines)


OUTCOME_REASONS_SHOWN = 4
"""Reasons the table lists per policy, the most frequent first (the JSON has them all)."""


def _outcome_lines(result: BenchResult) -> list[str]:
    """Jobs that did not succeed, per policy, by outcome class and their most frequent reasons."""
    lines = []
    for run in result.runs:
        counted = sorted(
            (
                (count, outcome, reason)
                for outcome, reasons in run.summary["outcomes"].items()
                if outcome != "succeeded"
                for reason, count in reasons.items()
            ),
            key=lambda r: -r[0],
        )
        parts = [f"{o} {c} ({r or 'no reason given'})" for c, o, r in counted[:OUTCOME_REASONS_SHOWN]]
        more = sum(c for c, _, _ in counted[OUTCOME_REASONS_SHOWN:])
        if more:
            parts.append(
                f"{more} more with {len(counted) - OUTCOME_REASONS_SHOWN} other reasons (see --json)"
            )
        if parts:
            lines.append(f"  {run.name}: " + "; ".join(parts))
    return ["", "Jobs that did not succeed, by reason:", *lines] if lines else []


def _stop_lines(result: BenchResult) -> list[str]:
    """Per policy that stopped runs (preemptions, moves): how many, and the work lost against that done."""
    lines = [
        f"  {run.name}: {m['preemptions']:,} runs stopped, {m['lost_gpu_hours']:,.1f} GPU-h lost of "
        f"{m['gpu_hours']:,.1f} GPU-h done"
        for run in result.runs
        if (m := run.summary).get("preemptions") and "teams" not in m
    ]
    return ["", "Runs stopped (preempted, or moved by re-balancing):", *lines] if lines else []


def _team_lines(result: BenchResult) -> list[str]:
    """Per policy with teams (`--teams`): fairness error, preemptions, and each team's shares and waits."""
    lines = []
    for run in result.runs:
        m = run.summary
        if "teams" not in m:
            continue
        err, by_weight = m["fairness_error"], m.get("fairness_error_by_weight")
        lines.append(
            f"  {run.name}: fairness error {'-' if err is None else f'{err:.3f}'} "
            f"(by weight alone {'-' if by_weight is None else f'{by_weight:.3f}'}), "
            f"{m['gpu_hours']:,.1f} GPU-h "
            f"done, {m['preemptions']} preemptions, {m['lost_gpu_hours']:,.1f} GPU-h lost"
        )
        for name, f in m["teams"].items():
            used = "-" if f["share_used"] is None else f"{f['share_used']:.3f}"
            fair = "-" if f.get("share_fair") is None else f"{f['share_fair']:.3f}"
            waits = "/".join(
                "-" if f[k] is None else f"{f[k] / 3600:,.2f}" for k in ("p50_wait_s", "p99_wait_s")
            )
            lines.append(
                f"    {name}: {f['jobs']:,} jobs, share entitled {f['share_entitled']:.3f}, max-min fair "
                f"{fair}, used {used}, "
                f"wait p50/p99 {waits} h"
            )
    return ["", "Teams (share used while every team had work waiting):", *lines] if lines else []


def _solver_lines(result: BenchResult) -> list[str]:
    """Each optimising policy's rounds: solver, solve times, fallbacks to greedy's plan, statuses."""
    lines = []
    for run in result.runs:
        m = run.summary
        if m.get("solver_rounds"):
            lines.append(
                f"  {run.name}: {m['solver']}, {m['solver_rounds']:,} rounds, solve median "
                f"{m['solve_s_median']:.3f} s, max {m['solve_s_max']:.3f} s, {m['solver_fallbacks']} on "
                f"greedy's plan; {m['solver_statuses']}"
            )
    return ["", "Solver:", *lines] if lines else []


def write_plots(result: BenchResult, clusters_path: Path | str, out_dir: Path | str) -> list[Path]:
    """JCT CDF and GPU utilisation per policy, a Gantt chart per cluster per policy, and with teams each
    policy's teams' shares over time against their entitlements (`teams_POLICY.png`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    nodes = nodes_from_config(load_model(clusters_path, ClustersConfig))
    jcts = {
        run.name: [t.ended_at - t.queued_at for t in run.timelines if t.state == JobState.SUCCEEDED]
        for run in result.runs
    }
    written = [jct_cdf(jcts, out / "jct_cdf.png")]
    series = {run.name: busy_fraction(run.executions, result.total_gpus) for run in result.runs}
    written.append(utilization_over_time(series, out / "gpu_utilization.png"))
    for run in result.runs:
        if result.teams is not None and "teams" in run.summary:
            entitled = {name: f["share_entitled"] for name, f in run.summary["teams"].items()}
            path = out / f"teams_{run.name}.png"
            title = f"{run.name}: teams' shares (dashed: entitled)"
            written.append(team_shares(run.executions, result.teams.team_of, entitled, path, title))
        for cluster in sorted({n.cluster for n in nodes}):
            cluster_nodes = [n for n in nodes if n.cluster == cluster]
            runs = [e for e in run.executions if e.cluster == cluster]
            path = out / f"gantt_{run.name}_{cluster}.png"
            written.append(gantt(runs, cluster_nodes, path, title=f"{run.name} on {cluster}"))
    return written
