"""A preemption on a Kubernetes cluster (issue #21), the scheduler and the real client against the fake API
server: the run is deleted with its grace period, the job is queued again with what it kept, its next run
gets a new name, and nothing of the stopped run is left."""

from __future__ import annotations

import pytest

from cpn.clock import SimClock
from cpn.decisions import Decision, Preemption
from cpn.engine.scheduler import Scheduler
from cpn.jobs import Cause, JobSpec, JobState
from cpn.policies.fifo import FifoPolicy
from cpn.store import JobStore
from tests.kubernetes.conftest import gpu_labels, make_gateway, seed_taints, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

V100 = "Tesla-V100-SXM2-16GB"
VC = ("batch.volcano.sh", "jobs")


def names(server, res: tuple[str, str]) -> list[str]:
    return sorted(name for _, name in server.objects.get(res, {}))


def test_a_preempted_job_is_deleted_with_grace_queued_again_and_resubmitted_under_a_new_name(server):
    server.add_node("t-0", gpu_labels("training", V100, 2, 16384), 2, taints=seed_taints("training", V100))
    store = JobStore(":memory:", clock=SimClock())
    spec = JobSpec("bulk/train", "resnet50", image="resnet:1", cpu=1, checkpoint_interval_s=600.0)
    store.submit([spec])

    def scheduler() -> Scheduler:  # a fresh gateway and scheduler on the same store: a restart
        return Scheduler(store, make_gateway(server), FifoPolicy(), SimClock(), forecast=False)

    def runs(s: Scheduler) -> bool:
        s.round()
        return store.get(spec.job_id).state == JobState.RUNNING

    first = scheduler()
    assert first.round().placed == 1
    assert names(server, VC) == ["train"]
    wait_for(lambda: runs(first))

    stop = Preemption(spec.job_id, "a/x", "team a reclaims", (("east/t-0", 1),), 0.25, 30.0)
    assert first.preempt(Decision(preemptions=(stop,))) == 1
    deletes = [path for method, path in server.requests if method == "DELETE"]
    assert len(deletes) == 1 and "/namespaces/bulk/jobs/train?" in deletes[0]
    assert "gracePeriodSeconds=30" in deletes[0]
    assert names(server, VC) == [] and names(server, ("", "pods")) == []
    queued = store.history(spec.job_id)[-1]
    assert (queued.to_state, queued.cause) == (JobState.QUEUED, Cause.PREEMPTED)
    assert "0.250 GPU-hours lost since its last checkpoint" in queued.reason
    assert store.get(spec.job_id).spec.checkpoint_interval_s == 600.0  # resumes from its own checkpoints

    assert first.round().placed == 1  # the deleted run's end is no transition of the job's
    assert names(server, VC) == ["train-g2"]
    assert [p["metadata"]["name"] for p in server.pods_of("bulk", "train-g2")] == ["train-g2-worker-0"]
    wait_for(lambda: runs(first))

    second = scheduler()  # the generation comes from the job's history, not from the process
    assert second.preempt(Decision(preemptions=(stop,))) == 1
    assert second.round().placed == 1
    assert names(server, VC) == ["train-g3"]
    assert {p["metadata"]["name"] for p in server.objects[("", "pods")].values()} == {"train-g3-worker-0"}
    creates = [path for method, path in server.requests if method == "POST"]
    assert len(creates) == 3  # one object per run, none created twice
