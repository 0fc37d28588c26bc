"""The ClusterGateway contract for `logs`: a running job's log so far, a finished job's while the cluster
keeps it, the last `tail_lines` lines only, and NoLog for a job the clusters never ran.

The simulated clusters serve a synthetic log (its start, step progress, end); the Kubernetes gateway reads the
pod's log from the (fake) API server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from cpn.adapters.gateway import ClusterGateway, NoLog
from cpn.decisions import Placement
from tests.contract.test_gateway_contract import _SyncedClusters, fake_clusters, job, simulated

LOG = "\n".join(f"step {i}/600" for i in range(1, 601))
SO_FAR = "\n".join(LOG.splitlines()[:300])
"""What the Kubernetes job has written while it runs; LOG and a last line when it ends."""


@dataclass
class Harness:
    """A gateway over NODES; `write` has the cluster's job write LOG so far; `settle` ends every job."""

    gateway: ClusterGateway
    write: Callable[[str], None]
    settle: Callable[[], None]


def simulated_logs() -> Harness:
    base = simulated()
    sim = base.gateway

    def write(job_id: str) -> None:  # the simulator's log grows with simulated time
        sim.advance(sim.clock.now() + 10.0)

    return Harness(sim, write, base.settle)


def kubernetes_logs(request) -> Harness:
    servers, gateways = fake_clusters(request)
    clusters = _SyncedClusters(gateways)

    def write(job_id: str) -> None:
        clusters.poll_events()  # the gateway has seen the job's pods
        for pod in servers["east"].pods_of("default", job_id):
            servers["east"].logs[("default", pod["metadata"]["name"])] = SO_FAR

    def settle() -> None:
        servers["east"].finish("default", "a", log=LOG + "\ndone")
        clusters.poll_events()

    return Harness(clusters, write, settle)


@pytest.fixture(
    params=[
        simulated_logs,
        pytest.param(kubernetes_logs, marks=[pytest.mark.integration, pytest.mark.kubernetes]),
    ],
    ids=lambda factory: factory.__name__,
)
def harness(request) -> Harness:
    return request.param(request) if request.param is kubernetes_logs else request.param()


def test_a_running_and_then_a_finished_job_have_a_log_tailed_to_the_lines_asked(harness):
    gw = harness.gateway
    gw.submit(job("a"), Placement("a", "east", "gpu-0", 1))
    harness.write("a")
    running = gw.logs("a", 3).splitlines()
    assert len(running) == 3 and running[-1].startswith("step ") and running[-1] != "step 600/600"
    assert gw.logs("a", 1) == running[-1]
    harness.settle()
    finished = gw.logs("a", 2).splitlines()
    assert len(finished) == 2 and finished[0] == "step 600/600"  # every step done, then its end
    with pytest.raises(NoLog):
        gw.logs("never-ran", 10)
