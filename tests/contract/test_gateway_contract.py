"""The ClusterGateway contract, run against every implementation.

To add one, write a factory that builds it over NODES and returns a Harness whose `settle` lets every
submitted job run to its end, and append it to IMPLEMENTATIONS. The Kubernetes gateway runs here with the
real `kubernetes` client against one fake API server per cluster (cpn/adapters/kubernetes/fake_apiserver.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from cpn.adapters.clusters import ClusterSet
from cpn.adapters.gateway import DELETED_REASON, ClusterGateway, SubmitRejected
from cpn.clock import SimClock
from cpn.decisions import Placement
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.intake import parse_manifests
from cpn.inventory import Node
from cpn.jobs import JobSpec
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import GroundTruth

if TYPE_CHECKING:
    from cpn.adapters.kubernetes import KubernetesGateway

NODES = (
    Node("east", "gpu-0", "Tesla-V100-SXM2-16GB", 4, 16, 32, "training"),
    Node("west", "gpu-0", "Tesla-P100-PCIE-16GB", 2, 16, 16, "hybrid"),
    Node("east", "gpu-1", "Tesla-V100-SXM2-16GB", 4, 16, 32, "training"),
)
ALL_FREE = {"east/gpu-0": 4, "west/gpu-0": 2, "east/gpu-1": 4}


def job(job_id: str, gpus: int = 1, **kw) -> JobSpec:
    """A job every implementation can run to success."""
    return JobSpec(
        job_id=job_id,
        model="ResNet-18",
        batch_size=32,
        num_gpus=gpus,
        total_steps=600,
        image="resnet:1",
        cpu=2,
        **kw,
    )


@dataclass
class Harness:
    """A gateway over NODES and a way to let its submitted jobs finish."""

    gateway: ClusterGateway
    settle: Callable[[], None]


def simulated() -> Harness:
    table = ThroughputTable(
        [ThroughputRow("ResNet-18", 32, gpu, n, 20.0) for gpu in ("v100", "p100") for n in (1, 2, 4)]
    )
    gateway = SimulatedGateway(NODES, GroundTruth(table), SimClock())

    def settle() -> None:
        while (t := gateway.next_event_time()) is not None:
            gateway.advance(t)

    return Harness(gateway, settle)


class _SyncedClusters(ClusterSet):
    """Kubernetes gateways, one per cluster of NODES, routed by cluster name as the composition root does.

    `poll_events` first relists (KubernetesGateway.sync), so that what the fake API server did is seen at
    once rather than when a watch thread gets to it.
    """

    def __init__(self, gateways: dict[str, KubernetesGateway]) -> None:
        super().__init__(gateways)
        self.kubernetes = gateways

    def poll_events(self):
        for gw in self.kubernetes.values():
            gw.sync()
        return super().poll_events()


def fake_clusters(request, **gateway_kw) -> tuple[dict, dict]:
    """(servers, gateways) by cluster: a fake API server with NODES per cluster and a Kubernetes gateway
    on it (`gateway_kw` go to the gateway), all stopped when the test ends."""
    # Imported here: the kubernetes client takes seconds to import, and the unit run never needs it.
    from cpn.adapters.kubernetes.fake_apiserver import FakeApiServer
    from tests.kubernetes.conftest import gpu_labels, make_gateway

    servers, gateways = {}, {}
    for cluster in dict.fromkeys(n.cluster for n in NODES):
        server = servers[cluster] = FakeApiServer().start()
        request.addfinalizer(server.stop)
        for n in (n for n in NODES if n.cluster == cluster):
            labels = gpu_labels(n.usage, n.gpu_product, n.gpu_count, int(n.gpu_memory_gb * 1024))
            server.add_node(n.name, labels, n.gpu_count, cpu=f"{n.cpu_cores:g}")
        gateways[cluster] = make_gateway(server, cluster, **gateway_kw)
        request.addfinalizer(gateways[cluster].close)
    return servers, gateways


def kubernetes(request) -> Harness:
    servers, gateways = fake_clusters(request)

    def settle() -> None:
        for server in servers.values():
            server.finish_all()
        for gw in gateways.values():  # the gateways see the ends now, not when their watches get to them
            gw.sync()

    return Harness(_SyncedClusters(gateways), settle)


IMPLEMENTATIONS: list[Callable[..., Harness]] = [
    simulated,
    pytest.param(kubernetes, marks=[pytest.mark.integration, pytest.mark.kubernetes]),
]


@pytest.fixture(params=IMPLEMENTATIONS, ids=lambda factory: factory.__name__)
def harness(request) -> Harness:
    return request.param(request) if request.param is kubernetes else request.param()


def free_gpus(gateway: ClusterGateway) -> dict[str, int]:
    return {s.node.key: s.free_gpus for s in gateway.inventory()}


def test_inventory_lists_every_node_with_all_cards_free(harness):
    assert free_gpus(harness.gateway) == ALL_FREE
    assert all(s.running == () and s.cpu_used == 0 and s.shared == () for s in harness.gateway.inventory())


def test_submitted_job_is_seen_running_then_ends(harness):
    gw = harness.gateway
    gw.submit(job("j1"), Placement("j1", "east", "gpu-0", 1))
    assert [(e.job_id, e.kind) for e in gw.poll_events()] == [("j1", "running")]
    assert gw.poll_events() == []
    harness.settle()
    (end,) = gw.poll_events()
    assert (end.job_id, end.kind) == ("j1", "succeeded")
    # Measured memory, where the cluster's metrics have it, is what one card of the node held.
    assert end.gpu_mem_gb is None or 0 < end.gpu_mem_gb <= NODES[0].gpu_memory_gb


def test_inventory_holds_the_cards_while_a_job_runs_and_releases_them(harness):
    gw = harness.gateway
    gw.submit(job("gang", gpus=2), Placement("gang", "west", "gpu-0", 2))
    gw.submit(job("one"), Placement("one", "east", "gpu-0", 1))
    assert free_gpus(gw) == {**ALL_FREE, "east/gpu-0": 3, "west/gpu-0": 0}
    (west,) = [s for s in gw.inventory() if s.node.cluster == "west"]
    assert (west.running, west.cpu_used) == (("gang",), 2)
    harness.settle()
    assert free_gpus(gw) == ALL_FREE
    assert all(s.running == () for s in gw.inventory())
    assert sorted(e.kind for e in gw.poll_events()) == ["running", "running", "succeeded", "succeeded"]


@pytest.mark.parametrize(
    ("spec", "placement"),
    [
        (job("big", gpus=3), Placement("big", "west", "gpu-0", 3)),
        (job("big"), Placement("big", "east", "no-such-node", 1)),
        (job("big"), Placement("big", "nowhere", "gpu-0", 1)),
        (job("big", gpus=4), Placement("big", "east", "gpu-0", 2)),
        (job("big", gpus=4), Placement("big", "east", "gpu-0", 2, (("gpu-0", 2),))),
        (job("big", gpus=4), Placement("big", "east", "gpu-0", 2, (("no-such-node", 2),))),
        (
            JobSpec("serve", model="ResNet-18", kind="inference", total_steps=1),
            Placement("serve", "east", "gpu-0", 1),
        ),
    ],
    ids=[
        "too-many-gpus",
        "unknown-node",
        "unknown-cluster",
        "fewer-cards-than-the-job",
        "node-twice",
        "unknown-gang-node",
        "pool-the-job-may-not-use",
    ],
)
def test_submit_the_cluster_cannot_run_is_rejected_and_changes_nothing(harness, spec, placement):
    gw = harness.gateway
    with pytest.raises(SubmitRejected):
        gw.submit(spec, placement)
    assert gw.poll_events() == []
    assert free_gpus(gw) == ALL_FREE


def test_cards_held_by_running_jobs_are_not_handed_out_twice(harness):
    gw = harness.gateway
    gw.submit(job("a", gpus=2), Placement("a", "west", "gpu-0", 2))
    with pytest.raises(SubmitRejected):
        gw.submit(job("b"), Placement("b", "west", "gpu-0", 1))
    harness.settle()
    gw.submit(job("b"), Placement("b", "west", "gpu-0", 1))


def test_a_gang_holds_cards_on_all_its_nodes_at_once_and_releases_them_together(harness):
    gw = harness.gateway
    gw.submit(job("gang", gpus=8), Placement("gang", "east", "gpu-0", 4, (("gpu-1", 4),)))
    assert free_gpus(gw) == {**ALL_FREE, "east/gpu-0": 0, "east/gpu-1": 0}
    assert [s.running for s in gw.inventory() if s.node.cluster == "east"] == [("gang",), ("gang",)]
    assert [(e.job_id, e.kind) for e in gw.poll_events()] == [("gang", "running")]
    harness.settle()
    assert free_gpus(gw) == ALL_FREE
    assert [(e.job_id, e.kind) for e in gw.poll_events()] == [("gang", "succeeded")]


def test_jobs_that_ask_to_share_share_one_card(harness):
    gw = harness.gateway
    for name in ("a", "b"):
        gw.submit(job(name, gpu_share=0.5), Placement(name, "west", "gpu-0", 1))
    (west,) = [s for s in gw.inventory() if s.node.cluster == "west"]
    assert (west.free_gpus, [c.free_share for c in west.shared], west.running) == (1, [0.0], ("a", "b"))
    with pytest.raises(SubmitRejected):
        gw.submit(job("whole", gpus=2), Placement("whole", "west", "gpu-0", 2))
    harness.settle()
    assert free_gpus(gw) == ALL_FREE


def test_held_jobs_are_the_submitted_ones_until_their_end_is_polled(harness):
    gw = harness.gateway
    assert gw.held_jobs() == frozenset()
    gw.submit(job("j1"), Placement("j1", "east", "gpu-0", 1))
    assert gw.held_jobs() == {"j1"}
    harness.settle()
    assert gw.held_jobs() == {"j1"}  # ended, but the end is not handed out yet
    assert [e.kind for e in gw.poll_events()] == ["running", "succeeded"]
    assert gw.held_jobs() == frozenset()


SERVICE_MANIFEST = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat}
spec:
  replicas: 1
  selector: {matchLabels: {app: chat}}
  template:
    metadata: {labels: {app: chat}}
    spec:
      containers: [{name: m, image: "srv:1", resources: {limits: {nvidia.com/gpu: 1}}}]
---
apiVersion: v1
kind: Service
metadata: {name: chat}
spec: {selector: {app: chat}, ports: [{port: 80}]}
"""


