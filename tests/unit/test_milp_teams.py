"""The queue optimiser keeps greedy's teams rule: a team below its share starts first on free cards of its
share, before the plan weighs completion times (cpn.policies.milp `_fair_first`, issue #30)."""

from __future__ import annotations

from dataclasses import replace

from cpn.decisions import Team, Teams
from cpn.inventory import NodeState
from cpn.policies import make_policy
from tests.unit.test_milp import H, job, node, snap
from tests.unit.test_policies import assert_feasible

TEAMS = Teams((Team("a"), Team("b"), Team("default")), {"a": "a", "b": "b"})

V4 = node("v", "v100", 4)


def _round():
    """Team a holds 2 of the 4 cards (its half) until hour 20 and queues five 6-minute jobs; team b holds
    nothing and queues a 10-hour job; one card is free (the fourth is held by a job outside cpn). By
    weighted completion time alone the five short jobs go first (b's job, though weighed 4 times for its
    team's standing, would delay five)."""
    shorts = [job(f"a/short{i}", arrival=float(i)) for i in range(5)]
    jobs = [*shorts, job("b/long", arrival=9.0)]
    runtimes = {"b/long": {"v100": 10 * H}, **{j.job_id: {"v100": 0.1 * H} for j in shorts}}
    running = {"a/r1": (20 * H, "a/v", 1), "a/r2": (20 * H, "a/v", 1)}
    state = NodeState(V4, 1, running=("a/r1", "a/r2"))
    return snap(0.0, jobs, [state], runtimes, running)


def test_by_completion_time_alone_a_short_job_takes_the_one_free_card():
    s = replace(_round(), teams=None)
    decision = make_policy("milp", reservation=False).decide(s)
    assert [p.job_id[:7] for p in decision.placements] == ["a/short"]
    assert_feasible(s, decision)


def test_a_team_below_its_share_starts_first_as_greedy_starts_it():
    s = replace(_round(), teams=TEAMS)
    greedy = make_policy("greedy").decide(s)
    decision = make_policy("milp", reservation=False).decide(s)
    assert [p.job_id for p in greedy.placements] == ["b/long"]
    assert [p.job_id for p in decision.placements] == ["b/long"]
    assert_feasible(s, decision)
