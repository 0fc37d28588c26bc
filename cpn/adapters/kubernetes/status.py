"""What a job's objects say about it: running, succeeded or failed, since when, and why.

- A workload ends as its kind's status says (`cpn.workloads`, `WorkloadKind.ended`): a batch Job with its
  `Complete` or `Failed` condition, a Volcano Job with `status.state.phase` Completed (succeeded) or Failed,
  Aborted, Terminated (failed), a Kubeflow job with `Succeeded`/`Failed`, a JobSet with `Completed`/`Failed`,
  a TrainJob with `Complete`/`Failed`, a RayJob with `jobDeploymentStatus` Complete/Failed (and `jobStatus`
  SUCCEEDED for success), a bare Pod with its phase. Services (a Deployment, LeaderWorkerSet, RayService,
  InferenceService) and a RayCluster serve until removed.
- A job runs once one of its pods runs (or has already finished).
- A failure's reason comes from its pods first: `OOMKilled` when a container was killed for memory
  (its state or last state), `Evicted: <message>` for an evicted pod; else the condition's reason and
  message (`BackoffLimitExceeded: ...`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cpn.adapters.gateway import OOM_REASON
from cpn.workloads import Ended, Phase, WorkloadKind, timestamp, workload_of


@dataclass(frozen=True)
class JobStatus:
    """One job as its objects on one cluster show it."""

    phase: Phase
    start: float | None = None
    """When its first pod started (Unix seconds), if one has."""
    end: float | None = None
    reason: str = ""
    nodes: tuple[str, ...] = ()
    """Nodes its pods run or ran on."""
    failed_pod: tuple[str, str] | None = None
    """(namespace, name) of the pod whose log tells why it failed, else its first pod."""
    pods: tuple[tuple[str, str], ...] = ()
    """(namespace, name) of each of its pods, by name."""


def _pod_started(pod: Mapping[str, Any]) -> float | None:
    status = pod.get("status") or {}
    if status.get("phase") not in ("Running", "Succeeded", "Failed"):
        return None
    times = [timestamp(status.get("startTime"))]
    for cs in status.get("containerStatuses") or []:
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            times.append(timestamp((state.get("running") or state.get("terminated") or {}).get("startedAt")))
    known = [t for t in times if t is not None]
    return min(known) if known else None


def pod_failure(pod: Mapping[str, Any]) -> str:
    """Why a pod failed: OOMKilled, Evicted: ..., or '' when it says nothing."""
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            if (state.get("terminated") or {}).get("reason") == OOM_REASON:
                return OOM_REASON
    if status.get("reason") == "Evicted":
        return f"Evicted: {status.get('message', '')}".rstrip(": ")
    return ""


def job_status(
    workload: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]], kind: WorkloadKind | None = None
) -> JobStatus:
    """The status of a job from its workload object (None when not seen), of workload kind `kind` (else
    the object's own apiVersion and kind say), and its pods."""
    pods = sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name", ""))
    starts = [t for t in (_pod_started(p) for p in pods) if t is not None]
    start = min(starts) if starts else None
    nodes = tuple(dict.fromkeys(n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))))
    reasons = [(r, p) for p in pods if (r := pod_failure(p))]
    first = pods[0] if pods else None
    failed_pod = reasons[0][1] if reasons else first
    keys = tuple(
        ((p.get("metadata") or {}).get("namespace", "default"), (p.get("metadata") or {}).get("name", ""))
        for p in pods
    )
    where = None if failed_pod is None else keys[pods.index(failed_pod)]
    phase, end, reason = _ended(workload, kind)
    if phase is None:
        running = any((p.get("status") or {}).get("phase") in ("Running", "Succeeded") for p in pods)
        return JobStatus("running" if running else "submitted", start, None, "", nodes, where, keys)
    if phase == "failed" and reasons:
        reason = reasons[0][0]
    return JobStatus(phase, start, end, reason, nodes, where, keys)


def _ended(workload: Mapping[str, Any] | None, kind: WorkloadKind | None) -> Ended:
    if workload is None:
        return None, None, ""
    kind = kind or workload_of(workload)
    return (None, None, "") if kind is None else kind.ended(workload)
