"""The retraining's Prefect artifact: links to its MLflow runs first, so a narrow table on the run page
still shows them; the long reasons go below the table.

Built here, a plain function of the training's results, so that the Prefect task (tasks.report) only
publishes it and tests read it without Prefect.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from models.registry import RunResult


def _json(values: Sequence[str]) -> str:
    return quote(json.dumps(list(values), separators=(",", ":")))


def retraining_markdown(
    results: Sequence[RunResult], store: str, ui: str | None = None, experiment_id: str | None = None
) -> str:
    """Markdown: whether the champion changed, a link comparing the session's runs side by side in the
    MLflow UI at `ui` (with `experiment_id`), then one table row per estimator (its run linked, else its
    id; estimator; registered version; held-out MAPE; champion), then why each won or lost. Without `ui`
    (the MLflow UI's address unknown) the run ids stand in for the links. `store` is the tracking store as
    it may be shown (password hidden)."""
    changed = any(r.champion for r in results)
    lines = [f"Retraining on {store}: the champion {'changed' if changed else 'stayed'}."]
    base = None if ui is None or experiment_id is None else ui.rstrip("/") + "/#/"
    if base is not None and len(results) > 1:
        query = f"runs={_json([r.run_id for r in results])}&experiments={_json([experiment_id])}"
        lines.append(f"[Compare the runs in MLflow]({base}compare-runs?{query})")
    lines += ["", "| MLflow run | estimator | version | held-out MAPE | champion |", "|---|---|---|---|---|"]
    for r in results:
        run = (
            r.run_id
            if base is None
            else f"[{r.estimator} run]({base}experiments/{experiment_id}/runs/{r.run_id})"
        )
        champion = "yes (alias moved)" if r.champion else "no"
        lines.append(f"| {run} | {r.estimator} | {r.version or '-'} | {r.holdout_mape:.1%} | {champion} |")
    lines.append("")
    lines += [f"- {r.estimator}: {r.reason}" for r in results]
    return "\n".join(lines)
