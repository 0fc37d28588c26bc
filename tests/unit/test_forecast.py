"""The forward look (cpn.engine.forecast) on literal snapshots: the production policies run forward in
simulated time give each waiting job a predicted start, end and interval, and say why a prediction moved."""

from __future__ import annotations

import math

import pytest

from cpn.decisions import Estimate, RunningJob, Snapshot
from cpn.engine import forecast
from cpn.engine.forecast import Forecaster
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.policies import make_policy

V100 = Node("a", "v100-0", "Tesla-V100-SXM2-16GB", 1, 16, 32, "hybrid")
GPU = V100.gpu_type


def job(job_id: str, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(job_id=job_id, model="ResNet-18", batch_size=32, num_gpus=gpus, total_steps=10, **kw)


def snapshot(
    now: float, pending: tuple[JobSpec, ...], running: dict[str, RunningJob], runtimes: dict
) -> Snapshot:
    """One one-card node, busy with `running`; `runtimes`: job_id -> (runtime s, uncertainty)."""
    busy = [j for j, r in running.items() if r.cards]
    state = NodeState(V100, free_gpus=1 - len(busy), running=tuple(running))
    estimates = {j: {GPU: Estimate(r, uncertainty=u)} for j, (r, u) in runtimes.items()}
    return Snapshot(now=now, pending=pending, nodes=(state,), estimates=estimates, running=running)


def holding(end: float) -> RunningJob:
    return RunningJob(end, ((V100.key, 1),))


@pytest.mark.parametrize("policy", ["fifo", "sjf", "greedy"])
def test_a_job_behind_one_running_job_starts_at_its_predicted_end(policy):
    forecaster = Forecaster(make_policy(policy))
    snap = snapshot(0.0, (job("a"),), {"r": holding(100.0)}, {"r": (100.0, 0.25), "a": (50.0, 0.0)})
    decision = forecaster.apply(snap, forecaster.policy.decide(snap))
    (w,) = decision.waiting
    assert (w.job_id, w.predicted_start, w.predicted_end) == ("a", 100.0, 150.0)
    assert (w.start_low, w.start_high) == pytest.approx((80.0, 125.0))  # r's 100 s runtime, +-25%
    assert w.moved == ""


def test_a_service_never_frees_its_cards():
    forecaster = Forecaster(make_policy("greedy"))
    service = RunningJob(math.inf, ((V100.key, 1),))
    snap = snapshot(0.0, (job("a"),), {"svc": service}, {"a": (50.0, 0.0)})
    (w,) = forecaster.apply(snap, forecaster.policy.decide(snap)).waiting
    assert w.predicted_start is None and w.predicted_end is None


def test_a_queued_service_placed_ahead_never_ends():
    forecaster = Forecaster(make_policy("fifo"))
    svc = job("svc", kind="inference")
    snap = snapshot(0.0, (job("a"), svc), {"r": holding(10.0)}, {"r": (10.0, 0.0), "a": (50.0, 0.0)})
    waiting = {w.job_id: w for w in forecaster.apply(snap, forecaster.policy.decide(snap)).waiting}
    assert waiting["a"].predicted_start == 10.0
    assert waiting["svc"].predicted_start == 60.0 and waiting["svc"].predicted_end == math.inf


def test_a_higher_priority_arrival_moves_the_prediction_and_says_so():
    forecaster = Forecaster(make_policy("greedy"))
    runtimes = {"r": (100.0, 0.0), "a": (50.0, 0.0), "b": (30.0, 0.0)}
    first = snapshot(0.0, (job("a"),), {"r": holding(100.0)}, runtimes)
    (w,) = forecaster.apply(first, forecaster.policy.decide(first)).waiting
    assert w.predicted_start == 100.0
    later = snapshot(10.0, (job("a"), job("b", priority=5)), {"r": holding(100.0)}, runtimes)
    waiting = {w.job_id: w for w in forecaster.apply(later, forecaster.policy.decide(later)).waiting}
    assert waiting["b"].predicted_start == 100.0
    assert waiting["a"].predicted_start == 130.0
    assert waiting["a"].moved == "b arrived with higher priority"


def test_an_early_end_moves_the_prediction_and_says_so():
    forecaster = Forecaster(make_policy("fifo"))
    runtimes = {"r": (100.0, 0.0), "s": (100.0, 0.0), "a": (50.0, 0.0)}
    two = Node("a", "v100-0", "Tesla-V100-SXM2-16GB", 2, 16, 32, "hybrid")
    both = NodeState(two, 0, running=("r", "s"))
    estimates = {j: {GPU: Estimate(r)} for j, (r, _) in runtimes.items()}
    running = {"r": RunningJob(100.0, ((two.key, 1),)), "s": RunningJob(200.0, ((two.key, 1),))}
    first = Snapshot(
        now=0.0, pending=(job("a", gpus=2),), nodes=(both,), estimates=estimates, running=running
    )
    (w,) = forecaster.apply(first, forecaster.policy.decide(first)).waiting
    assert w.predicted_start == 200.0
    early = Snapshot(
        now=50.0,
        pending=(job("a", gpus=2),),
        nodes=(NodeState(two, 1, running=("r",)),),
        estimates=estimates,
        running={"r": running["r"]},
    )
    (w,) = forecaster.apply(early, forecaster.policy.decide(early)).waiting
    assert w.predicted_start == 100.0
    assert w.moved == "s ended earlier than predicted"


def test_the_last_look_is_reused_while_the_state_is_the_one_it_predicted():
    forecaster = Forecaster(make_policy("greedy"))
    runtimes = {"r": (100.0, 0.0), "a": (50.0, 0.0), "b": (50.0, 0.0)}
    first = snapshot(0.0, (job("a"), job("b")), {"r": holding(100.0)}, runtimes)
    forecaster.apply(first, forecaster.policy.decide(first))
    at_end = snapshot(100.0, (job("a"), job("b")), {}, runtimes)  # r ended when predicted
    (w,) = forecaster.apply(at_end, forecaster.policy.decide(at_end)).waiting
    assert (w.job_id, w.predicted_start, w.moved) == ("b", 150.0, "")
    assert forecaster.looks == 1


class Counting:
    """A production policy that counts its decisions (how often the forward look asks it)."""

    def __init__(self, name: str) -> None:
        # greedy as it takes the queue in order (a job that waits for a faster type books cards: then the
        # look asks about every job, Traits)
        self.policy = make_policy(name, **({"wait_for_faster": "false"} if name == "greedy" else {}))
        self.name = self.policy.name
        self.traits = self.policy.traits
        self.decided = 0

    def decide(self, snap: Snapshot):
        self.decided += 1
        return self.policy.decide(snap)


def predictions(forecaster: Forecaster, snap: Snapshot) -> dict[str, tuple]:
    decision = forecaster.apply(snap, forecaster.policy.policy.decide(snap))
    return {w.job_id: (w.predicted_start, w.start_low, w.start_high, w.moved) for w in decision.waiting}


@pytest.mark.parametrize(
    ("policy", "runtime", "asked"),
    [("greedy", 30.0, 1), ("fifo", 30.0, 1), ("sjf", 80.0, 4), ("sjf", 30.0, 4)],
)
def test_an_arrival_is_looked_at_from_where_it_could_start_and_predicts_as_a_fresh_look(
    policy, runtime, asked
):
    runtimes = {"r": (100.0, 0.1), "a": (50.0, 0.1), "b": (60.0, 0.1), "c": (runtime, 0.1)}
    first = snapshot(0.0, (job("a"), job("b")), {"r": holding(100.0)}, runtimes)
    later = snapshot(10.0, (job("a"), job("b"), job("c")), {"r": holding(100.0)}, runtimes)
    fresh = Forecaster(Counting(policy))
    expected = predictions(fresh, later)
    following = Forecaster(Counting(policy))
    predictions(following, first)
    following.policy.decided = 0
    got = predictions(following, later)
    assert {j: p[:3] for j, p in got.items()} == {j: p[:3] for j, p in expected.items()}
    assert following.followed == 1 and following.policy.decided == asked


def test_a_capped_forecaster_does_not_look_again_until_its_share_of_the_time_has_passed(monkeypatch):
    """With `max_share`, a look that cost 1 s is not repeated for 1 / share seconds: the jobs it saw keep
    their predictions, a job that arrived since has none yet; then the next look predicts it."""
    wall = [100.0]
    monkeypatch.setattr(forecast.time, "monotonic", lambda: wall[0])
    real_look = forecast.look

    def costly(*args, **kwargs):
        wall[0] += 1.0  # every look costs one second of wall time
        return real_look(*args, **kwargs)

    monkeypatch.setattr(forecast, "look", costly)
    forecaster = Forecaster(make_policy("fifo"), max_share=0.25)
    runtimes = {"r": (100.0, 0.0), "a": (50.0, 0.0), "b": (50.0, 0.0)}

    def starts(pending: tuple[JobSpec, ...]) -> dict[str, float | None]:
        snap = snapshot(0.0, pending, {"r": holding(100.0)}, runtimes)
        return {
            w.job_id: w.predicted_start
            for w in forecaster.apply(snap, forecaster.policy.decide(snap)).waiting
        }

    assert starts((job("a"),)) == {"a": 100.0}
    wall[0] += 1.0  # 2 s after the look began: within the 4 s a 25% share of a 1 s look allows
    assert starts((job("a"), job("b"))) == {"a": 100.0, "b": None}
    assert forecaster.looks == 1
    wall[0] += 3.0
    assert starts((job("a"), job("b"))) == {"a": 100.0, "b": 150.0}
    assert forecaster.looks == 2
