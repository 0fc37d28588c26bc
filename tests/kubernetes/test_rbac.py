"""deploy/rbac.yaml is valid and grants every call the gateway makes (as the fake API server saw them)."""

from __future__ import annotations

from fnmatch import fnmatch

import kubernetes_validate
import pytest
import yaml

from config.settings import REPO_ROOT
from cpn.adapters.gateway import SubmitRejected
from cpn.adapters.kubernetes.fake_apiserver import call_of
from cpn.decisions import Placement
from cpn.jobs import JobSpec
from tests.kubernetes.conftest import gpu_labels, make_gateway, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

RBAC = list(yaml.safe_load_all((REPO_ROOT / "deploy" / "rbac.yaml").read_text()))


def rules(name: str) -> list[dict]:
    (role,) = [d for d in RBAC if d["kind"] == "ClusterRole" and d["metadata"]["name"] == name]
    return role["rules"]


def allowed(role: list[dict], group: str, resource: str, verb: str) -> bool:
    """Whether a rule of `role` grants the call; a resource starting with / is a non-resource URL."""
    if resource.startswith("/"):
        return any(
            verb in r["verbs"] and any(fnmatch(resource, u) for u in r.get("nonResourceURLs", ()))
            for r in role
        )
    return any(
        group in r.get("apiGroups", ()) and resource in r.get("resources", ()) and verb in r["verbs"]
        for r in role
    )


def test_every_object_is_valid_for_kubernetes_1_30():
    for doc in RBAC:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)


def test_the_cpn_role_grants_every_call_of_a_jobs_life(server):
    server.add_node("t-0", gpu_labels("hybrid", "Tesla-V100-SXM2-16GB", 4, 16384), 4)
    server.fail("POST", "/deployments", 500, times=10)  # a failed submission is rolled back: delete
    gw = make_gateway(server, sleep=lambda s: None)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {
            "selector": {"matchLabels": {"app": "s"}},
            "template": {
                "metadata": {"labels": {"app": "s"}},
                "spec": {"containers": [{"name": "m", "image": "i"}]},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "serve"},
        "spec": {"selector": {"app": "s"}},
    }
    serve = JobSpec(
        "team/serve", "m", kind="inference", image="i", manifest=yaml.safe_dump_all([deployment, service])
    )
    try:
        with pytest.raises(SubmitRejected, match="HTTP 500"):
            gw.submit(serve, Placement("team/serve", "east", "t-0", 1))
        train = JobSpec("team/train", "m", image="i")
        gw.submit(train, Placement("team/train", "east", "t-0", 1))
        gw.submit(train, Placement("team/train", "east", "t-0", 1))  # known: no call
        make_gateway(server).submit(train, Placement("team/train", "east", "t-0", 1))  # 409, then get
        gw.start()
        wait_for(gw.poll_events)
        server.finish("team", "train", log="done")
        wait_for(gw.poll_events)  # the end reads the pod log
        gw.delete("team/train")  # its objects and those that came with it, found by cpn's labels
        server.faults.clear()
        gw.submit(serve, Placement("team/serve", "east", "t-0", 1))
        gw.delete("team/serve")
    finally:
        gw.close()
    calls = {call_of(m, p) for m, p in server.requests}
    assert ("", "pods/log", "get") in calls and ("batch.volcano.sh", "jobs", "watch") in calls
    assert ("apps", "deployments", "delete") in calls and ("batch.volcano.sh", "jobs", "list") in calls
    missing = sorted(c for c in calls if not allowed(rules("cpn"), *c))
    assert missing == []


def test_the_plan_role_reads_what_an_inventory_reads(server):
    gw = make_gateway(server)
    gw.inventory()
    assert all(allowed(rules("cpn-plan"), *call_of(m, p)) for m, p in server.requests)
