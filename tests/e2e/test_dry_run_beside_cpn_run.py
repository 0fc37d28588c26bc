"""A `schedule-round` dry run beside a live `cpn run` on the same store only reads, and a run that is not
dry is refused while `cpn run` schedules the store.

`cpn run` runs its simulated clusters 100x slower than the wall clock (`--time-scale 0.01`) with a
5-minute interval: after the round that takes the queue, it has jobs submitted, jobs migrating and
jobs queued, and nothing falls due for minutes, so it writes nothing while the dry run runs. That is
checked, not assumed: its round count (`cpn_rounds_total` in /metrics) unchanged across the dry run shows
no round ran in between, and only then are the store's contents and the simulated clusters' files
compared. The store file itself is not hashed: `cpn run`'s lease keeper renews the lease in it every 2 s.
"""

from __future__ import annotations

import hashlib
import signal
import time
from pathlib import Path

import httpx
import pytest

from cpn.store import JobStore, StoreLeased
from flows.schedule import schedule_round
from tests.e2e.test_cpn_run import free_port, start, states, submit_generated

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

FILES = ("jobs.db.sim-journal", "jobs.db.sim-time")
"""The simulated clusters' journal and their timeline."""


def digests(home: Path) -> dict[str, str]:
    return {
        name: hashlib.sha256((home / name).read_bytes()).hexdigest()
        for name in FILES
        if (home / name).exists()
    }


def contents(home: Path) -> tuple:
    """Everything in the store but the lease, read without writing."""
    with JobStore(home / "jobs.db", read_only=True) as store:
        return (
            store.jobs(),
            store.transitions_all(),
            store.cancel_requests(),
            store.saved_progress(),
            store.copies(),
            store.clusters(removed=True),
        )


def rounds(port: int) -> float:
    """Rounds `cpn run` has run, from its /metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return next(float(line.split()[1]) for line in text.splitlines() if line.startswith("cpn_rounds_total "))


def settled(home: Path, port: int, log: Path) -> dict[str, str]:
    """The jobs' states once `cpn run` has taken the queue and its round is over (no file changes for
    a second)."""
    deadline = time.monotonic() + 60
    while True:
        seen, files = states(port), digests(home)
        time.sleep(1)
        if set(seen.values()) != {"queued"} and "assigned" not in seen.values():
            if states(port) == seen and digests(home) == files:
                return seen
        assert time.monotonic() < deadline, f"cpn run did not settle: {seen}\n{log.read_text()}"


def test_a_dry_run_beside_cpn_run_writes_nothing_and_a_real_run_is_refused(
    prefect_harness, tmp_path, monkeypatch
):
    home, port, log = tmp_path / "home", free_port(), tmp_path / "run.log"
    monkeypatch.setenv("CPN_HOME", str(home))
    monkeypatch.delenv("CPN_STORE", raising=False)
    options = ("--time-scale", "0.01", "--interval", "300", "--estimates", "oracle")
    proc = start(home, port, log, options)
    try:
        submit_generated(port, tmp_path, jobs=50, seed=2)
        seen = settled(home, port, log)
        assert {"submitted", "migrating", "queued"} <= set(seen.values()), seen

        for _ in range(3):  # a round of cpn run during the dry run spoils the comparison: try again
            ran, before, stored = rounds(port), digests(home), contents(home)
            result = schedule_round(dry_run=True, estimates="oracle")  # as cpn run estimates
            after, kept = digests(home), contents(home)
            if rounds(port) == ran:
                break
        else:
            pytest.fail(f"cpn run ran a round during each of 3 dry runs:\n{log.read_text()}")
        assert set(before) == set(FILES)
        assert kept == stored, "the dry run wrote to the store"
        assert after == before, "the dry run wrote to the simulated clusters' files"
        assert result.dry_run and result.pending == list(seen.values()).count("queued")
        assert states(port) == seen, "the dry run reconciled or moved no job"

        with pytest.raises(StoreLeased, match=r":cpn run, .*stop that process"):
            schedule_round(estimates="oracle")
        assert digests(home)["jobs.db.sim-time"] == before["jobs.db.sim-time"]
        assert states(port) == seen
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log.read_text()
    with JobStore(home / "jobs.db", read_only=True) as store:
        assert store.lease().expires_at == 0.0, "cpn run released the store as it stopped"
