"""A move on a Kubernetes cluster (issue #21, cpn.policies.rebalance), the scheduler and the real client
against the fake API server: a job running on a slow card is stopped and placed on a faster node in one
decision; its old run is deleted with its grace period, the new one is created under the next name on the
fast node, and the end the cluster reports for the deleted run does not fail the job, which succeeds when
its new run does."""

from __future__ import annotations

import pytest

from cpn.clock import SimClock
from cpn.decisions import Decision, Placement, Preemption
from cpn.engine.scheduler import Scheduler
from cpn.jobs import JobSpec, JobState
from cpn.policies.fifo import FifoPolicy
from cpn.store import JobStore
from tests.kubernetes.conftest import gpu_labels, make_gateway, seed_taints, wait_for
from tests.kubernetes.test_preemption import VC, names

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

K80, V100 = "Tesla-K80", "Tesla-V100-SXM2-16GB"


def test_a_job_moved_to_a_faster_node_runs_there_under_a_new_name_and_succeeds(server):
    server.add_node("slow-0", gpu_labels("training", K80, 1, 12288), 1, taints=seed_taints("training", K80))
    server.add_node("fast-0", gpu_labels("training", V100, 1, 16384), 1, taints=seed_taints("training", V100))
    clock = SimClock()  # one clock: the deleted run's end is told apart by its time against the move's
    store = JobStore(":memory:", clock=clock)
    spec = JobSpec("bulk/train", "resnet50", image="resnet:1", cpu=1, checkpoint_interval_s=600.0)
    store.submit([spec])
    scheduler = Scheduler(store, make_gateway(server, clock=clock), FifoPolicy(), clock, forecast=False)

    def state() -> JobState:
        scheduler.round()
        return store.get(spec.job_id).state

    scheduler.snapshot()  # the job queued: placed by hand on the slow node
    _, now = scheduler.assign(Decision(placements=(Placement(spec.job_id, "east", "slow-0", 1),)))
    assert scheduler.submit(now) == (1, 0)
    wait_for(lambda: state() == JobState.RUNNING)
    assert [p["spec"]["nodeName"] for p in server.pods_of("bulk", "train")] == ["slow-0"]

    move = Decision(
        placements=(Placement(spec.job_id, "east", "fast-0", 1),),
        preemptions=(Preemption(spec.job_id, spec.job_id, "rebalance", (("east/slow-0", 1),), 0.1, 30.0),),
    )
    migrate, now = scheduler.assign(move)
    assert migrate == [] and scheduler.submit(now) == (1, 0)
    deletes = [path for method, path in server.requests if method == "DELETE"]
    assert len(deletes) == 1 and "/namespaces/bulk/jobs/train?" in deletes[0]
    assert "gracePeriodSeconds=30" in deletes[0]
    assert names(server, VC) == ["train-g2"]
    left = {name for res, objs in server.objects.items() if res != ("", "nodes") for _, name in objs}
    assert left and all(name.startswith("train-g2") for name in left)  # nothing of the old run
    pods = server.objects[("", "pods")].values()
    assert [(p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods] == [("train-g2-worker-0", "fast-0")]
    assert (store.get(spec.job_id).state, store.get(spec.job_id).node) == (JobState.SUBMITTED, "fast-0")

    wait_for(lambda: state() == JobState.RUNNING)  # the deleted run's end is skipped, not a failure
    server.finish("bulk", "train-g2")
    wait_for(lambda: state() == JobState.SUCCEEDED)
    states = [t.to_state for t in store.history(spec.job_id)]
    assert JobState.FAILED not in states and states.count(JobState.RUNNING) == 2
