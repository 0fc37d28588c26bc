"""Teams on literal snapshots: a team below its quota goes first, idle quota is lent, a hard limit holds
and says `over-quota`; the teams file's validation; the trace's namespace column; the bench's shares."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from config.settings import ConfigError
from config.teams import DEFAULT_TEAM, TeamsConfig, load_teams, quota_warnings
from cpn.decisions import NEVER, RunningJob, Team, Teams, never_starts
from cpn.formats.trace_csv import TraceFormatError, load_trace_csv
from cpn.jobs import JobState
from cpn.perf.report import JobTimeline
from cpn.perf.teams import team_figures, water_fill, work_figures
from cpn.policies import make_policy
from cpn.policies.teams import Ledger
from cpn.sim.gateway import Execution, Stopped
from tests.unit.test_policies import job, node, snap, state

POLICIES = ("fifo", "sjf", "greedy", "milp")


def teams(*members: Team) -> Teams:
    return Teams(
        (*members, Team(DEFAULT_TEAM)),
        MappingProxyType({m.name: m.name for m in members}),
    )


def running(n, team: str, cards: int) -> dict[str, RunningJob]:
    return {f"{team}/run-{i}": RunningJob(1e9, ((n.key, 1),)) for i in range(cards)}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_team_below_its_quota_goes_first(policy):
    """One card free; team a (at its quota) queued first, team b (below its quota) after: b's job starts."""
    n = node("n0", gpus=4)
    cfg = teams(Team("a", quota=(("v100", 2),)), Team("b", quota=(("v100", 2),)))
    jobs = [job("a/j1"), job("b/j1")]
    s = snap(
        jobs, [state(n, free=1)], running=MappingProxyType(running(n, "a", 2) | running(n, "b", 1)), teams=cfg
    )
    decision = make_policy(policy).decide(s)
    assert [p.job_id for p in decision.placements] == ["b/j1"]


@pytest.mark.parametrize("policy", POLICIES)
def test_without_teams_the_same_queue_keeps_its_order(policy):
    n = node("n0", gpus=4)
    s = snap([job("a/j1"), job("b/j1")], [state(n, free=1)], running=MappingProxyType(running(n, "a", 3)))
    assert [p.job_id for p in make_policy(policy).decide(s).placements] == ["a/j1"]


@pytest.mark.parametrize("policy", POLICIES)
def test_idle_quota_is_lent(policy):
    """Team a's quota is 2 cards, team b's 6 and idle: a (no borrowing limit) takes all 8 free cards."""
    n = node("n0", gpus=8)
    cfg = teams(Team("a", quota=(("v100", 2),)), Team("b", quota=(("v100", 6),)))
    jobs = [job(f"a/j{i}") for i in range(8)]
    decision = make_policy(policy).decide(snap(jobs, [state(n)], teams=cfg))
    assert len(decision.placements) == 8


@pytest.mark.parametrize("policy", POLICIES)
def test_a_hard_limit_holds_and_says_over_quota(policy):
    """Quota 2, borrowing limit 0: two of four jobs start on eight free cards; the others wait over-quota."""
    n = node("n0", gpus=8)
    cfg = teams(Team("a", quota=(("training", 2),), borrowing_limit=0))
    jobs = [job(f"a/j{i}") for i in range(4)]
    decision = make_policy(policy).decide(snap(jobs, [state(n)], teams=cfg))
    assert len(decision.placements) == 2
    codes = {w.job_id: w.code for w in decision.waiting}
    assert len(codes) == 2 and set(codes.values()) == {"over-quota"}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_borrowing_limit_caps_borrowed_cards(policy):
    """Quota 1 card, borrowing limit 2: three one-card jobs of five start."""
    n = node("n0", gpus=8)
    cfg = teams(Team("a", quota=(("v100", 1),), borrowing_limit=2))
    decision = make_policy(policy).decide(snap([job(f"a/j{i}") for i in range(5)], [state(n)], teams=cfg))
    assert len(decision.placements) == 3


def test_teams_file_validation_names_the_field(tmp_path):
    path = tmp_path / "teams.yaml"
    path.write_text(
        "teams:\n  - {name: a, namespaces: [x]}\n  - {name: b, namespaces: [x], borrowing_limit: -1}\n"
    )
    with pytest.raises(ConfigError, match="borrowing_limit"):
        load_teams(path)
    path.write_text("teams:\n  - {name: a, namespaces: [x]}\n  - {name: b, namespaces: [x]}\n")
    with pytest.raises(ConfigError, match=r"teams\.1\.namespaces: 'x' is already in team 'a'"):
        load_teams(path)
    path.write_text("teams:\n  - {name: a, namespaces: [x], quota: {v100: -2}}\n")
    with pytest.raises(ConfigError, match="teams.0.quota"):
        load_teams(path)


