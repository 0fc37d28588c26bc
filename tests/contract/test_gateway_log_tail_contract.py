"""The ClusterGateway contract for a job killed for memory: it ends `failed` with `OOMKilled`, and only that
end may carry a log tail (JobEvent.log_tail), the last lines of what the job wrote, bounded.

The simulated clusters kill a job whose model needs more memory than its card has, and have no pod log
(their tail is empty); the Kubernetes gateway reads the killed pod's log from the (fake) API server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from cpn.adapters.gateway import OOM_REASON, ClusterGateway
from cpn.decisions import Placement
from cpn.jobs import JobSpec
from tests.contract.test_gateway_contract import _SyncedClusters, fake_clusters, job, simulated

LOG = "\n".join(f"step {i}" for i in range(500)) + "\ntorch.OutOfMemoryError: CUDA out of memory."
LOG_BYTES = 256


@dataclass
class Harness:
    """A gateway over NODES; `kill` has the cluster kill a running job for memory, writing `LOG`."""

    gateway: ClusterGateway
    settle: Callable[[], None]
    kill: Callable[[str], None]


def simulated_kills() -> Harness:
    base = simulated()
    return Harness(base.gateway, base.settle, kill=lambda job_id: None)  # the job's memory kills it


def kubernetes_kills(request) -> Harness:
    servers, gateways = fake_clusters(request, log_bytes=LOG_BYTES)

    def kill(job_id: str) -> None:
        servers["east"].finish("default", job_id, outcome="failed", reason=OOM_REASON, log=LOG)

    def settle() -> None:
        for server in servers.values():
            server.finish_all()

    return Harness(_SyncedClusters(gateways), settle, kill)


@pytest.fixture(
    params=[
        simulated_kills,
        pytest.param(kubernetes_kills, marks=[pytest.mark.integration, pytest.mark.kubernetes]),
    ],
    ids=lambda factory: factory.__name__,
)
def harness(request) -> Harness:
    return request.param(request) if request.param is kubernetes_kills else request.param()


def test_an_oom_kill_ends_failed_and_only_that_end_carries_a_bounded_tail(harness):
    gw = harness.gateway
    # ResNet-18 at batch 4096 needs far more than a 16 GB card holds (cpn.sim.memory).
    big = JobSpec("big", "ResNet-18", batch_size=4096, total_steps=600, image="resnet:1", cpu=2)
    gw.submit(big, Placement("big", "east", "gpu-0", 1))
    gw.submit(job("fine"), Placement("fine", "east", "gpu-1", 1))
    harness.kill("big")
    harness.settle()
    events = gw.poll_events() + gw.poll_events()
    ends = {e.job_id: e for e in events if e.kind != "running"}
    assert (ends["big"].kind, ends["big"].reason) == ("failed", OOM_REASON)
    assert ends["fine"].kind == "succeeded"
    tail = ends["big"].log_tail
    # The end of what the job wrote, whole lines, within the bound; the simulator has no log at all.
    assert LOG.endswith(tail) and len(tail.encode()) <= LOG_BYTES
    assert tail == "" or tail.splitlines()[-1] == "torch.OutOfMemoryError: CUDA out of memory."
    assert [e.log_tail for e in events if e is not ends["big"]] == [""] * (len(events) - 1)
