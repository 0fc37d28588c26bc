"""Small things people met running `cpn up` for an afternoon (issue 27, item 8): `cpn cluster list` shows
nodes and cards, `cpn teams` works without `--config`, a pipe closed early ends `cpn` quietly, the 401
answer says where `cpn up` keeps its token, `cpn up` prints the web UI's address, and docs/prefect.md
lists every deployment of prefect.yaml."""

from __future__ import annotations

import os
import sys

import yaml

from cli import main
from cli.up import ui_login
from config.runtime import runtime_settings
from config.settings import REPO_ROOT
from cpn.jobs import JobSpec
from cpn.store import JobStore


def test_cluster_list_shows_each_clusters_nodes_and_cards(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    assert main(["cluster", "list"]) == 0  # seeds the set from the demo's clusters.yaml
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:6] == ["cluster", "state", "kind", "nodes", "cards", "jobs"]
    demo = yaml.safe_load((REPO_ROOT / "config" / "demo" / "clusters.yaml").read_text())["clusters"]
    for cluster, line in zip(demo, lines[1:], strict=True):
        groups = cluster["node_groups"]
        nodes = sum(g.get("count", 1) for g in groups)
        cards = sum(g.get("count", 1) * g["gpus_per_node"] for g in groups)
        assert line.split()[:5] == [cluster["name"], "active", "simulated", str(nodes), str(cards)]


def test_teams_without_config_shows_everyone_in_the_default_team_and_says_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    with JobStore(tmp_path / "jobs.db") as store:
        store.submit([JobSpec("lab/a", "ResNet-50", num_gpus=1), JobSpec("nlp/b", "ResNet-50", num_gpus=1)])
    assert main(["teams"]) == 0
    captured = capsys.readouterr()
    (row,) = captured.out.splitlines()[1:]
    assert row.split()[:5] == ["default", "1", "0", "0", "2"]
    assert "no teams.yaml" in captured.err and "--config" in captured.err


def test_a_pipe_closed_early_ends_cpn_without_a_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    with JobStore(tmp_path / "jobs.db") as store:
        store.submit([JobSpec(f"lab/job-{i:05d}", "ResNet-50", num_gpus=1) for i in range(300)])
    read, write = os.pipe()
    os.close(read)  # the reader is gone, as after `| head -1`
    with open(write, "w") as piped:
        monkeypatch.setattr(sys, "stdout", piped)
        assert main(["jobs"]) == 141  # what a shell reports for a command its pipe cut off
        monkeypatch.undo()
        print("still", file=piped, flush=True)  # the process's stdout now goes nowhere, quietly


def test_the_401_answer_says_where_cpn_up_keeps_its_token(client):
    response = client.get("/jobs")
    assert response.status_code == 401
    assert "cpn token create" in response.json()["error"] and "$CPN_HOME/token" in response.json()["error"]


def test_cpn_up_says_how_to_log_in_to_the_web_ui(tmp_path, monkeypatch):
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    assert ui_login(False, runtime_settings()) == f" (log in with the token in {tmp_path / 'token'})"
    assert ui_login(True, runtime_settings()) == ""


def test_docs_prefect_lists_every_deployment():
    text = (REPO_ROOT / "docs" / "prefect.md").read_text()
    names = [d["name"] for d in yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]]
    assert [n for n in names if f"| `{n}` |" not in text] == []
