"""What intake read of each job, said back: the gang, the pins and where the GPU count came from."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from cpn.intake import Reading, parse_manifests, read_manifests
from cpn.jobs import JobSpec
from tests.unit.test_intake_gangs import (
    SEED_INFERENCE,
)  # the seed's (003): no GPU limit, a product toleration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "manifests"


def read_one(text: str) -> Reading:
    ((_, reading),) = read_manifests(text)
    return reading


def test_a_manifest_that_pins_a_gpu_without_limit_or_gpu_count_says_it_took_the_default():
    assert read_one(SEED_INFERENCE) == Reading(
        kind="inference",
        pods=2,
        gpus_per_pod=(1, 1),
        gpus=2,
        gpus_from="default: 1 GPU per pod of spec.template, which pins a GPU but has no nvidia.com/gpu limit "
        "or gpu_count annotation",
        gpu_products=("NVIDIA-H20",),
        node_pools=("hybrid", "inference"),
        priority=0,
        gpu_share=None,
        gpu_mem_gb=None,
        gpu_memory_min_gb=None,
        cpu=2.0,
        notes=("carried with it: Service inference-service",),
        workload="apps/v1 Deployment",
    )


def test_the_gpu_count_annotation_stands_in_for_the_limit_and_says_so():
    text = SEED_INFERENCE.replace('epoch: "1"}', 'epoch: "1", gpu_count: "2", priority: "5", gpu_mem: "30"}')
    reading = read_one(text)
    assert (reading.pods, reading.gpus_per_pod, reading.gpus) == (2, (2, 2), 4)
    assert reading.gpus_from == "annotation gpu_count: 2 per pod of spec.template, no nvidia.com/gpu limit"
    assert (reading.priority, reading.gpu_mem_gb) == (5, 30.0)


def test_limits_count_every_gpu_holding_template():
    doc = yaml.safe_load((EXAMPLES / "volcano-job.yaml").read_text())
    del doc["metadata"]["annotations"]["gpu_count"]
    worker = doc["spec"]["tasks"][0]
    worker["replicas"] = 2
    worker["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    big = yaml.safe_load(yaml.safe_dump(worker))
    big.update(name="big", replicas=1)
    big["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 3
    doc["spec"]["tasks"].append(big)
    reading = read_one(yaml.safe_dump(doc))
    assert (reading.pods, reading.gpus_per_pod, reading.gpus) == (3, (1, 1, 3), 5)
    assert reading.gpus_from == 'resources.limits["nvidia.com/gpu"] of the pods\' containers'
    assert reading.summary().startswith("3 pods of 1 + 1 + 3 GPUs = 5 GPUs (resources.limits")


def test_summary_says_everything_in_one_line():
    text = SEED_INFERENCE.replace('epoch: "1"}', 'epoch: "1", gpu_share: "0.5"}')
    assert read_one(text).summary() == (
        "2 pods x 1 GPU = 2 GPUs (default: 1 GPU per pod of spec.template, which pins a GPU but has no "
        "nvidia.com/gpu limit or gpu_count annotation); GPU NVIDIA-H20; pools hybrid, inference; priority 0; "
        "shares 0.5 of a card; memory per card predicted; 2 CPUs; carried with it: Service inference-service"
    )


@pytest.mark.parametrize(
    "name", ["training-job.yaml", "volcano-job.yaml", "inference-deployment.yaml", "queue.yaml"]
)
def test_a_stored_job_reads_back_as_it_was_read_at_the_door(name):
    for spec, reading in read_manifests((EXAMPLES / name).read_text()):
        assert Reading.of(spec) == replace(reading, notes=())  # notes are told at the door only


def test_read_back_of_a_seed_style_job_and_of_a_job_without_manifest():
    (spec,) = parse_manifests(SEED_INFERENCE)
    assert Reading.of(spec).gpus_from.startswith("default: 1 GPU per pod")
    from_trace = JobSpec(job_id="default/t1", model="ResNet-50", num_gpus=4)
    reading = Reading.of(from_trace)
    assert (reading.pods, reading.gpus_per_pod, reading.node_pools) == (1, (4,), ("hybrid", "training"))
    assert reading.gpus_from == "num_gpus of the job's trace row (it came without a manifest)"


def test_a_pool_and_card_memory_the_manifest_requires_are_read():
    text = SEED_INFERENCE.replace(
        "    spec:\n      affinity:",
        "    spec:\n"
        "      nodeSelector: {maip.mxsf.io/node.usage: hybrid, nvidia.com/gpu.memory: '98304'}\n"
        "      affinity:",
    )
    reading = read_one(text)
    assert (reading.node_pools, reading.gpu_memory_min_gb) == (("hybrid",), 96.0)
    assert "cards of at least 96 GB; 2 CPUs" in reading.summary()
