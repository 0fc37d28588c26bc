"""One verdict everywhere: a job no cluster can ever take is rejected in the first round, with the same
reason, by every policy, by `cpn plan`'s dry run and by the scheduling round `cpn run` runs; and every
queued job has a current waiting reason, also in the round it comes back to the queue.

The same through the `cpn plan` command and the `schedule-round` flow: tests/e2e/test_one_verdict.py.
"""

from __future__ import annotations

import pytest

from cpn.adapters.migrator import MigrationDone
from cpn.clock import SimClock
from cpn.decisions import Estimate, Placement, Snapshot
from cpn.dry_run import planned_jobs
from cpn.engine.scheduler import Scheduler
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node, NodeState, Taint
from cpn.jobs import JobSpec, JobState
from cpn.policies import POLICIES, make_policy
from cpn.sim.estimates import OracleEstimates
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import GroundTruth
from cpn.store import JobStore
from tests.unit.test_migration_flow import setup
from tests.unit.test_submit_refusals import Refusing

USAGE, PRODUCT = "maip.mxsf.io/node.usage", "nvidia.com/gpu.product"
V100, K80 = "Tesla-V100-SXM2-16GB", "Tesla-K80"
TABLE = ThroughputTable(
    [ThroughputRow("ResNet-18", 32, gpu, n, 1.0 * n) for gpu in ("v100", "k80") for n in (1, 2, 4, 8)]
)


def node(name: str, product: str, gpus: int = 8) -> Node:
    taints = (Taint(USAGE, "training"), Taint(PRODUCT, product))
    return Node("a", name, product, gpus, 12 if product == K80 else 16, 64, "training", taints=taints)


NODES = (node("v0", V100), node("k0", K80, gpus=4))


def job(job_id: str, gpus: int = 1, steps: int = 100, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", batch_size=32, num_gpus=gpus, total_steps=steps, **kw)


IMPOSSIBLE = {
    "ns/h20": (job("ns/h20", gpu_products=("NVIDIA-H20",)), "runs only on NVIDIA-H20"),
    "ns/wide": (job("ns/wide", gpus=12), "needs 12 GPUs; no cluster has that many"),
    "ns/lab": (job("ns/lab", node_pools=("gpu-lab",)), "job ns/lab asks for gpu-lab"),
}
"""Jobs no node of NODES can ever take, and what their rejection says."""
HEAD = job("ns/head", gpus=4)
"""A job the clusters can take, but not while every card is busy: it heads the queue."""


def estimates(jobs) -> dict:
    return {j.job_id: {"v100": Estimate(100.0), "k80": Estimate(300.0)} for j in jobs}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_rejects_a_job_no_cluster_can_take_in_its_first_round(name):
    # Every card is busy and a job that could run heads the queue: no policy gets to these jobs by
    # placing or by skipping ahead, yet each rejects them at once.
    jobs = (HEAD, *(spec for spec, _ in IMPOSSIBLE.values()))
    busy = tuple(NodeState(n, free_gpus=0, running=(f"x/{n.name}",)) for n in NODES)
    decision = make_policy(name).decide(Snapshot(0.0, jobs, busy, estimates(jobs)))
    reasons = {r.job_id: r.reason for r in decision.rejections}
    assert set(reasons) == set(IMPOSSIBLE)
    for job_id, (_, phrase) in IMPOSSIBLE.items():
        assert phrase in reasons[job_id]
    assert [w.job_id for w in decision.waiting] == ["ns/head"]


def reasons_of(store: JobStore) -> dict[str, str]:
    failed = store.jobs([JobState.SCHEDULE_FAILED])
    return {r.job_id: store.history(r.job_id)[-1].reason for r in failed}


def test_the_plan_the_round_and_every_policy_give_the_same_reason():
    jobs = tuple(spec for spec, _ in IMPOSSIBLE.values())
    free = tuple(NodeState(n, n.gpu_count) for n in NODES)
    verdicts = []
    for name in sorted(POLICIES):
        policy = make_policy(name)
        verdicts.append(
            {r.job_id: r.reason for r in policy.decide(Snapshot(0.0, jobs, free, estimates(jobs))).rejections}
        )
        clock = SimClock()
        with JobStore(":memory:", clock=clock) as store:
            store.submit(jobs)
            gateway = SimulatedGateway(NODES, GroundTruth(TABLE), clock)
            dry = Scheduler(store, gateway, make_policy(name), clock, estimator=OracleEstimates(TABLE))
            snapshot = dry.snapshot()  # the dry run's stages (cpn plan's), then the round's own
            planned = planned_jobs(snapshot, dry.decide(snapshot), binders={}, validate=lambda *_: None)
            verdicts.append({p.job_id: p.reason for p in planned if p.outcome == "rejected"})
            Scheduler(store, gateway, policy, clock, estimator=OracleEstimates(TABLE)).round()
            verdicts.append(reasons_of(store))
    assert set(verdicts[0]) == set(IMPOSSIBLE)
    assert all(v == verdicts[0] for v in verdicts)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_a_pinned_job_waits_for_its_product_with_that_reason(name):
    pinned = job("ns/pinned", gpu_products=(K80,))
    nodes = (NodeState(NODES[0], 8), NodeState(NODES[1], 0, running=("x/k0",)))
    decision = make_policy(name).decide(Snapshot(0.0, (pinned,), nodes, estimates([pinned])))
    (waiting,) = decision.waiting
    assert (waiting.code, waiting.detail) == (
        "no-gpu-type",
        f"no free card of the GPU products it runs on ({K80})",
    )


def occupy(gateway: SimulatedGateway, job_id: str) -> None:
    """Someone else's job on cluster b's only card."""
    gateway.submit(job(job_id, steps=5), Placement(job_id, "b", "b-0", 1))


def test_a_job_a_migration_returns_to_the_queue_has_its_reason_in_that_round():
    store, gateway, _, scheduler = setup(lambda job_id, dst: MigrationDone(job_id, dst, gateway.clock.now()))
    occupy(gateway, "x/first")
    scheduler.round()
    assert store.get("ns/j").waiting.code == "no-gpu-type"
    gateway.advance(gateway.next_event_time())
    scheduler.round()  # the card is free: placed on b, away from its data, so it migrates
    assert store.get("ns/j").state == JobState.MIGRATING
    occupy(gateway, "x/second")
    scheduler.round()  # the copy is done: queued again at b, where the card is taken again
    record = store.get("ns/j")
    assert record.state == JobState.QUEUED and record.location == "b"
    assert record.waiting is not None and record.waiting.code == "no-gpu-type"


def test_a_job_the_cluster_refuses_for_now_has_its_reason_in_that_round():
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    store.submit([JobSpec(job_id="ns/j", model="m")])
    Scheduler(store, Refusing(transient=True), make_policy("fifo"), clock).round()
    record = store.get("ns/j")
    assert record.state == JobState.QUEUED
    assert record.waiting.code == "refused"
    assert (
        record.waiting.detail
        == 'the cluster refused it: Job.batch "x" is invalid: spec.template: Required value'
    )
