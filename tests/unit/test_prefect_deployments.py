"""prefect.yaml, checked with Prefect's own code: entrypoints load, parameters exist, schedules parse."""

from __future__ import annotations

import pytest
import yaml
from prefect.client.schemas.schedules import construct_schedule
from prefect.flows import load_flow_from_entrypoint

from config.settings import REPO_ROOT

DEPLOYMENTS = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())["deployments"]


@pytest.mark.parametrize("deployment", DEPLOYMENTS, ids=lambda d: d["name"])
def test_deployment_names_a_flow_its_parameters_and_valid_schedules(deployment, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    flow = load_flow_from_entrypoint(deployment["entrypoint"])
    unknown = set(deployment.get("parameters", {})) - set(flow.parameters.properties)
    assert not unknown, f"{deployment['name']}: parameters the flow does not take: {sorted(unknown)}"
    for schedule in deployment.get("schedules", []):
        construct_schedule(**schedule)


def test_retraining_is_checked_often_and_decides_itself_when_it_is_due():
    (retrain,) = [d for d in DEPLOYMENTS if d["entrypoint"] == "flows/retrain.py:retrain"]
    (schedule,) = retrain["schedules"]
    assert construct_schedule(**schedule).interval.total_seconds() <= 3600
    assert {"every_completions", "every_s"} <= set(retrain["parameters"])
