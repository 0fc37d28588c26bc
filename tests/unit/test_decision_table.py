"""The decision table of a round and a round limited to some clusters, on literal data."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from cpn.decisions import Decision, Estimate, Placement, Rejection, Snapshot, Waiting
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.views.decision_table import decision_rows, only_clusters


def node(cluster: str, name: str, gpu: str) -> NodeState:
    spec = Node(
        cluster, name, gpu, gpu_count=4, gpu_memory_gb=16, cpu_cores=32, usage="training", gpu_key=gpu
    )
    return NodeState(spec, free_gpus=4)


SNAP = Snapshot(
    now=100.0,
    pending=(JobSpec("a/one", "ResNet-50"), JobSpec("a/two", "ResNet-50"), JobSpec("a/three", "A3C")),
    nodes=(node("east", "e0", "v100"), node("west", "w0", "k80")),
    estimates=MappingProxyType({"a/one": {"v100": Estimate(3600.0), "k80": Estimate(9000.0)}}),
    transfer_s=MappingProxyType({"a/one": {"east": 120.0, "west": 0.0}}),
)


def test_placed_rows_carry_the_estimate_of_the_nodes_gpu_type_and_the_transfer():
    decision = Decision(
        placements=(Placement("a/one", "east", "e0", 2),),
        rejections=(Rejection("a/three", "needs 99 GPUs"),),
        waiting=(
            Waiting(
                "a/two",
                "memory",
                "needs 40 GB",
                4000.0,
                4100.0,
                3900.0,
                4300.0,
                "a/one ended earlier than predicted",
            ),
        ),
    )
    rows = {r["job"]: r for r in decision_rows(SNAP, decision)}
    assert rows["a/one"] == {
        "job": "a/one",
        "outcome": "placed",
        "cluster": "east",
        "node": "e0",
        "gpus": 2,
        "predicted_runtime_s": 3600.0,
        "transfer_s": 120.0,
        "predicted_start_s": 220.0,
        "why": "",
        "moved": "",
    }
    assert rows["a/two"]["outcome"] == "waiting" and rows["a/two"]["why"] == "memory: needs 40 GB"
    assert rows["a/two"]["predicted_start_s"] == 4000.0 and rows["a/two"]["predicted_end_s"] == 4100.0
    assert (rows["a/two"]["start_low_s"], rows["a/two"]["start_high_s"]) == (3900.0, 4300.0)
    assert rows["a/two"]["moved"] == "a/one ended earlier than predicted"
    assert rows["a/three"]["outcome"] == "rejected" and rows["a/three"]["why"] == "needs 99 GPUs"


def test_only_clusters_keeps_their_nodes_and_names_unknown_ones():
    assert [n.node.cluster for n in only_clusters(SNAP, ["west"]).nodes] == ["west"]
    assert only_clusters(SNAP, []) is SNAP
    with pytest.raises(ValueError, match=r"\['north'\] are not in the inventory; known: \['east', 'west'\]"):
        only_clusters(SNAP, ["north", "east"])