def test_a_quota_beyond_the_clusters_is_a_warning():
    config = TeamsConfig.model_validate(
        {"teams": [{"name": "a", "namespaces": ["a"], "quota": {"v100": 40}}]}
    )
    assert quota_warnings(config, {"v100": 36}) == [
        "team a: quota v100=40 is more than the clusters have (36)"
    ]
    assert quota_warnings(config, {"v100": 40}) == []


def test_trace_namespace_column(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,arrival_s,model,batch_size,num_gpus,total_steps,namespace,checkpoint_interval_s\n"
        "j1,0,ResNet-18,32,1,100,vision,360\nj2,0,ResNet-18,32,1,100,,\n"
    )
    j1, j2 = load_trace_csv(path)
    assert (j1.job_id, j1.checkpoint_interval_s) == ("vision/j1", 360.0)
    assert (j2.job_id, j2.checkpoint_interval_s) == ("j2", None)
    path.write_text(
        "job_id,arrival_s,model,batch_size,num_gpus,total_steps,namespace\nj1,0,ResNet-18,32,1,100,Bad_NS\n"
    )
    with pytest.raises(TraceFormatError, match="column namespace"):
        load_trace_csv(path)


def test_team_figures_share_while_both_wait():
    """a and b both wait over [0, 10); a holds 3 cards of the 4 used then: shares 0.75 / 0.25."""
    cfg = teams(Team("a"), Team("b"))
    lines = [
        JobTimeline("a/1", 3, 0.0, 10.0, 20.0, JobState.SUCCEEDED),
        JobTimeline("a/2", 3, 0.0, 0.0, 10.0, JobState.SUCCEEDED),
        JobTimeline("b/1", 1, 0.0, 10.0, 20.0, JobState.SUCCEEDED),
        JobTimeline("b/2", 1, 0.0, 0.0, 10.0, JobState.SUCCEEDED),
    ]
    runs = [
        Execution("a/2", "c", "n", (0, 1, 2), 0.0, 10.0, "succeeded"),
        Execution("b/2", "c", "n", (3,), 0.0, 10.0, "succeeded"),
        Execution("a/1", "c", "n", (0, 1, 2), 10.0, 20.0, "succeeded"),
    ]
    out = team_figures(cfg, lines, runs)
    assert out["teams"]["a"]["share_used"] == pytest.approx(0.75)
    assert out["teams"]["b"]["share_entitled"] == pytest.approx(0.5)
    assert out["fairness_error"] == pytest.approx(0.25)
    assert out["teams"]["a"]["p99_wait_s"] == 10.0
    kept = Stopped("a/1", 5.0, 3, kept_gpu_s=9.0, lost_gpu_s=6.0)
    work = work_figures(runs, [kept])
    assert work == {
        "gpu_hours": pytest.approx(79 / 3600),
        "preemptions": 1,
        "lost_gpu_hours": 6 / 3600,
        "lost_fraction": pytest.approx(6 / 85),
        "preemptions_per_job": 1 / 3,  # of the 3 jobs that ran, one was stopped once
        "max_preemptions_of_a_job": 1,
    }


def test_weight_only_shares_count_only_teams_with_work():
    """Two teams with no quota, equal weights, and the default team with no job: each working team is
    entitled to half the cards, not a third (an idle team does not shrink the others' shares)."""
    n = node("n0", gpus=8)
    cfg = teams(Team("a"), Team("b"))
    s = snap([job("a/j1")], [state(n, free=7)], running=MappingProxyType(running(n, "b", 1)), teams=cfg)
    ledger = Ledger(s, cfg)
    assert ledger.use["a"].quota == {"v100": 4} and ledger.use["b"].quota == {"v100": 4}
    assert not any(ledger.use[DEFAULT_TEAM].quota.values())


@pytest.mark.parametrize("policy", POLICIES)
def test_a_job_its_teams_hard_limit_never_lets_start_says_so_instead_of_gang(policy):
    """The lab's case: quota 4 cards, borrowing limit 0, a job of 8 cards on a node with 4 free. It would
    say `gang` (not enough cards together); it can never start under its team's limits, whatever runs."""
    n = node("n0", gpus=8)
    cfg = teams(Team("a", quota=(("v100", 4),), borrowing_limit=0))
    decision = make_policy(policy).decide(snap([job("a/big", gpus=8)], [state(n, free=4)], teams=cfg))
    assert decision.placements == ()
    (wait,) = decision.waiting
    assert (wait.job_id, wait.code) == ("a/big", "over-quota")
    assert wait.detail == (
        "team a may never hold the 8 cards it needs, whatever else runs (quota v100=4; a hard limit): "
        f"{NEVER}"
    )
    assert never_starts(wait.code, wait.detail) and not never_starts("over-quota", over_quota_detail())


