"""`cpn bench intake` on a real PostgreSQL server: two `cpn serve` replicas on one database beside a fresh
SQLite store, every acknowledged job stored once in each, and a database that holds jobs refused."""

from __future__ import annotations

import json

import pytest

from cli import main
from cpn.store import JobStore

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.timeout(300)]


def test_compare_runs_sqlite_and_two_replicas_on_postgres_and_loses_nothing(
    postgres_server, tmp_path, capsys
):
    url = postgres_server.create_database()
    out = tmp_path / "intake.json"

    status = main(
        ["bench", "intake", "--clients", "4", "--jobs", "200", "--compare", url, "--json", str(out)]
    )

    assert status == 0
    figures = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == figures
    for name, replicas in (("sqlite", 1), ("postgresql", 2)):
        run = figures[name]
        assert (run["replicas"], run["acknowledged"], run["stored"]) == (replicas, 200, 200), name
        assert (run["lost"], run["duplicated"], run["errors"]) == (0, 0, {}), name
    ratio = figures["ratio_postgresql_to_sqlite"]
    assert ratio["jobs_per_s"] == round(
        figures["postgresql"]["jobs_per_s"] / figures["sqlite"]["jobs_per_s"], 3
    )
    with JobStore(url) as store:  # the jobs went to the database itself
        assert len(store.jobs()) == 200


def test_a_store_that_holds_jobs_is_refused(postgres_server, capsys):
    url = postgres_server.create_database()
    assert main(["bench", "intake", "--jobs", "20", "--clients", "2", "--store", url, "--replicas", "2"]) == 0
    capsys.readouterr()

    assert main(["bench", "intake", "--jobs", "20", "--store", url]) == 2

    assert "the store holds 20 jobs already; the bench needs an empty one" in capsys.readouterr().err
