"""Intake counts jobs whole and honours where the manifest says they may run (issue: Kubernetes gateway)."""

from __future__ import annotations

import yaml

from cpn.intake import parse_manifests
from cpn.inventory import Node
from cpn.jobs import JobSpec
from cpn.rules import constraint_problem, job_admission_problem

ANNOTATIONS = {"model_name": "resnet50", "data_size": "1", "epoch": "1"}


def pod(gpus: int | None = None, cpu: str = "1", **spec) -> dict:
    limits = {"cpu": cpu} | ({} if gpus is None else {"nvidia.com/gpu": gpus})
    return {
        "spec": {"containers": [{"name": "m", "image": "img:1", "resources": {"limits": limits}}], **spec}
    }


def volcano(*tasks: tuple[str, int, dict]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "dist", "annotations": ANNOTATIONS},
            "spec": {
                "minAvailable": sum(r for _, r, _ in tasks),
                "tasks": [{"name": n, "replicas": r, "template": t} for n, r, t in tasks],
            },
        }
    )


def test_volcanos_tensorflow_example_is_a_three_gpu_gang_of_its_workers():
    (spec,) = parse_manifests(volcano(("ps", 1, pod(cpu="2")), ("worker", 3, pod(1, cpu="4"))))
    assert (spec.num_gpus, spec.pod_gpus, spec.cpu) == (3, (1, 1, 1), 12.0)


def test_volcanos_mindspore_example_counts_the_workers_not_the_master():
    (spec,) = parse_manifests(volcano(("master", 1, pod()), ("worker", 2, pod(1))))
    assert (spec.num_gpus, spec.pod_gpus) == (2, (1, 1))


def test_a_batch_job_multiplies_its_parallelism():
    doc = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "p", "annotations": ANNOTATIONS},
        "spec": {"parallelism": 4, "template": pod(2)},
    }
    (spec,) = parse_manifests(yaml.safe_dump(doc))
    assert (spec.num_gpus, spec.pod_gpus, spec.cpu) == (8, (2, 2, 2, 2), 4.0)


SEED_INFERENCE = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: inference-service
  labels: {app: inference-service}
  annotations: {model_name: resnet50, data_size: "0", epoch: "1"}
spec:
  replicas: 2
  selector: {matchLabels: {app: inference-service}}
  template:
    metadata: {labels: {app: inference-service}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
              - matchExpressions:
                  - {key: maip.mxsf.io/node.usage, operator: In, values: [inference, hybrid]}
      tolerations:
        - {key: maip.mxsf.io/node.usage, operator: Equal, value: inference, effect: NoSchedule}
        - {key: maip.mxsf.io/node.usage, operator: Equal, value: hybrid, effect: NoSchedule}
        - {key: nvidia.com/gpu.product, operator: Equal, value: NVIDIA-H20, effect: NoSchedule}
      containers:
        - name: main
          image: nginx:latest
          resources:
            requests: {cpu: 1, memory: 1Gi}
            limits: {cpu: 1, memory: 1Gi}
---
apiVersion: v1
kind: Service
metadata: {name: inference-service, labels: {app: inference-service}}
spec:
  selector: {app: inference-service}
  ports: [{port: 80, targetPort: 80, name: http}]
"""


def test_the_seeds_inference_example_is_two_gpu_pods_on_h20_with_its_service():
    (spec,) = parse_manifests(SEED_INFERENCE)
    assert (spec.kind, spec.num_gpus, spec.pod_gpus) == ("inference", 2, (1, 1))
    assert spec.gpu_products == ("NVIDIA-H20",)
    assert spec.node_pools == ("hybrid", "inference")
    assert [d["kind"] for d in yaml.safe_load_all(spec.manifest)] == ["Deployment", "Service"]


def test_node_selector_and_affinity_narrow_product_pool_and_memory():
    template = pod(
        1,
        nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "maip.mxsf.io/node.usage", "operator": "In", "values": ["training"]},
                                {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]},
                            ]
                        }
                    ]
                }
            }
        },
    )
    (spec,) = parse_manifests(volcano(("worker", 1, template)))
    assert spec.gpu_products == ("NVIDIA-A100-SXM4-80GB",)
    assert spec.node_pools == ("training",)
    assert 39 < spec.gpu_memory_min_gb < 39.1


def test_a_toleration_of_any_product_does_not_narrow():
    template = pod(1, tolerations=[{"key": "nvidia.com/gpu.product", "operator": "Exists"}])
    (spec,) = parse_manifests(volcano(("worker", 1, template)))
    assert spec.gpu_products == ()


def test_constraint_problem_names_what_keeps_the_job_off_the_node():
    h20 = Node("c", "n", "NVIDIA-H20", 8, 96, 64, "hybrid")
    v100 = Node("c", "m", "Tesla-V100-SXM2-16GB", 8, 16, 64, "training")
    job = JobSpec("a/b", "m", gpu_products=("NVIDIA-H20",), node_pools=("hybrid",))
    assert constraint_problem(h20, job) is None
    assert "runs only on NVIDIA-H20" in constraint_problem(v100, job)
    assert "asks for hybrid" in constraint_problem(Node("c", "k", "NVIDIA-H20", 8, 96, 64, "training"), job)
    big = JobSpec("a/c", "m", gpu_memory_min_gb=40)
    assert "at least 40 GB" in job_admission_problem(v100, big)
    assert job_admission_problem(v100, JobSpec("a/d", "m", kind="inference")) is not None


def test_stored_specs_with_lists_compare_equal_to_the_tuples_they_came_from():
    spec = JobSpec("a/b", "m", gpu_products=["X"], pod_gpus=[1, 1])  # as JSON gives them back
    assert spec == JobSpec("a/b", "m", gpu_products=("X",), pod_gpus=(1, 1))
    assert hash(spec)
