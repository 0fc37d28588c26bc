"""The Migrator contract, run against every implementation: the simulated copies and skopeo between two real
docker-registry servers (that one is marked `integration` and `registry`).

A harness starts copies and `settle`s until they are done (simulated time moves, or real copies finish).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest

from config.settings import ClustersConfig
from cpn.adapters.migrator import MigrationDone, Migrator
from cpn.clock import SimClock
from cpn.jobs import JobSpec
from cpn.sim.migrator import SimulatedMigrator
from cpn.transfer import TransferTimes


def clusters(registry_a: str | None = None, registry_b: str | None = None) -> ClustersConfig:
    group = {"name": "n", "gpu_product": "v100", "gpus_per_node": 1, "gpu_memory_gb": 16, "cpu_cores": 8}
    sites = []
    for name, reg in (("site-a", registry_a), ("site-b", registry_b)):
        extra = {"registry": reg, "registry_insecure": True} if reg else {}
        sites.append({"name": name, "node_groups": [group], **extra})
    return ClustersConfig.model_validate({"clusters": sites, "wan_gbps": {"site-a": {"site-b": 10}}})


@dataclass
class Harness:
    migrator: Migrator
    settle: Callable[[int], list[MigrationDone]]
    """Wait until this many copies have reported; returns every report polled meanwhile."""
    image: str
    """An image reference that exists at site-a."""


@pytest.fixture
def simulated() -> Iterator[Harness]:
    clock = SimClock()
    migrator = SimulatedMigrator(TransferTimes(clusters()), clock)

    def settle(n: int) -> list[MigrationDone]:
        done: list[MigrationDone] = []
        while len(done) < n and (t := migrator.next_event_time()) is not None:
            migrator.advance(t)
            clock.advance_to(t)
            done += migrator.poll()
        return done + migrator.poll()

    yield Harness(migrator, settle, "team/resnet:v1")


@pytest.fixture
def skopeo(tmp_path) -> Iterator[Harness]:
    from cpn.adapters.registry import SkopeoMigrator
    from tests.integration.servers import build_oci_image, push_oci, registry

    with ExitStack() as stack:
        a = stack.enter_context(registry(tmp_path / "a"))
        b = stack.enter_context(registry(tmp_path / "b"))
        layout = tmp_path / "layout"
        build_oci_image(layout, layer_bytes=4096)
        push_oci(layout, "v1", f"{a.address}/team/resnet:v1")
        migrator = SkopeoMigrator(clusters(a.address, b.address), retries=1, backoff_s=0.1)

        def settle(n: int) -> list[MigrationDone]:
            done: list[MigrationDone] = []
            deadline = time.monotonic() + 120
            while len(done) < n and time.monotonic() < deadline:
                done += migrator.poll()
                time.sleep(0.05)
            return done + migrator.poll()

        yield Harness(migrator, settle, "team/resnet:v1")


IMPLEMENTATIONS = [
    pytest.param("simulated", id="simulated"),
    pytest.param("skopeo", id="skopeo", marks=[pytest.mark.integration, pytest.mark.registry]),
]


@pytest.fixture(params=IMPLEMENTATIONS)
def harness(request) -> Harness:
    return request.getfixturevalue(request.param)


def job(job_id: str, image: str, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-50", image=image, source_cluster="site-a", **kw)


def test_each_copy_reports_once_for_its_destination(harness):
    harness.migrator.start(job("ns/a", harness.image), "site-a", "site-b")
    harness.migrator.start(job("ns/b", harness.image, data_size_gb=1.0), "site-a", "site-b")
    done = harness.settle(2)
    assert sorted(d.job_id for d in done) == ["ns/a", "ns/b"]
    assert all(d.ok and d.cluster == "site-b" for d in done), done
    assert harness.migrator.poll() == []  # reported once


def test_reports_come_in_time_order_and_poll_returns_at_once(harness):
    began = time.monotonic()
    harness.migrator.start(job("ns/a", harness.image), "site-a", "site-b")
    assert time.monotonic() - began < 1.0  # start never waits for the copy
    [done] = harness.settle(1)
    assert done.time >= 0 and done.reason == ""


def test_a_job_with_nothing_to_copy_finishes_ok(harness):
    harness.migrator.start(job("ns/bare", ""), "site-a", "site-b")
    [done] = harness.settle(1)
    assert done.ok and done.job_id == "ns/bare" and done.cluster == "site-b"
