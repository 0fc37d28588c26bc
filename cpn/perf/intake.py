"""Load on the HTTP intake: C clients post N jobs to a real server and the store is checked afterwards.

`bench_intake` starts the server command it is given (`cpn serve` with a fresh token,
in a subprocess) R times (replicas) on one store, a fresh SQLite file or an empty
database it is given, waits until each answers `/healthz`, then runs C asyncio
clients in this process, each on its own keep-alive connection to one replica (round
robin), posting batches of B generated Jobs until N are sent. Each request's latency
is timed from its first byte written to its last byte read. After the load the servers
are stopped and the store is opened: every acknowledged job must be there once
(`lost`, `duplicated`: jobs with more than one entry into the queue).

The clients are a minimal HTTP/1.1 writer and reader over asyncio streams, so that
the load generator, which shares the machine, costs as little as it can.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from cpn.auth import create_token
from cpn.store import JobStore, StoreError

NAMESPACE = "bench"
"""Namespace of the generated jobs (the bench's token may write only it)."""


@dataclass(frozen=True)
class IntakeBenchResult:
    """What one load run measured."""

    clients: int
    batch: int
    jobs: int
    requests: int
    seconds: float
    """Wall time from the first request sent to the last answer read."""
    jobs_per_s: float
    """Acknowledged jobs per second of that wall time."""
    p50_ms: float
    p99_ms: float
    """99th percentile of request latency."""
    acknowledged: int
    """Jobs the server answered `created` for."""
    stored: int
    """Jobs in the store afterwards."""
    lost: int
    """Acknowledged jobs missing from the store: must be 0."""
    duplicated: int
    """Jobs that entered the queue more than once: must be 0."""
    errors: dict[str, int]
    """Responses other than 201, by status code."""
    server_cpu_ms_per_job: float
    """CPU time (user + system) the server process spent during the load, per acknowledged job:
    the cost of intake itself, whatever else shares the machine."""

    def to_json(self) -> dict:
        """The figures as a JSON-ready dict (the issue's keys first)."""
        first = ("jobs_per_s", "p99_ms", "acknowledged", "stored", "lost", "duplicated")
        data = asdict(self)
        return {k: data[k] for k in first} | {k: v for k, v in data.items() if k not in first}


def job_manifest(index: int) -> str:
    """A small batch/v1 Job with cpn's annotations, unique by `index`."""
    return (
        "apiVersion: batch/v1\n"
        "kind: Job\n"
        "metadata:\n"
        f"  name: bench-{index:07d}\n"
        f"  namespace: {NAMESPACE}\n"
        "  annotations:\n"
        '    model_name: "ResNet-50"\n'
        '    data_size: "20"\n'
        f'    epoch: "{1 + index % 90}"\n'
        '    batch_size: "64"\n'
        "spec:\n"
        "  template:\n"
        "    spec:\n"
        "      restartPolicy: Never\n"
        "      containers:\n"
        "        - name: main\n"
        "          image: registry.example.com/train/resnet:1.4\n"
        "          resources:\n"
        "            requests: {cpu: '4', memory: 16Gi}\n"
        "            limits: {cpu: '4', memory: 16Gi, nvidia.com/gpu: 2}\n"
    )


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_intake(
    server_command: Callable[[Path, int], list[str]],
    *,
    clients: int,
    jobs: int,
    batch: int = 1,
    store: str | None = None,
    replicas: int = 1,
    progress: Callable[[str], None] = lambda _: None,
) -> IntakeBenchResult:
    """Start the servers, post `jobs` jobs in batches of `batch` from `clients` clients, check the store.

    `server_command(tokens_file, port)` is the command line of a server on 127.0.0.1:`port`
    authenticating with that tokens file, over the store that `CPN_STORE` in its environment names
    (so that a password in a database URL is on no command line). `store` is that store, a file or a
    database URL, which must hold no job (StoreError if it does); None: a fresh SQLite file.
    `replicas` servers share it, client i posting to replica i mod `replicas`.
    """
    if clients < 1 or jobs < 1 or batch < 1 or replicas < 1:
        raise ValueError("--clients, --jobs, --batch and --replicas must be at least 1")
    with tempfile.TemporaryDirectory(prefix="cpn-bench-intake-") as tmp:
        target = str(Path(tmp) / "jobs.db") if store is None else store
        _check_empty(target)  # this also migrates a new store's schema, once, before the replicas start
        tokens = Path(tmp) / "tokens.yaml"
        token = create_token(tokens, "bench", [NAMESPACE])
        ports: list[int] = []
        while len(ports) < replicas:
            if (port := free_port()) not in ports:
                ports.append(port)
        env = os.environ | {"CPN_STORE": target}
        progress(f"starting {replicas} server(s) on 127.0.0.1:{','.join(map(str, ports))} ...")
        logs = [Path(tmp) / f"server-{i}.log" for i in range(replicas)]
        servers: list[tuple[subprocess.Popen, Path]] = []
        try:
            for port, log in zip(ports, logs, strict=True):
                with log.open("wb") as out:  # the child keeps its own descriptor
                    command = server_command(tokens, port)
                    proc = subprocess.Popen(
                        command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
                    )
                servers.append((proc, log))
            for port, (proc, log) in zip(ports, servers, strict=True):
                _wait_ready(port, proc, log)
            bodies = [
                "---\n".join(job_manifest(i) for i in range(start, min(start + batch, jobs))).encode()
                for start in range(0, jobs, batch)
            ]
            progress(f"posting {jobs:,} jobs in {len(bodies):,} requests from {clients} clients ...")
            cpu_before = sum(_cpu_seconds(proc.pid) for proc, _ in servers)
            seconds, latencies, acked, errors = asyncio.run(_load(ports, token, bodies, clients))
            server_cpu = sum(_cpu_seconds(proc.pid) for proc, _ in servers) - cpu_before
        finally:
            for proc, _ in servers:
                _stop(proc)
        with JobStore(target) as s:
            stored_ids = {r.job_id for r in s.jobs()}
            entries = Counter(t.job_id for t in s.transitions_all() if t.from_state is None)
    latencies.sort()
    return IntakeBenchResult(
        clients=clients,
        batch=batch,
        jobs=jobs,
        requests=len(bodies),
        seconds=round(seconds, 3),
        jobs_per_s=round(len(acked) / seconds, 1),
        p50_ms=round(_quantile(latencies, 0.50) * 1000, 2),
        p99_ms=round(_quantile(latencies, 0.99) * 1000, 2),
        acknowledged=len(acked),
        stored=len(stored_ids),
        lost=len(set(acked) - stored_ids),
        duplicated=sum(1 for n in entries.values() if n > 1) + (len(acked) - len(set(acked))),
        errors={str(k): v for k, v in sorted(errors.items())},
        server_cpu_ms_per_job=round(server_cpu * 1000 / max(1, len(acked)), 3),
    )


def _check_empty(target: str) -> None:
    """Open the store (creating or migrating its schema) and refuse it if it holds any job: the check
    afterwards counts every job in it as the bench's."""
    with JobStore(target) as s:
        held = sum(s.counts().values())
        if held:
            raise StoreError(
                f"{s.path}: the store holds {held:,} jobs already; the bench needs an empty one "
                "(a new database, e.g. createdb)"
            )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _wait_ready(port: int, server: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited ({server.returncode}): {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the server did not answer /healthz within {timeout_s:.0f} s")


def _stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


async def _load(
    ports: list[int], token: str, bodies: list[bytes], clients: int
) -> tuple[float, list[float], list[str], Counter]:
    queue = iter(bodies)
    latencies: list[float] = []
    acked: list[str] = []
    errors: Counter = Counter()

    async def client(port: int) -> None:
        head = (
            f"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/yaml\r\nContent-Length: "
        ).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for body in queue:
                start = time.perf_counter()
                writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
                status, payload = await _response(reader)
                latencies.append(time.perf_counter() - start)
                if status == 201:
                    acked.extend(j["job_id"] for j in json.loads(payload)["jobs"] if j["status"] == "created")
                else:
                    errors[status] += 1
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(ports[i % len(ports)]) for i in range(clients)))
    return time.perf_counter() - start, latencies, acked, errors


async def _response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 response with a Content-Length."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = next(
        int(v) for k, _, v in (line.partition(b":") for line in lines[1:]) if k.lower() == b"content-length"
    )
    return status, await reader.readexactly(length)
