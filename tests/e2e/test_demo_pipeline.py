"""The demo flow's graph shows the pipeline's stages; with predictor estimates the learning loop closes."""

from __future__ import annotations

import asyncio
import json

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

from flows.demo import demo
from tests.e2e.stages import ROUND_STAGES, task_names

pytestmark = pytest.mark.e2e

EXPECTED = ROUND_STAGES | {"collect_completions", "retrain-predictor", "publish_retraining", "write_report"}
"""The task runs the demo's graph shows: every round stage, then the learning loop's."""


async def graph(flow_run_id) -> tuple[set[str], set[str]]:
    """(task run names, subflow names) of a flow run."""
    names = await task_names(flow_run_id, EXPECTED)
    async with get_client() as client:
        children = await client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[flow_run_id]))
        )
        flows = {(await client.read_flow(r.flow_id)).name for r in children}
        return names, flows


def test_the_demo_runs_each_stage_as_a_task_and_learns_the_model_it_explored(prefect_harness, tmp_path):
    state = demo(out=str(tmp_path), jobs=40, seed=5, estimates="predictor", return_state=True)
    summary = state.result()
    assert summary["succeeded"] == 40

    names, subflows = asyncio.run(graph(state.state_details.flow_run_id))
    assert EXPECTED <= names, f"stages missing from the graph: {EXPECTED - names}"
    assert {"collect-metrics", "ingest-benchmarks"} <= subflows

    figures = json.loads((tmp_path / "explore.json").read_text())
    runs = figures["jobs"]
    assert runs, f"no job of the held-out model {figures['model']} completed"
    for run in runs:
        assert run["explore_before"], "a model the starting predictor never saw must be estimated explore"
        assert not run["explore_after"], "retraining on its measured run must make the model seen"
        assert run["error_after"] < run["error_before"], run
        assert run["error_before"] == pytest.approx(
            abs(run["predicted_before_s"] - run["measured_s"]) / run["measured_s"]
        )
