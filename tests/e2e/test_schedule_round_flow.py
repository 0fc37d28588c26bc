"""`schedule-round` under Prefect's test harness: each stage a task, the decision table an artifact."""

from __future__ import annotations

import asyncio
import json

import pytest
from prefect.client.orchestration import get_client

from config.runtime import runtime_settings
from config.settings import load_profile
from cpn.adapters.gateway import OOM_REASON
from cpn.engine.scheduler import RESTART_MIGRATION_LOST, RESTART_UNSUBMITTED
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.jobs import JobState
from cpn.sim import generated
from cpn.store import JobStore
from flows.schedule import schedule_round
from models.registry import champion_version
from tests.e2e.stages import ROUND_STAGES, task_names

pytestmark = pytest.mark.e2e


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A cpn home with 12 generated jobs queued in its store."""
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    monkeypatch.delenv("CPN_STORE", raising=False)
    profile = load_profile()
    table = ThroughputTable.load(GAVEL_ISOLATED)
    jobs = generated.accept_manifests(generated.generate_manifests(profile.clusters, table, 12, 4))
    with JobStore(tmp_path / "jobs.db") as store:
        store.submit(jobs)
    return tmp_path


def states(home) -> dict[JobState, int]:
    with JobStore(home / "jobs.db") as store:
        return {state: n for state, n in store.counts().items() if n}


async def latest_round(flow_run_id, expected: frozenset[str] = frozenset()) -> tuple[set[str], list]:
    """The task names of a round's flow run (once `expected` are recorded: stages.task_names) and its
    decision table artifacts."""
    names = await task_names(flow_run_id, expected)
    async with get_client() as client:
        artifacts = await client.read_artifacts()
        table = [a for a in artifacts if a.key == "schedule-round" and a.flow_run_id == flow_run_id]
        return names, table


def test_a_dry_run_publishes_the_decisions_and_changes_nothing(prefect_harness, home):
    state = schedule_round(dry_run=True, return_state=True)
    result = state.result()
    assert result.dry_run and result.pending == 12 and result.decided > 0 and result.placed == 0
    assert states(home) == {JobState.QUEUED: 12}

    names, (artifact,) = asyncio.run(latest_round(state.state_details.flow_run_id))
    assert {"snapshot-and-estimates", "optimise", "publish-decisions"} <= names
    changing = {"collect", "cancel", "assign", "migrate", "submit", "record-waiting"}
    assert not names & changing, "a dry run must not reach the stages that write"
    assert "dry run" in artifact.description
    rows = artifact.data if isinstance(artifact.data, list) else json.loads(artifact.data)
    assert len(rows) == 12
    placed = [r for r in rows if r["outcome"] == "placed"]
    assert len(placed) == result.decided
    assert all(r["cluster"] and r["node"] and r["gpus"] >= 1 and r["predicted_runtime_s"] > 0 for r in placed)
    assert all(r["why"] for r in rows if r["outcome"] != "placed")
    # The deployment's default estimates: the champion, trained and registered first in this fresh home.
    assert champion_version(runtime_settings().mlflow_uri) == "1"


def test_a_round_submits_through_every_stage_and_only_to_the_clusters_asked(prefect_harness, home):
    state = schedule_round(policy="greedy", clusters=["gz-v100"], estimates="oracle", return_state=True)
    result = state.result()
    assert result.placed + result.migrating + result.submit_refused == result.decided > 0
    with JobStore(home / "jobs.db") as store:
        started = [r for r in store.jobs() if r.state != JobState.QUEUED]
    assert started and all(r.cluster == "gz-v100" for r in started)

    names, _ = asyncio.run(latest_round(state.state_details.flow_run_id, ROUND_STAGES))
    assert ROUND_STAGES <= names

    assert result.migrating > 0, "some jobs' payloads are elsewhere: copies in flight between the runs"
    with JobStore(home / "jobs.db") as store:
        in_flight = {c.placement.job_id: c for c in store.copies()}
    assert len(in_flight) == result.migrating

    again = schedule_round(policy="greedy", clusters=["gz-v100"], estimates="oracle")
    # The next run resumes the same store and simulated clusters: what was submitted stays submitted, every
    # copy in flight goes on from where the store has it (never queued again, never copied twice) and holds
    # its cards, and a job OOM-killed meanwhile is queued again for a larger card (re-planning).
    with JobStore(home / "jobs.db") as store:
        histories = {r.job_id: store.history(r.job_id) for r in store.jobs()}
        still = {c.placement.job_id: c for c in store.copies()}
    replanned = sum(any(t.reason.startswith(OOM_REASON) for t in h) for h in histories.values())
    settled = [t.reason for h in histories.values() for t in h if t.reason.startswith("restart:")]
    assert not [r for r in settled if r in (RESTART_MIGRATION_LOST, RESTART_UNSUBMITTED)], settled
    for job_id, copy in in_flight.items():
        moves = [t.to_state for t in histories[job_id]]
        assert moves.count(JobState.MIGRATING) == 1, f"{job_id} copied once: {moves}"
        assert moves.count(JobState.QUEUED) == 1, f"{job_id} never queued again: {moves}"
        if job_id in still:  # still copying: the same copy, from when it began
            assert (still[job_id].source, still[job_id].started_at) == (copy.source, copy.started_at)
    assert again.pending == 12 - result.placed - result.migrating + replanned


def test_an_unknown_cluster_fails_the_round_and_names_the_known_ones(prefect_harness, home):
    with pytest.raises(ValueError, match="not in the inventory; known: .*gz-v100"):
        schedule_round(clusters=["nowhere"], estimates="oracle")
    assert states(home) == {JobState.QUEUED: 12}
