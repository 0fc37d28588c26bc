"""Load on the HTTP intake: C clients post N jobs to a real server and the store is checked afterwards.

`bench_intake` starts the server command it is given (`cpn serve` on a fresh store,
with a fresh token, in a subprocess), waits until `/healthz` answers, then runs C
asyncio clients in this process, each on its own keep-alive connection, posting
batches of B generated Jobs until N are sent. Each request's latency is timed from
its first byte written to its last byte read. After the load the server is stopped
and the store is opened: every acknowledged job must be there once (`lost`,
`duplicated`: jobs with more than one entry into the queue).

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
from cpn.store import JobStore

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
    server_command: Callable[[Path, Path, int], list[str]],
    *,
    clients: int,
    jobs: int,
    batch: int = 1,
    progress: Callable[[str], None] = lambda _: None,
) -> IntakeBenchResult:
    """Start the server, post `jobs` jobs in batches of `batch` from `clients` clients, check the store.

    `server_command(store, tokens_file, port)` is the command line of a server
    on 127.0.0.1:`port` over that store, authenticating with that tokens file.
    """
    if clients < 1 or jobs < 1 or batch < 1:
        raise ValueError("--clients, --jobs and --batch must be at least 1")
    with tempfile.TemporaryDirectory(prefix="cpn-bench-intake-") as tmp:
        store, tokens = Path(tmp) / "jobs.db", Path(tmp) / "tokens.yaml"
        token = create_token(tokens, "bench", [NAMESPACE])
        port = free_port()
        progress(f"starting the server on 127.0.0.1:{port} ...")
        log = open(Path(tmp) / "server.log", "wb")  # noqa: SIM115  # closed below, after the server
        server = subprocess.Popen(
            server_command(store, tokens, port), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            _wait_ready(port, server, Path(tmp) / "server.log")
            bodies = [
                "---\n".join(job_manifest(i) for i in range(start, min(start + batch, jobs))).encode()
                for start in range(0, jobs, batch)
            ]
            progress(f"posting {jobs:,} jobs in {len(bodies):,} requests from {clients} clients ...")
            cpu_before = _cpu_seconds(server.pid)
            seconds, latencies, acked, errors = asyncio.run(_load(port, token, bodies, clients))
            server_cpu = _cpu_seconds(server.pid) - cpu_before
        finally:
            _stop(server)
            log.close()
        with JobStore(store) as s:
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
    port: int, token: str, bodies: list[bytes], clients: int
) -> tuple[float, list[float], list[str], Counter]:
    queue = iter(bodies)
    latencies: list[float] = []
    acked: list[str] = []
    errors: Counter = Counter()
    head = (
        f"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/yaml\r\nContent-Length: "
    ).encode()

    async def client() -> None:
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
    await asyncio.gather(*(client() for _ in range(clients)))
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