@pytest.mark.parametrize(
    ("spec", "placement", "end"),
    [
        (job("train", gpus=2), Placement("train", "east", "gpu-0", 2), "failed"),
        (
            JobSpec("team/chat", "ResNet-18", kind="inference", image="srv:1", manifest=SERVICE_MANIFEST),
            Placement("team/chat", "west", "gpu-0", 1),
            "succeeded",
        ),
    ],
    ids=["training-job", "service"],
)
def test_deleting_a_job_frees_its_cards_at_once_and_reports_its_end(harness, spec, placement, end):
    gw = harness.gateway
    gw.submit(spec, placement)
    assert [(e.job_id, e.kind) for e in gw.poll_events()] == [(spec.job_id, "running")]
    assert free_gpus(gw) != ALL_FREE
    gw.delete(spec.job_id)
    assert free_gpus(gw) == ALL_FREE
    (gone,) = gw.poll_events()
    # A service runs until deleted: that is its end; a training job deleted did not finish.
    assert (gone.job_id, gone.kind, gone.reason) == (spec.job_id, end, DELETED_REASON)
    assert gw.held_jobs() == frozenset()
    gw.delete(spec.job_id)  # deleting again, or a job never submitted, changes nothing
    gw.delete("never-submitted")
    harness.settle()
    assert gw.poll_events() == [] and free_gpus(gw) == ALL_FREE


