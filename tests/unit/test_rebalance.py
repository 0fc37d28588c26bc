"""Re-balancing for makespan (issue #21, cpn.policies.rebalance) on literal snapshots: a running job that
checkpoints moves to a free faster card only when it gains more than one checkpoint interval there; the work
left at a running job's last checkpoint; an urgent queued job starts on the fast type before the inner
policy's choice, and with `preemption=true` stops only a running job that checkpoints and can afford it."""

from __future__ import annotations

import math
from types import MappingProxyType

import pytest

from cpn.decisions import Estimate, Placement, RunningJob, Snapshot
from cpn.inventory import NodeState
from cpn.policies import make_policy
from cpn.policies.rebalance import RebalancingPolicy
from tests.unit.test_policies import job, node, snap, state

SLOW = node("k0", gpu="k80", gpus=1)
FAST = node("v0", gpu="v100", gpus=1)
INTERVAL = 360.0


def estimates(**runtimes: float) -> MappingProxyType:
    return MappingProxyType({gpu: Estimate(t) for gpu, t in runtimes.items()})


def on(n, job_id: str, started: float, runtimes: dict[str, float], **kw) -> RunningJob:
    """`job_id` running alone on node `n` since `started` (a first run), its end predicted by `runtimes`."""
    gpu = n.gpu_type
    kw.setdefault("checkpoint_interval_s", INTERVAL)
    return RunningJob(
        started + runtimes[gpu],
        ((n.key, 1),),
        started,
        gpu_type=gpu,
        estimates=estimates(**runtimes),
        spec=job(job_id),
        **kw,
    )


def moving(fast_s: float, **kw) -> Snapshot:
    """At 1,000 s: job r on the slow card since 0 (10,000 s there), nothing queued, the fast card free."""
    r = on(SLOW, "r", 0.0, {"k80": 10_000.0, "v100": fast_s}, **kw)
    nodes = (state(FAST), NodeState(SLOW, 0, running=("r",)))
    return Snapshot(now=1000.0, pending=(), nodes=nodes, running=MappingProxyType({"r": r}))


def rebalancing(name: str = "fifo", **settings: str) -> RebalancingPolicy:
    policy = make_policy(name, rebalance="true", **settings)
    assert isinstance(policy, RebalancingPolicy)
    return policy


def test_a_job_on_a_slow_card_moves_to_a_free_faster_one():
    """At 1,000 s with checkpoints every 360 s, r kept 720 s of its 10,000 s on the K80 (92.8% left): on the
    V100 (2,000 s whole) it ends at 1,000 + 60 restart + 0.928 * 2,000 = 2,916 s instead of 10,000 s. The move
    is its preemption for itself and its placement on the fast card, in one decision."""
    decision = rebalancing().decide(moving(fast_s=2000.0))
    (stop,) = decision.preemptions
    assert (stop.job_id, stop.for_job, stop.cards) == ("r", "r", ((SLOW.key, 1),))
    assert stop.lost_gpu_hours == pytest.approx(280 / 3600)  # trained 1,000 s, kept 720 s
    assert decision.placements == (Placement("r", FAST.cluster, FAST.name, 1),)


@pytest.mark.parametrize(
    ("fast_s", "moves"),
    [
        (9000.0, True),  # ends at 1,060 + 0.928 * 9,000 = 9,412: 588 s sooner than 10,000
        (9300.0, False),  # ends at 1,060 + 0.928 * 9,300 = 9,690.4: only 309.6 s sooner, under 360 s
    ],
)
def test_a_move_must_gain_more_than_one_checkpoint_interval(fast_s, moves):
    decision = rebalancing().decide(moving(fast_s=fast_s))
    assert [(p.job_id, p.for_job) for p in decision.preemptions] == ([("r", "r")] if moves else [])
    assert [p.node for p in decision.placements] == (["v0"] if moves else [])


