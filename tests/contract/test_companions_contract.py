"""Objects submitted with a workload that another job brought already (a ConfigMap two jobs of one file
reference), on both gateways: the same content is shared, other content refuses the job naming the object
and the field, and holds nothing; another cluster has its own."""

from __future__ import annotations

import pytest

from cpn.adapters.gateway import SubmitRejected
from cpn.decisions import Placement
from cpn.jobs import JobSpec
from tests.contract.test_gateway_contract import ALL_FREE, free_gpus, harness  # noqa: F401 (fixture)

MANIFEST = """
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: t
          image: "resnet:1"
          resources: {{limits: {{nvidia.com/gpu: 1}}}}
          volumeMounts: [{{name: cfg, mountPath: /cfg}}]
      volumes: [{{name: cfg, configMap: {{name: shared-cfg}}}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: shared-cfg}}
data: {{lr: "{lr}"}}
"""


def job(name: str, lr: str = "0.1") -> JobSpec:
    return JobSpec(
        f"team/{name}",
        "ResNet-18",
        batch_size=32,
        total_steps=600,
        image="resnet:1",
        cpu=2,
        manifest=MANIFEST.format(name=name, lr=lr),
    )


def test_a_companion_of_the_same_content_is_shared_and_of_other_content_refused(harness):  # noqa: F811
    gw = harness.gateway
    for name in ("a", "b"):
        gw.submit(job(name), Placement(f"team/{name}", "east", "gpu-0", 1))
    other = job("c", lr="0.2")
    with pytest.raises(
        SubmitRejected,
        match=r"ConfigMap team/shared-cfg already exists on cluster east with other content "
        r"\(data.lr differs; it came with job team/a\); give one of them another name",
    ):
        gw.submit(other, Placement("team/c", "east", "gpu-1", 1))
    assert free_gpus(gw) == {**ALL_FREE, "east/gpu-0": 2}
    gw.submit(other, Placement("team/c", "west", "gpu-0", 1))  # west has none of that name
    assert sorted((e.job_id, e.kind) for e in gw.poll_events()) == [
        ("team/a", "running"),
        ("team/b", "running"),
        ("team/c", "running"),
    ]
