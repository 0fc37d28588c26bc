"""The Kubernetes gateway with the real `kubernetes` client against an HTTP-level fake API server."""

from __future__ import annotations

import pytest
import yaml

from cpn.adapters.gateway import OOM_REASON, SubmitRejected
from cpn.adapters.kubernetes import ApiRefusal, validate_object
from cpn.decisions import Placement
from cpn.jobs import JobSpec
from tests.kubernetes.conftest import DOMAIN, PRODUCT, USAGE, gpu_labels, make_gateway, seed_taints, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]

V100 = "Tesla-V100-SXM2-16GB"
VC = ("batch.volcano.sh", "jobs")


@pytest.fixture
def cluster(server):
    """Two training nodes, a hybrid and an inference node, a control-plane node and a cordoned one."""
    for name, usage, gpus in (
        ("t-0", "training", 4),
        ("t-1", "training", 4),
        ("h-0", "hybrid", 2),
        ("i-0", "inference", 2),
    ):
        server.add_node(name, gpu_labels(usage, V100, gpus, 16384), gpus, taints=seed_taints(usage, V100))
    server.add_node(
        "cp-0",
        {**gpu_labels("training", V100, 8, 16384), "node-role.kubernetes.io/control-plane": ""},
        8,
        taints=[{"key": f"{DOMAIN}/control-plane", "effect": "NoSchedule"}],
    )
    server.add_node("t-cordoned", gpu_labels("training", V100, 4, 16384), 4, unschedulable=True)
    return server


def job(job_id: str, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="resnet50", num_gpus=gpus, image="resnet:1", cpu=2, **kw)


def test_inventory_reads_gpu_labels_taints_and_what_pods_request(cluster):
    cluster.put(
        ("", "pods"),
        {
            "metadata": {"name": "someone-else", "namespace": "other"},
            "spec": {
                "nodeName": "t-0",
                "containers": [
                    {"name": "c", "resources": {"requests": {"cpu": "1500m", "nvidia.com/gpu": "3"}}}
                ],
            },
            "status": {"phase": "Running"},
        },
    )
    gw = make_gateway(cluster)
    states = {s.node.name: s for s in gw.inventory()}
    assert sorted(states) == ["h-0", "i-0", "t-0", "t-1", "t-cordoned"]  # the control plane never gets jobs
    t0 = states["t-0"]
    assert (t0.free_gpus, t0.cpu_used, t0.node.cpu_cores) == (1, 1.5, 32)
    assert (t0.node.gpu_product, t0.node.gpu_type, t0.node.gpu_memory_gb, t0.node.usage) == (
        V100,
        "v100",
        16,
        "training",
    )
    assert {(t.key, t.value) for t in t0.node.taints} == {(USAGE, "training"), (PRODUCT, V100)}
    assert states["t-cordoned"].free_gpus == 0
    assert states["t-1"].free_gpus == 4


def test_submit_creates_one_validated_volcano_job_pinned_by_the_seed_scheme(cluster):
    gw = make_gateway(cluster)
    gw.submit(job("team/train", 4), Placement("team/train", "east", "t-1", 4))
    obj = cluster.get(VC, "team", "train")
    validate_object(obj | {"metadata": {"name": "train", "namespace": "team"}}, "1.30")
    pod = obj["spec"]["tasks"][0]["template"]
    assert pod["metadata"]["annotations"][f"cpn.{DOMAIN}/job-id"] == "team/train"
    (term,) = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["t-1"]}]
    assert {"key": USAGE, "operator": "In", "values": ["hybrid", "training"]} in term["matchExpressions"]
    tolerated = {(t["key"], t["value"]) for t in pod["spec"]["tolerations"]}
    assert tolerated == {(USAGE, "training"), (USAGE, "hybrid"), (PRODUCT, V100)}
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert obj["spec"]["schedulerName"] == "volcano"
    states = {s.node.name: s for s in gw.inventory()}
    assert (states["t-1"].free_gpus, states["t-1"].running) == (0, ("team/train",))


def test_a_second_submission_that_the_watches_have_not_shown_meets_409_and_is_the_same_job(cluster):
    lagging = make_gateway(cluster)
    lagging.start()
    lagging.close()  # its view stops here, before the job exists
    make_gateway(cluster).submit(job("team/a", 2), Placement("team/a", "east", "t-0", 2))
    lagging.submit(job("team/a", 2), Placement("team/a", "east", "t-0", 2))
    posts = [p for m, p in cluster.requests if m == "POST"]
    assert len(posts) == 2  # tried twice, 409 the second time
    assert len(cluster.pods_of("team", "a")) == 1  # one copy runs


