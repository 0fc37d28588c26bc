"""A pod's `priorityClassName` read as cpn's priority (JobSpec.priority: higher goes first).

Kubernetes PriorityClass values and cpn's priorities are on one scale (whole numbers, higher first), so
a class's `value` is the job's priority, bounded to cpn's range (PRIORITY_MIN to PRIORITY_MAX): the
built-in `system-node-critical` (2,000,001,000) and `system-cluster-critical` (2,000,000,000) become the
highest, as on a cluster they outrank every user class (kubernetes.io/docs/concepts/scheduling-eviction/
pod-priority-preemption). Classes defined by PriorityClass objects in the submitted file give their
`value`.

A class named neither way is accepted, at the default priority, and the Reading says so: the
PriorityClass objects live on each cluster, which may define it, and refusing every job that names one
of its cluster's classes would turn away what the cluster itself accepts. The kube-apiserver's Priority
admission refuses pods of an undefined class, so where a cluster lacks it the pods do not start: the
Reading names the class the clusters must hold.
"""

from __future__ import annotations

from collections.abc import Mapping

PRIORITY_MIN = -(10**9)
PRIORITY_MAX = 10**9
"""cpn's priority range (the `priority` annotation's bounds)."""

SYSTEM_CLASSES: Mapping[str, int] = {
    "system-node-critical": 2_000_001_000,
    "system-cluster-critical": 2_000_000_000,
}
"""The PriorityClasses every cluster has, with their values."""


def class_priority(name: str, defined: Mapping[str, int]) -> int | None:
    """cpn's priority of class `name`: from `defined` (the file's PriorityClass objects, name -> value),
    else a system class; None when neither defines it."""
    value = defined.get(name, SYSTEM_CLASSES.get(name))
    if value is None:
        return None
    return max(PRIORITY_MIN, min(PRIORITY_MAX, value))
