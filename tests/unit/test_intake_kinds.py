"""Intake of every workload kind cpn accepts (cpn.workloads), on manifests from each project's own examples
(tests/data/kinds/, each citing its source): GPUs, gang, kind of job, priority; versions, generateName, the
kind error, and the CRD schema check."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from cpn.crd_schemas import served_versions
from cpn.intake import IntakeError, Reading, parse_manifests, read_manifests
from cpn.workloads import WORKLOADS, workload_of

KINDS = Path(__file__).parent.parent / "data" / "kinds"


def manifest(name: str) -> str:
    return (KINDS / f"{name}.yaml").read_text()


def problems(text: str) -> list:
    with pytest.raises(IntakeError) as info:
        parse_manifests(text)
    return info.value.problems


@pytest.mark.parametrize(
    ("name", "kind", "gpus", "pod_gpus", "priority"),
    [
        ("pytorchjob", "training", 2, (1, 1), 0),  # Master 1 + Worker 1, one GPU each
        ("tfjob", "training", 2, (1, 1), 5),  # 2 workers of one GPU; chief and ps hold none
        ("mpijob", "training", 2, (1, 1), 0),  # the launcher holds none
        ("mpijob-v2beta1", "training", 2, (1, 1), 0),  # the MPI Operator's version
        ("trainjob", "training", 6, (2, 2, 2), 0),  # numNodes 3 x resourcesPerNode 2
        ("jobset", "training", 4, (1, 1, 1, 1), 0),  # workers: replicas 2 x parallelism 2
        ("lws", "inference", 32, (8, 8, 8, 8), 0),  # 2 groups x (leader + 1 worker) x 8
        ("rayjob", "training", 4, (), 0),  # one head of 4 GPUs
        ("raycluster", "training", 2, (1, 1), 0),  # CPU head, 2 GPU workers
        ("rayservice", "inference", 1, (), 0),  # CPU head, 1 GPU worker
        ("inferenceservice", "inference", 1, (), 0),  # predictor, minReplicas 1 by default
        ("pod", "training", 1, (), 0),
    ],
)
def test_each_kind_is_counted_whole_as_one_gang(name, kind, gpus, pod_gpus, priority):
    ((spec, reading),) = read_manifests(manifest(name), f"{name}.yaml")
    assert (spec.kind, spec.num_gpus, spec.pod_gpus, spec.priority) == (kind, gpus, pod_gpus, priority)
    assert reading.gpus_from.startswith('resources.limits["nvidia.com/gpu"]')
    original = yaml.safe_load(manifest(name))
    assert yaml.safe_load(spec.manifest)["kind"] == original["kind"]
    assert reading.workload == f"{original['apiVersion']} {original['kind']}" and reading.name_from == ""


def test_lws_counts_size_minus_one_workers_per_group():
    doc = yaml.safe_load(manifest("lws"))
    doc["spec"]["leaderWorkerTemplate"]["size"] = 4  # 1 leader + 3 workers per group
    (spec,) = parse_manifests(yaml.safe_dump(doc))
    assert spec.num_gpus == 2 * 4 * 8


def test_ray_worker_group_without_replicas_counts_its_min_replicas_and_hosts():
    doc = yaml.safe_load(manifest("raycluster"))
    group = doc["spec"]["workerGroupSpecs"][0]
    del group["replicas"]
    group["numOfHosts"] = 2
    (spec,) = parse_manifests(yaml.safe_dump(doc))
    assert spec.pod_gpus == (1, 1)  # minReplicas 1 x 2 hosts


def test_inference_service_scaled_to_zero_still_needs_one_pod():
    doc = yaml.safe_load(manifest("inferenceservice"))
    doc["spec"]["predictor"]["minReplicas"] = 0
    (spec,) = parse_manifests(yaml.safe_dump(doc))
    assert (spec.num_gpus, spec.image) == (1, "")  # the serving runtime supplies the image


def test_every_served_version_of_a_crd_is_accepted_and_listed():
    for workload in WORKLOADS:
        if workload.crds:
            assert set(workload.versions) == set(served_versions(workload)), workload.kind


def test_ray_v1alpha1_is_accepted_and_an_unknown_version_names_the_supported_ones():
    text = manifest("raycluster")
    (spec,) = parse_manifests(text.replace("ray.io/v1\n", "ray.io/v1alpha1\n"))
    assert spec.num_gpus == 2
    (problem,) = problems(text.replace("ray.io/v1\n", "ray.io/v2\n"))
    assert problem.field == "apiVersion"
    assert "'ray.io/v2'" in problem.reason and problem.reason.endswith("use ray.io/v1 or ray.io/v1alpha1")


def test_a_known_kind_in_another_group_names_the_api_versions_it_has():
    doc = yaml.safe_load(manifest("pod"))
    doc["apiVersion"] = "apps/v1"
    doc["kind"] = "Job"
    (problem,) = problems(yaml.safe_dump(doc))
    assert problem.field == "apiVersion" and problem.reason.endswith(
        "use batch/v1 or batch.volcano.sh/v1alpha1"
    )


def test_kind_error_lists_the_supported_kinds_and_hints_only_a_close_match():
    doc = yaml.safe_load(manifest("pytorchjob"))
    doc["kind"] = "PytorchJob"
    (typo,) = problems(yaml.safe_dump(doc))
    assert typo.field == "kind" and "did you mean 'PyTorchJob'?" in typo.reason
    assert all(w.kind in typo.reason for w in WORKLOADS) and "case-sensitive" not in typo.reason
    doc["kind"] = "Notebook"
    (far,) = problems(yaml.safe_dump(doc))
    assert "did you mean" not in far.reason and "InferenceService" in far.reason


def test_generate_name_gets_a_deterministic_name_that_differs_with_the_content():
    doc = yaml.safe_load(manifest("pod"))
    del doc["metadata"]["name"]
    doc["metadata"]["generateName"] = "gpu-pod-"
    (a,) = parse_manifests(yaml.safe_dump(doc))
    (again,) = parse_manifests(yaml.safe_dump(doc))
    doc["spec"]["containers"][0]["args"] = ["--other"]
    (b,) = parse_manifests(yaml.safe_dump(doc))
    assert a.job_id == again.job_id and a.job_id != b.job_id
    assert a.job_id.startswith("default/gpu-pod-") and len(a.job_id) == len("default/gpu-pod-") + 10
    assert yaml.safe_load(a.manifest)["metadata"]["name"] == a.job_id.split("/")[1]
    ((_, reading),) = read_manifests(yaml.safe_dump(doc))
    assert "generateName 'gpu-pod-'" in reading.name_from and "named by generateName" in reading.summary()
    assert Reading.of(b) == reading  # told again from the stored manifest


def test_a_custom_resource_its_crd_schema_refuses_is_refused_naming_the_field():
    doc = yaml.safe_load(manifest("pytorchjob"))
    doc["spec"]["runPolicy"] = {"backoffLimit": "three"}
    (problem,) = problems(yaml.safe_dump(doc))
    assert problem.field == "spec.runPolicy.backoffLimit"
    assert "'three' is not of type 'integer'" in problem.reason and "CRD schema" in problem.reason


def test_a_trainjob_without_runtime_ref_is_refused_by_its_schema():
    doc = yaml.safe_load(manifest("trainjob"))
    del doc["spec"]["runtimeRef"]
    (problem,) = problems(yaml.safe_dump(doc))
    assert "runtimeRef" in problem.reason and "Kubeflow Trainer TrainJob CRD schema" in problem.reason


def test_a_jobset_without_replicated_jobs_names_where_they_go():
    doc = yaml.safe_load(manifest("jobset"))
    doc["spec"]["replicatedJobs"] = "none"
    (problem,) = problems(yaml.safe_dump(doc))
    assert problem.field == "spec.replicatedJobs" and "JobSet" in problem.reason


def test_pod_counts_beyond_the_limit_are_refused_without_being_multiplied_out():
    doc = yaml.safe_load(manifest("jobset"))
    doc["spec"]["replicatedJobs"][1]["replicas"] = 1000
    doc["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"] = 1000
    (problem, *_) = problems(yaml.safe_dump(doc))
    assert "1,000,000 pods in all" in problem.reason


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "manifests"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_example_is_accepted_and_read_back_alike(path):
    for spec, reading in read_manifests(path.read_text(), path.name):
        assert spec.num_gpus >= 1 and Reading.of(spec) == replace(reading, notes=())  # notes: at the door


def test_the_schema_is_checked_after_the_api_servers_and_webhooks_defaults():
    ray = yaml.safe_load(manifest("raycluster"))
    del ray["spec"]["workerGroupSpecs"][0]["maxReplicas"]  # required, but defaulted by the CRD
    ray["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["command"] = None  # dropped
    jobset = yaml.safe_load(manifest("jobset"))
    jobset["spec"]["failurePolicy"] = {
        "maxRestarts": 1,
        "rules": [{"action": "FailJobSet"}],
    }  # named by JobSet
    (a,) = parse_manifests(yaml.safe_dump(ray))
    (b,) = parse_manifests(yaml.safe_dump(jobset))
    assert "maxReplicas" not in yaml.safe_load(a.manifest)["spec"]["workerGroupSpecs"][0]  # stored as written
    assert "name" not in yaml.safe_load(b.manifest)["spec"]["failurePolicy"]["rules"][0]
    jobset["spec"]["failurePolicy"]["rules"][0]["action"] = "Explode"
    (problem,) = problems(yaml.safe_dump(jobset))
    assert (
        problem.field == "spec.failurePolicy.rules[0].action" and "'Explode' is not one of" in problem.reason
    )


def test_a_rayjob_on_an_existing_cluster_is_refused_naming_the_cluster_to_submit_instead():
    doc = yaml.safe_load(manifest("rayjob"))
    del doc["spec"]["rayClusterSpec"]
    doc["spec"]["clusterSelector"] = {"ray.io/cluster": "raycluster-kuberay"}
    (problem,) = problems(yaml.safe_dump(doc))
    assert problem.field == "spec.rayClusterSpec" and "submit that RayCluster to cpn" in problem.reason


PINNABLE = sorted(p.stem for p in KINDS.glob("*.yaml") if p.stem != "trainjob")  # a TrainJob has no pod spec


@pytest.mark.parametrize("name", PINNABLE)
def test_a_product_pin_and_a_priority_are_read_from_every_kind(name):
    doc = yaml.safe_load(manifest(name))
    for slot in workload_of(doc).slots(doc):  # every pod spec of the kind, as written in the manifest
        slot.template["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"}
    doc["metadata"]["annotations"]["priority"] = "7"
    (spec,) = parse_manifests(yaml.safe_dump(doc))
    assert (spec.gpu_products, spec.priority) == (("Tesla-V100-SXM2-16GB",), 7)