@pytest.mark.parametrize(
    "kw",
    [{"checkpoint_interval_s": None}, {"preemptible": False}],
    ids=["never-checkpoints", "not-preemptible"],
)
def test_no_move_without_checkpoints_or_for_a_job_marked_not_preemptible(kw):
    assert rebalancing().decide(moving(fast_s=2000.0)).preemptions != ()  # the same job, else, moves
    decision = rebalancing().decide(moving(fast_s=2000.0, **kw))
    assert (decision.preemptions, decision.placements) == ((), ())


def test_left_at_checkpoint_counts_the_restart_and_keeps_whole_intervals():
    """A resumed run (half the work left, 60 s of restart) started at 100 s, checkpointing every 300 s, on a
    type where the whole job takes 4,000 s: by 1,000 s it trained 840 s, of which 600 s are checkpointed."""
    run = RunningJob(
        math.inf,
        started=100.0,
        checkpoint_interval_s=300.0,
        left=0.5,
        restart_s=60.0,
        estimates=estimates(v100=4000.0, k80=math.inf),
    )
    assert run.left_at_checkpoint(1000.0, "v100") == pytest.approx(0.5 - 600 / 4000)
    assert run.left_at_checkpoint(759.0, "v100") == pytest.approx(0.5 - 300 / 4000)  # 599 s trained
    assert run.left_at_checkpoint(130.0, "v100") == 0.5  # still restoring: nothing trained yet
    assert run.left_at_checkpoint(1e6, "v100") == 0.0  # never below nothing left
    assert run.left_at_checkpoint(1000.0, "k80") is None  # no finite estimate there
    assert run.left_at_checkpoint(1000.0, "a100") is None  # no estimate there
    no_start = RunningJob(math.inf, checkpoint_interval_s=300.0, estimates=estimates(v100=4000.0))
    assert no_start.left_at_checkpoint(1000.0, "v100") is None
    never = RunningJob(math.inf, started=100.0, estimates=estimates(v100=4000.0))
    assert never.left_at_checkpoint(1000.0, "v100") is None


# --- urgent jobs ---------------------------------------------------------------------------------------


def urgent_snapshot() -> Snapshot:
    """Both cards free; `short` (100 s on the V100) queued before `long`, whose 1,000 s on the V100 are the
    makespan's bound by themselves: on the K80 (5,000 s) it would end far past it."""
    runtimes = {"short": {"v100": 100.0, "k80": 200.0}, "long": {"v100": 1000.0, "k80": 5000.0}}
    return snap([job("short"), job("long")], [state(FAST), state(SLOW)], runtimes)


@pytest.mark.parametrize("name", ["fifo", "greedy"])
def test_an_urgent_job_starts_on_the_fast_type_before_the_inner_policys_choice(name):
    s = urgent_snapshot()
    inner = {p.job_id: p.node for p in make_policy(name).decide(s).placements}
    assert inner["short"] == "v0"  # the inner policy alone gives `short` the V100
    placed = {p.job_id: p.node for p in rebalancing(name).decide(s).placements}
    assert placed == {"long": "v0", "short": "k0"}


def preempting_snapshot(victim: RunningJob) -> Snapshot:
    """At 1,000 s the V100 is held by `victim` (started at 0, checkpoints every 300 s, ends at 1,500 s), the
    K80 is free; `long` takes 2,000 s on the V100, 8,000 s on the K80, so the bound is 1,000 + 2,000 s and
    `long` must start on the V100 now. Stopped now, the victim keeps 900 of its 1,500 s (40% left)."""
    s = snap([job("long")], [state(SLOW)], {"long": {"v100": 2000.0, "k80": 8000.0}})
    nodes = (NodeState(FAST, 0, running=("victim",)), *s.nodes)
    return Snapshot(
        now=1000.0,
        pending=s.pending,
        nodes=nodes,
        estimates=s.estimates,
        running=MappingProxyType({"victim": victim}),
    )


def victim(k80_s: float = 3000.0, **kw) -> RunningJob:
    kw.setdefault("checkpoint_interval_s", 300.0)
    return on(FAST, "victim", 0.0, {"v100": 1500.0, "k80": k80_s}, **kw)