def test_under_fifo_a_job_its_team_can_never_start_does_not_hold_back_its_teams_later_jobs():
    """Quota 4 cards, borrowing limit 0: the 8-card head can never start; the team's 1-card jobs behind it
    start on the free cards (FIFO's head-of-line blocking is for a head that may start some day)."""
    n = node("n0", gpus=8)
    cfg = teams(Team("a", quota=(("v100", 4),), borrowing_limit=0))
    jobs = [job("a/big", gpus=8), job("a/j0"), job("a/j1")]
    decision = make_policy("fifo").decide(snap(jobs, [state(n)], teams=cfg))
    assert [p.job_id for p in decision.placements] == ["a/j0", "a/j1"]
    (wait,) = decision.waiting
    assert wait.job_id == "a/big" and never_starts(wait.code, wait.detail)


def test_under_fifo_a_head_that_may_start_later_still_blocks_its_team():
    """The same team with 3 of its 4 cards busy: the 4-card head may start once they end, so it blocks the
    1-card job behind it (`queue-order`)."""
    n = node("n0", gpus=8)
    cfg = teams(Team("a", quota=(("v100", 4),), borrowing_limit=0))
    jobs = [job("a/four", gpus=4), job("a/j0")]
    s = snap(jobs, [state(n, free=5)], running=MappingProxyType(running(n, "a", 3)), teams=cfg)
    decision = make_policy("fifo").decide(s)
    assert decision.placements == ()
    assert {w.job_id: w.code for w in decision.waiting} == {"a/four": "over-quota", "a/j0": "queue-order"}


def over_quota_detail() -> str:
    """The detail of a job its team's limit holds back for now (it may start when its team's jobs end)."""
    n = node("n0", gpus=8)
    cfg = teams(Team("a", quota=(("v100", 2),), borrowing_limit=0))
    decision = make_policy("fifo").decide(
        snap([job("a/j0", gpus=2), job("a/j1", gpus=2)], [state(n)], teams=cfg)
    )
    (wait,) = decision.waiting
    return wait.detail


def test_the_shares_plot_draws_each_team_against_its_entitlement(tmp_path):
    """`cpn bench policies --teams F --plots D` writes teams_POLICY.png from the executions."""
    from cpn.perf.plots import share_series, team_shares

    cfg = teams(Team("a"), Team("b"))
    runs = [
        Execution("a/1", "c", "n", (0, 1, 2), 0.0, 10.0, "succeeded"),
        Execution("b/1", "c", "n", (3,), 5.0, 20.0, "succeeded"),
    ]
    times, shares = share_series(runs, cfg.team_of)
    assert times == [0.0, 5.0, 10.0, 20.0]
    assert shares["a"][:3] == [1.0, 0.75, 0.0] and shares["b"][:3] == [0.0, 0.25, 1.0]
    path = team_shares(runs, cfg.team_of, {"a": 0.5, "b": 0.5}, tmp_path / "teams.png")
    assert path.stat().st_size > 0


def test_a_team_that_asks_for_less_than_its_weight_share_is_owed_only_what_it_asks():
    """Over [0, 10) both wait: a runs 6 cards and waits for 6 more, b runs 1 and waits for 1 more. Of the 7
    cards in use b's max-min fair share is the 2 it asks (a gets the other 5), not half of them."""
    cfg = teams(Team("a"), Team("b"))
    lines = [
        JobTimeline("a/1", 6, 0.0, 10.0, 20.0, JobState.SUCCEEDED),
        JobTimeline("a/2", 6, 0.0, 0.0, 10.0, JobState.SUCCEEDED),
        JobTimeline("b/1", 1, 0.0, 10.0, 20.0, JobState.SUCCEEDED),
        JobTimeline("b/2", 1, 0.0, 0.0, 10.0, JobState.SUCCEEDED),
    ]
    runs = [
        Execution("a/2", "c", "n", tuple(range(6)), 0.0, 10.0, "succeeded"),
        Execution("b/2", "c", "n", (6,), 0.0, 10.0, "succeeded"),
    ]
    out = team_figures(cfg, lines, runs)
    assert out["teams"]["b"]["share_fair"] == pytest.approx(2 / 7)
    assert out["teams"]["b"]["share_used"] == pytest.approx(1 / 7)
    assert out["fairness_error"] == pytest.approx(1 / 7)
    assert out["fairness_error_by_weight"] == pytest.approx(0.5 - 1 / 7)


def test_water_fill_gives_each_what_it_asks_up_to_its_weighted_share():
    assert water_fill(10, {"a": 1, "b": 1, "c": 2}, {"a": 1, "b": 9, "c": 9}) == pytest.approx(
        {"a": 1, "b": 3, "c": 6}
    )
    assert water_fill(4, {"a": 1, "b": 1}, {"a": 0, "b": 9}) == pytest.approx({"a": 0, "b": 4})
