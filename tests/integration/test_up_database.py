"""`cpn up --database` on a real PostgreSQL server: the job store, Prefect's database and MLflow's backend
store are databases on that server (made by `cpn up`), not SQLite files in the cpn home, and the URL's
password shows nowhere."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import psycopg
import pytest

from cli.up import free_port
from config.settings import REPO_ROOT
from tests.integration.test_prefect_server import _logs, api, deployment, start_cpn_up

pytestmark = [
    pytest.mark.integration,
    pytest.mark.postgres,
    pytest.mark.prefect_server,
    pytest.mark.timeout(900),
]

PASSWORD = "never-printed-7d1f"
"""The server trusts local connections, so any password is accepted: this one must appear nowhere."""


@pytest.fixture(scope="module")
def on_postgres(tmp_path_factory, postgres_server):
    """`cpn up --database` with a password in the URL and the prefix `up_`; yields what start_cpn_up
    yields and the server."""
    server = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{postgres_server.port}"
    home = tmp_path_factory.mktemp("cpn-home")
    for started in start_cpn_up(home, "--database", server, "--database-prefix", "up_"):
        yield (*started, postgres_server)


def rows(server, database: str, query: str) -> list[tuple]:
    """What `query` returns in `database` on the server, read directly."""
    with psycopg.connect(server.url(database)) as conn:
        return conn.execute(query).fetchall()


def mlflow_api(port: int, path: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/2.0/mlflow{path}",
        data=data,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_every_service_answers_and_every_store_is_a_database_on_the_server(on_postgres):
    proc, base, ready_s, ports, home, printed, server = on_postgres
    print(f"cpn up --database ready after {ready_s:.1f} s")
    for port, path in ((ports[0], "/api/health"), (ports[1], "/health"), (ports[2], "/healthz")):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            assert r.status == 200
    made = {r[0] for r in rows(server, "postgres", "SELECT datname FROM pg_database")}
    assert {"up_cpn", "up_prefect", "up_mlflow"} <= made
    assert "made up_cpn, up_prefect, up_mlflow" in printed
    assert not list(home.rglob("*.db")), "a SQLite store in the cpn home"

    # Prefect: a deployment and a flow run made through its API are rows of up_prefect.
    d = deployment(base, "schedule-round")
    run = api(base, "POST", f"/deployments/{d['id']}/create_flow_run", {"parameters": {"dry_run": True}})
    assert run["id"] in {r["id"] for r in api(base, "POST", "/flow_runs/filter", {})}
    assert (d["name"],) in rows(server, "up_prefect", "SELECT name FROM deployment")
    assert (run["id"],) in rows(server, "up_prefect", "SELECT id::text FROM flow_run")

    # MLflow: cpn run trained the first champion before it answered; its runs are rows of up_mlflow.
    experiment = mlflow_api(ports[1], "/experiments/get-by-name?experiment_name=cpn-predictor")["experiment"]
    listed = mlflow_api(ports[1], "/runs/search", {"experiment_ids": [experiment["experiment_id"]]})["runs"]
    assert listed
    stored = rows(server, "up_mlflow", "SELECT run_uuid FROM runs")
    assert {(r["info"]["run_id"],) for r in listed} <= set(stored)
    assert experiment["artifact_location"].startswith((home / "mlruns").as_uri())

    # The job store: cpn run migrated up_cpn and seeded its clusters there.
    assert rows(server, "up_cpn", "SELECT count(*) FROM clusters")[0][0] > 0


def test_the_password_shows_nowhere(on_postgres):
    proc, base, ready_s, ports, home, printed, server = on_postgres
    assert "postgres:***@127.0.0.1" in printed
    assert PASSWORD not in printed
    assert PASSWORD not in _logs(home)


def test_a_server_that_cannot_be_reached_is_named_without_its_password(tmp_path):
    refused = f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/postgres"
    argv = [
        sys.executable,
        "-c",
        "import sys; from cli import main; sys.exit(main())",
        "up",
        "--database",
        refused,
    ]
    for option in ("--prefect-port", "--mlflow-port", "--api-port"):
        argv += [option, str(free_port())]
    done = subprocess.run(
        argv, cwd=REPO_ROOT, env={"CPN_HOME": str(tmp_path)}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--database postgresql://postgres:***@127.0.0.1:1/postgres" in done.stderr
    assert PASSWORD not in done.stdout + done.stderr


def test_ctrl_c_stops_it(on_postgres):
    proc, *_ = on_postgres
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 0
