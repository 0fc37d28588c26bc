"""Jobs rendered as the Kubernetes manifests intake accepts."""

from __future__ import annotations

import re

import yaml

from cpn.jobs import JobSpec


def slug(text: str) -> str:
    """`text` as a DNS-1123 label fragment: lower case, runs of other characters as one dash."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _manifest_name(job_id: str) -> tuple[str, str]:
    namespace, _, name = job_id.rpartition("/")
    name = slug(name)[:63].strip("-")
    if not name:
        raise ValueError(f"job id {job_id!r} gives no valid Kubernetes name")
    return (namespace or "default"), name


def _num(x: float) -> str:
    return f"{x:g}"


def to_manifest(job: JobSpec, label_domain: str) -> str:
    """`job` as a Volcano `batch.volcano.sh/v1alpha1` Job in YAML, the way intake reads it back.

    Name and namespace come from the job id (`namespace/name`, namespace `default` when the id
    has none). The job's figures travel as string annotations (`model_name`, `data_size` GB,
    `epoch`, `batch_size`, `gpu_count`, `gpu_mem` GB per card, `total_steps`, `image_size` GB,
    `source_cluster`, `precision` unless fp32; unknown ones left out). As in the seed, the pod template
    requires a node of the job's pool or the hybrid pool, prefers its own pool, and tolerates both pools'
    taints; the GPU product toleration and the node are added at submit, once the scheduler has chosen
    them.
    """
    if not job.image:
        raise ValueError(f"job {job.job_id} has no image; a manifest needs one")
    namespace, name = _manifest_name(job.job_id)
    annotations = {
        "model_name": job.model,
        "data_size": _num(job.data_size_gb),
        "epoch": str(job.epochs),
        "batch_size": None if job.batch_size is None else str(job.batch_size),
        "gpu_count": str(job.num_gpus),
        "gpu_mem": None if job.gpu_mem_gb is None else _num(job.gpu_mem_gb),
        "total_steps": None if job.total_steps is None else str(job.total_steps),
        "image_size": _num(job.image_size_gb),
        "source_cluster": job.source_cluster,
        "precision": None if job.precision == "fp32" else job.precision,
    }
    usage_key = f"{label_domain}/node.usage"
    pools = [job.kind, "hybrid"]
    pod_spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": usage_key, "operator": "In", "values": pools}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [{"key": usage_key, "operator": "In", "values": [job.kind]}]
                        },
                    }
                ],
            }
        },
        "tolerations": [
            {"key": usage_key, "operator": "Equal", "value": pool, "effect": "NoSchedule"} for pool in pools
        ],
        "containers": [
            {
                "name": "main",
                "image": job.image,
                "imagePullPolicy": "IfNotPresent",
                "resources": {
                    "requests": {"cpu": _num(job.cpu)},
                    "limits": {"cpu": _num(job.cpu), "nvidia.com/gpu": job.num_gpus},
                },
            }
        ],
        "restartPolicy": "Never",
    }
    manifest = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {k: v for k, v in annotations.items() if v is not None},
        },
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 1,
            "policies": [{"action": "CompleteJob", "event": "TaskCompleted"}],
            "tasks": [{"replicas": 1, "name": "worker", "template": {"spec": pod_spec}}],
        },
    }
    return yaml.safe_dump(manifest, sort_keys=False)
