"""A fake API server per test and the real `kubernetes` client pointed at it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from config.settings import ClustersConfig
from cpn.adapters.kubernetes import KubernetesGateway, RetryPolicy
from cpn.adapters.kubernetes.fake_apiserver import FakeApiServer

DOMAIN = "maip.mxsf.io"
USAGE = f"{DOMAIN}/node.usage"
PRODUCT = "nvidia.com/gpu.product"


def gpu_labels(usage: str, product: str, gpus: int, memory_mib: int) -> dict[str, str]:
    """Node labels as GPU Feature Discovery and the seed's scheme write them."""
    return {
        USAGE: usage,
        PRODUCT: product,
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.memory": str(memory_mib),
    }


def seed_taints(usage: str, product: str) -> list[dict[str, str]]:
    return [
        {"key": USAGE, "value": usage, "effect": "NoSchedule"},
        {"key": PRODUCT, "value": product, "effect": "NoSchedule"},
    ]


def api_client(server: FakeApiServer) -> client.ApiClient:
    configuration = client.Configuration(host=server.url)
    return client.ApiClient(configuration)


FAST = RetryPolicy(attempts=4, base_s=0.01, max_s=0.05, timeout_s=5)


_MADE: list[KubernetesGateway] = []
"""Gateways made by `make_gateway` and not closed yet: the `server` fixture closes them."""


def make_gateway(server: FakeApiServer, cluster: str = "east", **kw) -> KubernetesGateway:
    kw.setdefault("retry", FAST)
    gateway = KubernetesGateway(cluster, api_client(server), label_domain=DOMAIN, watch_timeout_s=2, **kw)
    _MADE.append(gateway)
    return gateway


def wait_for(predicate: Callable[[], object], timeout: float = 5.0) -> object:
    """Poll until `predicate()` is truthy; its value, or AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    srv = FakeApiServer().start()
    yield srv
    while _MADE:  # a submission starts the gateway's watches
        _MADE.pop().close()
    srv.stop()


def write_kubeconfig(path: Path, server_url: str) -> Path:
    """A kubeconfig at `path` whose context `lab` reaches the fake API server at `server_url`."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": {"server": server_url}}],
                "users": [{"name": "cpn", "user": {"token": "t"}}],
                "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "cpn"}}],
                "current-context": "lab",
            }
        )
    )
    return path


def lab_config(server: FakeApiServer, tmp_path: Path, **cluster: object) -> ClustersConfig:
    """Settings of one cluster `lab` reached through a kubeconfig, over two 4-card A100 training nodes
    added to `server`; `cluster` adds settings of the cluster (e.g. log_tail_lines)."""
    product = "NVIDIA-A100-SXM4-80GB"
    for name in ("gpu-a", "gpu-b"):
        server.add_node(
            name, gpu_labels("training", product, 4, 81920), 4, taints=seed_taints("training", product)
        )
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    group = {
        "name": "unused",
        "gpu_product": product,
        "gpus_per_node": 1,
        "gpu_memory_gb": 80,
        "cpu_cores": 1,
    }
    lab = {
        "name": "lab",
        "kube_context": "lab",
        "kubeconfig": str(kubeconfig),
        "node_groups": [group],
        **cluster,
    }
    return ClustersConfig.model_validate({"label_domain": DOMAIN, "clusters": [lab]})