def test_a_restarted_gateway_knows_the_job_from_its_watches_and_posts_nothing(cluster):
    make_gateway(cluster).submit(job("team/a", 2), Placement("team/a", "east", "t-0", 2))
    make_gateway(cluster).submit(job("team/a", 2), Placement("team/a", "east", "t-0", 2))
    assert cluster.calls[("batch.volcano.sh", "jobs", "create")] == 1


def test_an_object_of_the_same_name_that_is_not_the_job_is_refused(cluster):
    cluster.put(
        VC,
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "a", "namespace": "team"},
            "spec": {"tasks": []},
        },
    )
    gw = make_gateway(cluster)
    with pytest.raises(SubmitRejected, match="already exists and is not cpn's job team/a"):
        gw.submit(job("team/a"), Placement("team/a", "east", "t-0", 1))


def test_watch_reports_running_then_the_end_with_the_log_tail(cluster):
    gw = make_gateway(cluster)
    gw.start()
    try:
        gw.submit(job("team/a"), Placement("team/a", "east", "t-0", 1))
        (running,) = wait_for(gw.poll_events)
        assert (running.job_id, running.kind) == ("team/a", "running")
        cluster.finish("team", "a", log="\n".join(f"step {i}" for i in range(100)))
        (done,) = wait_for(gw.poll_events)
        assert (done.job_id, done.kind, done.reason) == ("team/a", "succeeded", "")
        assert done.time >= running.time
        assert gw.log_tail("team/a").splitlines() == [f"step {i}" for i in range(50, 100)]
        assert {s.node.name: s.free_gpus for s in gw.inventory()}["t-0"] == 4
    finally:
        gw.close()


@pytest.mark.parametrize(
    ("reason", "expected"), [("OOMKilled", OOM_REASON), ("Evicted", "Evicted: The node was low on memory.")]
)
def test_a_failed_pod_says_why_from_its_container_statuses(cluster, reason, expected):
    gw = make_gateway(cluster)
    gw.start()
    try:
        gw.submit(job("team/a"), Placement("team/a", "east", "t-0", 1))
        wait_for(gw.poll_events)
        cluster.finish("team", "a", outcome="failed", reason=reason, log="CUDA out of memory")
        (failed,) = wait_for(gw.poll_events)
        assert (failed.kind, failed.reason) == ("failed", expected)
        assert gw.log_tail("team/a") == "CUDA out of memory"
    finally:
        gw.close()


def test_410_gone_relists_and_nothing_is_missed(cluster):
    gw = make_gateway(cluster)
    gw.start()
    try:
        gw.submit(job("team/a"), Placement("team/a", "east", "t-0", 1))
        wait_for(gw.poll_events)
        lists = gw.relists
        # The job ends and the versions that said so are compacted before the watch reads on.
        cluster.finish("team", "a")
        cluster.compact()
        (done,) = wait_for(gw.poll_events)
        assert (done.job_id, done.kind) == ("team/a", "succeeded")
        wait_for(lambda: gw.relists > lists)
    finally:
        gw.close()


def test_a_watch_resuming_from_an_expired_version_gets_410_and_relists(cluster):
    gw = make_gateway(cluster)
    gw.submit(job("team/a"), Placement("team/a", "east", "t-0", 1))  # lists, then watches from there
    assert [e.kind for e in wait_for(gw.poll_events)] == ["running"]
    try:
        cluster.compact(expire_open_watches=True)
        cluster.finish("team", "a")
        (done,) = wait_for(gw.poll_events)
        assert done.kind == "succeeded"
        wait_for(lambda: gw.relists >= 8)  # four collections (nodes, pods, Jobs, Volcano Jobs) listed twice
    finally:
        gw.close()


def test_restart_reports_what_the_cluster_runs_and_submits_nothing_twice(cluster):
    first = make_gateway(cluster)
    first.submit(job("team/a"), Placement("team/a", "east", "t-0", 1))
    first.submit(job("team/b"), Placement("team/b", "east", "t-1", 1))
    cluster.finish("team", "b", outcome="failed", reason="OOMKilled")
    # cpn restarts: a new gateway, nothing in memory.
    gw = make_gateway(cluster)
    try:
        assert gw.held_jobs() == {"team/a", "team/b"}
        events = [(e.job_id, e.kind, e.reason) for e in gw.poll_events()]
        assert sorted(events) == [
            ("team/a", "running", ""),
            ("team/b", "failed", OOM_REASON),
            ("team/b", "running", ""),
        ]
        assert gw.held_jobs() == {"team/a"}  # b's end is handed out
        posts = len([1 for m, _ in cluster.requests if m == "POST"])
        gw.submit(job("team/a"), Placement("team/a", "east", "t-0", 1))
        assert len([1 for m, _ in cluster.requests if m == "POST"]) == posts  # known: not even tried
        cluster.finish("team", "a")
        (done,) = wait_for(gw.poll_events)
        assert (done.job_id, done.kind) == ("team/a", "succeeded")
        assert gw.held_jobs() == frozenset()
    finally:
        gw.close()