def test_with_preemption_an_urgent_job_stops_a_job_that_checkpoints_and_can_afford_it():
    """Restarted from its checkpoint even on the K80, the victim ends within the bound: 60 + 0.4 * 3,000 s."""
    decision = rebalancing(preemption="true").decide(preempting_snapshot(victim()))
    assert [(p.job_id, p.for_job, p.cards) for p in decision.preemptions] == [
        ("victim", "long", ((FAST.key, 1),))
    ]
    assert [(p.job_id, p.node) for p in decision.placements] == [("long", "v0")]


@pytest.mark.parametrize(
    "running",
    [
        victim(preemptible=False),
        victim(checkpoint_interval_s=None),
        victim(k80_s=6000.0),  # restarted on the K80 it would end past the bound: 60 + 0.4 * 6,000 s
    ],
    ids=["not-preemptible", "never-checkpoints", "cannot-afford"],
)
def test_an_urgent_job_never_stops_a_job_that_may_not_or_cannot_afford_to_stop(running):
    decision = rebalancing(preemption="true").decide(preempting_snapshot(running))
    assert decision.preemptions == ()
    assert "v0" not in {p.node for p in decision.placements}


def test_without_preemption_an_urgent_job_stops_nothing():
    decision = rebalancing().decide(preempting_snapshot(victim()))
    assert decision.preemptions == ()
    assert "v0" not in {p.node for p in decision.placements}


# --- gangs gather ------------------------------------------------------------------------------------


def gathering_snapshot(wide_v100_s: float) -> Snapshot:
    """At 1,000 s: V100 node va has 1 of its 2 cards free, the other held by `narrow` (checkpoints every
    360 s, since 0); V100 node vb has its one card free; the K80 node has 2 free; `anchor` (never
    checkpoints) holds V100 node vc until 100,000 s, so the bound is far and nothing queued is urgent. The
    2-card `wide` takes `wide_v100_s` on the V100s and 5,000 s on the K80: greedy alone starts it on the
    K80, the only node with 2 cards free."""
    va, vb, vc, k8 = node("va", gpus=2), node("vb", gpus=1), node("vc", gpus=1), node("k8", gpu="k80", gpus=2)
    narrow = on(va, "narrow", 0.0, {"v100": 10_000.0, "k80": 40_000.0})
    anchor = on(vc, "anchor", 0.0, {"v100": 100_000.0}, checkpoint_interval_s=None)
    s = snap([job("wide", gpus=2)], [], {"wide": {"v100": wide_v100_s, "k80": 5000.0}})
    nodes = (
        NodeState(va, 1, running=("narrow",)),
        state(vb),
        NodeState(vc, 0, running=("anchor",)),
        state(k8),
    )
    running = MappingProxyType({"narrow": narrow, "anchor": anchor})
    return Snapshot(now=1000.0, pending=s.pending, nodes=nodes, estimates=s.estimates, running=running)


def test_a_gang_started_on_a_slow_type_gathers_on_a_fast_node_that_a_narrow_job_moves_off():
    """`narrow` moves to vb's free V100 (losing 280 s since its last checkpoint and the 60 s restart) and
    `wide` takes va's two V100s: it saves (5,000 - 1,000) s on each of its 2 cards."""
    s = gathering_snapshot(wide_v100_s=1000.0)
    assert {p.job_id: p.node for p in make_policy("greedy").decide(s).placements} == {"wide": "k8"}
    decision = rebalancing("greedy").decide(s)
    assert {p.job_id: (p.node, p.num_gpus) for p in decision.placements} == {
        "wide": ("va", 2),
        "narrow": ("vb", 1),
    }
    (move,) = decision.preemptions
    assert (move.job_id, move.for_job, move.cards) == ("narrow", "narrow", (("a/va", 1),))


def test_a_gang_stays_on_the_slow_type_when_it_would_save_less_than_the_moves_lose():
    """On the V100s `wide` would save only 2 x 10 s, less than the 340 GPU-seconds `narrow` loses moving."""
    decision = rebalancing("greedy").decide(gathering_snapshot(wide_v100_s=4990.0))
    assert {p.job_id: p.node for p in decision.placements} == {"wide": "k8"}
    assert decision.preemptions == ()
