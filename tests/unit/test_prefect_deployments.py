"""prefect.yaml, checked with Prefect's own code: entrypoints load, parameters exist, schedules and
triggers parse, and the loops the pipeline needs are all there."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from prefect.client.schemas.schedules import construct_schedule
from prefect.events.schemas.deployment_triggers import DeploymentEventTrigger
from prefect.flows import load_flow_from_entrypoint

from config.settings import REPO_ROOT
from tasks.schedule import COMPLETED_EVENT

DEPLOYMENTS = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]
BY_NAME = {d["name"]: d for d in DEPLOYMENTS}


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d["name"])
def test_deployment_names_a_flow_its_parameters_and_valid_schedules(deployment, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    flow = load_flow_from_entrypoint(deployment["entrypoint"])
    unknown = set(deployment.get("parameters", {})) - set(flow.parameters.properties)
    assert not unknown, f"{deployment['name']}: parameters the flow does not take: {sorted(unknown)}"
    for schedule in deployment.get("schedules", []):
        construct_schedule(**{k: v for k, v in schedule.items() if k != "active"})
    for trigger in deployment.get("triggers", []):
        spec = {k: v for k, v in trigger.items() if k != "type"}
        parsed = DeploymentEventTrigger(**spec)
        assert set(parsed.parameters or {}) <= set(flow.parameters.properties)


def test_every_stage_of_the_card_has_a_deployment_on_the_process_pool():
    assert {"schedule-round", "collect-metrics", "retrain", "ingest-benchmarks"} <= set(BY_NAME)
    assert all(d["work_pool"]["name"] == "cpn" for d in DEPLOYMENTS)


def interval_s(deployment: dict) -> float:
    (schedule,) = deployment["schedules"]
    return construct_schedule(interval=schedule["interval"]).interval.total_seconds()


def test_one_scheduling_round_at_a_time_and_its_ui_parameters():
    d = BY_NAME["schedule-round"]
    assert d["concurrency_limit"]["limit"] == 1
    assert {"policy", "dry_run", "clusters"} <= set(d["parameters"])
    assert interval_s(d) <= 600


def test_metrics_every_minute_benchmarks_weekly_retraining_nightly():
    assert interval_s(BY_NAME["collect-metrics"]) == 60
    (weekly,) = BY_NAME["ingest-benchmarks"]["schedules"]
    assert construct_schedule(cron=weekly["cron"]).cron.split()[4] != "*", "weekly: one day of the week"
    (nightly,) = BY_NAME["retrain"]["schedules"]
    fields = construct_schedule(cron=nightly["cron"]).cron.split()
    assert fields[2:] == ["*", "*", "*"] and fields[1].isdigit(), "nightly: once a day"


def test_retraining_is_triggered_by_as_many_completion_events_as_it_retrains_on():
    d = BY_NAME["retrain"]
    (trigger,) = d["triggers"]
    assert trigger["expect"] == [COMPLETED_EVENT]
    assert trigger["threshold"] == d["parameters"]["every_completions"]
    assert trigger["posture"] == "Reactive"


@pytest.mark.integration  # a fresh interpreter importing Prefect: several seconds
def test_importing_a_flow_does_not_load_mlflow_or_xgboost():
    """A worker imports the flow before every run; MLflow and XGBoost cost it ~10 s for nothing."""
    code = (
        "import sys, flows.demo, flows.retrain, flows.schedule, flows.metrics, flows.benchmarks;"
        "print(sorted(m for m in ('mlflow', 'xgboost', 'sklearn') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
