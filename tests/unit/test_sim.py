"""The simulated clusters: durations from the table, OOM and other failures, capacity, determinism."""

from __future__ import annotations

import pytest

from cpn.adapters.gateway import OOM_REASON, SubmitRejected
from cpn.clock import SimClock
from cpn.decisions import Placement
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node
from cpn.jobs import JobSpec
from cpn.model_names import model_key
from cpn.sim.gateway import Execution, SimulatedGateway
from cpn.sim.memory import MODELS, gpu_memory_gb
from cpn.sim.truth import LOAD_S, GroundTruth

K80 = Node("a", "k80-0", "Tesla-K80", 8, 12, 32, "training")
V100 = Node("b", "v100-0", "Tesla-V100-SXM2-16GB", 4, 16, 16, "training")

TABLE = ThroughputTable(
    [
        ThroughputRow("ResNet-18", 32, "v100", 1, 10.0),
        ThroughputRow("ResNet-18", 32, "k80", 1, 2.0),
        ThroughputRow("ResNet-50", 128, "v100", 4, 8.0),
        ThroughputRow("ResNet-50", 128, "k80", 2, 0.0),
        ThroughputRow("A3C", None, "v100", 1, 4.0),
        ThroughputRow("Mystery", 8, "v100", 1, 0.0),
    ]
)

CARD_GB = {"k80": 12, "p100": 16, "v100": 16}
"""GPU memory of the cards in Gavel's table (DESIGN.md)."""


def job(job_id: str, model: str = "ResNet-18", batch: int | None = 32, gpus: int = 1, steps: int = 100, **kw):
    return JobSpec(job_id=job_id, model=model, batch_size=batch, num_gpus=gpus, total_steps=steps, **kw)


def place(spec: JobSpec, node: Node, gpus: int | None = None) -> Placement:
    return Placement(spec.job_id, node.cluster, node.name, spec.num_gpus if gpus is None else gpus)


def make(nodes=(K80, V100)) -> tuple[SimulatedGateway, SimClock]:
    clock = SimClock()
    return SimulatedGateway(nodes, GroundTruth(TABLE), clock), clock


def drain(gw: SimulatedGateway) -> None:
    while (t := gw.next_event_time()) is not None:
        gw.advance(t)


def free(gw: SimulatedGateway, node: Node) -> int:
    return next(s.free_gpus for s in gw.inventory() if s.node == node)


def test_duration_is_total_steps_over_measured_steps_per_sec():
    gw, clock = make()
    spec = job("j1", steps=100)
    gw.submit(spec, place(spec, V100))
    assert gw.next_event_time() == pytest.approx(10.0)
    gw.advance(10.0)
    assert clock.now() == 10.0
    assert [(e.kind, e.time) for e in gw.poll_events()] == [("running", 0.0), ("succeeded", 10.0)]
    assert gw.executions == [Execution("j1", "b", "v100-0", (0,), 0.0, 10.0, "succeeded")]


def test_same_job_runs_slower_on_a_slower_card():
    gw, _ = make()
    spec = job("j1", steps=100)
    gw.submit(spec, place(spec, K80))
    drain(gw)
    assert gw.executions[0].end == pytest.approx(50.0)


def test_advance_processes_only_due_events_and_moves_the_clock():
    gw, clock = make()
    a, b = job("a", steps=100), job("b", steps=300)
    gw.submit(a, place(a, V100))
    gw.submit(b, place(b, V100))
    gw.poll_events()
    gw.advance(15.0)
    assert clock.now() == 15.0
    assert [(e.job_id, e.kind) for e in gw.poll_events()] == [("a", "succeeded")]
    assert gw.running_jobs() == ("b",)
    assert gw.next_event_time() == pytest.approx(30.0)


def test_equal_end_times_resolve_in_submission_order():
    gw, _ = make()
    for name in ("x", "y", "z"):
        spec = job(name)
        gw.submit(spec, place(spec, V100))
    drain(gw)
    assert [e.job_id for e in gw.executions] == ["x", "y", "z"]


def test_oom_fails_after_loading_with_kubernetes_reason_and_frees_the_gpus():
    gw, _ = make()
    big = job("big", model="ResNet-50", batch=128, gpus=2)  # 12.3 GB per card on two cards
    gw.submit(big, place(big, K80))
    assert free(gw, K80) == 6
    drain(gw)
    failed = gw.poll_events()[-1]
    assert (failed.kind, failed.time, failed.reason) == ("failed", LOAD_S, OOM_REASON)
    assert gw.executions[0].outcome == "failed"
    assert free(gw, K80) == 8
    assert gw.running_jobs() == ()


def test_declared_memory_above_the_model_counts():
    gw, _ = make()
    spec = job("greedy", gpu_mem_gb=14.0)
    gw.submit(spec, place(spec, K80))
    drain(gw)
    assert gw.executions[0].reason == OOM_REASON
    assert GroundTruth(TABLE).memory_gb(spec, 1) == 14.0
    assert GroundTruth(TABLE).memory_gb(job("modest", gpu_mem_gb=0.1), 1) == gpu_memory_gb("ResNet-18", 32)


