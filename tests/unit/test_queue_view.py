"""The scheduler's incremental view of the queue agrees with the store."""

from __future__ import annotations

from dataclasses import replace

from cpn.decisions import Team, Teams
from cpn.engine.queue_view import QueueView, seen_spec
from cpn.jobs import JobSpec, JobState
from cpn.store import Change, JobStore


def spec(job_id: str, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", **kw)


def ids(view: QueueView) -> list[str]:
    return [j.job_id for j in view.pending()]


def test_view_follows_arrivals_departures_and_requeues_in_acceptance_order():
    store = JobStore(":memory:")
    view = QueueView(store)
    store.submit([spec("a"), spec("b", source_cluster="x"), spec("c")])
    view.refresh()
    assert ids(view) == ["a", "b", "c"]
    assert view.location("b") == "x"

    store.transition("a", JobState.ASSIGNED, cluster="x", node="n")
    store.transition("a", JobState.MIGRATING)
    store.transition("b", JobState.ASSIGNED, cluster="x", node="n")
    store.submit([spec("d")])
    view.refresh()
    assert ids(view) == ["c", "d"]

    store.transition("a", JobState.QUEUED, location="y")
    view.refresh()
    assert ids(view) == ["a", "c", "d"], "a re-queued job keeps its place in acceptance order"
    assert view.location("a") == "y"
    assert ids(view) == [r.job_id for r in store.jobs([JobState.QUEUED])]


def test_job_that_passes_through_the_queue_between_refreshes_is_not_pending():
    store = JobStore(":memory:")
    view = QueueView(store)
    store.submit([spec("a")])
    store.transition("a", JobState.SCHEDULE_FAILED, reason="too big")
    view.refresh()
    assert view.pending() == ()


def test_a_queued_job_arrives_when_the_store_accepted_it():
    """Live jobs carry no trace arrival: policies age them from their acceptance by the store."""
    from cpn.clock import SimClock

    clock = SimClock(1_000.0)
    store = JobStore(":memory:", clock=clock)
    view = QueueView(store)
    store.submit([spec("early")])
    clock.advance_to(1_600.0)
    store.submit([spec("late", arrival_s=5.0)])
    view.refresh()
    assert [(j.job_id, j.arrival_s) for j in view.pending()] == [("early", 1_000.0), ("late", 1_600.0)]


def test_the_spec_a_policy_sees_has_what_runs_taught_whole_cards_to_explore_and_the_teams_interval():
    """`seen_spec`, the one place the spec a policy sees is built: the queue, the round's whole-card swap
    for a model the predictor has not seen, and the team's checkpoint interval all go through it."""
    sharing = spec("ns/s", gpu_share=0.5, gpu_mem_gb=4.0, image="img:1")
    learned = Change(
        "ns/s", JobState.QUEUED, 0, None, image="img@sha256:ab", needs_more_than_gb=8.0, submitted_at=7.0
    )
    teams = Teams((Team("default", checkpoint_interval_s=600.0),))
    seen = seen_spec(sharing, learned, whole_cards=True, teams=teams)
    assert (seen.arrival_s, seen.image, seen.gpu_mem_gb) == (7.0, "img@sha256:ab", 8.01)
    assert seen.gpu_share is None and seen.checkpoint_interval_s == 600.0
    assert seen_spec(sharing) is sharing, "nothing to learn or swap: the spec as it is"
    own = replace(sharing, checkpoint_interval_s=60.0)
    assert seen_spec(own, teams=teams).checkpoint_interval_s == 60.0, "a job's own interval stands"
    assert seen_spec(sharing, learned).gpu_share == 0.5
