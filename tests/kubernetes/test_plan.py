"""`cpn plan`: a dry run on config/demo and on a live (fake) cluster, validated against the real schemas."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from cli import main
from config.settings import REPO_ROOT, load_profile
from cpn.inventory import nodes_from_config
from tests.kubernetes.conftest import DOMAIN, USAGE, gpu_labels, seed_taints, write_kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

EXAMPLES = sorted((REPO_ROOT / "examples" / "plan").glob("*.yaml"))
CRD = yaml.load(  # libyaml: the same document, 5x faster than the pure-Python loader
    (REPO_ROOT / "data" / "schemas" / "volcano-batch.volcano.sh_jobs.yaml").read_text(),
    Loader=yaml.CSafeLoader,
)
VOLCANO_SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
DEMO_NODES = {(n.cluster, n.name): n for n in nodes_from_config(load_profile().clusters)}

H20_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: wants-h20
  annotations: {model_name: ResNet-50, data_size: "1", epoch: "1", batch_size: "64", total_steps: "100"}
spec:
  template:
    spec:
      restartPolicy: Never
      tolerations: [{key: nvidia.com/gpu.product, operator: Equal, value: NVIDIA-H20, effect: NoSchedule}]
      containers: [{name: m, image: x:1, resources: {limits: {nvidia.com/gpu: 1}}}]
"""


def pod_specs(obj: dict) -> list[dict]:
    if obj["kind"] == "Service":
        return []
    if obj["apiVersion"].startswith("batch.volcano.sh/"):
        return [t["template"]["spec"] for t in obj["spec"]["tasks"]]
    return [obj["spec"]["template"]["spec"]]


