"""Times people can read (issue 27, item 4): durations with units, wall times in local time with the zone
and how far from now, simulated times labelled, no empty interval, and a running job's predicted end on
its page."""

from __future__ import annotations

import math
import re
import time

import pytest
from fastapi.testclient import TestClient

from cli import main
from cpn.api import create_app
from cpn.auth import ApiSecurity
from cpn.clock import SimClock
from cpn.decisions import NEVER, Estimate, Waiting
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore
from cpn.times import between, clock_time, duration, moment, parse_api_time, relative, stamp
from cpn.ui.pages import mount_ui

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


@pytest.fixture
def berlin(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (42.4, "42 s"),
        (246.0, "4.1 min"),
        (10165.7, "2.8 h"),
        (129600.0, "1.5 d"),
        (math.inf, "never"),
    ],
)
def test_a_duration_always_has_its_unit(seconds, text):
    assert duration(seconds) == text


def test_wall_times_are_local_with_the_zone_and_how_far_from_now(berlin):
    assert clock_time(NOW) == "2027-01-15 09:00:00 CET"
    assert moment(NOW + 246.0, NOW) == "2027-01-15 09:04:06 CET (in 4.1 min)"
    assert relative(NOW - 3.0, NOW) == "3 s ago" and relative(NOW + 0.2, NOW) == "now"
    assert stamp(NOW) == "2027-01-15T08:00:00Z"  # inside stored texts: ISO 8601 UTC
    assert parse_api_time("2027-01-15T08:00:00.000Z") == NOW


def test_simulated_times_say_so_and_an_empty_interval_is_not_shown():
    assert clock_time(1623.0) == "t = 27.1 min (simulated)" == stamp(1623.0)
    assert between(6909.0, 6909.0) is None and between(None, 10.0) is None
    assert between(6909.0, 7509.0) == "between t = 1.9 h (simulated) and t = 2.1 h (simulated)"


def test_cpn_jobs_gives_a_wall_clock_eta_as_how_far_from_now(tmp_path, capsys):
    with JobStore(tmp_path / "jobs.db") as store:  # the wall clock
        store.submit([JobSpec("lab/a", "ResNet-50", num_gpus=1)])
        store.set_waiting([Waiting("lab/a", "queue-order", "", time.time() + 3 * 3600 + 60)])
    assert main(["jobs", "--store", str(tmp_path / "jobs.db")]) == 0
    (row,) = capsys.readouterr().out.splitlines()[1:-1]
    assert row.endswith("in 3.0 h")


class Runtimes:
    """An estimate source: every job runs 2 h (±10 %) on every GPU type."""

    def estimates(self, jobs, gpu_types):
        return {j.job_id: dict.fromkeys(gpu_types, Estimate(7200.0, uncertainty=0.1)) for j in jobs}


def test_a_running_jobs_page_shows_its_predicted_end_and_interval(tmp_path, berlin):
    with JobStore(tmp_path / "jobs.db", SimClock(NOW)) as store:
        store.submit([JobSpec("lab/a", "ResNet-50", num_gpus=1)])
        store.transition("lab/a", JobState.ASSIGNED, cluster="c", node="n", placement=[("n", 1)])
        store.transition("lab/a", JobState.SUBMITTED)
        store.transition("lab/a", JobState.RUNNING, cluster="c", node="n")
        security = ApiSecurity.no_auth(allowed_hosts={"testserver"})

        class View:
            node_gpu = {("c", "n"): "v100"}

        app = mount_ui(
            create_app(store, security=security),
            store,
            security,
            lambda: View(),
            now=lambda: NOW + 1800,
            estimates=Runtimes(),
        )
        with TestClient(app) as client:
            page = client.get("/ui/jobs/lab/a").text
    expected = (
        '<dd id="predicted-end">2027-01-15 11:00:00 CET (in 1.5 h), '
        "between 2027-01-15 10:48:00 CET and 2027-01-15 11:12:00 CET</dd>"
    )
    assert expected in page


def test_a_job_that_never_starts_under_its_quota_says_so_where_its_start_would_be(tmp_path, capsys):
    detail = f"team nlp may never hold the 8 cards it needs (quota k80=4; a hard limit): {NEVER}"
    with JobStore(tmp_path / "jobs.db", SimClock(NOW)) as store:
        store.submit([JobSpec("nlp/big", "ResNet-50", num_gpus=8)])
        store.set_waiting([Waiting("nlp/big", "over-quota", detail)])
        security = ApiSecurity.no_auth(allowed_hosts={"testserver"})
        app = mount_ui(create_app(store, security=security), store, security, now=lambda: NOW)
        with TestClient(app) as client:
            job_page, queue = client.get("/ui/jobs/nlp/big").text, client.get("/ui/queue").text
    assert f'<dd id="predicted-start">{NEVER}</dd>' in job_page and f"<td>{NEVER}</td>" in queue
    assert main(["job", "nlp/big", "--store", str(tmp_path / "jobs.db")]) == 0
    assert re.search(rf"^predicted start\s+{NEVER}$", capsys.readouterr().out, re.MULTILINE)


def test_a_live_simulations_pages_give_its_times_their_time_of_day(tmp_path, berlin):
    """`cpn up` runs simulated clusters at wall speed: a simulated time says which wall time it falls on."""
    with JobStore(tmp_path / "jobs.db", SimClock(600.0)) as store:
        store.submit([JobSpec("lab/a", "ResNet-50", num_gpus=1)])
        store.set_waiting([Waiting("lab/a", "queue-order", "", 720.0, None, 660.0, 780.0)])
        security = ApiSecurity.no_auth(allowed_hosts={"testserver"})
        app = create_app(store, security=security, clock="simulated")
        mount_ui(app, store, security, now=lambda: 600.0, wall_of=lambda t: NOW + t - 600.0)
        with TestClient(app) as client:
            page = client.get("/ui/jobs/lab/a").text
    assert (
        '<dd id="predicted-start">t = 12.0 min (simulated; 2027-01-15 09:02:00 CET) (in 2.0 min)</dd>' in page
    )
    assert (
        "between t = 11.0 min (simulated; 2027-01-15 09:01:00 CET) and t = 13.0 min (simulated; "
        "2027-01-15 09:03:00 CET)"
    ) in page
