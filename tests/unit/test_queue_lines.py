"""A round costs what can start: the queue grouped by shape, kept by the queue view, and greedy visiting only
the shapes that can start."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from config.policies import policy_settings
from config.settings import REPO_ROOT, ClustersConfig, load_model
from cpn.decisions import Estimate, QueueLines, Snapshot, Team, Teams, shape_of
from cpn.engine.queue_view import QueueView
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.inventory import Node, NodeState, Taint
from cpn.jobs import JobSpec, JobState
from cpn.perf.scale import bench_scale
from cpn.policies import make_policy
from cpn.policies.placement import Capacity, queue_lines
from cpn.store import JobStore

USAGE = Taint(key="maip.mxsf.io/node.usage", value="training")
GPU = Taint(key="nvidia.com/gpu.product", value="Tesla-V100-SXM2-16GB")


def job(job_id: str, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", batch_size=32, num_gpus=gpus, total_steps=100, **kw)


def v100(free: int) -> NodeState:
    node = Node("a", "v0", "Tesla-V100-SXM2-16GB", 8, 16, 32, "training", taints=(USAGE, GPU))
    return NodeState(node, free, 0.0)


def snapshot(jobs: list[JobSpec], free: int) -> Snapshot:
    estimates = {j.job_id: {"v100": Estimate(100.0)} for j in jobs}
    return Snapshot(now=0.0, pending=tuple(jobs), nodes=(v100(free),), estimates=MappingProxyType(estimates))


def ranked(lines) -> dict[tuple, list[str]]:
    return {key: [j.job_id for _, j in line] for key, line in lines.lines.items()}


def test_greedy_visits_only_the_shapes_that_can_start(monkeypatch):
    """Four cards free, a thousand 8-card jobs queued ahead of two 1-card ones: the 8-card shape is asked
    once, not once per job, and the 1-card jobs start."""
    asked = []
    worth_trying = Capacity.worth_trying
    monkeypatch.setattr(
        Capacity, "worth_trying", lambda self, j: asked.append(j.job_id) or worth_trying(self, j)
    )
    jobs = [job(f"wide-{i:04d}", 8) for i in range(1000)] + [job("x"), job("y")]
    s = replace(snapshot(jobs, free=4), explain=False)
    lines = {}
    for i, j in enumerate(jobs):
        lines.setdefault(shape_of(j), []).append(((0, i), j))
    lined = replace(s, lines=QueueLines(s.pending, {k: tuple(line) for k, line in lines.items()}))
    decision = make_policy("greedy").decide(lined)
    assert [p.job_id for p in decision.placements] == ["x", "y"]
    assert len(asked) <= 4, asked[:10]
    assert make_policy("greedy").decide(s) == decision, "the same decision without the lines, job by job"


def test_greedy_takes_shapes_in_queue_order_priority_first():
    jobs = [job("a", 2), job("wide", 8), job("b", 2), job("c"), job("urgent", 4, priority=1)]
    decision = make_policy("greedy").decide(snapshot(jobs, free=7))
    assert [p.job_id for p in decision.placements] == ["urgent", "a", "c"]
    assert {w.job_id: w.code for w in decision.waiting} == {"wide": "no-gpu-type", "b": "no-gpu-type"}


def test_the_queue_view_keeps_the_lines_of_its_pending_jobs_in_queue_order():
    store = JobStore(":memory:")
    view = QueueView(store)
    store.submit([job("a", 2), job("b"), job("c", 2), job("d", 2, priority=1), job("e")])
    view.refresh()
    lines = view.lines()
    assert lines.pending is view.pending()
    two, one = shape_of(job("a", 2)), shape_of(job("b"))
    assert ranked(lines) == {two: ["d", "a", "c"], one: ["b", "e"]}

    store.transition("a", JobState.ASSIGNED, cluster="x", node="n")
    store.transition("b", JobState.SCHEDULE_FAILED, reason="too big")
    store.transition("e", JobState.ASSIGNED, cluster="x", node="n")
    store.submit([job("f")])
    view.refresh()
    assert ranked(view.lines()) == {two: ["d", "c"], one: ["f"]}
    assert view.lines() is view.lines(), "unchanged until the queue changes"


def test_a_policy_uses_the_given_lines_only_for_the_pending_jobs_they_group():
    store = JobStore(":memory:")
    view = QueueView(store)
    store.submit([job("a"), job("b")])
    view.refresh()
    given = Snapshot(0.0, view.pending(), (), lines=view.lines())
    assert queue_lines(given) is view.lines()
    assert queue_lines(replace(given, pending=given.pending[1:])) is None, "a copy with other pending jobs"
    assert queue_lines(replace(given, teams=Teams((Team("default"),)))) is None, "teams take turns instead"


def test_bench_scale_replays_each_size_and_times_it():
    clusters = load_model(REPO_ROOT / "examples" / "clusters" / "two-sites.yaml", ClustersConfig)
    table = ThroughputTable.load(GAVEL_ISOLATED)
    runs = bench_scale(policy_settings("greedy"), [2, 4], clusters, table, gap_s=600.0)
    assert [r.jobs for r in runs] == [2, 4]
    assert all(r.wall_s > 0 and r.cpu_s > 0 and r.makespan_s > 0 for r in runs)
    with pytest.raises(ValueError, match="sizes"):
        bench_scale(policy_settings("greedy"), [0], clusters, table)
    with pytest.raises(ValueError, match="gap_s"):
        bench_scale(policy_settings("greedy"), [2], clusters, table, gap_s=0)