@pytest.fixture(scope="module")
def demo_plan(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("plan")
    h20 = out / "h20.yaml"
    h20.write_text(H20_JOB)
    argv = ["plan", "--config", "config/demo", "--out", str(out), "--estimates", "oracle"]
    with pytest.MonkeyPatch.context() as env:  # a home with no store yet: the queue is the manifests' alone
        env.setenv("CPN_HOME", str(tmp_path_factory.mktemp("home")))
        env.delenv("CPN_STORE", raising=False)
        assert main([*argv, *map(str, EXAMPLES), str(h20)]) == 1, "the H20 job is rejected: exit 1"
    return out, {j["job_id"]: j for j in json.loads((out / "plan.json").read_text())["jobs"]}


def test_every_written_object_validates_against_kubernetes_1_30_and_the_volcano_crd(demo_plan):
    out, _ = demo_plan
    objects = [o for f in sorted(out.glob("*/*.yaml")) for o in yaml.safe_load_all(f.read_text())]
    assert {o["kind"] for o in objects} == {"Job", "Deployment", "Service"}
    for obj in objects:
        if obj["apiVersion"] == "batch.volcano.sh/v1alpha1":
            jsonschema.validate(obj, VOLCANO_SCHEMA)
        else:
            kubernetes_validate.validate(obj, "1.30.0", strict=True)


def test_pools_and_tolerations_follow_the_seed_scheme(demo_plan):
    out, jobs = demo_plan
    for job in (j for j in jobs.values() if j["outcome"] == "placed"):
        docs = list(yaml.safe_load_all((out / job["file"]).read_text()))
        inference = docs[0]["kind"] == "Deployment"
        allowed = {"inference", "hybrid"} if inference else {"training", "hybrid"}
        for placed in job["nodes"]:
            assert DEMO_NODES[(job["cluster"], placed["node"])].usage in allowed
        for spec in pod_specs(docs[0]):
            tolerated = {t["value"] for t in spec["tolerations"] if t["key"] == USAGE}
            assert tolerated == allowed
            assert "training" not in tolerated or not inference


def test_a_two_replica_deployment_is_two_gpu_pods_with_its_service(demo_plan):
    out, jobs = demo_plan
    job = jobs["default/inference-service"]
    assert job["gpus"] == 2
    deployment, service = yaml.safe_load_all((out / job["file"]).read_text())
    assert deployment["spec"]["replicas"] == 2
    assert (
        deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        == "1"
    )
    assert (service["kind"], service["metadata"]["namespace"]) == ("Service", "default")


def test_a_service_with_only_the_three_required_annotations_is_placed_with_no_runtime(demo_plan):
    # examples/plan/inference-minimal.yaml: model_name, data_size, epoch; no batch size, no steps.
    out, jobs = demo_plan
    job = jobs["team-serving/chat-service"]
    assert (job["outcome"], job["gpus"], job["predicted_runtime_s"]) == ("placed", 2, None)
    assert {DEMO_NODES[(job["cluster"], n["node"])].usage for n in job["nodes"]} <= {"inference", "hybrid"}
    (deployment,) = yaml.safe_load_all((out / job["file"]).read_text())
    assert deployment["spec"]["replicas"] == 2
    assert "total_steps" not in deployment["metadata"]["annotations"]


def test_a_job_pinned_to_a_gpu_product_lands_only_on_it(demo_plan):
    _, jobs = demo_plan
    job = jobs["team-vision/resnet50-v100"]
    assert job["gpu_type"] == "v100"
    assert {DEMO_NODES[(job["cluster"], n["node"])].gpu_product for n in job["nodes"]} == {
        "Tesla-V100-SXM2-16GB"
    }
    assert job["transfer_s"] > 0  # its data is in bj-k80
    assert job["predicted_runtime_s"] > 0


def test_a_volcano_job_of_a_ps_and_three_one_gpu_workers_is_a_three_gpu_gang(demo_plan):
    out, jobs = demo_plan
    job = jobs["default/tensorflow-dist-mnist"]
    assert job["gpus"] == 3
    (vcjob,) = yaml.safe_load_all((out / job["file"]).read_text())
    assert [t["replicas"] for t in vcjob["spec"]["tasks"]] == [1, 3]
    assert vcjob["spec"]["schedulerName"] == "volcano"


def test_a_job_for_a_product_no_cluster_has_is_rejected_with_the_reason(demo_plan):
    _, jobs = demo_plan
    job = jobs["default/wants-h20"]
    assert job["outcome"] == "rejected"
    assert "runs only on NVIDIA-H20" in job["reason"]


def test_plan_reads_a_real_cluster_through_its_kubeconfig_and_submits_nothing(server, tmp_path, monkeypatch):
    server.add_node(
        "gpu-a",
        gpu_labels("training", "NVIDIA-A100-SXM4-80GB", 8, 81920),
        8,
        taints=seed_taints("training", "NVIDIA-A100-SXM4-80GB"),
    )
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    config = tmp_path / "config"
    config.mkdir()
    (config / "clusters.yaml").write_text(
        yaml.safe_dump(
            {
                "label_domain": DOMAIN,
                "gpu_aliases": {"NVIDIA-A100-SXM4-80GB": "a100"},
                "clusters": [
                    {
                        "name": "lab",
                        "kube_context": "lab",
                        "kubeconfig": str(kubeconfig),
                        "node_groups": [
                            {
                                "name": "unused",
                                "gpu_product": "x",
                                "gpus_per_node": 1,
                                "gpu_memory_gb": 1,
                                "cpu_cores": 1,
                            }
                        ],
                    }
                ],
            }
        )
    )
    (config / "policy.yaml").write_text("name: fifo\n")
    out = tmp_path / "out"
    tensorflow = REPO_ROOT / "examples" / "plan" / "volcano-tensorflow.yaml"
    # The oracle is refused on a real cluster; the predictor, trained now, has no scores for the A100 and
    # leaves it out of its estimates, as the oracle's table did.
    monkeypatch.setenv("CPN_HOME", str(tmp_path / "home"))
    argv = ["plan", "--config", str(config), "--out", str(out), "--estimates", "predictor"]
    assert main([*argv, str(tensorflow)]) == 0
    (job,) = json.loads((out / "plan.json").read_text())["jobs"]
    assert (job["outcome"], job["cluster"], job["nodes"], job["gpu_type"]) == (
        "placed",
        "lab",
        [{"node": "gpu-a", "gpus": 3}],
        "a100",
    )
    assert [m for m, _ in server.requests if m != "GET"] == []  # read-only: nothing was submitted
