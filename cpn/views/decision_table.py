"""One scheduling round as people read it: the decision table, and a round limited to some clusters."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from cpn.decisions import Decision, Snapshot


def only_clusters(snapshot: Snapshot, clusters: Sequence[str]) -> Snapshot:
    """The snapshot with only the nodes of `clusters` (all when empty); ValueError names unknown ones."""
    if not clusters:
        return snapshot
    known = {n.node.cluster for n in snapshot.nodes}
    unknown = sorted(set(clusters) - known)
    if unknown:
        raise ValueError(f"clusters {unknown} are not in the inventory; known: {sorted(known)}")
    return replace(snapshot, nodes=tuple(n for n in snapshot.nodes if n.node.cluster in clusters))


def decision_rows(snapshot: Snapshot, decision: Decision) -> list[dict]:
    """One row per job the round looked at: where it goes (cluster, node, GPUs, predicted runtime,
    transfer time, predicted start) or why it waits or was rejected; a waiting job's forward look
    (cpn.engine.forecast) adds its predicted end, its start's interval and why its start moved. Times are
    seconds; None = unknown (or never, a service's end)."""
    gpu_type = {(n.node.cluster, n.node.name): n.node.gpu_type for n in snapshot.nodes}
    rows = []
    for p in decision.placements:
        estimate = snapshot.estimates.get(p.job_id, {}).get(gpu_type.get((p.cluster, p.node), ""))
        transfer = snapshot.transfer_s.get(p.job_id, {}).get(p.cluster)
        rows.append(
            {
                "job": p.job_id,
                "outcome": "placed",
                "cluster": p.cluster,
                "node": p.node,
                "gpus": p.total_gpus,
                "predicted_runtime_s": None if estimate is None else round(estimate.runtime_s, 1),
                "transfer_s": None if transfer is None else round(transfer, 1),
                "predicted_start_s": round(snapshot.now + (transfer or 0.0), 1),
                "why": "",
                "moved": "",
            }
        )
    for r in decision.rejections:
        rows.append(_other(r.job_id, "rejected", None, r.reason))
    for w in decision.waiting:
        why = f"{w.code}: {w.detail}" if w.detail else w.code
        row = _other(w.job_id, "waiting", w.predicted_start, why)
        row.update(
            predicted_end_s=_seconds(w.predicted_end),
            start_low_s=_seconds(w.start_low),
            start_high_s=_seconds(w.start_high),
            moved=w.moved,
        )
        rows.append(row)
    return rows


def _other(job_id: str, outcome: str, start: float | None, why: str) -> dict:
    return {
        "job": job_id,
        "outcome": outcome,
        "cluster": "",
        "node": "",
        "gpus": None,
        "predicted_runtime_s": None,
        "transfer_s": None,
        "predicted_start_s": _seconds(start),
        "why": why,
        "moved": "",
    }


def _seconds(t: float | None) -> float | None:
    """A time for the artifact: rounded to 0.1 s; None when unknown or never (a service's end)."""
    return None if t is None or t == float("inf") else round(t, 1)
