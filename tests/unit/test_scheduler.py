"""The production scheduling round and the replay driver on tiny literal clusters, answers worked by hand."""

from __future__ import annotations

import pytest

from cpn.clock import SimClock
from cpn.decisions import Decision, Estimate, Snapshot
from cpn.engine.scheduler import Scheduler
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node
from cpn.jobs import JobSpec, JobState
from cpn.perf.report import summarize, timelines
from cpn.policies.base import Traits
from cpn.policies.fifo import FifoPolicy
from cpn.rules import EXCLUSIVE_REASON
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.migrator import SimulatedMigrator
from cpn.sim.replay import STUCK_REASON, arrivals_from_jobs, replay
from cpn.sim.truth import GroundTruth
from cpn.store import JobStore
from cpn.transfer import TransferTimes
from tests.unit.test_migration_flow import one_card_sites

TABLE = ThroughputTable(
    [
        ThroughputRow("ResNet-18", 32, "v100", 1, 1.0),
        ThroughputRow("ResNet-18", 32, "v100", 2, 1.6),
    ]
)
NODE_A = Node("a", "a-0", "Tesla-V100-SXM2-16GB", 2, 16, 32, "training")
NODE_B = Node("b", "b-0", "Tesla-V100-SXM2-16GB", 2, 16, 32, "training")
INFER_A = Node("a", "a-infer-0", "Tesla-V100-SXM2-16GB", 2, 16, 32, "inference")


