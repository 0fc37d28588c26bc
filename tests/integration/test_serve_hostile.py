"""`cpn serve` as a real process (uvicorn on loopback) with a token file, against the inputs of issue 14.

Every hostile input gets a 4xx within 5 s, the server stays up and nothing is
stored; unauthenticated reads and writes get 401; a token for one namespace can
neither read nor write another; a foreign Host or a cross-site Origin is refused.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time

import pytest

from cpn.auth import create_token
from cpn.perf.intake import free_port, job_manifest
from cpn.store import JobStore

pytestmark = pytest.mark.integration

REQUIRED = 'model_name: "ResNet-50"\n    data_size: "20"\n    epoch: "10"\n'
ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def job(name: str, namespace: str = "team-a", extra: str = "", annotations: str = REQUIRED) -> str:
    return (
        f"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
        f"  annotations:\n    {annotations}{extra}spec:\n  template:\n    spec:\n      restartPolicy: Never\n"
        "      containers:\n      - name: main\n        image: registry.example.com/train:1\n"
        "        resources: {limits: {nvidia.com/gpu: 1}}\n"
    )


HOSTILE = {
    "deep-nesting": "[" * 100_000 + "]" * 100_000,
    "alias-bomb": ALIAS_BOMB + job("bomb"),
    "invalid-date": job("date", extra="  built: 2024-02-30\n  x: " + "1" * 5000 + "\n"),
    "timestamp-tag": job("ts", extra="  t: !!timestamp not-a-date\n")
    + "---\n"
    + job("ts2", extra="  a: 1\n  a: 2\n"),
    "newline-name": job('"nl-job\\n"'),
    "bool-epoch": job("yes-epoch", annotations='model_name: "x"\n    data_size: "1"\n    epoch: yes\n'),
    "kind-typo": job("ok") + "---\n" + job("typo").replace("kind: Job", "kind: job"),
    "huge-gpus": job("gpus").replace(
        "image: registry",
        "resources: {limits: {nvidia.com/gpu: 1000000000000000000000000}}\n        image: registry",
    ),
    "too-large": job("big") + "#" * (2 << 20) + "\n",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A `cpn serve` process with a tokens file holding a team-a token and a team-b token."""
    tmp = tmp_path_factory.mktemp("serve")
    tokens = tmp / "tokens.yaml"
    alice, bob = create_token(tokens, "alice", ["team-a"]), create_token(tokens, "bob", ["team-b"])
    port = free_port()
    log = open(tmp / "server.log", "wb")  # noqa: SIM115
    command = [sys.executable, "-c", "import sys; from cli import main; sys.exit(main())", "serve"]
    args = ["--store", str(tmp / "jobs.db"), "--tokens-file", str(tokens), "--port", str(port)]
    process = subprocess.Popen([*command, *args], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if request(port, "GET", "/healthz")[0] == 200:
                break
        except OSError:
            time.sleep(0.2)
    else:
        process.kill()
        pytest.fail((tmp / "server.log").read_text())
    yield {"port": port, "alice": alice, "bob": bob, "store": tmp / "jobs.db", "log": tmp / "server.log"}
    process.send_signal(signal.SIGINT)
    process.wait(timeout=15)
    log.close()


def request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def post(server, text: str, token: str | None = None, **headers: str):
    auth = {"Authorization": f"Bearer {token or server['alice']}"}
    return request(
        server["port"],
        "POST",
        "/jobs",
        text.encode(),
        {"Content-Type": "application/yaml", **auth, **headers},
    )


def stored(server) -> list[str]:
    with JobStore(server["store"]) as store:
        return [r.job_id for r in store.jobs()]


@pytest.mark.parametrize("name", list(HOSTILE))
def test_each_hostile_input_is_a_quick_short_4xx_and_the_server_stays_up(server, name):
    before = stored(server)
    start = time.monotonic()
    status, body = post(server, HOSTILE[name])
    assert time.monotonic() - start < 5
    assert 400 <= status < 500 and len(body) < 64 * 1024
    assert json.loads(body)["error"]
    assert request(server["port"], "GET", "/healthz")[0] == 200
    assert stored(server) == before


def test_tokens_namespaces_host_and_origin(server):
    port = server["port"]
    assert request(port, "POST", "/jobs", job("a").encode(), {"Content-Type": "application/yaml"})[0] == 401
    assert request(port, "GET", "/jobs")[0] == 401
    assert post(server, job("a"))[0] == 201
    assert post(server, job("b", "team-b"))[0] == 403  # alice may not write team-b
    assert post(server, job("b", "team-b"), server["bob"])[0] == 201
    bob = {"Authorization": f"Bearer {server['bob']}"}
    assert request(port, "GET", "/jobs/team-a/a", headers=bob)[0] == 403
    listed = json.loads(request(port, "GET", "/jobs", headers=bob)[1])["jobs"]
    assert [j["job_id"] for j in listed] == ["team-b/b"]
    assert post(server, job("c"), Host="attacker.example")[0] == 421
    assert post(server, job("c"), Origin="http://attacker.example")[0] == 403
    status, _ = request(port, "POST", "/jobs", job("c").encode(), {"Content-Type": "text/plain", **bob})
    assert status == 415
    assert sorted(stored(server)) == ["team-a/a", "team-b/b"]
    assert server["alice"] not in server["log"].read_text()


def test_a_batch_round_trip(server):
    text = "---\n".join(job_manifest(i).replace("namespace: bench", "namespace: team-a") for i in range(10))
    status, body = post(server, text)
    assert status == 201 and len(json.loads(body)["jobs"]) == 10
