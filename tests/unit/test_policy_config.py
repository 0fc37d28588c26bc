"""One policy configuration (issue #31): `policy.yaml` takes every policy's settings, `--policy`/`--set`
override it the same way on every command, and a bad setting is refused, naming the field, before
anything starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from cli import main
from cli.run import build
from config.policies import (
    DEFAULT_POLICY,
    DEFAULT_SETTINGS,
    MilpSettings,
    PolicySettingsError,
    SchedulerPolicy,
    parse_overrides,
    policy_settings,
)
from config.settings import ConfigError, load_policy, load_profile
from cpn.jobs import Cause, JobSpec, JobState
from cpn.perf.policies import policy_runs
from cpn.policies.preemption import PreemptingPolicy
from cpn.policies.rebalance import RebalancingPolicy
from tasks.config import load_settings
from tests.unit.test_teams_service import CLUSTERS  # one node of two V100 cards

TEAMS = {
    "teams": [
        {"name": "a", "namespaces": ["a"], "quota": {"v100": 1}},
        {"name": "b", "namespaces": ["b"], "quota": {"v100": 1}},
    ]
}
"""Two teams of one V100 each: a may borrow b's card while b has nothing to run."""
BENCH_LIKE = {"name": "milp", "preemption": True, "rebalance": True, "time_limit_s": 2, "cpu_threshold": 0.8}


def config_folder(tmp_path: Path, policy: dict, teams: dict | None = None) -> Path:
    folder = tmp_path / "config"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "clusters.yaml").write_text(yaml.safe_dump(CLUSTERS))
    (folder / "policy.yaml").write_text(yaml.safe_dump(policy))
    if teams is not None:
        (folder / "teams.yaml").write_text(yaml.safe_dump(teams))
    return folder


def test_policy_yaml_takes_every_setting_of_the_policy_and_the_cpu_threshold(tmp_path):
    policy = load_profile(config_folder(tmp_path, BENCH_LIKE)).policy
    assert policy.settings == policy_settings("milp", preemption="true", rebalance="true", time_limit_s="2")
    assert isinstance(policy.settings, MilpSettings) and policy.cpu_threshold == 0.8


def test_the_file_and_the_benchmarks_set_give_the_same_settings(tmp_path):
    """`cpn bench --set ...` and the same settings in policy.yaml: one policy, decided alike."""
    pairs = ["preemption=true", "rebalance=true", "time_limit_s=2", "cpu_threshold=0.8"]
    (bench,), cpu = policy_runs(["milp"], parse_overrides(pairs))
    from_file = load_policy(config_folder(tmp_path, BENCH_LIKE) / "policy.yaml")
    assert (bench, cpu) == (from_file.settings, from_file.cpu_threshold)
    overridden = SchedulerPolicy.of({"name": "fifo"}).overridden("milp", parse_overrides(pairs))
    assert overridden == from_file


def test_a_folder_that_names_no_policy_gets_the_default_with_its_settings(tmp_path):
    default = SchedulerPolicy.of({})
    assert (
        default.settings == policy_settings(DEFAULT_POLICY, **DEFAULT_SETTINGS) == SchedulerPolicy().settings
    )
    tuned = SchedulerPolicy.of({"time_limit_s": 2})  # a setting of the default policy, still with the rest
    assert tuned.settings == policy_settings(DEFAULT_POLICY, **DEFAULT_SETTINGS, time_limit_s=2)
    assert SchedulerPolicy.of({"name": DEFAULT_POLICY}).settings == policy_settings(DEFAULT_POLICY)


@pytest.mark.parametrize(
    ("policy", "names"),
    [
        ({"name": "milp", "time_limit_s": -1}, ("time_limit_s", "greater than 0")),
        ({"name": "greedy", "solver": "cbc"}, ("solver", "Extra inputs")),
        ({"name": "sjf", "cpu_threshold": 1.5}, ("cpu_threshold", "(0, 1]")),
        ({"name": "mlp"}, ("unknown policy 'mlp'", "milp")),
        ({"name": "fifo", "preemption": "perhaps"}, ("preemption", "boolean")),
    ],
)
def test_a_bad_setting_names_the_file_and_the_field(tmp_path, policy, names):
    with pytest.raises(ConfigError) as err:
        load_profile(config_folder(tmp_path, policy))
    assert "policy.yaml" in str(err.value)
    assert all(name in str(err.value) for name in names), str(err.value)


