"""Shared fixtures. Prefect flows run under one session-wide test harness (Prefect's own guide)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture(scope="session")
def prefect_harness():
    """A temporary Prefect API and database for the whole session, started on first use."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for the whole session, started on first use (tests/integration/servers.py)."""
    from tests.integration.servers import postgres

    with postgres() as server:
        yield server


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=[pytest.mark.integration, pytest.mark.postgres])]
)
def store_target(request, tmp_path):
    """Where a new, empty job store lives, once per database: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return tmp_path / "jobs.db"
    return request.getfixturevalue("postgres_server").create_database()
