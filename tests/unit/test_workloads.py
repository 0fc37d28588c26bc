"""How each workload kind's status says it ended (cpn.workloads, WorkloadKind.ended), on statuses written as
each project's controller writes them, and where each kind keeps its pods."""

from __future__ import annotations

import pytest

from cpn.workloads import WORKLOADS, pod_count, workload_kind, workload_of

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T01:00:00Z"
END = 1767229200.0  # T1


def cond(kind: str, reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": "True", "lastTransitionTime": T1, "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("api", "kind", "status", "ended"),
    [
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            {"conditions": [cond("Created"), cond("Running")]},
            (None, None, ""),
        ),
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            {"conditions": [cond("Succeeded")], "completionTime": T1},
            ("succeeded", END, ""),
        ),
        (
            "kubeflow.org/v1",
            "TFJob",
            {
                "conditions": [
                    cond("Failed", "TFJobFailed", "TFJob x has failed because 1 Worker replica(s) failed.")
                ]
            },
            ("failed", END, "TFJobFailed: TFJob x has failed because 1 Worker replica(s) failed."),
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            {"conditions": [cond("Complete")]},
            ("succeeded", END, ""),
        ),
        (
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {"conditions": [cond("Completed", "AllJobsCompleted")]},
            ("succeeded", END, ""),
        ),
        (
            "jobset.x-k8s.io/v1alpha2",
            "JobSet",
            {"conditions": [cond("Failed", "FailedJobs", "jobset failed due to reaching max retries")]},
            ("failed", END, "FailedJobs: jobset failed due to reaching max retries"),
        ),
        ("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}, (None, None, "")),
        (
            "ray.io/v1",
            "RayJob",
            {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED", "endTime": T1},
            ("succeeded", END, ""),
        ),
        (
            "ray.io/v1",
            "RayJob",
            {"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED", "endTime": T1},
            ("failed", END, "jobStatus STOPPED"),
        ),
        ("ray.io/v1", "RayCluster", {"state": "ready"}, (None, None, "")),
        (
            "v1",
            "Pod",
            {"phase": "Succeeded", "containerStatuses": [{"state": {"terminated": {"finishedAt": T1}}}]},
            ("succeeded", END, ""),
        ),
        (
            "batch.volcano.sh/v1alpha1",
            "Job",
            {"state": {"phase": "Aborted", "lastTransitionTime": T1}},
            ("failed", END, "Aborted"),
        ),
        ("batch/v1", "Job", {"conditions": [cond("Complete")], "completionTime": T1}, ("succeeded", END, "")),
        (
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            {"conditions": [cond("Available")]},
            (None, None, ""),
        ),
        ("serving.kserve.io/v1beta1", "InferenceService", {"conditions": [cond("Ready")]}, (None, None, "")),
    ],
)
def test_the_kinds_status_says_whether_and_how_it_ended(api, kind, status, ended):
    obj = {"apiVersion": api, "kind": kind, "status": status}
    assert workload_of(obj).ended(obj) == ended


def test_kinds_are_found_by_group_and_kind_whatever_the_version():
    assert workload_kind("ray.io/v9", "RayJob").kind == "RayJob"
    assert workload_of({"apiVersion": "ray.io/v9", "kind": "RayJob"}) is None
    assert workload_kind("batch/v1", "Job").group == "batch"
    assert workload_kind("batch.volcano.sh/v1alpha1", "Job").group == "batch.volcano.sh"
    assert len({(w.group, w.kind) for w in WORKLOADS}) == len(WORKLOADS)


def test_pod_count_multiplies_every_count_out():
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "spec": {"replicas": 3, "leaderWorkerTemplate": {"size": 4, "workerTemplate": {"spec": {}}}},
    }
    assert pod_count(lws) == 12  # no leader template: the worker template makes the leaders too
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "spec": {
            "headGroupSpec": {"template": {}},
            "workerGroupSpecs": [{"replicas": 2, "numOfHosts": 4, "template": {}}],
        },
    }
    assert pod_count(ray) == 1 + 8
