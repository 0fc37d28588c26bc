"""Pictures of a run a person would rather look at than read (PNG, matplotlib)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from cpn.inventory import Node  # noqa: E402


class Execution(Protocol):
    """A job holding specific cards of one node from `start` to `end`."""

    job_id: str
    cluster: str
    node: str
    gpus: tuple[int, ...]
    start: float
    end: float
    outcome: str
    share: float


def gantt(executions: Sequence[Execution], nodes: Sequence[Node], path: Path, title: str = "") -> Path:
    """One row per GPU card, grouped by cluster and node; bars are executions, failures cross-hatched red."""
    rows: dict[tuple[str, str, int], int] = {}
    for node in nodes:
        for g in range(node.gpu_count):
            rows[(node.cluster, node.name, g)] = len(rows)
    cmap = plt.get_cmap("tab20b")
    ok: dict[int, tuple[list, list]] = {}
    failed: dict[int, list] = {}
    for i, ex in enumerate(executions):
        span = (ex.start / 3600, (ex.end - ex.start) / 3600)
        for g in ex.gpus:
            row = rows[(ex.cluster, ex.node, g)]
            if ex.outcome == "succeeded":
                spans, colours = ok.setdefault(row, ([], []))
                spans.append(span)
                colours.append(cmap(i % 20))
            else:
                failed.setdefault(row, []).append(span)
    height = max(4.0, min(0.12 * len(rows) + 1.5, 30.0))
    fig, ax = plt.subplots(figsize=(14, height))
    for row, (spans, colours) in ok.items():
        ax.broken_barh(spans, (row - 0.42, 0.84), facecolors=colours)
    for row, spans in failed.items():
        ax.broken_barh(spans, (row - 0.42, 0.84), facecolors="white", edgecolors="#b00000", hatch="xxxx")
    ticks, labels, previous = [], [], None
    for (cluster, node, _gpu), y in rows.items():
        if (cluster, node) != previous:
            ticks.append(y)
            labels.append(f"{cluster}/{node}")
            if previous is not None:
                ax.axhline(y - 0.5, color="grey", linewidth=0.4)
            previous = (cluster, node)
    step = max(1, len(ticks) // 60)
    ax.set_yticks(ticks[::step], labels[::step], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("time (hours)")
    ax.set_xlim(left=0)
    ax.set_title(title or "GPU occupancy")
    ax.text(
        1.0,
        1.01,
        "one row per card; red cross-hatched = failed run",
        transform=ax.transAxes,
        ha="right",
        va="bottom",
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def jct_cdf(jcts: Mapping[str, Sequence[float]], path: Path, title: str = "Job completion time CDF") -> Path:
    """Empirical CDF of job completion times, one line per policy."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for name, values in jcts.items():
        if not len(values):
            continue
        xs = np.sort(np.asarray(values)) / 3600
        ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(True, which="both", alpha=0.3)
    return _save_with_legend(fig, ax, title, path)


def utilization_over_time(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]], path: Path, title: str = "GPU utilisation"
) -> Path:
    """Fraction of GPUs busy over time, one line per policy; series maps name -> (times_s, fraction)."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for name, (times, frac) in series.items():
        ax.step(np.asarray(times) / 3600, frac, where="post", label=name)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPUs busy (fraction)")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    return _save_with_legend(fig, ax, title, path)


def _save_with_legend(fig, ax, title: str, path: Path) -> Path:
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def busy_fraction(executions: Sequence[Execution], total_gpus: int) -> tuple[list[float], list[float]]:
    """Step series of the fraction of GPUs held, from executions."""
    deltas: dict[float, float] = {}
    for ex in executions:
        held = len(ex.gpus) * ex.share
        deltas[ex.start] = deltas.get(ex.start, 0) + held
        deltas[ex.end] = deltas.get(ex.end, 0) - held
    times, fracs, level = [], [], 0.0
    for t in sorted(deltas):
        level += deltas[t]
        times.append(t)
        fracs.append(level / total_gpus)
    return times, fracs


def share_series(
    executions: Sequence[Execution], team_of: Callable[[str], str]
) -> tuple[list[float], dict[str, list[float]]]:
    """Step series of each team's share of the cards in use: (times_s, {team: share at each time}); NaN
    while no card is in use."""
    deltas: dict[str, dict[float, float]] = {}
    total: dict[float, float] = {}
    for ex in executions:
        held = len(ex.gpus) * ex.share
        team = deltas.setdefault(team_of(ex.job_id), {})
        for t, d in ((ex.start, held), (ex.end, -held)):
            team[t] = team.get(t, 0.0) + d
            total[t] = total.get(t, 0.0) + d
    times = sorted(total)
    busy, in_use = 0.0, []
    for t in times:
        busy += total[t]
        in_use.append(busy)
    shares = {}
    for name, changes in deltas.items():
        level, ys = 0.0, []
        for t, b in zip(times, in_use, strict=True):
            level += changes.get(t, 0.0)
            ys.append(level / b if b > 1e-9 else float("nan"))
        shares[name] = ys
    return times, shares


def team_shares(
    executions: Sequence[Execution],
    team_of: Callable[[str], str],
    entitled: Mapping[str, float],
    path: Path,
    title: str = "Teams' shares of the cards in use",
) -> Path:
    """Each team's share of the cards in use over time (solid, `share_series`) against its entitlement
    (dashed, same colour): how far, and for how long, a team was from its fair share."""
    times, shares = share_series(executions, team_of)
    fig, ax = plt.subplots(figsize=(10, 4.5))
    cmap = plt.get_cmap("tab10")
    for i, name in enumerate(sorted(set(shares) | set(entitled))):
        colour = cmap(i % 10)
        if name in shares:
            ax.step(np.asarray(times) / 3600, shares[name], where="post", label=name, color=colour)
        if name in entitled:
            ax.axhline(entitled[name], color=colour, linestyle="--", linewidth=1)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("share of the cards in use")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    return _save_with_legend(fig, ax, title, path)
