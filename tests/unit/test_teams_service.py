"""Teams in the live service: `cpn run` reads `teams.yaml` of its config folder and its policy places by team
order; `GET /teams` and the web UI's clusters page show each team's standing, a namespace token only its
teams'."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from cli import main
from config.settings import load_profile
from cpn.api import create_app
from cpn.auth import ApiSecurity, Authenticator, create_token
from cpn.bootstrap import Service, build_service, service_teams
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import nodes_from_config
from cpn.jobs import ON_CLUSTER, JobSpec, JobState
from cpn.sim.estimates import OracleEstimates
from cpn.ui.pages import mount_ui
from cpn.views.team_board import TeamBoard

TABLE = ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", 1, 1.0)])
CLUSTERS = {
    "clusters": [
        {
            "name": "c",
            "node_groups": [
                {
                    "name": "n",
                    "count": 1,
                    "gpu_product": "Tesla-V100-SXM2-16GB",
                    "gpus_per_node": 2,
                    "gpu_memory_gb": 16,
                    "cpu_cores": 8,
                }
            ],
        }
    ]
}
"""One cluster, one node, two V100 cards: room for two of the queue's five jobs."""
TEAMS = {
    "teams": [
        {"name": "a", "namespaces": ["a"], "quota": {"v100": 1}},
        {"name": "b", "namespaces": ["b"], "quota": {"v100": 1, "k80": 4}, "borrowing_limit": 0},
    ]
}
"""Two teams of one V100 each; b's K80 quota is more than the clusters have (a warning)."""
QUEUE = ("a/j1", "a/j2", "a/j3", "b/j1", "other/j1")
"""In arrival order: team a's three jobs first, then b's one, then one of a namespace in no team."""


def folder(tmp_path: Path, teams: dict | None) -> Path:
    config = tmp_path / "config"
    config.mkdir(parents=True)
    (config / "clusters.yaml").write_text(yaml.safe_dump(CLUSTERS))
    if teams is not None:
        (config / "teams.yaml").write_text(yaml.safe_dump(teams))
    return config


def one_round(tmp_path: Path, teams: dict | None) -> Service:
    """`cpn run`'s service over a config folder with `teams`, after one FIFO round over QUEUE."""
    config = folder(tmp_path, teams)
    profile = load_profile(config)
    service = build_service(
        profile.clusters,
        tmp_path / "jobs.db",
        "fifo",
        TABLE,
        estimator=OracleEstimates(TABLE),
        time_scale=1.0,
        teams=service_teams(str(config), profile.clusters),
    )
    service.store.submit(
        [JobSpec(j, "ResNet-18", batch_size=32, num_gpus=1, total_steps=10_000) for j in QUEUE]
    )
    service.scheduler.round()
    return service


def started(service: Service) -> list[str]:
    return sorted(r.job_id for r in service.store.jobs(ON_CLUSTER))


def test_cpn_run_places_by_team_order_with_a_teams_file(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="cpn.bootstrap"):
        service = one_round(tmp_path / "teams", TEAMS)
    assert started(service) == ["a/j1", "b/j1"]  # b, below its quota, goes before a's second job
    assert service.store.get("a/j2").state == JobState.QUEUED
    assert "team b: quota k80=4 is more than the clusters have (0)" in caplog.text
    service.close()
    plain = one_round(tmp_path / "plain", None)  # no teams file: one queue in arrival order
    assert plain.scheduler.teams is None
    assert started(plain) == ["a/j1", "a/j2"]
    plain.close()


def test_cpn_run_exits_2_on_a_bad_teams_file_naming_the_field(tmp_path, capsys):
    bad = {"teams": [{"name": "a", "namespaces": ["a"], "weight": -1}]}
    config = folder(tmp_path, bad)
    code = main(["run", "--config", str(config), "--store", str(tmp_path / "jobs.db"), "--no-auth"])
    assert code == 2
    err = capsys.readouterr().err
    assert "teams.0.weight" in err and "greater than 0" in err
    assert not (tmp_path / "jobs.db").exists()  # refused before the store was opened


@pytest.fixture
def served(tmp_path):
    """The API and web UI over the service after its round, with an admin token and a token for `b`."""
    service = one_round(tmp_path, TEAMS)
    tokens = tmp_path / "tokens.yaml"
    admin, team_b = (
        {"authorization": f"Bearer {create_token(tokens, n, ns)}"} for n, ns in (("op", ["*"]), ("tb", ["b"]))
    )
    security = ApiSecurity(Authenticator(tokens), allowed_hosts=frozenset({"testserver"}))
    assert service.scheduler.teams is not None
    board = TeamBoard(service.scheduler.teams, nodes_from_config(service.clusters))
    app = mount_ui(
        create_app(service.store, security=security, teams=board), service.store, security, teams=board
    )
    with TestClient(app) as client:
        yield client, admin, team_b, service
    service.close()


def test_get_teams_shows_every_team_to_an_admin_and_its_own_to_a_namespace_token(served):
    client, admin, team_b, service = served
    a = {"team": "a", "weight": 1.0, "quota": {"v100": 1}, "borrowing_limit": None}
    b = {"team": "b", "weight": 1.0, "quota": {"k80": 4, "v100": 1}, "borrowing_limit": 0}
    # The default team has a job waiting, so it shares what the quotas leave of each GPU type: nothing here.
    default = {"team": "default", "weight": 1.0, "quota": {"v100": 0}, "borrowing_limit": None}
    rows = client.get("/teams", headers=admin).json()["teams"]
    assert rows == [
        {**a, "cards": 1, "borrowed": 0, "share": 0.5, "waiting": 2},
        {**b, "cards": 1, "borrowed": 0, "share": 0.5, "waiting": 0},
        {**default, "cards": 0, "borrowed": 0, "share": 0.0, "waiting": 1},
    ]
    assert client.get("/teams", headers=team_b).json()["teams"] == [rows[1]]
    assert client.get("/teams").status_code == 401


def test_get_teams_is_404_without_teams(store):
    security = ApiSecurity.no_auth(allowed_hosts={"testserver"})
    with TestClient(create_app(store, security=security)) as client:
        answer = client.get("/teams")
    assert answer.status_code == 404 and "teams.yaml" in answer.json()["error"]


def test_the_clusters_page_shows_the_teams_of_the_token(served):
    client, admin, team_b, _ = served
    every = client.get("/ui/clusters", headers=admin).text
    assert 'id="teams"' in every and "<td>a</td>" in every and "<td>default</td>" in every
    own = client.get("/ui/clusters", headers=team_b).text
    assert "<td>b</td>" in own and "k80=4, v100=1" in own and "<td>a</td>" not in own
