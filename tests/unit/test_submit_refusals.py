"""A cluster's refusal: a transient one queues the job again, a final one fails it with the message."""

from __future__ import annotations

import pytest

from cpn.adapters.gateway import SubmitRejected
from cpn.clock import SimClock
from cpn.engine.scheduler import Scheduler
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec, JobState
from cpn.policies import make_policy
from cpn.store import JobStore

NODE = Node("c", "n0", "Tesla-V100-SXM2-16GB", 2, 16, 8, "training")


class Refusing:
    """A cluster that refuses every submission the way it is told to."""

    def __init__(self, transient: bool) -> None:
        self.transient = transient

    def inventory(self):
        return (NodeState(NODE, free_gpus=2),)

    def submit(self, job, placement) -> None:
        error = SubmitRejected('Job.batch "x" is invalid: spec.template: Required value')
        error.transient = self.transient
        raise error

    def poll_events(self):
        return []

    def held_jobs(self):
        return frozenset()


@pytest.mark.parametrize(("transient", "state"), [(True, JobState.QUEUED), (False, JobState.FAILED)])
def test_refusals_requeue_or_fail(transient, state):
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    store.submit([JobSpec(job_id="ns/j", model="m")])
    scheduler = Scheduler(store, Refusing(transient), make_policy("fifo"), clock)
    result = scheduler.round()
    assert result.submit_refused == 1
    assert store.get("ns/j").state == state
    assert store.history("ns/j")[-1].reason.startswith("submit refused: Job.batch")
