"""Image migration against two real docker-registry servers and skopeo, with an OCI image built by hand."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from cli import main
from config.settings import ClustersConfig
from cpn.adapters.registry import CopyFailed, SkopeoMigrator, copy_image
from cpn.jobs import JobSpec
from cpn.transfer import TransferTimes
from tests.integration.servers import ThrottledProxy, build_oci_image, push_oci, registry

pytestmark = [pytest.mark.integration, pytest.mark.registry, pytest.mark.timeout(180)]


@pytest.fixture
def site_a(tmp_path):
    with registry(tmp_path / "a") as reg:
        yield reg


@pytest.fixture
def site_b(tmp_path):
    with registry(tmp_path / "b") as reg:
        yield reg


def pushed(
    tmp_path: Path, reg, layer_bytes: int = 4096, repo: str = "team/resnet:v1"
) -> tuple[str, str, int]:
    """Build an image, push it to `reg`; (reference, digest, bytes of manifest + config + layer)."""
    layout = tmp_path / f"layout-{layer_bytes}"
    digest = build_oci_image(layout, layer_bytes=layer_bytes)
    push_oci(layout, "v1", f"{reg.address}/{repo}")
    size = sum(p.stat().st_size for p in (layout / "blobs" / "sha256").iterdir())
    return f"{reg.address}/{repo}", digest, size


def served_digest(ref: str) -> str:
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{ref}"],
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def test_cli_copies_then_skips(tmp_path, site_a, site_b, capsys):
    ref, digest, size = pushed(tmp_path, site_a)
    out = tmp_path / "copy.json"

    assert main(["migrate", "image", ref, site_b.address, "--insecure", "--json", str(out)]) == 0
    first = json.loads(out.read_text())
    assert first["digest"] == digest
    assert first["destination"] == f"{site_b.address}/team/resnet@{digest}"
    assert first["bytes"] == size
    assert first["seconds"] > 0
    assert first["skipped"] is False
    assert served_digest(f"{site_b.address}/team/resnet:v1") == digest
    assert served_digest(first["destination"]) == digest
    assert "Copying blob" in capsys.readouterr().err

    assert main(["migrate", "image", ref, site_b.address, "--insecure", "--json", str(out)]) == 0
    second = json.loads(out.read_text())
    assert second["skipped"] is True
    assert second["bytes"] == 0
    assert second["digest"] == digest


def test_tls_required_unless_insecure(tmp_path, site_a, site_b):
    ref, _, _ = pushed(tmp_path, site_a)
    with pytest.raises(CopyFailed, match="after 1 attempts"):
        copy_image(ref, f"{site_b.address}/team/resnet:v1", retries=0)


def clusters(a: str, b: str) -> ClustersConfig:
    group = {
        "name": "n",
        "gpu_product": "Tesla-V100-SXM2-16GB",
        "gpus_per_node": 1,
        "gpu_memory_gb": 16,
        "cpu_cores": 8,
    }
    return ClustersConfig.model_validate(
        {
            "clusters": [
                {"name": "site-a", "registry": a, "registry_insecure": True, "node_groups": [group]},
                {"name": "site-b", "registry": b, "registry_insecure": True, "node_groups": [group]},
            ],
            "wan_gbps": {"site-a": {"site-b": 0.1}},
        }
    )


def wait_done(migrator: SkopeoMigrator, timeout_s: float = 90):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if done := migrator.poll():
            return done
        time.sleep(0.05)
    raise AssertionError("the migration did not finish")


def test_migrator_copies_in_background_and_learns_bandwidth(tmp_path, site_a, site_b):
    _, digest, size = pushed(tmp_path, site_a, layer_bytes=12 * 1024**2)
    config = clusters(site_a.address, site_b.address)
    transfers = TransferTimes(config)
    migrator = SkopeoMigrator(config, transfers=transfers)
    job = JobSpec(job_id="ns/j1", model="ResNet-50", image="team/resnet:v1", source_cluster="site-a")

    began = time.monotonic()
    migrator.start(job, "site-a", "site-b")
    assert time.monotonic() - began < 0.5  # the copy runs in the background
    [done] = wait_done(migrator)

    assert done.ok, done.reason
    assert done.job_id == "ns/j1" and done.cluster == "site-b"
    assert done.image == f"{site_b.address}/team/resnet@{digest}"
    assert done.bytes == size and done.seconds > 0
    assert served_digest(done.image) == digest
    # Loopback moves 12 MB far faster than the configured 0.1 Gbit/s: the estimate rises from the prior.
    assert transfers.bandwidth_gbps("site-a", "site-b") > 0.1
    assert transfers.bandwidth_gbps("site-b", "site-a") == 0.1


def test_registry_killed_mid_copy_retries_then_fails(tmp_path, site_a, site_b):
    ref, _, _ = pushed(tmp_path, site_a, layer_bytes=3 * 1024**2)
    proxy = ThrottledProxy(site_b.address, bytes_per_s=1024**2)  # about 3 s per copy of the layer
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(line)
        if line.startswith("Copying blob") and site_b.proc.poll() is None:
            site_b.kill()

    try:
        with pytest.raises(CopyFailed, match="after 3 attempts") as failure:
            copy_image(
                ref,
                f"{proxy.address}/team/resnet:v1",
                src_insecure=True,
                dest_insecure=True,
                retries=2,
                backoff_s=0.2,
                progress=progress,
            )
    finally:
        proxy.close()
    assert failure.value.attempts == 3
    assert sum(line.startswith("attempt") and "retrying" in line for line in lines) == 2
    assert any(line.startswith("Copying blob") for line in lines)


def test_migrator_failure_goes_back_with_reason(tmp_path, site_a, site_b):
    pushed(tmp_path, site_a)
    site_b.kill()
    migrator = SkopeoMigrator(clusters(site_a.address, site_b.address), retries=1, backoff_s=0.1)
    migrator.start(JobSpec(job_id="ns/j2", model="ResNet-50", image="team/resnet:v1"), "site-a", "site-b")
    [done] = wait_done(migrator)
    assert not done.ok
    assert "after 2 attempts" in done.reason and site_b.address in done.reason
    assert done.image == "" and done.bytes is None
