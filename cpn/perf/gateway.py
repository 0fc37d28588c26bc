"""What the Kubernetes gateway's live path costs per job: API calls and objects read, and the wall time.

`bench_gateway` starts the fake API server (cpn.adapters.kubernetes.fake_apiserver) holding `nodes` GPU
nodes and `pods` pods of other users spread over them, starts a Kubernetes gateway on it (its first lists
and watches: the warm-up), takes one inventory as a round would, places `jobs` one-card jobs on the nodes
with free cards (round robin) and submits them, then waits until the watches report every job running.
The fake counts each request by (API group, resource, verb) and the objects its lists return; the figures
are those counted after the warm-up, per job. The fake lives in the package so that this runs from an
installed cpn.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from cpn.adapters.kubernetes import KubernetesGateway, api_client_at
from cpn.adapters.kubernetes.fake_apiserver import FakeApiServer
from cpn.decisions import Placement
from cpn.jobs import JobSpec

DOMAIN = "bench.cpn.io"
PRODUCT = "NVIDIA-A100-SXM4-80GB"
CARDS_PER_NODE = 8


@dataclass(frozen=True)
class GatewayFigures:
    """What submitting `jobs` jobs cost after the warm-up."""

    nodes: int
    pods: int
    jobs: int
    calls: dict[str, int]
    """`group/resource verb` -> requests made after the warm-up, watch (re)opens left out."""
    watch_opens: int
    """Watches opened after the warm-up: each watch's first open, and reopens at its timeout; per
    collection and time, not per job."""
    listed: int
    """Objects the API server's lists returned after the warm-up."""
    warmup_calls: int
    warmup_listed: int
    warmup_s: float
    submit_s: float
    """Wall time of the submissions."""
    running_s: float
    """Wall time from the first submission until every job was reported running."""

    @property
    def calls_per_job(self) -> float:
        """API requests per job after the warm-up."""
        return sum(self.calls.values()) / self.jobs

    @property
    def listed_per_job(self) -> float:
        """Objects read by lists per job after the warm-up."""
        return self.listed / self.jobs


def populate(server: FakeApiServer, nodes: int, pods: int) -> None:
    """`nodes` 8-card training nodes, and `pods` pods of another user over them: one CPU each, and every
    other pod on a node one card, at most half the node's cards."""
    for i in range(nodes):
        labels = {
            f"{DOMAIN}/node.usage": "training",
            "nvidia.com/gpu.product": PRODUCT,
            "nvidia.com/gpu.count": str(CARDS_PER_NODE),
            "nvidia.com/gpu.memory": "81920",
        }
        server.add_node(f"node-{i:05d}", labels, CARDS_PER_NODE)
    for j in range(pods):
        node, nth = j % nodes, j // nodes
        gpus = 1 if nth % 2 == 0 and nth // 2 < CARDS_PER_NODE // 2 else 0
        limits = {"cpu": "1", "nvidia.com/gpu": str(gpus)}
        server.put(
            ("", "pods"),
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"other-{j:06d}", "namespace": "others"},
                "spec": {
                    "nodeName": f"node-{node:05d}",
                    "containers": [{"name": "c", "resources": {"requests": limits, "limits": limits}}],
                },
                "status": {"phase": "Running"},
            },
        )


def bench_gateway(
    nodes: int = 1000, pods: int = 10000, jobs: int = 1000, timeout_s: float = 300
) -> GatewayFigures:
    """Submit `jobs` jobs through a gateway on a fake API server of `nodes` nodes and `pods` pods."""
    server = FakeApiServer(check_schemas=False).start()  # measure the gateway, not the fake
    gateway = KubernetesGateway("bench", api_client_at(server.url), label_domain=DOMAIN)
    try:
        populate(server, nodes, pods)
        t0 = time.perf_counter()
        gateway.start()
        warmup_s = time.perf_counter() - t0
        warm_calls, warm_listed = Counter(server.calls), server.listed
        free = [(s.node.name, s.free_gpus) for s in gateway.inventory() if s.free_gpus > 0]
        slots = [name for name, cards in free for _ in range(cards)]
        if len(slots) < jobs:
            raise ValueError(f"{jobs} jobs need {jobs} free cards; the nodes have {len(slots)}")
        order = sorted(slots, key=lambda name: slots.index(name) % CARDS_PER_NODE)  # round robin
        t1 = time.perf_counter()
        for i in range(jobs):
            job_id = f"bench/job-{i:05d}"
            spec = JobSpec(job_id=job_id, model="resnet50", num_gpus=1, image="bench:1", cpu=1)
            gateway.submit(spec, Placement(job_id, "bench", order[i], 1))
        submit_s = time.perf_counter() - t1
        running: set[str] = set()
        deadline = time.monotonic() + timeout_s
        while len(running) < jobs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(running)} of {jobs} jobs reported running in {timeout_s:g} s")
            running.update(e.job_id for e in gateway.poll_events() if e.kind == "running")
            time.sleep(0.01)
        running_s = time.perf_counter() - t1
        calls = Counter(server.calls)
        calls.subtract(warm_calls)
        return GatewayFigures(
            nodes=nodes,
            pods=pods,
            jobs=jobs,
            calls={
                f"{g or 'core'}/{r} {v}": n for (g, r, v), n in sorted(calls.items()) if n and v != "watch"
            },
            watch_opens=sum(n for (_, _, v), n in calls.items() if v == "watch"),
            listed=server.listed - warm_listed,
            warmup_calls=sum(warm_calls.values()),
            warmup_listed=warm_listed,
            warmup_s=warmup_s,
            submit_s=submit_s,
            running_s=running_s,
        )
    finally:
        gateway.close()
        server.stop()