def test_429_and_5xx_are_retried_with_backoff(cluster):
    slept = []
    gw = make_gateway(cluster, sleep=slept.append)
    cluster.fail("POST", "/jobs", 503, times=1)
    cluster.fail("POST", "/jobs", 429, times=1, retry_after=0.02)
    cluster.fail("GET", "/nodes", 500, times=1)
    gw.submit(job("team/a"), Placement("team/a", "east", "t-0", 1))
    assert cluster.get(VC, "team", "a") is not None
    assert gw.api.retries == 3
    assert slept == [0.01, 0.01, 0.02]  # first backoff (nodes), first backoff (POST), then Retry-After


def test_another_4xx_refuses_the_job_with_the_servers_message(cluster):
    gw = make_gateway(cluster)
    cluster.fail("POST", "/jobs", 403, times=1)
    with pytest.raises(ApiRefusal, match="HTTP 403: scripted") as refused:
        gw.submit(job("team/a"), Placement("team/a", "east", "t-0", 1))
    assert (refused.value.status, refused.value.transient) == (403, False)
    assert gw.api.retries == 0
    assert {s.node.name: s.free_gpus for s in gw.inventory()}["t-0"] == 4


def test_an_unavailable_api_server_refuses_after_the_retries_and_leaves_nothing_behind(cluster):
    gw = make_gateway(cluster, sleep=lambda s: None)
    cluster.fail("POST", "/deployments", 503, times=10)  # the Service that comes with it is created first
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "serve"}},
            "template": {
                "metadata": {"labels": {"app": "serve"}},
                "spec": {"containers": [{"name": "m", "image": "srv:1"}]},
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "serve"},
        "spec": {"selector": {"app": "serve"}, "ports": [{"port": 80}]},
    }
    spec = JobSpec(
        "team/serve",
        "resnet50",
        kind="inference",
        image="srv:1",
        manifest=yaml.safe_dump_all([deployment, service]),
    )
    with pytest.raises(ApiRefusal, match="HTTP 503") as refused:
        gw.submit(spec, Placement("team/serve", "east", "i-0", 1))
    assert refused.value.transient
    assert cluster.get(("", "services"), "team", "serve") is None  # rolled back
    assert cluster.get(("apps", "deployments"), "team", "serve") is None
    cluster.faults.clear()
    gw.submit(spec, Placement("team/serve", "east", "i-0", 1))
    assert (
        cluster.get(("", "services"), "team", "serve")["metadata"]["labels"][f"cpn.{DOMAIN}/managed"]
        == "true"
    )


def test_a_two_replica_deployment_spreads_over_its_two_nodes(cluster):
    gw = make_gateway(cluster)
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "serve"}},
            "template": {
                "metadata": {"labels": {"app": "serve"}},
                "spec": {
                    "containers": [
                        {"name": "m", "image": "srv:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                    ]
                },
            },
        },
    }
    spec = JobSpec(
        "team/serve",
        "resnet50",
        kind="inference",
        image="srv:1",
        num_gpus=2,
        pod_gpus=(1, 1),
        manifest=yaml.safe_dump(manifest),
    )
    gw.submit(spec, Placement("team/serve", "east", "i-0", 1, (("h-0", 1),)))
    pods = cluster.pods_of("team", "serve")
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["h-0", "i-0"]
    tolerated = {t["value"] for p in pods for t in p["spec"]["tolerations"] if t["key"] == USAGE}
    assert tolerated == {"inference", "hybrid"}
    states = {s.node.name: s for s in gw.inventory()}
    assert (states["i-0"].free_gpus, states["h-0"].free_gpus) == (1, 1)


def test_a_placement_against_the_jobs_gpu_product_is_refused(cluster):
    gw = make_gateway(cluster)
    with pytest.raises(SubmitRejected, match="runs only on NVIDIA-H20"):
        gw.submit(job("team/a", gpu_products=("NVIDIA-H20",)), Placement("team/a", "east", "t-0", 1))
    assert cluster.get(VC, "team", "a") is None


def test_a_rolled_back_job_leaves_the_companion_another_job_brought(cluster):
    from tests.contract.test_companions_contract import job as sharing_job

    gw = make_gateway(cluster)
    gw.submit(sharing_job("a"), Placement("team/a", "east", "t-0", 1))
    cluster.fail("POST", "/jobs", 403, times=1)  # b: its ConfigMap is found shared, then its Job refused
    with pytest.raises(ApiRefusal, match="HTTP 403"):
        gw.submit(sharing_job("b"), Placement("team/b", "east", "t-1", 1))
    shared = cluster.get(("", "configmaps"), "team", "shared-cfg")
    assert shared is not None and shared["metadata"]["annotations"][f"cpn.{DOMAIN}/job-id"] == "team/a"
