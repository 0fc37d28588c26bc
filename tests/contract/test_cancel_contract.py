"""Cancelling jobs, run against every gateway: the store takes the cancel (cpn.store.JobStore.cancel, what
`DELETE /jobs/{ns}/{name}` and `cpn job cancel` call), the scheduler's round carries it out through
`ClusterGateway.delete` (cpn.engine.scheduler.Scheduler.cancel).

A queued job leaves the queue at once; one on a cluster is deleted there by the next round, a Deployment
with its Service; the job ends `cancelled`, with who asked, and its end never counts as a completed run.
Cancelling twice changes nothing more; cancelling a finished job changes nothing; nothing is submitted
after its cancel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from cpn.adapters.gateway import ClusterGateway
from cpn.clock import SimClock
from cpn.engine.feedback import completed_runs
from cpn.engine.scheduler import Scheduler
from cpn.jobs import JobSpec, JobState
from cpn.policies.fifo import FifoPolicy
from cpn.store import JobStore
from tests.contract.test_gateway_contract import (
    ALL_FREE,
    NODES,
    SERVICE_MANIFEST,
    _SyncedClusters,
    fake_clusters,
    free_gpus,
    job,
    simulated,
)


@dataclass
class Harness:
    """A gateway over NODES, a way to let its jobs finish, and what the clusters still hold of a job."""

    gateway: ClusterGateway
    settle: Callable[[], None]
    objects: Callable[[str], list[str]]
    """Names of what the clusters hold for a job id (workloads, Services), by kind."""


def simulated_objects() -> Harness:
    base = simulated()
    return Harness(base.gateway, base.settle, lambda job_id: [job_id] if job_id in base.gateway._runs else [])


def kubernetes_objects(request) -> Harness:
    servers, gateways = fake_clusters(request)

    def settle() -> None:
        for server in servers.values():
            server.finish_all()

    def objects(job_id: str) -> list[str]:
        namespace, name = job_id.split("/")
        return [
            f"{res[1]}/{key[1]}"
            for server in servers.values()
            for res, items in server.objects.items()
            if res not in (("", "nodes"), ("", "pods"))
            for key in items
            if key == (namespace, name)
        ]

    return Harness(_SyncedClusters(gateways), settle, objects)


@pytest.fixture(
    params=[
        simulated_objects,
        pytest.param(kubernetes_objects, marks=[pytest.mark.integration, pytest.mark.kubernetes]),
    ],
    ids=lambda factory: factory.__name__,
)
def harness(request) -> Harness:
    return request.param(request) if request.param is kubernetes_objects else request.param()


@pytest.fixture
def store():
    with JobStore(":memory:", clock=SimClock()) as s:
        yield s


def scheduler(store: JobStore, harness: Harness) -> Scheduler:
    return Scheduler(store, harness.gateway, FifoPolicy(), SimClock())


TRAIN = job("team/train", gpus=2)
SERVICE = JobSpec("team/chat", "ResNet-18", kind="inference", image="srv:1", manifest=SERVICE_MANIFEST)


def history(store: JobStore, job_id: str) -> list[tuple[str, str]]:
    return [(t.to_state.value, t.reason) for t in store.history(job_id)]


def test_a_queued_job_leaves_the_queue_at_once_and_is_never_submitted(harness, store):
    store.submit([TRAIN])
    outcome = store.cancel(TRAIN.job_id, "alice")
    assert (outcome.status, outcome.state) == ("cancelled", JobState.CANCELLED)
    result = scheduler(store, harness).round()
    assert (result.pending, result.placed, result.cancelled) == (0, 0, 0)
    assert harness.gateway.held_jobs() == frozenset() and free_gpus(harness.gateway) == ALL_FREE
    assert history(store, TRAIN.job_id)[-1] == ("cancelled", "cancelled by alice")


@pytest.mark.parametrize("spec", [TRAIN, SERVICE], ids=["running-job", "deployment-with-its-service"])
def test_a_running_job_is_deleted_by_the_next_round_and_never_counts_as_completed(harness, store, spec):
    store.submit([spec])
    sched = scheduler(store, harness)
    assert sched.round().placed == 1
    sched.collect()
    assert store.get(spec.job_id).state == JobState.RUNNING
    assert harness.objects(spec.job_id)  # the Deployment and its Service are on the cluster
    outcome = store.cancel(spec.job_id, "alice")
    assert (outcome.status, outcome.state) == ("requested", JobState.RUNNING)
    assert free_gpus(harness.gateway) != ALL_FREE  # only the scheduler deletes
    assert sched.round().cancelled == 1
    assert store.get(spec.job_id).state == JobState.CANCELLED
    assert harness.objects(spec.job_id) == [] and free_gpus(harness.gateway) == ALL_FREE
    harness.settle()
    sched.round()  # the cluster reports the deleted job's end: it is no transition of the job's
    assert [s for s, _ in history(store, spec.job_id)][-2:] == ["running", "cancelled"]
    assert history(store, spec.job_id)[-1][1].startswith("cancelled by alice (asked at ")
    assert completed_runs(store, NODES) == []  # the predictor's training data
    assert store.cancel_requests() == []


def test_a_job_cancelled_twice_is_cancelled_once(harness, store):
    queued, running = job("team/queued", gpus=4), job("team/running")
    store.submit([running])
    sched = scheduler(store, harness)
    sched.round()
    store.submit([queued])
    store.cancel(queued.job_id, "alice")
    assert store.cancel(queued.job_id, "bob").status == "finished"
    assert [store.cancel(running.job_id, who).status for who in ("alice", "bob")] == ["requested"] * 2
    assert [r.requested_by for r in store.cancel_requests()] == ["alice"]
    assert sched.round().cancelled == 1
    assert store.cancel(running.job_id, "bob").status == "finished"
    assert sched.round().cancelled == 0
    for job_id in (queued.job_id, running.job_id):
        cancels = [reason for state, reason in history(store, job_id) if state == "cancelled"]
        assert len(cancels) == 1 and cancels[0].startswith("cancelled by alice")


def test_cancelling_a_finished_job_says_so_and_changes_nothing(harness, store):
    store.submit([TRAIN])
    sched = scheduler(store, harness)
    sched.round()
    sched.collect()
    harness.settle()
    sched.round()
    before = history(store, TRAIN.job_id)
    outcome = store.cancel(TRAIN.job_id, "alice")
    assert (outcome.status, outcome.state) == ("finished", JobState.SUCCEEDED)
    assert sched.round().cancelled == 0
    assert history(store, TRAIN.job_id) == before and store.cancel_requests() == []


def test_a_job_cancelled_after_the_snapshot_is_not_placed(harness, store):
    store.submit([TRAIN])
    sched = scheduler(store, harness)
    sched.collect()
    sched.cancel()
    decision = sched.decide(sched.snapshot())
    assert [p.job_id for p in decision.placements] == [TRAIN.job_id]
    store.cancel(TRAIN.job_id, "alice")  # another API replica, while the leader decides
    to_migrate, to_submit = sched.assign(decision)
    assert (to_migrate, to_submit) == ([], [])
    assert sched.submit(to_submit) == (0, 0)
    assert harness.gateway.held_jobs() == frozenset() and store.get(TRAIN.job_id).state == JobState.CANCELLED


def test_a_job_assigned_in_the_round_of_its_cancel_is_deleted_after_submit(harness, store):
    store.submit([TRAIN])
    sched = scheduler(store, harness)
    sched.collect()
    sched.cancel()
    _, to_submit = sched.assign(sched.decide(sched.snapshot()))
    assert store.cancel(TRAIN.job_id, "alice").status == "requested"
    assert sched.submit(to_submit) == (1, 0)
    assert sched.round().cancelled == 1
    assert harness.objects(TRAIN.job_id) == [] and free_gpus(harness.gateway) == ALL_FREE
    assert store.get(TRAIN.job_id).state == JobState.CANCELLED


def test_a_job_queued_again_after_its_cancel_is_never_submitted_again(harness, store):
    store.submit([TRAIN])
    sched = scheduler(store, harness)
    sched.round()
    sched.collect()
    store.cancel(TRAIN.job_id, "alice")
    harness.gateway.delete(TRAIN.job_id)  # the cluster lost the run and the job is queued again, as
    store.transition(TRAIN.job_id, JobState.QUEUED, reason="OOMKilled")  # an OOM kill re-plans it
    result = sched.round()
    assert (result.placed, result.cancelled) == (0, 1)
    assert harness.gateway.held_jobs() == frozenset()
    assert store.get(TRAIN.job_id).state == JobState.CANCELLED
    assert harness.objects(TRAIN.job_id) == []
