"""Every workload kind through the Kubernetes gateway on the fake API server: the object created is that kind,
passes its CRD's schema, pins every pod template to the placed node, and its kind's failure status ends the
job with its reason (the lifecycle both gateways share is in tests/contract/test_gateway_contract.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from cpn.adapters.gateway import SubmitRejected
from cpn.crd_schemas import schema_problems
from cpn.decisions import Placement
from cpn.intake import parse_manifests
from cpn.workloads import workload_of
from tests.contract.test_gateway_contract import KIND_NAMES, SMALLER
from tests.kubernetes.conftest import api_client, gpu_labels, make_gateway, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

KINDS = Path(__file__).parent.parent / "data" / "kinds"
V100 = "Tesla-V100-SXM2-16GB"


def kind_spec(name: str):
    doc = yaml.safe_load((KINDS / f"{name}.yaml").read_text())
    SMALLER.get(name, lambda d: None)(doc)
    (spec,) = parse_manifests(yaml.safe_dump(doc))
    return spec


def created(server, spec) -> dict:
    """The workload object the fake API server received for `spec`."""
    workload = workload_of(yaml.safe_load(spec.manifest))
    res = (workload.group, workload.plural)
    (obj,) = [o for (ns, _), o in server.objects.get(res, {}).items() if ns == "default"]
    return obj


@pytest.mark.parametrize("name", KIND_NAMES)
def test_the_object_created_is_its_kind_valid_by_its_schema_with_every_pod_pinned(server, name):
    server.add_node("n-0", gpu_labels("hybrid", V100, 4, 16384), 4, cpu="512")
    server.add_node("n-1", gpu_labels("hybrid", V100, 4, 16384), 4, cpu="512")  # the LWS example asks 250
    gw = make_gateway(server)
    spec = kind_spec(name)
    gw.submit(spec, Placement(spec.job_id, "east", "n-1", spec.num_gpus))
    obj = created(server, spec)
    original = yaml.safe_load(spec.manifest)
    assert (obj["apiVersion"], obj["kind"]) == (original["apiVersion"], original["kind"])
    assert schema_problems(obj, workload_of(obj)) == []
    pods = wait_for(lambda: server.pods_of("default", obj["metadata"]["name"]))
    assert pods and {p["spec"].get("nodeName") for p in pods} == {"n-1"}  # CPU pods follow the gang
    gpus = sum(
        float(c["resources"]["limits"].get("nvidia.com/gpu", 0))
        for p in pods
        for c in p["spec"]["containers"]
        if c.get("resources", {}).get("limits")
    )
    assert gpus == spec.num_gpus
    text = json.dumps(obj)
    assert text.count('"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n-1"]}]') >= 1


def test_a_trainjob_carries_its_pin_in_runtime_patches_and_its_cards_per_node(server):
    server.add_node("n-0", gpu_labels("training", V100, 4, 16384), 4)
    gw = make_gateway(server)
    spec = kind_spec("trainjob")
    gw.submit(spec, Placement(spec.job_id, "east", "n-0", 4))
    obj = created(server, spec)
    assert obj["spec"]["trainer"]["resourcesPerNode"]["requests"]["nvidia.com/gpu"] == "2"
    (patch,) = obj["spec"]["runtimePatches"]
    assert patch["manager"] == "cpn.maip.mxsf.io"
    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = job["template"]["spec"]["template"]
    assert job["name"] == "node" and pod["metadata"]["annotations"]["cpn.maip.mxsf.io/job-id"] == spec.job_id
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["n-0"]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("pytorchjob", "BackoffLimitExceeded: Job has reached the specified backoff limit"),
        ("jobset", "BackoffLimitExceeded: Job has reached the specified backoff limit"),
        ("rayjob", "AppFailed: the Ray job's entrypoint failed"),
        ("pod", "Failed"),
    ],
)
def test_the_kinds_failure_status_ends_the_job_with_its_reason(server, name, reason):
    server.add_node("n-0", gpu_labels("training", V100, 4, 16384), 4, cpu="64")
    gw = make_gateway(server)
    spec = kind_spec(name)
    gw.submit(spec, Placement(spec.job_id, "east", "n-0", spec.num_gpus))
    server.finish("default", created(server, spec)["metadata"]["name"], outcome="failed")
    gw.sync()
    ends = wait_for(lambda: [e for e in gw.poll_events() if e.kind != "running"])
    assert [(e.job_id, e.kind, e.reason) for e in ends] == [(spec.job_id, "failed", reason)]


def test_an_object_its_crd_refuses_is_not_sent_and_the_fake_refuses_it_too(server):
    server.add_node("n-0", gpu_labels("training", V100, 4, 16384), 4)
    gw = make_gateway(server)
    spec = kind_spec("pytorchjob")
    doc = yaml.safe_load(spec.manifest)
    doc["spec"]["runPolicy"] = {"backoffLimit": "three"}
    bad = replace(spec, manifest=yaml.safe_dump(doc))
    with pytest.raises(SubmitRejected, match="spec.runPolicy.backoffLimit.*PyTorchJob CRD schema"):
        gw.submit(bad, Placement(spec.job_id, "east", "n-0", 2))
    assert not server.objects.get(("kubeflow.org", "pytorchjobs"))
    custom = client.CustomObjectsApi(api_client(server))
    with pytest.raises(client.ApiException) as info:
        custom.create_namespaced_custom_object("kubeflow.org", "v1", "default", "pytorchjobs", doc)
    assert info.value.status == 422 and "backoffLimit" in info.value.body


def test_a_cluster_without_the_crd_refuses_the_kind_at_submission_saying_so(server):
    server.add_node("n-0", gpu_labels("training", V100, 4, 16384), 4)
    server.fail("GET", "/apis/kubeflow.org/", 404, times=1000)  # no Kubeflow CRD: lists answer 404
    gw = make_gateway(server)
    spec = kind_spec("pytorchjob")
    with pytest.raises(
        SubmitRejected, match="does not serve PyTorchJob .kubeflow.org/v1.: its CRD is not installed"
    ):
        gw.submit(spec, Placement(spec.job_id, "east", "n-0", 2))
    assert not any(method == "POST" for method, _ in server.requests)
    assert gw.poll_events() == [] and gw.held_jobs() == frozenset()


def test_a_cluster_whose_discovery_is_forbidden_still_takes_every_kind(server):
    server.add_node("n-0", gpu_labels("training", V100, 4, 16384), 4)
    server.fail("GET", "/apis/ray.io/v1alpha1", 403, times=1000)  # only discovery reads that version
    gw = make_gateway(server)
    assert [s.node.workloads for s in gw.inventory()] == [None]  # not known: nothing kept off
    spec = kind_spec("pytorchjob")
    gw.submit(spec, Placement(spec.job_id, "east", "n-0", 2))
    assert [s.node.workloads for s in gw.inventory()] == [None]
    assert created(server, spec)["kind"] == "PyTorchJob"


def test_a_create_the_cluster_refuses_is_refused_with_its_message(server):
    server.add_node("n-0", gpu_labels("training", V100, 4, 16384), 4)
    server.fail("POST", "/pytorchjobs", 404, times=1)
    gw = make_gateway(server)
    spec = kind_spec("pytorchjob")
    with pytest.raises(SubmitRejected, match="HTTP 404"):
        gw.submit(spec, Placement(spec.job_id, "east", "n-0", 2))
    assert gw.poll_events() == [] and gw.held_jobs() == frozenset()


def test_a_cluster_serving_mpijob_only_as_v2beta1_is_watched_and_cleaned_in_that_version(server):
    server.add_node("n-0", gpu_labels("training", V100, 4, 16384), 4)
    server.fail("GET", "/apis/kubeflow.org/v1/", 404, times=1000)  # no Training Operator: the MPI Operator
    gw = make_gateway(server)
    spec = kind_spec("mpijob-v2beta1")
    gw.submit(spec, Placement(spec.job_id, "east", "n-0", 2))
    server.finish("default", created(server, spec)["metadata"]["name"])
    gw.sync()
    ends = wait_for(lambda: [e for e in gw.poll_events() if e.kind != "running"])
    assert [(e.job_id, e.kind) for e in ends] == [(spec.job_id, "succeeded")]
    gw.delete(spec.job_id)
    assert (
        not server.objects.get(("kubeflow.org", "mpijobs"))
        and server.pods_of("default", "tensorflow-benchmarks") == []
    )
