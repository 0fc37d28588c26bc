"""KubernetesBinder: the seed's label scheme added to the user's manifest, nothing of theirs lost."""

from __future__ import annotations

import pytest
import yaml

from cpn.adapters.kubernetes import BindError, KubernetesBinder, validate_object
from cpn.decisions import Placement
from cpn.inventory import Node
from cpn.jobs import JobSpec
from tests.kubernetes.conftest import DOMAIN, PRODUCT, USAGE

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

P100 = "Tesla-P100-PCIE-16GB"
NODES = {
    ("c", "a"): Node("c", "a", P100, 4, 16, 32, "hybrid"),
    ("c", "b"): Node("c", "b", P100, 4, 16, 32, "hybrid"),
}


def binder(**kw) -> KubernetesBinder:
    return KubernetesBinder(DOMAIN, lambda cluster, name: NODES[(cluster, name)], **kw)


def manifest(kind: str, pod_spec: dict, **spec) -> str:
    api = {"Deployment": "apps/v1", "Job": "batch/v1"}[kind]
    doc = {
        "apiVersion": api,
        "kind": kind,
        "metadata": {"name": "x"},
        "spec": {"template": {"spec": pod_spec}, **spec},
    }
    if kind == "Deployment":
        doc["spec"]["selector"] = {"matchLabels": {"app": "x"}}
        doc["spec"]["template"]["metadata"] = {"labels": {"app": "x"}}
    return yaml.safe_dump(doc)


def test_an_inference_job_keeps_the_users_affinity_and_loses_other_pools_and_products():
    pod_spec = {
        "containers": [{"name": "m", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        "tolerations": [
            {"key": USAGE, "operator": "Equal", "value": "training", "effect": "NoSchedule"},
            {"key": PRODUCT, "operator": "Equal", "value": "NVIDIA-H20", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Exists"},
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]},
                    ]
                }
            }
        },
    }
    job = JobSpec("ns/x", "m", kind="inference", manifest=manifest("Deployment", pod_spec))
    (obj,) = binder().bind(job, Placement("ns/x", "c", "a", 1))
    validate_object(obj, "1.30")
    spec = obj["spec"]["template"]["spec"]
    assert {(t["key"], t.get("value")) for t in spec["tolerations"]} == {
        ("dedicated", None),
        (USAGE, "inference"),
        (USAGE, "hybrid"),
        (PRODUCT, P100),
    }
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["z1"], ["z2"]]  # the user's, each kept
    assert all(
        t["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["a"]}] for t in terms
    )
    assert (
        obj["metadata"]["namespace"] == "ns" and obj["spec"]["template"]["metadata"]["labels"]["app"] == "x"
    )


def test_a_one_pod_job_over_two_nodes_runs_as_two_indexed_pods_of_equal_cards():
    pod_spec = {"restartPolicy": "Never", "containers": [{"name": "m", "image": "i"}]}
    job = JobSpec("ns/x", "m", num_gpus=8, manifest=manifest("Job", pod_spec))
    (obj,) = binder().bind(job, Placement("ns/x", "c", "a", 4, (("b", 4),)))
    validate_object(obj, "1.30")
    assert (obj["spec"]["parallelism"], obj["spec"]["completions"], obj["spec"]["completionMode"]) == (
        2,
        2,
        "Indexed",
    )
    container = obj["spec"]["template"]["spec"]["containers"][0]
    assert (
        container["resources"]["limits"]["nvidia.com/gpu"]
        == container["resources"]["requests"]["nvidia.com/gpu"]
    )
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    with pytest.raises(BindError, match="pods of equal cards"):
        binder().bind(job, Placement("ns/x", "c", "a", 3, (("b", 5),)))


def test_on_hami_a_job_sharing_a_card_asks_for_its_share_of_memory_and_cores():
    job = JobSpec("ns/x", "m", image="i", gpu_share=0.25)
    (obj,) = binder(hami=True, hami_resource_pool="poc").bind(job, Placement("ns/x", "c", "a", 1))
    validate_object(obj, "1.30")
    template = obj["spec"]["tasks"][0]["template"]
    limits = template["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpumem"], limits["nvidia.com/gpucores"]) == ("4096", "25")
    assert template["metadata"]["annotations"]["hami.io/resource-pool"] == "poc"