@pytest.mark.parametrize(
    ("spec", "node", "reason"),
    [
        (job("nofig", gpus=2), V100, "no measured throughput for ResNet-18 batch 32 on 2x v100"),
        (job("zero", model="Mystery", batch=8), V100, "measured not to run (0 steps/s)"),
        (JobSpec("nosteps", model="ResNet-18", batch_size=32), V100, "no total_steps"),
    ],
)
def test_unrunnable_jobs_fail_after_loading_with_a_clear_reason(spec, node, reason):
    gw, _ = make()
    gw.submit(spec, place(spec, node))
    drain(gw)
    (execution,) = gw.executions
    assert execution.outcome == "failed"
    assert execution.end == LOAD_S
    assert reason in execution.reason


def test_batch_size_one_matches_a_model_measured_at_a_fixed_batch():
    gw, _ = make()
    spec = job("a3c", model="A3C", batch=1, steps=40)
    gw.submit(spec, place(spec, V100))
    drain(gw)
    assert gw.executions[0].outcome == "succeeded"
    assert gw.executions[0].end == pytest.approx(10.0)


def test_multi_gpu_job_holds_all_its_cards_on_one_node_until_it_ends():
    gw, _ = make()
    gang = job("gang", model="ResNet-50", batch=128, gpus=4, steps=80, cpu=6)
    gw.submit(gang, place(gang, V100))
    (state,) = [s for s in gw.inventory() if s.node == V100]
    assert (state.free_gpus, state.cpu_used, state.running) == (0, 6, ("gang",))
    late = job("late")
    with pytest.raises(SubmitRejected, match="0 free GPUs"):
        gw.submit(late, place(late, V100))
    drain(gw)
    assert gw.executions[0].gpus == (0, 1, 2, 3)
    assert free(gw, V100) == 4
    gw.submit(late, place(late, V100))


def test_cards_are_specific_and_reused_lowest_first():
    gw, _ = make()
    a, b, c = job("a", steps=10), job("b", steps=1000), job("c", steps=10)
    gw.submit(a, place(a, V100))
    gw.submit(b, place(b, V100))
    drain_until = gw.next_event_time()
    gw.advance(drain_until)
    gw.submit(c, place(c, V100))
    drain(gw)
    gpus = {e.job_id: e.gpus for e in gw.executions}
    assert gpus == {"a": (0,), "b": (1,), "c": (0,)}


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (Placement("j", "a", "nope", 1), "no node a/nope"),
        (Placement("j", "b", "v100-0", 5), "4 free GPUs"),
        (Placement("j", "b", "v100-0", 0), "asks for 0"),
        (Placement("other", "b", "v100-0", 1), "placement is for other"),
    ],
)
def test_submit_refuses_what_the_cluster_cannot_do(placement, message):
    gw, _ = make()
    with pytest.raises(SubmitRejected, match=message):
        gw.submit(job("j"), placement)
    assert gw.poll_events() == []
    assert free(gw, V100) == 4


def test_submit_refuses_cpu_beyond_the_node_and_a_job_already_running():
    gw, _ = make()
    hog = job("hog", cpu=17)
    with pytest.raises(SubmitRejected, match="free CPU cores"):
        gw.submit(hog, place(hog, V100))
    spec = job("j")
    gw.submit(spec, place(spec, V100))
    with pytest.raises(SubmitRejected, match="already running"):
        gw.submit(spec, place(spec, V100))


def test_same_inputs_give_identical_executions_and_events():
    def run() -> tuple[list, list]:
        gw, _ = make()
        events = []
        jobs = [job(f"j{i}", steps=10 * (i % 4 + 1)) for i in range(12)]
        pending = list(jobs)
        while pending or gw.next_event_time() is not None:
            for node in (V100, K80):
                while pending and free(gw, node) > 0:
                    spec = pending.pop(0)
                    gw.submit(spec, place(spec, node))
            events += gw.poll_events()
            if (t := gw.next_event_time()) is not None:
                gw.advance(t)
        events += gw.poll_events()
        return gw.executions, events

    first, second = run(), run()
    assert first == second
    assert len(first[0]) == 12


def test_nodes_must_be_unique():
    with pytest.raises(ValueError, match="listed twice"):
        make((V100, V100))


def test_memory_model_agrees_with_gavels_measurements():
    """Every configuration Gavel ran fits its card; every one it could not run (0 steps/s) does not."""
    table = ThroughputTable.load()
    checked = 0
    for row in table:
        mem = gpu_memory_gb(row.model, row.batch_size, row.num_gpus)
        assert mem is not None, row
        assert (mem > CARD_GB[row.gpu_type]) == (row.steps_per_sec == 0), (row, mem)
        checked += 1
    assert checked == len(table.rows) > 400


def test_memory_model_grows_with_batch_and_data_parallelism_and_knows_its_limits():
    assert (
        gpu_memory_gb("resnet-50", 64) < gpu_memory_gb("ResNet-50", 128) < gpu_memory_gb("ResNet-50", 128, 2)
    )
    assert gpu_memory_gb("ResNet-50", None) is None
    assert gpu_memory_gb("unknown-model", 32) is None
    assert gpu_memory_gb("CycleGAN", None) == gpu_memory_gb("CycleGAN", 1)
    assert set(MODELS) == {model_key(r.model) for r in ThroughputTable.load()}
