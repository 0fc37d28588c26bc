"""What the scheduler does with finished and failed copies: the migrated image, pinned by digest, is what
gets submitted; bytes and seconds are recorded; a copy that keeps failing fails the job."""

from __future__ import annotations

from config.settings import ClustersConfig
from cpn.adapters.migrator import MigrationDone
from cpn.clock import SimClock
from cpn.engine.scheduler import MAX_MIGRATION_FAILURES, Scheduler
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.inventory import Node
from cpn.jobs import JobSpec, JobState
from cpn.policies import make_policy
from cpn.sim.estimates import OracleEstimates
from cpn.sim.gateway import SimulatedGateway
from cpn.sim.truth import GroundTruth
from cpn.store import JobStore
from cpn.transfer import TransferTimes

TABLE = ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", 1, 1.0)])


def one_card_sites(wan_gbps: dict[str, dict[str, float]], cpu_cores: int = 4) -> ClustersConfig:
    """Sites of one one-card V100 node each, one per name in `wan_gbps`, with that WAN between them."""
    names = sorted({*wan_gbps, *(dst for row in wan_gbps.values() for dst in row)})
    group = {
        "name": "g",
        "gpu_product": "v100",
        "gpus_per_node": 1,
        "gpu_memory_gb": 16,
        "cpu_cores": cpu_cores,
    }
    return ClustersConfig.model_validate(
        {"clusters": [{"name": c, "node_groups": [group]} for c in names], "wan_gbps": wan_gbps}
    )


CLUSTERS = one_card_sites({"a": {"b": 10}})
PINNED = "registry.b:5000/team/train@sha256:" + "ab" * 32


class ScriptedMigrator:
    """A migrator whose copies end as the test says, at the next poll."""

    def __init__(self, outcome) -> None:
        self.outcome = outcome
        self.started: list[tuple[str, str, str]] = []
        self._done: list[MigrationDone] = []

    def start(self, job, src, dst, started_at=None) -> None:
        self.started.append((job.job_id, src, dst))
        self._done.append(self.outcome(job.job_id, dst))

    def poll(self):
        done, self._done = self._done, []
        return done


class RecordingGateway(SimulatedGateway):
    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.submitted: list[JobSpec] = []

    def submit(self, job, placement) -> None:
        super().submit(job, placement)
        self.submitted.append(job)


def setup(outcome):
    clock = SimClock()
    store = JobStore(":memory:", clock=clock)
    node = Node("b", "b-0", "v100", 1, 16, 4, "training")  # only cluster b has a card
    gateway = RecordingGateway([node], GroundTruth(TABLE), clock)
    migrator = ScriptedMigrator(outcome)
    scheduler = Scheduler(
        store,
        gateway,
        make_policy("greedy"),
        clock,
        estimator=OracleEstimates(TABLE),
        transfers=TransferTimes(CLUSTERS),
        migrator=migrator,
    )
    job = JobSpec(
        job_id="ns/j",
        model="ResNet-18",
        batch_size=32,
        total_steps=10,
        image="registry.a:5000/team/train:v1",
        source_cluster="a",
    )
    store.submit([job])
    return store, gateway, migrator, scheduler


def test_a_migrated_job_runs_the_copied_image_pinned_by_digest():
    store, gateway, migrator, scheduler = setup(
        lambda job_id, dst: MigrationDone(job_id, dst, 1.0, image=PINNED, bytes=52_000_000, seconds=4.2)
    )
    scheduler.round()
    assert migrator.started == [("ns/j", "a", "b")]
    assert store.get("ns/j").state == JobState.MIGRATING
    scheduler.round()
    assert [j.image for j in gateway.submitted] == [PINNED]
    record = store.get("ns/j")
    assert record.state == JobState.SUBMITTED and record.image == PINNED and record.location == "b"
    reasons = [t.reason for t in store.history("ns/j")]
    assert f"migrated to b (52000000 bytes in 4.2 s, {PINNED})" in reasons


def test_a_copy_that_keeps_failing_requeues_then_fails_the_job_and_never_submits_it():
    store, gateway, migrator, scheduler = setup(
        lambda job_id, dst: MigrationDone(job_id, dst, 1.0, ok=False, reason="registry unreachable")
    )
    for _ in range(2 * MAX_MIGRATION_FAILURES + 2):
        scheduler.round()
    assert store.get("ns/j").state == JobState.FAILED
    assert len(migrator.started) == MAX_MIGRATION_FAILURES
    assert gateway.submitted == []
    assert store.history("ns/j")[-1].reason == "migration failed to b: registry unreachable"
