"""Devices read right, as the fake API server receives them: a GKE accelerator pin swapped for a selector
the chosen node matches (on every pod template of the kind), the ConfigMap and claim a job's pods need
created beside it, DRA claims bound without a `nvidia.com/gpu` beside them, and default cards bound to the
template intake counted them on."""

from __future__ import annotations

import pytest
import yaml

from cpn.adapters.kubernetes import KubernetesBinder, validate_object
from cpn.decisions import Placement
from cpn.intake import read_manifests
from cpn.inventory import Node
from tests.kubernetes.conftest import DOMAIN, gpu_labels, make_gateway, seed_taints
from tests.unit.test_devices import CONFIGMAP_JOB, GKE_JOB, MIG_JOB, WHOLE_GPU_TEMPLATE
from tests.unit.test_intake_kinds_devices import kind_doc, rayjob_with_cpu_head

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

A100 = "NVIDIA-A100-SXM4-40GB"
JOBS = ("batch", "jobs")


def matches(term: dict, labels: dict[str, str]) -> bool:
    """Whether a node with `labels` matches every In expression of a node-selector term."""
    return all(
        labels.get(e["key"]) in e["values"]
        for e in term.get("matchExpressions") or []
        if e["operator"] == "In"
    )


def test_a_gke_accelerator_pin_reaches_the_cluster_as_a_selector_the_chosen_node_matches(server):
    labels = gpu_labels("training", A100, 8, 40960)
    server.add_node("a-0", labels, 8, taints=seed_taints("training", A100))
    ((spec, _),) = read_manifests(GKE_JOB)
    gw = make_gateway(server)
    gw.submit(spec, Placement(spec.job_id, "east", "a-0", 2))
    obj = server.get(JOBS, "default", "gemma-finetune")
    validate_object(obj, "1.30")
    pod = obj["spec"]["template"]["spec"]
    assert "cloud.google.com/gke-accelerator" not in (pod.get("nodeSelector") or {})
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]} in term["matchExpressions"]
    (node,) = server.objects[("", "nodes")].values()
    assert matches(term, node["metadata"]["labels"])  # the user's GKE pin would match no node here


def test_the_configmap_and_claim_the_pods_need_are_created_with_the_job(server):
    server.add_node(
        "t-0", gpu_labels("training", "Tesla-T4", 4, 15360), 4, taints=seed_taints("training", "Tesla-T4")
    )
    ((spec, _),) = read_manifests(CONFIGMAP_JOB)
    gw = make_gateway(server)
    gw.submit(spec, Placement(spec.job_id, "east", "t-0", 1))
    job = server.get(JOBS, "team", "train")
    assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
    config = server.get(("", "configmaps"), "team", "special-config")
    assert config is not None and config["data"] == {"SPECIAL_LEVEL": "very", "SPECIAL_TYPE": "charm"}
    assert server.get(("", "persistentvolumeclaims"), "team", "imagenet") is not None


