"""The device rules of intake (cpn.devices pins, priorityClassName, the CPU-only rule, companions, other
schedulers' queue labels) hold on every workload kind, over the pod templates `cpn.workloads` finds: the
manifests are the projects' own examples (tests/data/kinds/) with what a user of each would add."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cpn.intake import CPU_ONLY_REASON, IntakeError, read_manifests

KINDS = Path(__file__).parent.parent / "data" / "kinds"


def kind_doc(name: str) -> dict:
    return yaml.safe_load((KINDS / f"{name}.yaml").read_text())


def read(*docs: dict):
    ((spec, reading),) = read_manifests(yaml.safe_dump_all(docs), "job.yaml")
    return spec, reading


def test_a_pytorchjob_pinned_by_gkes_accelerator_label_on_every_replica_is_pinned_to_that_card():
    doc = kind_doc("pytorchjob")
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["nodeSelector"] = {
            "cloud.google.com/gke-accelerator": "nvidia-tesla-a100"
        }
    spec, reading = read(doc)
    assert (spec.num_gpus, spec.gpu_products, reading.gpu_products) == (2, ("a100-40gb",), ("a100-40gb",))


def test_a_pytorchjob_whose_replicas_pin_different_cards_is_refused():
    doc = kind_doc("pytorchjob")
    specs = doc["spec"]["pytorchReplicaSpecs"]
    specs["Master"]["template"]["spec"]["nodeSelector"] = {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    specs["Worker"]["template"]["spec"]["nodeSelector"] = {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"
    }
    with pytest.raises(IntakeError) as info:
        read(doc)
    assert any("pins name different cards" in p.reason for p in info.value.problems)


def test_an_unreadable_gpu_label_on_a_worker_replica_is_refused_at_its_field():
    doc = kind_doc("pytorchjob")
    worker = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["nodeSelector"] = {"cloud.google.com/gke-accelerator": "nvidia-tesla-z900"}
    with pytest.raises(IntakeError) as info:
        read(doc)
    (problem,) = info.value.problems
    assert problem.field.startswith("spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector")


def test_a_jobset_carries_the_configmap_its_workers_mount_and_loses_its_kueue_queue():
    doc = kind_doc("jobset")
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "user-queue"}
    workers = doc["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]
    workers["volumes"] = [{"name": "config", "configMap": {"name": "train-config"}}]
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "train-config"},
        "data": {"a": "1"},
    }
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unrelated"}, "data": {"b": "2"}}
    spec, reading = read(config, other, doc)
    workload, *carried = yaml.safe_load_all(spec.manifest)
    assert [(o["kind"], o["metadata"]["name"]) for o in carried] == [("ConfigMap", "train-config")]
    assert "kueue.x-k8s.io/queue-name" not in workload["metadata"]["labels"]
    assert "carried with it: ConfigMap train-config" in reading.notes
    assert any(
        "removed other schedulers' queues (kueue.x-k8s.io/queue-name=user-queue)" in n for n in reading.notes
    )


def rayjob_with_cpu_head() -> dict:
    """The KubeRay RayJob example with its head made CPU-only and the RayCluster example's GPU workers."""
    doc = kind_doc("rayjob")
    cluster = doc["spec"]["rayClusterSpec"]
    cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}
    cluster["workerGroupSpecs"] = kind_doc("raycluster")["spec"]["workerGroupSpecs"]
    return doc


def test_a_rayjob_whose_head_is_cpu_only_is_accepted_for_its_gpu_workers():
    spec, reading = read(rayjob_with_cpu_head())
    assert (spec.num_gpus, spec.pod_gpus, reading.pods) == (2, (1, 1), 2)
    assert reading.workload == "ray.io/v1 RayJob"


def test_a_rayjob_whose_workers_pin_a_card_without_a_limit_gets_its_default_card_on_the_workers():
    doc = rayjob_with_cpu_head()
    worker = doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    del worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    worker["tolerations"] = [
        {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": "NVIDIA-H20", "effect": "NoSchedule"}
    ]
    spec, reading = read(doc)
    assert (spec.pod_gpus, spec.gpu_products) == ((1, 1), ("NVIDIA-H20",))
    assert "workerGroupSpecs[0].template, which pins a GPU" in reading.gpus_from


def test_a_rayjob_with_no_gpu_anywhere_is_refused_as_a_cpu_job():
    doc = rayjob_with_cpu_head()
    worker = doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    del worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    with pytest.raises(IntakeError) as info:
        read(doc)
    assert [p.reason for p in info.value.problems] == [CPU_ONLY_REASON]


def test_a_leaderworkerset_takes_its_priority_from_its_pods_priority_class_name():
    doc = kind_doc("lws")
    for template in doc["spec"]["leaderWorkerTemplate"].values():
        if isinstance(template, dict):
            template["spec"]["priorityClassName"] = "serving-high"
    high = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "serving-high"},
    }
    spec, reading = read({**high, "value": 100000}, doc)
    assert (spec.kind, spec.priority, reading.priority) == ("inference", 100000, 100000)
    assert "priority 100000 from priorityClassName serving-high" in reading.notes
    alone, said = read(doc)  # the class is not in the file: the cluster must define it
    assert alone.priority == 0 and any("serving-high is neither a PriorityClass" in n for n in said.notes)
