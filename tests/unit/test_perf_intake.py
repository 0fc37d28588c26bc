"""The intake bench's load: its clients spread over the replicas in turn, each request counted once."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from cpn.perf.intake import _load


async def _two_replicas_under_load(bodies: list[bytes]) -> tuple[list[float], list[str], Counter, Counter]:
    """Two loopback HTTP servers that answer every POST 201, the body being the job id, and count what
    each served; `_load` posts `bodies` to them from 4 clients."""
    served: Counter = Counter()

    def replica(name: str):
        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                    job = (await reader.readexactly(length)).decode()
                    served[name] += 1
                    body = json.dumps({"jobs": [{"job_id": job, "status": "created"}]}).encode()
                    writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            except asyncio.IncompleteReadError:  # the client closed its connection
                writer.close()

        return answer

    servers = [await asyncio.start_server(replica(name), "127.0.0.1", 0) for name in ("a", "b")]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    _, latencies, acked, errors = await _load(ports, "token", bodies, clients=4)
    for s in servers:
        s.close()
    return latencies, acked, errors, served


def test_clients_spread_over_the_replicas_in_turn():
    bodies = [f"bench/job-{i}".encode() for i in range(12)]

    latencies, acked, errors, served = asyncio.run(_two_replicas_under_load(bodies))

    assert sorted(acked) == sorted(b.decode() for b in bodies) and len(latencies) == 12
    assert errors == Counter()
    assert served["a"] > 0 and served["b"] > 0 and served["a"] + served["b"] == 12