KIND_MANIFESTS = Path(__file__).parent.parent / "data" / "kinds"
"""Manifests of every workload kind, from each project's own examples (tests/unit/test_intake_kinds.py)."""

SMALLER = {
    "lws": lambda d: (
        d["spec"].update(replicas=1)
        or [
            t["spec"]["containers"][0]["resources"]["limits"].update({"nvidia.com/gpu": "1"})
            for t in (
                d["spec"]["leaderWorkerTemplate"]["leaderTemplate"],
                d["spec"]["leaderWorkerTemplate"]["workerTemplate"],
            )
        ]
    ),
    "trainjob": lambda d: d["spec"]["trainer"].update(numNodes=2),
}
"""Shrinks that fit a kind's example on NODES (LeaderWorkerSet: one group of two one-GPU pods; TrainJob: two
nodes' pods of 2 GPUs)."""


def kind_job(name: str) -> JobSpec:
    """The example of one kind, read by intake, as a job every implementation can run."""
    doc = yaml.safe_load((KIND_MANIFESTS / f"{name}.yaml").read_text())
    SMALLER.get(name, lambda d: None)(doc)
    (spec,) = parse_manifests(yaml.safe_dump(doc))
    return replace(spec, model="ResNet-18", batch_size=32, total_steps=600, cpu=2, node_pools=())


KIND_NAMES = sorted(p.stem for p in KIND_MANIFESTS.glob("*.yaml"))


@pytest.mark.parametrize("name", KIND_NAMES)
def test_a_job_of_every_kind_runs_as_placed_ends_and_is_deleted_by_its_kind(harness, name):
    spec = kind_job(name)
    cluster = "west" if spec.kind == "inference" else "east"
    gw = harness.gateway
    gw.submit(spec, Placement(spec.job_id, cluster, "gpu-0", spec.num_gpus))
    assert [(e.job_id, e.kind) for e in gw.poll_events()] == [(spec.job_id, "running")]
    assert free_gpus(gw)[f"{cluster}/gpu-0"] == ALL_FREE[f"{cluster}/gpu-0"] - spec.num_gpus
    if spec.kind == "training" and name != "raycluster":  # a RayCluster has no end of its own
        harness.settle()
        (end,) = gw.poll_events()
        assert (end.job_id, end.kind) == (spec.job_id, "succeeded")
        assert free_gpus(gw) == ALL_FREE
        spec = replace(spec, job_id=f"{spec.job_id}-again")  # another job of the kind, to delete
        gw.submit(spec, Placement(spec.job_id, cluster, "gpu-0", spec.num_gpus))
        assert [e.kind for e in gw.poll_events()] == ["running"]
    gw.delete(spec.job_id)
    (gone,) = gw.poll_events()
    end = "succeeded" if spec.kind == "inference" else "failed"  # a service's end is its deletion
    assert (gone.job_id, gone.kind, gone.reason) == (spec.job_id, end, DELETED_REASON)
    assert free_gpus(gw) == ALL_FREE and gw.held_jobs() == frozenset()
