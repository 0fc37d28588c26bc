"""The workload kinds a cluster serves, as both gateways report and enforce them: a cluster without a
kind's CRD (west here: the simulated one declares no such kind, the fake API server answers 404 for the
Kubeflow group, as discovery meets a cluster without the Training Operator) lists nodes that do not serve
it, and refuses a job of that kind before it holds anything, naming the kind; built-in kinds run there."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cpn.adapters.gateway import SubmitRejected
from cpn.decisions import Placement
from cpn.rules import serves
from cpn.sim.gateway import SimulatedGateway
from tests.contract.test_gateway_contract import (
    ALL_FREE,
    NODES,
    Harness,
    free_gpus,
    job,
    kind_job,
    simulated,
)

KUBEFLOW = "/apis/kubeflow.org/"


def simulated_without_kubeflow() -> Harness:
    """The contract's simulated clusters, west declaring no CRD-defined kind (Cluster.workloads: [])."""
    base = simulated()
    assert isinstance(base.gateway, SimulatedGateway)
    nodes = tuple(replace(n, workloads=()) if n.cluster == "west" else n for n in NODES)
    gateway = SimulatedGateway(nodes, base.gateway.truth, base.gateway.clock)

    def settle() -> None:
        while (t := gateway.next_event_time()) is not None:
            gateway.advance(t)

    return Harness(gateway, settle)


def kubernetes_without_kubeflow(request) -> Harness:
    from tests.contract.test_gateway_contract import _SyncedClusters, fake_clusters

    servers, gateways = fake_clusters(request)
    servers["west"].fail("GET", KUBEFLOW, 404, times=10**6)  # no Kubeflow CRD on west

    def settle() -> None:
        for server in servers.values():
            server.finish_all()
        for gw in gateways.values():
            gw.sync()

    return Harness(_SyncedClusters(gateways), settle)


@pytest.fixture(
    params=[
        simulated_without_kubeflow,
        pytest.param(kubernetes_without_kubeflow, marks=[pytest.mark.integration, pytest.mark.kubernetes]),
    ],
    ids=["simulated", "kubernetes"],
)
def harness(request) -> Harness:
    factory = request.param
    return factory(request) if factory is kubernetes_without_kubeflow else factory()


def test_the_inventory_says_which_clusters_serve_the_kind(harness):
    spec = kind_job("pytorchjob")
    assert spec.workload == "kubeflow.org/v1/PyTorchJob"
    served = {s.node.key: serves(s.node, spec) for s in harness.gateway.inventory()}
    assert served == {"east/gpu-0": True, "east/gpu-1": True, "west/gpu-0": False}


def test_a_job_of_a_kind_the_cluster_lacks_is_refused_naming_it_and_holds_nothing(harness):
    gw = harness.gateway
    spec = kind_job("pytorchjob")
    with pytest.raises(SubmitRejected, match=r"cluster west does not serve PyTorchJob \(kubeflow.org/v1\)"):
        gw.submit(spec, Placement(spec.job_id, "west", "gpu-0", spec.num_gpus))
    assert gw.poll_events() == [] and free_gpus(gw) == ALL_FREE and gw.held_jobs() == frozenset()
    gw.submit(spec, Placement(spec.job_id, "east", "gpu-0", spec.num_gpus))  # where it is served
    gw.submit(job("plain"), Placement("plain", "west", "gpu-0", 1))  # a built-in kind runs anywhere
    assert sorted((e.job_id, e.kind) for e in gw.poll_events()) == [
        (spec.job_id, "running"),
        ("plain", "running"),
    ]