def test_a_dra_claim_is_bound_with_its_template_and_no_gpu_limit_beside_it():
    node = Node("c", "dra-0", A100, 8, 40, 96, "training", device_classes=("mig.nvidia.com",))
    ((spec, _),) = read_manifests(MIG_JOB)
    workload, template = KubernetesBinder(DOMAIN, lambda cluster, name: node).bind(
        spec, Placement(spec.job_id, "c", "dra-0", 1)
    )
    container = workload["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in (container.get("limits") or {}) | (container.get("requests") or {})
    assert workload["spec"]["template"]["spec"]["resourceClaims"] == [
        {"name": "mig-devices", "resourceClaimTemplateName": "mig-devices"}
    ]
    assert (template["kind"], template["metadata"]["namespace"]) == ("ResourceClaimTemplate", "default")
    assert yaml.safe_dump(template).count("mig.nvidia.com") == 4


def test_a_live_node_runs_hami_when_hamis_device_plugin_registered_it(server):
    server.add_node("plain-0", gpu_labels("training", "Tesla-T4", 4, 15360), 4)
    server.add_node("hami-0", gpu_labels("training", "Tesla-T4", 4, 15360), 4)
    (hami,) = [n for n in server.objects[("", "nodes")].values() if n["metadata"]["name"] == "hami-0"]
    # HAMi's device plugin writes its cards there: a JSON array, one object per card (Project-HAMi/HAMi docs).
    card = '{"id": "GPU-0", "count": 10, "devmem": 15360, "devcore": 100, "type": "NVIDIA-Tesla T4"}'
    hami["metadata"]["annotations"] = {"hami.io/node-nvidia-register": f"[{card}]"}
    states = {s.node.name: s.node.hami for s in make_gateway(server).inventory()}
    assert states == {"plain-0": False, "hami-0": True}


def test_the_dra_manifests_read_are_the_real_apis():
    """The claim objects the tests read are valid resource.k8s.io objects (v1beta1 from 1.32, v1 in 1.34),
    and the workload bound around them valid for 1.34."""
    node = Node("c", "dra-0", A100, 8, 40, 96, "training", device_classes=("mig.nvidia.com",))
    ((spec, _),) = read_manifests(MIG_JOB)
    workload, template = KubernetesBinder(DOMAIN, lambda cluster, name: node).bind(
        spec, Placement(spec.job_id, "c", "dra-0", 1)
    )
    validate_object(template, "1.32")
    validate_object(workload, "1.34")
    v1 = yaml.safe_load(WHOLE_GPU_TEMPLATE)
    validate_object(v1, "1.34")


def test_a_pytorchjob_pinned_by_gkes_label_reaches_the_cluster_pinned_to_the_chosen_card_on_every_replica(
    server,
):
    server.add_node("a-0", gpu_labels("training", A100, 8, 40960), 8, taints=seed_taints("training", A100))
    doc = kind_doc("pytorchjob")
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {
            "cloud.google.com/gke-accelerator": "nvidia-tesla-a100"
        }
    ((spec, _),) = read_manifests(yaml.safe_dump(doc))
    make_gateway(server).submit(spec, Placement(spec.job_id, "east", "a-0", 2))
    obj = server.get(("kubeflow.org", "pytorchjobs"), "default", "pytorch-dist-mnist-nccl")
    (node,) = server.objects[("", "nodes")].values()
    for replica in obj["spec"]["pytorchReplicaSpecs"].values():
        pod = replica["template"]["spec"]
        assert "cloud.google.com/gke-accelerator" not in (pod.get("nodeSelector") or {})
        (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100]} in term[
            "matchExpressions"
        ]
        assert matches(term, node["metadata"]["labels"])


def test_a_jobset_is_created_with_the_configmap_its_workers_mount(server):
    server.add_node(
        "t-0", gpu_labels("training", "Tesla-T4", 4, 15360), 4, taints=seed_taints("training", "Tesla-T4")
    )
    doc = kind_doc("jobset")
    workers = doc["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    workers["volumes"] = [{"name": "config", "configMap": {"name": "train-config"}}]
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "train-config"},
        "data": {"a": "1"},
    }
    ((spec, _),) = read_manifests(yaml.safe_dump_all([doc, config]))
    make_gateway(server).submit(spec, Placement(spec.job_id, "east", "t-0", 4))
    assert server.get(("jobset.x-k8s.io", "jobsets"), "default", "pytorch-gpus") is not None
    created = server.get(("", "configmaps"), "default", "train-config")
    assert created is not None and created["data"] == {"a": "1"}


def test_a_rayjobs_default_cards_are_bound_to_its_pinned_workers_not_its_cpu_head():
    node = Node("c", "h20-0", "NVIDIA-H20", 8, 96, 96, "training")
    doc = rayjob_with_cpu_head()
    worker = doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    del worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    worker["tolerations"] = [
        {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": "NVIDIA-H20", "effect": "NoSchedule"}
    ]
    ((spec, _),) = read_manifests(yaml.safe_dump(doc))
    (workload,) = KubernetesBinder(DOMAIN, lambda cluster, name: node).bind(
        spec, Placement(spec.job_id, "c", "h20-0", spec.num_gpus)
    )
    cluster = workload["spec"]["rayClusterSpec"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    assert "nvidia.com/gpu" not in head.get("limits", {})
    assert worker["limits"]["nvidia.com/gpu"] == worker["requests"]["nvidia.com/gpu"] == "1"
