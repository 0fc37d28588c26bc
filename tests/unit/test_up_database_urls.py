"""`cpn up --database`: the three databases' URLs derived from one server URL, and passwords hidden."""

from __future__ import annotations

import pytest

from cli.up import DatabaseError, server_databases
from config.runtime import hide_password


def test_each_service_gets_its_database_with_its_driver_and_the_password_kept():
    d = server_databases("postgresql://cpn:s%40cret@db.example.org:5433", "team1_")
    assert d.names == ("team1_cpn", "team1_prefect", "team1_mlflow")
    assert d.admin == "postgresql://cpn:s%40cret@db.example.org:5433/postgres"
    assert d.store == "postgresql://cpn:s%40cret@db.example.org:5433/team1_cpn"
    assert d.prefect == "postgresql+asyncpg://cpn:s%40cret@db.example.org:5433/team1_prefect"
    assert d.mlflow == "postgresql+psycopg://cpn:s%40cret@db.example.org:5433/team1_mlflow"
    assert "s%40cret" not in repr(d)


def test_a_database_in_the_url_is_the_one_connected_to_for_making_the_others():
    assert server_databases("postgresql://cpn@db/admin").admin == "postgresql://cpn@db/admin"
    assert server_databases("postgresql://cpn@db/admin").store == "postgresql://cpn@db/cpn"


@pytest.mark.parametrize(
    ("url", "prefix", "named"),
    [
        ("mysql://cpn:pw@db/x", "", "--database mysql://cpn:***@db/x"),
        ("postgresql://cpn@db", "Team-1", "--database-prefix 'Team-1'"),
        ("not a url", "", "--database: cannot read the URL"),
    ],
)
def test_bad_input_names_the_option_and_never_the_password(url, prefix, named):
    with pytest.raises(DatabaseError, match="^" + named.replace("(", r"\(").replace("*", r"\*")) as caught:
        server_databases(url, prefix)
    assert "pw@" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://cpn:s%40cret@db:5433/cpn", "postgresql://cpn:***@db:5433/cpn"),
        ("postgresql+asyncpg://cpn@db/prefect", "postgresql+asyncpg://cpn@db/prefect"),
        ("sqlite:////home/me/.cpn/mlflow.db", "sqlite:////home/me/.cpn/mlflow.db"),
        ("postgresql://cpn:pw@db/cpn?options=a:b@c", "postgresql://cpn:***@db/cpn?options=a:b@c"),
    ],
)
def test_hide_password(url, shown):
    assert hide_password(url) == shown
