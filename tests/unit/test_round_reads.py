"""A round reads the cancel requests and the scheduler facts (cpn.store_facts) only when the store's counter
of them (JobStore.facts_version) moved, or while requests are left: a replay's rounds cost what changed, yet
a request another process writes, or a delete a cluster refused, is still carried out."""

from __future__ import annotations

from cpn.clock import SimClock
from cpn.engine.scheduler import Scheduler
from cpn.jobs import JobState
from cpn.policies.fifo import FifoPolicy
from cpn.store import JobStore
from cpn.store_facts import CopyStarted, SavedProgress
from tests.contract.test_gateway_contract import job, simulated


def test_the_facts_counter_moves_with_cancel_requests_and_facts_only(store_target):
    with JobStore(store_target, clock=SimClock()) as store:
        store.submit([job("x"), job("y"), job("z")])
        version = store.facts_version()
        for state in (JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING, JobState.SUCCEEDED):
            store.transition("z", state, cluster="east", node="gpu-0")
        assert store.facts_version() == version, "a move without facts counts nothing"

        store.transition("x", JobState.ASSIGNED, cluster="east", node="gpu-0", placement=[("gpu-0", 1)])
        store.transition("x", JobState.MIGRATING, fact=CopyStarted("west"))
        assert store.facts_version() == version + 1
        store.transition("x", JobState.SUBMITTED)  # ends the copy
        assert store.facts_version() == version + 2
        store.transition("x", JobState.QUEUED, fact=SavedProgress(0.5))
        assert store.facts_version() == version + 3
        for state in (JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING):
            store.transition("x", state, cluster="east", node="gpu-0")
        assert store.facts_version() == version + 3
        store.transition("x", JobState.SUCCEEDED)  # ends its saved progress
        assert store.facts_version() == version + 4

        store.transition("y", JobState.ASSIGNED, cluster="east", node="gpu-0")
        assert store.cancel("y", "alice").status == "requested"
        assert store.facts_version() == version + 5
        assert store.cancel("y", "bob").status == "requested"
        assert store.facts_version() == version + 5, "a second request for the job writes nothing"


class RefusingOnce:
    """The simulated gateway, refusing its first delete (a cluster unreachable for a moment)."""

    def __init__(self, gateway) -> None:
        self.gateway = gateway
        self.refused = 0

    def delete(self, job_id: str, grace_s: float | None = None) -> None:
        if not self.refused:
            self.refused += 1
            raise ConnectionError("cluster unreachable")
        self.gateway.delete(job_id) if grace_s is None else self.gateway.delete(job_id, grace_s=grace_s)

    def __getattr__(self, name: str):
        return getattr(self.gateway, name)


def test_a_request_from_another_process_is_carried_out_and_a_refused_delete_retried(tmp_path):
    path = tmp_path / "jobs.db"
    gateway = RefusingOnce(simulated().gateway)
    with JobStore(path, clock=SimClock()) as store, JobStore(path, clock=SimClock()) as api:
        store.submit([job("team/a")])
        sched = Scheduler(store, gateway, FifoPolicy(), SimClock())
        assert sched.round().placed == 1
        sched.round()
        assert store.get("team/a").state == JobState.RUNNING
        assert api.cancel("team/a", "alice").status == "requested"  # an API replica's own store
        assert sched.round().cancelled == 0 and gateway.refused == 1  # the cluster refused the delete
        assert sched.round().cancelled == 1, "retried though nothing new was written"
        assert store.get("team/a").state == JobState.CANCELLED
