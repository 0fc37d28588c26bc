"""Real local servers for the integration tests: Prometheus, docker-registry, PostgreSQL, and a hand-built
OCI image.

Every server runs on a free loopback port with a generated config in a temporary folder, and is always
stopped (context managers). Needs the Debian packages `prometheus`, `docker-registry`, `skopeo` and
`postgresql` (`make test` installs them).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    """Wait until `url` answers 200, or fail naming the URL (and the process's exit, if it died)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


def stop(proc: subprocess.Popen) -> None:
    """Terminate a server we started and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def prometheus(tmp: Path, scrape_configs: list[dict], interval_s: float = 1.0) -> Iterator[str]:
    """A real Prometheus scraping `scrape_configs` every `interval_s`; yields its base URL."""
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": f"{interval_s:g}s", "scrape_timeout": f"{interval_s:g}s"},
                "scrape_configs": scrape_configs,
            }
        )
    )
    log = open(tmp / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/-/ready", proc=proc)
        yield url
    finally:
        stop(proc)
        log.close()


POSTGRES_PACKAGE = "apt-get install -y --no-install-recommends postgresql"
"""What installs the PostgreSQL server binaries on Debian, for the message when they are missing."""


def postgres_bindir() -> Path:
    """The folder of PostgreSQL's server binaries (`initdb`, `pg_ctl`): `pg_config --bindir`, else the
    newest /usr/lib/postgresql/VERSION/bin; fails naming the package to install if there is none."""
    candidates = []
    try:
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
        candidates.append(Path(found.stdout.strip()))
    except (OSError, subprocess.CalledProcessError):
        pass
    installed = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(
        installed, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True
    )
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    raise RuntimeError(f"the PostgreSQL server (initdb, pg_ctl) is not installed: run `{POSTGRES_PACKAGE}`")


class Postgres:
    """A running PostgreSQL server on loopback, trusting local connections of its superuser `postgres`.

    `stop` and `start` (the pg_ctl commands `postgres()` runs) take it down and up again, as an outage."""

    def __init__(self, port: int, stop: Callable[[], None], start: Callable[[], None]) -> None:
        self.port = port
        self._names = itertools.count(1)
        self.stop = stop
        self.start = start

    def url(self, database: str) -> str:
        """The URL of `database` on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database on this server; returns its URL."""
        import psycopg

        name = f"cpn_{next(self._names)}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        return self.url(name)


@contextmanager
def postgres() -> Iterator[Postgres]:
    """A real PostgreSQL server (Debian's package) in a fresh data folder, on a free loopback port.

    `initdb` refuses to run as root: then the server runs as the `postgres` user, in a folder it owns.
    Durability is switched off (fsync): the data are thrown away with the folder.
    """
    bindir = postgres_bindir()
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    # Not under pytest's temporary folder: when root runs the tests, only root may enter that one.
    folder = Path(tempfile.mkdtemp(prefix="cpn-postgres-"))
    data, port = folder / "data", free_port()
    if as_user:
        shutil.chown(folder, "postgres")

    def run(*command: str) -> None:
        done = subprocess.run([*as_user, *command], capture_output=True, text=True, timeout=60)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stdout}{done.stderr}")

    try:
        run(str(bindir / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres", "--no-sync")
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(folder / "server.log")

        def start() -> None:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", log, "-w", "start")

        def stop() -> None:
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")

        start()
        try:
            yield Postgres(port, stop, start)
        finally:
            stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Registry:
    """A running docker-registry: its `address` (host:port); `kill` stops it at once."""

    def __init__(self, address: str, proc: subprocess.Popen) -> None:
        self.address = address
        self.proc = proc

    def kill(self) -> None:
        """SIGKILL: the registry dies mid-request, as a crashed one would."""
        self.proc.kill()
        self.proc.wait()


@contextmanager
def registry(tmp: Path) -> Iterator[Registry]:
    """A real docker-registry (distribution 2.8) on a free loopback port, storing in `tmp`."""
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "config.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "error"},
                "storage": {"filesystem": {"rootdirectory": str(tmp / "data")}, "delete": {"enabled": True}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    log = open(tmp / "registry.log", "wb")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/v2/", proc=proc)
        yield Registry(f"127.0.0.1:{port}", proc)
    finally:
        stop(proc)
        log.close()


def build_oci_image(root: Path, tag: str = "v1", layer_bytes: int = 4096, seed: int = 0) -> str:
    """An OCI image layout at `root` with one gzip layer of `layer_bytes` random bytes; returns its digest.

    Built by hand (no Docker): a tar of one file, gzipped, its config and manifest JSON, every blob stored
    under its sha256.
    """
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return f"sha256:{digest}"

    payload = random_bytes(layer_bytes, seed)
    tar_buf = io.BytesIO()
    with tarfile.open(fileobj=tar_buf, mode="w") as tar:
        info = tarfile.TarInfo("payload.bin")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    diff = tar_buf.getvalue()
    layer = gzip.compress(diff, mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(diff).hexdigest()}"]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": put(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": put(layer),
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    digest = put(manifest)
    (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (root / "index.json").write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": digest,
                        "size": len(manifest),
                        "annotations": {"org.opencontainers.image.ref.name": tag},
                    }
                ],
            }
        )
    )
    return digest


def random_bytes(n: int, seed: int) -> bytes:
    """`n` incompressible bytes, the same for the same seed."""
    out = bytearray()
    block = seed.to_bytes(8, "big")
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


def push_oci(layout: Path, tag: str, ref: str) -> None:
    """Push the OCI layout's `tag` to the plain-HTTP registry reference `ref` with skopeo."""
    subprocess.run(
        ["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{layout}:{tag}", f"docker://{ref}"],
        check=True,
        capture_output=True,
        timeout=120,
    )


class ThrottledProxy:
    """A TCP proxy to `backend` that forwards at most `bytes_per_s` each way: makes a copy take time.

    Used to be sure a registry is killed while a copy is in flight.
    """

    def __init__(self, backend: str, bytes_per_s: int) -> None:
        self.backend = backend
        self.rate = bytes_per_s
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            host, port = self.backend.rsplit(":", 1)
            try:
                upstream = socket.create_connection((host, int(port)), timeout=5)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        chunk = max(1, self.rate // 20)
        try:
            while data := src.recv(chunk):
                dst.sendall(data)
                time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def close(self) -> None:
        """Stop accepting connections."""
        self._stopped.set()
        self._listener.close()
