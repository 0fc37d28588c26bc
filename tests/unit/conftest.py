"""Fixtures of the HTTP API tests: a job store on a fixed clock, two namespace tokens, and the secured app.

A module that needs another store or client defines its own fixture of the same name, which wins."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from cpn.api import create_app
from cpn.auth import ApiSecurity, Authenticator, create_token
from cpn.clock import SimClock
from cpn.store import JobStore

HOSTS = frozenset({"testserver", "127.0.0.1", "localhost"})
"""Host names the test app answers to."""


@pytest.fixture
def store(tmp_path):
    with JobStore(tmp_path / "jobs.db", SimClock(42.0)) as s:
        yield s


@pytest.fixture
def tokens(tmp_path) -> tuple[Path, str, str]:
    """A tokens file with a team-a token (alice) and a team-b token (bob)."""
    path = tmp_path / "tokens.yaml"
    return path, create_token(path, "alice", ["team-a"]), create_token(path, "bob", ["team-b"])


@pytest.fixture
def client(store, tokens):
    """The API with bearer tokens, as `cpn serve` runs it."""
    security = ApiSecurity(Authenticator(tokens[0]), allowed_hosts=HOSTS, max_body_bytes=64_000)
    with TestClient(create_app(store, security=security), raise_server_exceptions=False) as c:
        yield c
