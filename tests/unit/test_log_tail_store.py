"""A failed run's pod log tail in the job store (and a store written before it), and its redaction."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from cpn import migrations
from cpn.api import REDACTED, redact_text
from cpn.clock import SimClock
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore

COLUMNS_3 = "seq, job_id, from_state, to_state, time, reason, cluster, node, gpu_mem_gb"
TRANSITIONS_3 = """CREATE TABLE transitions (
    seq INTEGER PRIMARY KEY, job_id TEXT NOT NULL REFERENCES jobs (job_id), from_state TEXT,
    to_state TEXT NOT NULL, time REAL NOT NULL, reason TEXT NOT NULL, cluster TEXT, node TEXT, gpu_mem_gb REAL
)"""
"""The transitions table of schema version 3, before the log tail."""


def _run_and_fail(store: JobStore, job_id: str, log: str) -> None:
    for state in (JobState.ASSIGNED, JobState.SUBMITTED, JobState.RUNNING):
        store.transition(job_id, state, cluster="a", node="a-0")
    store.transition(job_id, JobState.FAILED, reason="Error", log_tail=log)


def test_the_tail_is_kept_with_the_failed_transition_and_survives_an_upgrade(tmp_path):
    path = tmp_path / "jobs.db"
    with JobStore(path, clock=SimClock()) as store:
        store.submit([JobSpec("ns/old", "resnet50"), JobSpec("ns/new", "resnet50")])
        _run_and_fail(store, "ns/old", "")
    # The store as the schema before the tail (version 3) wrote it.
    with closing(sqlite3.connect(path)) as raw, raw:
        raw.execute("ALTER TABLE transitions RENAME TO later")
        raw.execute(TRANSITIONS_3)
        raw.execute(f"INSERT INTO transitions SELECT {COLUMNS_3} FROM later")
        raw.execute("DROP TABLE later")
        raw.execute("DROP TABLE alembic_version")  # as cpn wrote it before its migrations
    with JobStore(path, clock=SimClock()) as store:
        assert [t.log_tail for t in store.history("ns/old")] == [""] * 5
        _run_and_fail(store, "ns/new", "step 9\nRuntimeError: boom")
        assert [t.log_tail for t in store.history("ns/new")] == [""] * 4 + ["step 9\nRuntimeError: boom"]
        assert store.transitions_all()[-1].log_tail == "step 9\nRuntimeError: boom"
    with closing(sqlite3.connect(path)) as raw:
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [(migrations.HEAD,)]


def test_secret_looking_values_in_a_log_are_redacted_and_the_rest_kept():
    log = "\n".join(
        [
            "export AWS_SECRET_ACCESS_KEY=abc123 then",
            '{"password": "hunter2", "user": "bob"}',
            "Authorization: Bearer eyJhbGciOi.x-y_z",
            "GITHUB_TOKEN = ghp_xyz",
            "step 3 loss=0.5 lr=1e-4",
            "CUDA out of memory. Tried to allocate 2.00 GiB",
        ]
    )
    assert redact_text(log).splitlines() == [
        f"export AWS_SECRET_ACCESS_KEY={REDACTED} then",
        f'{{"password": "{REDACTED}", "user": "bob"}}',
        f"Authorization: Bearer {REDACTED}",
        f"GITHUB_TOKEN = {REDACTED}",
        "step 3 loss=0.5 lr=1e-4",
        "CUDA out of memory. Tried to allocate 2.00 GiB",
    ]
