"""Time slicing (cpn.policies.slicing) on tiny literal snapshots: a short waiting job suspends a long job
that checkpoints only when that lowers the completion times, never a job within its checkpoint interval,
one that never checkpoints, a shorter one or another team's, and a wide gang frees a group's nodes."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from cpn.decisions import Estimate, RunningJob, Snapshot, Team, Teams
from cpn.inventory import NodeState
from cpn.policies import make_policy
from tests.unit.test_milp import job, node
from tests.unit.test_policies import assert_feasible

H = 3600.0
V0, V1 = node("v0", "v100", 4), node("v1", "v100", 4)


K = node("k", "k80")
LAST = RunningJob(50 * H, ((K.key, 1),))
"""A job that never checkpoints, on a K80 of its own, and ends last: it sets the makespan's bound, which a
suspended job, delayed, must still end by."""


def _snap(pending, running, states, runtimes, teams=None, now=10 * H) -> Snapshot:
    """`running` and `states` with LAST added; `runtimes`: each queued job's on a V100."""
    running = {**running, "last": LAST}
    states = [*states, NodeState(K, 0, running=("last",))]
    estimates = {j: {"v100": Estimate(t)} for j, t in runtimes.items()}
    return Snapshot(
        now=now,
        pending=tuple(pending),
        nodes=tuple(states),
        estimates=MappingProxyType(estimates),
        running=MappingProxyType(running),
        teams=teams,
    )


def _long(end=30 * H, started=9 * H, interval: float | None = 600.0, where=V0, cards=4) -> RunningJob:
    return RunningJob(end, ((where.key, cards),), started=started, checkpoint_interval_s=interval)


@pytest.mark.parametrize("inner", ["sjf", "greedy", "milp"])
def test_a_short_job_suspends_a_long_one_and_starts_on_its_cards(inner):
    s = _snap([job("short", gpus=4)], {"long": _long()}, [NodeState(V0, 0, running=("long",))], {"short": H})
    decision = make_policy(inner, time_slicing=True).decide(s)
    (stop,) = decision.preemptions
    assert (stop.job_id, stop.for_job) == ("long", "short")
    assert [(p.job_id, p.node) for p in decision.placements] == [("short", "v0")]
    assert not decision.waiting
    assert make_policy(inner).decide(s).preemptions == ()  # off by default


@pytest.mark.parametrize(
    "running, why",
    [
        (_long(started=10 * H - 300), "within its checkpoint interval"),
        (_long(interval=None), "never checkpoints"),
        (_long(end=10.5 * H), "ends before the short job would"),
        (
            _long(end=11.15 * H, interval=3000.0),
            "600 s of work since its checkpoint, the restart and the short job's hour outweigh the 1.14 h "
            "the short job would wait",
        ),
    ],
)
def test_no_suspension(running, why):
    s = _snap([job("short", gpus=4)], {"long": running}, [NodeState(V0, 0, running=("long",))], {"short": H})
    assert make_policy("sjf", time_slicing=True).decide(s).preemptions == (), why


def test_the_same_job_with_no_work_lost_is_suspended():
    s = _snap(
        [job("short", gpus=4)],
        {"long": _long(end=11.15 * H, interval=600.0)},
        [NodeState(V0, 0, running=("long",))],
        {"short": H},
    )
    assert [p.job_id for p in make_policy("sjf", time_slicing=True).decide(s).preemptions] == ["long"]


def test_only_jobs_of_the_waiting_jobs_team_are_suspended():
    teams = Teams(
        (Team("a", 1.0), Team("b", 1.0), Team("default", 1.0)), MappingProxyType({"a": "a", "b": "b"})
    )
    running = {"b/long": _long()}
    states = [NodeState(V0, 0, running=("b/long",))]
    s = _snap([job("a/short", gpus=4)], running, states, {"a/short": H}, teams=teams)
    assert make_policy("sjf", time_slicing=True).decide(s).preemptions == ()
    running = {"a/long": _long()}
    s = _snap(
        [job("a/short", gpus=4)], running, [NodeState(V0, 0, running=("a/long",))], {"a/short": H}, teams
    )
    assert [p.job_id for p in make_policy("sjf", time_slicing=True).decide(s).preemptions] == ["a/long"]


def test_a_gang_wider_than_a_node_suspends_jobs_on_several_nodes():
    running = {"l0": _long(where=V0), "l1": _long(where=V1, end=40 * H)}
    states = [NodeState(V0, 0, running=("l0",)), NodeState(V1, 0, running=("l1",))]
    s = _snap([job("wide", gpus=8)], running, states, {"wide": H})
    decision = make_policy("sjf", time_slicing=True).decide(s)
    assert sorted(p.job_id for p in decision.preemptions) == ["l0", "l1"]
    (placed,) = decision.placements
    assert placed.job_id == "wide" and placed.total_gpus == 8
    freed = [NodeState(V0, 4), NodeState(V1, 4)]
    assert_feasible(_snap([job("wide", gpus=8)], {}, freed, {"wide": H}), decision)
