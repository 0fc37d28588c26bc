"""Pure parts of image migration: references, image sizes, retries with backoff (skopeo replaced by a
script that fails), the migrator's refusals, and bandwidth learning."""

from __future__ import annotations

import json
import stat

import pytest

import cpn.adapters.registry as registry
from config.settings import ClustersConfig
from cpn.adapters.registry import CopyFailed, ImageRef, SkopeoMigrator, copy_image, manifest_bytes
from cpn.jobs import JobSpec
from cpn.transfer import MIN_LEARN_BYTES, TransferTimes


@pytest.mark.parametrize(
    ("ref", "parts"),
    [
        ("127.0.0.1:5000/team/app:v1", ("127.0.0.1:5000", "team/app", "v1", "")),
        ("registry.example.org/app", ("registry.example.org", "app", "", "")),
        ("team/app:v1", ("", "team/app", "v1", "")),
        ("localhost/app@sha256:ab", ("localhost", "app", "", "sha256:ab")),
        ("docker://h:1/a/b:t@sha256:cd", ("h:1", "a/b", "t", "sha256:cd")),
    ],
)
def test_references_split_into_registry_repository_tag_digest(ref, parts):
    parsed = ImageRef.parse(ref)
    assert (parsed.registry, parsed.repository, parsed.tag, parsed.digest) == parts


def test_a_moved_image_keeps_its_path_and_tag_and_is_pinned_by_digest():
    src = ImageRef.parse("a:5000/team/app:v1")
    dst = src.moved_to("b:5000")
    assert str(dst) == "b:5000/team/app:v1"
    assert dst.pinned("sha256:ff") == "b:5000/team/app@sha256:ff"
    assert str(ImageRef.parse("a:1/app@sha256:ab").moved_to("b:1")) == "b:1/app:sha256-ab"


def test_image_bytes_count_manifest_config_and_layers_and_index_children():
    child = json.dumps({"config": {"size": 10}, "layers": [{"size": 100}, {"size": 1000}]}).encode()
    assert manifest_bytes(child, lambda d: None) == len(child) + 1110
    index = json.dumps(
        {"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [{"digest": "sha256:c"}]}
    ).encode()
    assert manifest_bytes(index, lambda d: child) == len(index) + len(child) + 1110


@pytest.fixture
def failing_skopeo(tmp_path, monkeypatch):
    """A `skopeo` that fails every call, recording its arguments."""
    log = tmp_path / "calls"
    script = tmp_path / "skopeo"
    fatal = 'time="t" level=fatal msg="dial tcp: connection refused"'
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\necho '{fatal}' >&2\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(registry, "SKOPEO", str(script))
    return log


def test_failed_attempts_are_retried_with_doubling_backoff_then_fail_with_the_reason(failing_skopeo):
    waits: list[float] = []
    lines: list[str] = []
    with pytest.raises(CopyFailed) as failure:
        copy_image(
            "a:1/app:v1", "b:1/app:v1", retries=3, backoff_s=0.5, sleep=waits.append, progress=lines.append
        )
    assert failure.value.attempts == 4
    assert waits == [0.5, 1.0, 2.0]
    assert str(failure.value).endswith("4 attempts: cannot read a:1/app:v1: dial tcp: connection refused")
    assert len([line for line in lines if "retrying" in line]) == 3
    calls = failing_skopeo.read_text().splitlines()
    assert len(calls) == 4 and all("--tls-verify=true" in c for c in calls)


def test_missing_skopeo_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(registry, "SKOPEO", "/nonexistent/skopeo")
    with pytest.raises(RuntimeError, match="apt-get install skopeo"):
        copy_image("a:1/app:v1", "b:1/app:v1", retries=0)


def two_sites(registry_b: str | None) -> ClustersConfig:
    group = {"name": "g", "gpu_product": "V100", "gpus_per_node": 1, "gpu_memory_gb": 16, "cpu_cores": 4}
    return ClustersConfig.model_validate(
        {
            "clusters": [
                {"name": "a", "registry": "a:5000", "node_groups": [group]},
                {"name": "b", "registry": registry_b, "node_groups": [group]},
            ],
            "wan_gbps": {"a": {"b": 1.0}},
        }
    )


def test_migrator_refuses_a_destination_without_registry_and_passes_jobs_without_image():
    migrator = SkopeoMigrator(two_sites(None))
    migrator.start(JobSpec("ns/x", "m", image="team/app:v1"), "a", "b")
    migrator.start(JobSpec("ns/y", "m"), "a", "b")
    refused, passed = migrator.poll()
    assert not refused.ok and "cluster b has no registry" in refused.reason
    assert passed.ok and passed.job_id == "ns/y" and passed.bytes is None
    assert migrator.poll() == []


def test_bandwidth_learns_from_measured_transfers_with_the_configured_prior():
    transfers = TransferTimes(two_sites("b:5000"), prior_gb=1.0)
    job = JobSpec("ns/x", "m", image_size_gb=2.0)
    assert transfers.seconds(job, "a", "b") == pytest.approx(16.0)  # 16 Gbit at the configured 1 Gbit/s

    transfers.observe("a", "b", MIN_LEARN_BYTES - 1, 0.001)  # too small: latency, not bandwidth
    assert transfers.bandwidth_gbps("a", "b") == 1.0

    transfers.observe("a", "b", 3 * 10**9, 6.0)  # 24 Gbit in 6 s: 4 Gbit/s measured
    # (8 prior Gbit + 24) / (8 s + 6 s)
    assert transfers.bandwidth_gbps("a", "b") == pytest.approx(32 / 14)
    assert transfers.bandwidth_gbps("b", "a") == 1.0
    for _ in range(50):
        transfers.observe("a", "b", 3 * 10**9, 6.0)
    assert transfers.bandwidth_gbps("a", "b") == pytest.approx(4.0, rel=0.02)
    assert transfers.seconds(job, "a", "b") == pytest.approx(4.0, rel=0.02)