def test_another_policy_comes_with_its_own_defaults_and_the_same_cpu_threshold():
    milp = SchedulerPolicy.of({"name": "milp", "preemption": True, "time_limit_s": 3, "cpu_threshold": 0.5})
    greedy = milp.overridden("greedy")
    assert greedy.settings == policy_settings("greedy")  # `--policy greedy` is greedy, not milp's settings
    assert greedy.cpu_threshold == 0.5  # the scheduler's, kept
    assert milp.overridden("milp") == milp  # the file's own policy keeps the file's settings
    assert milp.overridden("greedy", {"preemption": "true"}).settings == policy_settings(
        "greedy", preemption="true"
    )
    with pytest.raises(
        PolicySettingsError, match="policy greedy has no such setting; known: .*cpu_threshold"
    ):
        milp.overridden("greedy", {"solver": "cbc"})
    with pytest.raises(PolicySettingsError, match="--set cpu_threshold: '0' is not a number in"):
        milp.overridden(None, {"cpu_threshold": "0"})


@pytest.mark.parametrize("command", ["run", "plan", "demo"])
def test_a_bad_setting_stops_each_command_before_anything_starts(tmp_path, capsys, command):
    folder = config_folder(tmp_path, {"name": "greedy"})
    args = [command, "--config", str(folder), "--set", "rebalance=sometimes"]
    args += {
        "run": ["--store", str(tmp_path / "jobs.db"), "--no-auth"],
        "plan": ["--out", str(tmp_path)],
    }.get(command, ["--out", str(tmp_path / "demo")])
    if command == "plan":
        args.append(str(tmp_path / "none.yaml"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "rebalance" in err and "boolean" in err
    assert not (tmp_path / "jobs.db").exists()


def test_flow_runs_read_the_policy_cpn_up_was_given(tmp_path, monkeypatch):
    """`cpn up --policy milp --set preemption=true` reaches every deployment's flow runs through the
    worker's environment (CPN_POLICY, CPN_POLICY_SET), applied to the config folder's policy.yaml."""
    folder = config_folder(tmp_path, {"name": "greedy", "cpu_threshold": 0.6})
    monkeypatch.setenv("CPN_POLICY", "milp")
    monkeypatch.setenv("CPN_POLICY_SET", "preemption=true,time_limit_s=4")
    profile = load_settings.fn(str(folder))
    assert profile.policy == SchedulerPolicy(
        settings=policy_settings("milp", preemption="true", time_limit_s="4"), cpu_threshold=0.6
    )
    monkeypatch.setenv("CPN_POLICY", "")
    monkeypatch.setenv("CPN_POLICY_SET", "")
    assert load_settings.fn(str(folder)).policy == load_profile(folder).policy


def _run_args(folder: Path, tmp_path: Path, *sets: str) -> argparse.Namespace:
    table = tmp_path / "table.csv"
    table.write_text("model,batch_size,gpu_product,num_gpus,steps_per_sec\nResNet-18,32,v100,1,1.0\n")
    return argparse.Namespace(
        config=str(folder),
        store=str(tmp_path / "jobs.db"),
        throughputs=str(table),
        estimates="oracle",
        time_scale=1.0,
        interval=None,
        policy=None,
        set=list(sets),
    )


def _job(job_id: str) -> JobSpec:
    """A job that never checkpoints: preemption may stop it the moment it started (one that checkpoints
    is spared until it has trained one interval, cpn.policies.preemption)."""
    return JobSpec(job_id, "ResNet-18", batch_size=32, num_gpus=1, total_steps=100_000)


@pytest.mark.parametrize("preemption", [True, False])
def test_cpn_run_preempts_for_a_team_below_quota_when_its_policy_yaml_says_so(tmp_path, preemption):
    """Team a borrows b's card; when b's job arrives, `preemption: true` in policy.yaml stops one of a's
    jobs for it in the next round; without it b waits for a card to free."""
    folder = config_folder(tmp_path, {"name": "greedy", "preemption": preemption}, TEAMS)
    service = build(_run_args(folder, tmp_path), load_profile(folder))
    try:
        policy = service.scheduler.policy
        assert isinstance(policy, PreemptingPolicy) == preemption
        service.store.submit([_job("a/j1"), _job("a/j2")])
        assert service.scheduler.round().placed == 2  # a holds both cards, one of them borrowed
        service.scheduler.collect()
        service.store.submit([_job("b/j1")])
        service.scheduler.round()
        service.scheduler.round()  # a stopped run's cards come back, then b's job is placed
        causes = [t.cause for j in ("a/j1", "a/j2") for t in service.store.history(j)]
        assert (Cause.PREEMPTED in causes) == preemption
        placed = service.store.get("b/j1").state != JobState.QUEUED
        assert placed == preemption
    finally:
        service.close()


def test_cpn_run_set_overrides_policy_yaml(tmp_path):
    folder = config_folder(tmp_path, {"name": "greedy"}, TEAMS)
    service = build(_run_args(folder, tmp_path, "preemption=true", "rebalance=true"), load_profile(folder))
    try:
        assert isinstance(service.scheduler.policy, RebalancingPolicy)
        assert service.scheduler.cpu_threshold == 0.7
    finally:
        service.close()
