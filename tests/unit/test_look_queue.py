"""The forward look asks a policy only about the jobs its declared traits say its decision depends on
(cpn.engine.look_queue): on generated queues its predicted starts are those of a look that asks the
policy about the whole queue at every simulated end."""

from __future__ import annotations

import random

import pytest

from cpn.decisions import Decision, Estimate, RunningJob, Snapshot
from cpn.engine.forecast import look
from cpn.engine.look_queue import LookQueue
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.policies import make_policy
from cpn.policies.base import Traits

TYPES = (("Tesla-V100-SXM2-16GB", 16.0, 8), ("Tesla-K80", 12.0, 4), ("Tesla-P100-PCIE-16GB", 16.0, 8))


class WholeQueue:
    """A policy that declares nothing of itself: the look asks it about the whole queue at every end."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.name = policy.name
        self.traits = Traits()

    def decide(self, snapshot: Snapshot) -> Decision:
        return self.policy.decide(snapshot)


def generated(seed: int, jobs: int = 120) -> Snapshot:
    """A random busy cluster and queue: gangs wider than a node, shared cards, priorities, memory and
    CPU limits, GPU types some jobs have no estimate for, transfers between two clusters."""
    rng = random.Random(seed)
    nodes, running = [], {}
    for i in range(12):
        product, memory, cards = TYPES[i % 3]
        node = Node(f"c{i % 2}", f"n{i}", product, cards, memory, 32, "hybrid" if i % 4 else "training")
        busy = rng.randint(0, cards)
        if busy:
            running[f"r{i}"] = RunningJob(rng.uniform(10, 3000), ((node.key, busy),))
        nodes.append(NodeState(node, cards - busy, cpu_used=2.0 * busy, running=(f"r{i}",) if busy else ()))
    pending, estimates, transfer = [], {}, {}
    for i in range(jobs):
        sharing = rng.random() < 0.1
        job = JobSpec(
            job_id=f"j{i:03d}",
            model="ResNet-18",
            num_gpus=1 if sharing else rng.choice((1, 1, 1, 2, 4, 8, 12)),
            gpu_share=0.5 if sharing else None,
            cpu=rng.choice((1.0, 2.0, 4.0, 8.0)),
            gpu_mem_gb=rng.uniform(2.0, 15.0),
            priority=rng.choice((0, 0, 0, 1)),
        )
        pending.append(job)
        types = [t for t, _, _ in TYPES if rng.random() < 0.8] or [TYPES[0][0]]
        estimates[job.job_id] = {
            nodes[k].node.gpu_type: Estimate(rng.uniform(50, 5000), uncertainty=0.2)
            for k, (t, _, _) in enumerate(TYPES)
            if t in types
        }
        transfer[job.job_id] = {"c0": rng.choice((0.0, 30.0)), "c1": rng.choice((0.0, 60.0))}
    return Snapshot(
        now=0.0,
        pending=tuple(pending),
        nodes=tuple(nodes),
        estimates=estimates,
        transfer_s=transfer,
        running=running,
        explain=False,
    )


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", ["fifo", "fifo-naive", "greedy", "sjf"])
def test_asking_about_part_of_the_queue_predicts_what_asking_about_all_of_it_does(name, seed):
    snap = generated(seed)
    policy = make_policy(name)
    decision = policy.decide(snap)
    got = look(policy, snap, decision).forecasts
    expected = look(WholeQueue(policy), snap, decision).forecasts
    assert len({f.start for f in expected.values()}) >= 10  # jobs start at many simulated ends
    assert got == expected


def test_a_part_is_asked_in_rank_order_and_only_of_the_jobs_after_the_last_part():
    jobs = tuple(
        JobSpec(job_id=f"j{i}", model="m", num_gpus=1 + i % 2, priority=1 if i in (3, 4) else 0)
        for i in range(6)
    )
    queue = LookQueue(Snapshot(now=0.0, pending=jobs, nodes=()))
    first = queue.part(None, 3, None)
    assert [j.job_id for j in first] == ["j3", "j4", "j0"]
    queue.drop("j4")
    rest = queue.part(queue.rank["j0"], 10, None)
    assert [j.job_id for j in rest] == ["j1", "j2", "j5"]
    assert [j.job_id for j in queue.whole()] == ["j0", "j1", "j2", "j3", "j5"]
