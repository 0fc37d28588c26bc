"""A job page's transfer time and measured runtime, from literal transitions."""

from cpn.jobs import JobState
from cpn.store import Transition
from cpn.ui.pages import RunTiming, run_timing

J = "team-a/train"


def t(to: JobState, at: float, cluster: str | None = None, node: str | None = None) -> Transition:
    return Transition(J, None, to, at, cluster=cluster, node=node)


def test_a_finished_run_after_a_copy() -> None:
    history = [
        t(JobState.QUEUED, 0),
        t(JobState.ASSIGNED, 10, "east", "n0"),
        t(JobState.MIGRATING, 12, "east", "n0"),
        t(JobState.SUBMITTED, 72, "east", "n0"),
        t(JobState.RUNNING, 80, "east", "n0"),
        t(JobState.SUCCEEDED, 3680, "east", "n0"),
    ]
    assert run_timing(history, now=9999) == RunTiming(60.0, 80.0, 3680.0, 3600.0, "east", "n0")


def test_the_latest_run_counts_and_a_running_one_lasts_until_now() -> None:
    history = [
        t(JobState.QUEUED, 0),
        t(JobState.RUNNING, 5, "east", "n0"),
        t(JobState.QUEUED, 50),
        t(JobState.MIGRATING, 60, "west", "n1"),
        t(JobState.RUNNING, 100, "west", "n1"),
    ]
    assert run_timing(history, now=130) == RunTiming(40.0, 100.0, None, 30.0, "west", "n1")


def test_a_job_that_never_ran() -> None:
    assert run_timing([t(JobState.QUEUED, 0)], now=10) == RunTiming(0.0, None, None, None)