def job(job_id: str, gpus: int = 1, steps: int = 100, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", batch_size=32, num_gpus=gpus, total_steps=steps, **kw)


def run(nodes, jobs, policy=None, with_migration=False, estimator=None):
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = SimulatedGateway(nodes, GroundTruth(TABLE), clock)
    migrator = transfers = None
    if with_migration:
        transfers = TransferTimes(one_card_sites({"a": {"b": 10}}, cpu_cores=1))
        migrator = SimulatedMigrator(transfers, clock)
    scheduler = Scheduler(
        store,
        gateway,
        policy or FifoPolicy(),
        clock,
        transfers=transfers,
        migrator=migrator,
        estimator=estimator,
    )
    result = replay(scheduler, gateway, clock, arrivals_from_jobs(jobs), migrator=migrator)
    return store, gateway, result, migrator


def test_fifo_replay_matches_hand_computed_schedule():
    # a (1 GPU, 100 s) starts at 0; b needs both cards and blocks c behind it until a ends at 100;
    # b runs 160 steps at 1.6 steps/s = 100 s; c then runs 50 s. JCTs 100, 200, 250.
    jobs = [job("a", steps=100), job("b", gpus=2, steps=160), job("c", steps=50)]
    store, gateway, result, _ = run([NODE_A], jobs)
    assert result.stuck == ()
    assert store.counts()[JobState.SUCCEEDED] == 3
    ends = {t.job_id: t.ended_at for t in timelines(store)}
    assert ends == pytest.approx({"a": 100.0, "b": 200.0, "c": 250.0})
    summary = summarize(timelines(store), [], total_gpus=2)
    assert summary["makespan_s"] == pytest.approx(250.0)
    assert summary["mean_jct_s"] == pytest.approx((100 + 200 + 250) / 3)
    assert summary["mean_wait_s"] == pytest.approx((0 + 100 + 200) / 3)


def test_every_job_walks_the_state_machine_in_order():
    store, _, _, _ = run([NODE_A], [job("a")])
    states = [t.to_state for t in store.history("a")]
    assert states == [
        JobState.QUEUED,
        JobState.ASSIGNED,
        JobState.SUBMITTED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
    ]
    assert [t.time for t in store.history("a")] == [0.0, 0.0, 0.0, 0.0, 100.0]


def test_job_placed_away_from_its_data_migrates_first_then_runs_where_it_went():
    # Its data is in cluster a, whose only node serves inference; 12.5 GB over 10 Gbit/s = 10 s of copy,
    # then it is submitted to the card in b it was assigned and runs there for 100 s.
    spec = job("m", source_cluster="a", data_size_gb=10, image_size_gb=2.5)
    store, gateway, _, migrator = run([INFER_A, NODE_B], [spec], with_migration=True)
    history = store.history("m")
    assert [t.to_state for t in history] == [
        JobState.QUEUED,
        JobState.ASSIGNED,
        JobState.MIGRATING,
        JobState.SUBMITTED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
    ]
    assert history[3].time == pytest.approx(10.0)
    assert store.get("m").location == "b"
    assert migrator.total_s == pytest.approx(10.0)
    (execution,) = gateway.executions
    assert (execution.cluster, execution.start, execution.end) == (
        "b",
        pytest.approx(10.0),
        pytest.approx(110.0),
    )


def test_job_already_where_it_runs_does_not_migrate():
    store, _, _, migrator = run(
        [NODE_A], [job("s", source_cluster="a", data_size_gb=50)], with_migration=True
    )
    assert JobState.MIGRATING not in [t.to_state for t in store.history("s")]
    assert migrator.total_s == 0


class NeverPlaces:
    name = "never"
    traits = Traits()

    def decide(self, snapshot: Snapshot) -> Decision:
        return Decision()


def test_queue_that_can_never_progress_ends_the_run_with_jobs_reported():
    store, _, result, _ = run([NODE_A], [job("x"), job("y", arrival_s=50)], policy=NeverPlaces())
    assert set(result.stuck) == {"x", "y"}
    assert all(store.get(j).state == JobState.SCHEDULE_FAILED for j in ("x", "y"))
    assert store.history("x")[-1].reason == STUCK_REASON


def test_arrivals_enter_the_store_at_their_time():
    store, _, _, _ = run([NODE_A], [job("early"), job("late", arrival_s=500)])
    assert store.history("late")[0].time == 500.0
    assert store.history("late")[-1].time == pytest.approx(600.0)


def test_completed_runs_report_measured_runtime_on_the_node_gpu_type():
    from cpn.engine.feedback import completed_runs

    store, _, _, _ = run([NODE_A], [job("a", steps=100), job("b", gpus=2, steps=160)])
    runs = {r.job_id: r for r in completed_runs(store, [NODE_A])}
    assert runs["a"].runtime_s == pytest.approx(100.0) and runs["a"].gpu_type == "v100"
    assert runs["b"].runtime_s == pytest.approx(100.0), "b waited 100 s but ran 100 s: queueing excluded"
    assert runs["b"].total_steps / runs["b"].runtime_s == pytest.approx(1.6)
    assert completed_runs(store, [NODE_A], since=150.0) == [runs["b"]]


def test_migrated_job_is_decided_from_where_its_data_now_is():
    # One card per site. The blocker holds a's card for 10 s, so x (data in a) copies to b (10 s). The copy
    # lands as a frees up, in the same round; x goes where its data went, to the card b held for it.
    from cpn.policies import make_policy
    from cpn.sim.estimates import OracleEstimates

    one_a = Node("a", "a-0", "Tesla-V100-SXM2-16GB", 1, 16, 32, "training")
    one_b = Node("b", "b-0", "Tesla-V100-SXM2-16GB", 1, 16, 32, "training")
    blocker = job("blocker", steps=10, source_cluster="a")
    x = job("x", source_cluster="a", data_size_gb=10, image_size_gb=2.5)
    store, gateway, _, migrator = run(
        [one_a, one_b],
        [blocker, x],
        policy=make_policy("greedy"),
        with_migration=True,
        estimator=OracleEstimates(TABLE),
    )
    assert migrator.total_s == pytest.approx(10.0), "exactly one copy"
    (run_x,) = [e for e in gateway.executions if e.job_id == "x"]
    assert (run_x.cluster, run_x.start) == ("b", pytest.approx(10.0))


def test_noisy_estimates_differ_between_identical_jobs_but_not_between_calls():
    from cpn.sim.estimates import NoisyOracle

    noisy = NoisyOracle(TABLE, sigma=0.3, seed=1)
    a, b = job("a"), job("b")
    first = noisy.estimate(a, "v100").runtime_s
    assert noisy.estimate(b, "v100").runtime_s != first, "each job draws its own error"
    assert noisy.estimate(a, "v100").runtime_s == first, "one job's error is fixed for the run"


class ExploreFor:
    """Estimates that flag the given jobs' models as never seen by the predictor."""

    def __init__(self, *explore: str) -> None:
        self.explore = explore

    def estimates(self, jobs, gpu_types):
        return {
            j.job_id: {g: Estimate(100.0, explore=j.job_id in self.explore) for g in gpu_types} for j in jobs
        }


def test_job_to_explore_runs_on_a_whole_card_and_only_clean_runs_feed_back():
    from cpn.engine.feedback import completed_runs

    # Three half-card jobs on two cards. Without exploring they would pack two to a card; "new" (a model
    # the predictor has never seen) gets a card to itself, so the two others share the other card.
    jobs = [job("new", gpu_share=0.5), job("s2", gpu_share=0.5), job("s3", gpu_share=0.5)]
    store, gateway, _, _ = run([NODE_A], jobs, estimator=ExploreFor("new"))
    share = {e.job_id: e.share for e in gateway.executions}
    assert share == {"new": 1.0, "s2": 0.5, "s3": 0.5}
    assert store.get("new").spec.gpu_share == 0.5, "the stored spec is what the user submitted"
    assert [t.reason for t in store.history("new") if t.to_state == JobState.ASSIGNED] == [EXCLUSIVE_REASON]
    # The partners' run times carry each other's interference: only the clean run trains the predictor.
    assert [r.job_id for r in completed_runs(store, [NODE_A])] == ["new"]


def test_a_job_to_explore_is_seen_on_whole_cards_with_what_its_runs_taught_since():
    """The whole-card swap is built with the rest of the spec a policy sees (queue_view.seen_spec): an OOM
    kill learned after the job entered the queue reaches the policy, whole cards and all."""
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = SimulatedGateway([NODE_A], GroundTruth(TABLE), clock)
    scheduler = Scheduler(store, gateway, FifoPolicy(), clock, estimator=ExploreFor("new"))
    store.submit([job("new", gpu_share=0.5)])
    (seen,) = scheduler.snapshot().pending
    assert seen.gpu_share is None and seen.gpu_mem_gb is None
    store.transition("new", JobState.ASSIGNED, cluster="a", node="a-0")
    store.transition("new", JobState.QUEUED, needs_more_than_gb=16.0)
    (seen,) = scheduler.snapshot().pending
    assert seen.gpu_share is None and seen.gpu_mem_gb == 16.01


def test_without_explore_sharing_jobs_pack_onto_one_card():
    jobs = [job("a", gpu_share=0.5), job("b", gpu_share=0.5)]
    _, gateway, _, _ = run([NODE_A], jobs, estimator=ExploreFor())
    assert {e.job_id: e.share for e in gateway.executions} == {"a": 0.5, "b": 0.5}
    assert {e.start for e in gateway.executions} == {0.0}


def test_finished_runs_report_measured_memory_which_feeds_the_predictor():
    from cpn.engine.feedback import completed_runs
    from cpn.sim.memory import gpu_memory_gb
    from models.retrain import memory_sample

    # "big" asks for more than the 16 GB card; the naive FIFO places it anyway, and it is OOM-killed
    # before it ever held its memory: nothing measured.
    jobs = [job("a"), job("b", gpus=2), job("big", gpu_mem_gb=40)]
    store, _, _, _ = run([NODE_A], jobs, policy=FifoPolicy(memory_aware=False))
    assert store.get("big").state == JobState.FAILED
    assert store.history("big")[-1].gpu_mem_gb is None
    memory = {r.job_id: r.gpu_mem_gb for r in completed_runs(store, [NODE_A])}
    assert memory == {
        "a": pytest.approx(gpu_memory_gb("ResNet-18", 32, 1)),
        "b": pytest.approx(gpu_memory_gb("ResNet-18", 32, 2)),
    }
    assert memory["b"] > memory["a"], "a data-parallel gang keeps gradient buckets and NCCL buffers"
    samples = [memory_sample(r) for r in completed_runs(store, [NODE_A])]
    assert sorted(s.gpu_mem_gb for s in samples) == sorted(memory.values())


@pytest.fixture(scope="module")
def predictor():
    """A small predictor of the synthetic world (tests/unit/test_predictor_support.py): A3C runs at a
    fixed batch there; uncalibrated and few trees, to stay fast."""
    from models.predictor import fit_predictor
    from tests.unit.test_predictor_support import catalog, rows

    return fit_predictor(rows(), catalog(), "rf", calibrate=False, n_estimators=10)


@pytest.mark.parametrize("name", ["greedy", "sjf", "milp"])
def test_a_job_the_predictor_cannot_estimate_is_rejected_saying_why_and_what_to_do(predictor, name):
    from cpn.policies import make_policy
    from cpn.policies.placement import NO_ESTIMATE

    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    gateway = SimulatedGateway([NODE_A], GroundTruth(TABLE), clock)
    scheduler = Scheduler(store, gateway, make_policy(name), clock, estimator=predictor)
    fixed = JobSpec(job_id="fixed", model="A3C", batch_size=64, total_steps=100)
    store.submit([fixed, JobSpec(job_id="fine", model="ResNet-50", batch_size=32, total_steps=100)])
    result = scheduler.round()
    assert (result.placed, result.rejected) == (1, 1)
    assert store.get("fine").state == JobState.SUBMITTED
    last = store.history("fixed")[-1]
    assert last.to_state == JobState.SCHEDULE_FAILED
    assert last.reason == f"{NO_ESTIMATE}: model 'a3c' runs at a fixed batch; give no batch size, not 64"
