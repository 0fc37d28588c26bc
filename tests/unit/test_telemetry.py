"""cpn's own metrics (cpn.telemetry) on literal data: names as Prometheus asks, jobs per state, namespace
and waiting reason, cards, health, the lease, waits and prediction errors, submissions and copies."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cpn.adapters.gateway import SubmitRejected
from cpn.adapters.migrator import MigrationDone
from cpn.clock import SimClock
from cpn.decisions import Placement, Waiting
from cpn.engine.scheduler import RoundResult
from cpn.jobs import JobSpec, JobState
from cpn.store import JobStore
from cpn.telemetry import CountingGateway, CountingMigrator, Telemetry
from cpn.ui.capacity import CardCounts

SPEC = JobSpec(job_id="lab/a", model="ResNet-50", num_gpus=2, epochs=3, manifest="name: a\n")
ROUND = RoundResult(
    time=0.0,
    events=0,
    placed=0,
    migrating=0,
    rejected=0,
    submit_refused=0,
    pending_after=0,
    stage_s=(("collect", 0.002), ("decide", 0.3)),
)


@pytest.fixture
def clock() -> SimClock:
    return SimClock(100.0)


@pytest.fixture
def store(tmp_path, clock):
    with JobStore(tmp_path / "jobs.db", clock) as s:
        yield s


def value(t: Telemetry, name: str, **labels: str) -> float | None:
    return t.registry.get_sample_value(name, labels)


def test_names_follow_prometheus_conventions(store):
    t = Telemetry(store)
    t.after_round(ROUND, [CardCounts("c1", "V100", 3, 1, 0)], {"c1": "ok"})
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(t.registry).decode())}
    assert all(name.startswith("cpn_") for name in families)
    for f in families.values():
        if f.type == "counter":  # the parser drops the suffix; the exposition carries it
            assert all(s.name.endswith("_total") for s in f.samples if not s.name.endswith("_created"))
        if f.type == "histogram":
            assert f.name.endswith("_seconds"), f.name
    assert "job_id" not in {label for f in families.values() for s in f.samples for label in s.labels}


def test_jobs_by_state_namespace_and_reason(store):
    store.submit([SPEC, replace(SPEC, job_id="lab/b"), replace(SPEC, job_id="ops/c")])
    store.set_waiting([Waiting("lab/a", "capacity", "no free V100"), Waiting("lab/b", "capacity")])
    store.transition("ops/c", JobState.SCHEDULE_FAILED, reason="too big")
    t = Telemetry(store)
    assert value(t, "cpn_jobs", state="queued", namespace="lab", reason="capacity") == 2
    assert value(t, "cpn_jobs", state="schedule-failed", namespace="ops", reason="") == 1
    assert value(t, "cpn_jobs", state="queued", namespace="ops", reason="") is None


def test_cards_health_and_stage_durations_as_the_round_published_them(store):
    t = Telemetry(store)
    assert value(t, "cpn_gpus", cluster="c1", gpu_type="V100", status="free") is None  # before a round
    t.after_round(ROUND, [CardCounts("c1", "V100", 3, 4, 1)], {"c1": "degraded"})
    assert value(t, "cpn_gpus", cluster="c1", gpu_type="V100", status="free") == 3
    assert value(t, "cpn_gpus", cluster="c1", gpu_type="V100", status="used") == 4
    assert value(t, "cpn_gpus", cluster="c1", gpu_type="V100", status="unusable") == 1
    assert value(t, "cpn_cluster_metrics_health", cluster="c1", health="degraded") == 1
    assert value(t, "cpn_cluster_metrics_health", cluster="c1", health="ok") == 0
    assert value(t, "cpn_round_stage_duration_seconds_count", stage="decide") == 1
    assert value(t, "cpn_round_stage_duration_seconds_sum", stage="decide") == pytest.approx(0.3)
    assert value(t, "cpn_round_stage_duration_seconds_bucket", stage="decide", le="0.25") == 0
    assert value(t, "cpn_rounds_total") == 1


def test_leader_only_while_this_process_holds_an_unexpired_lease(store):
    assert value(Telemetry(store, "host:1:cpn run"), "cpn_leader") == 0
    term = store.acquire_lease("host:1:cpn run", 60.0)
    assert value(Telemetry(store, "host:1:cpn run"), "cpn_leader") == 1
    assert value(Telemetry(store, "host:2:cpn run"), "cpn_leader") == 0
    store.release_lease("host:1:cpn run", term)
    assert value(Telemetry(store, "host:1:cpn run"), "cpn_leader") == 0


def test_a_start_observes_its_wait_and_its_first_predictions_error_once(store, clock):
    store.submit([SPEC])  # accepted at 100
    t = Telemetry(store)
    store.set_waiting([Waiting("lab/a", "capacity", predicted_start=400.0)])
    store.set_waiting([Waiting("lab/a", "capacity", predicted_start=900.0)])  # the first one counts
    store.transition("lab/a", JobState.ASSIGNED, cluster="c1", node="n1", placement=(("n1", 2),))
    store.transition("lab/a", JobState.SUBMITTED)
    store.transition("lab/a", JobState.RUNNING, at=1000.0)
    t.after_round(ROUND, [])
    t.after_round(ROUND, [])
    assert value(t, "cpn_job_wait_seconds_count", namespace="lab", gpus="2") == 1
    assert value(t, "cpn_job_wait_seconds_sum", namespace="lab", gpus="2") == 900.0
    assert value(t, "cpn_predicted_start_error_seconds_sum") == 600.0


def test_starts_before_the_telemetry_existed_are_not_observed(store):
    store.submit([SPEC])
    store.transition("lab/a", JobState.ASSIGNED, cluster="c1", node="n1", placement=(("n1", 2),))
    store.transition("lab/a", JobState.SUBMITTED)
    store.transition("lab/a", JobState.RUNNING, at=500.0)
    t = Telemetry(store)
    t.after_round(ROUND, [])
    assert value(t, "cpn_job_wait_seconds_count", namespace="lab", gpus="2") is None


class Gateway:
    """Refuses what `refuse` names, transiently or for good; accepts the rest."""

    def __init__(self, refuse: dict[str, bool]) -> None:
        self.refuse = refuse
        self.clusters = ("c1", "c2")

    def submit(self, spec: JobSpec, placement: Placement) -> None:
        if spec.job_id in self.refuse:
            refused = SubmitRejected("no room")
            refused.transient = self.refuse[spec.job_id]
            raise refused


def test_submissions_are_counted_per_cluster_and_outcome(store):
    t = Telemetry(store)
    gateway = CountingGateway(Gateway({"lab/b": True, "lab/c": False}), t.ports)
    gateway.submit(SPEC, Placement("lab/a", "c1", "n1", 2))
    for name in ("b", "c"):
        with pytest.raises(SubmitRejected):
            gateway.submit(replace(SPEC, job_id=f"lab/{name}"), Placement(f"lab/{name}", "c2", "n1", 2))
    assert gateway.clusters == ("c1", "c2")  # everything else passes through
    assert value(t, "cpn_submissions_total", cluster="c1", outcome="accepted") == 1
    assert value(t, "cpn_submissions_total", cluster="c2", outcome="refused") == 1
    assert value(t, "cpn_submissions_total", cluster="c2", outcome="failed") == 1


class Migrator:
    def __init__(self, done: list[MigrationDone]) -> None:
        self.done, self.started = done, []

    def start(self, job: JobSpec, src: str, dst: str, started_at: float | None = None) -> None:
        self.started.append((job.job_id, src, dst))

    def poll(self) -> list[MigrationDone]:
        done, self.done = self.done, []
        return done


def test_copies_count_bytes_seconds_and_failures_per_destination(store):
    t = Telemetry(store)
    done = [
        MigrationDone("lab/a", "c2", 5.0, bytes=1000, seconds=2.5),
        MigrationDone("lab/b", "c2", 6.0, bytes=0, seconds=0.1),
        MigrationDone("lab/c", "c2", 7.0, ok=False, reason="registry down"),
        MigrationDone("lab/d", "c1", 8.0),  # simulated: nothing measured
    ]
    inner = Migrator(done)
    migrator = CountingMigrator(inner, t.ports)
    migrator.start(SPEC, "c1", "c2")
    assert inner.started == [("lab/a", "c1", "c2")]
    assert migrator.poll() == done
    assert value(t, "cpn_image_copy_bytes_total", cluster="c2") == 1000
    assert value(t, "cpn_image_copy_duration_seconds_count", cluster="c2") == 2
    assert value(t, "cpn_image_copy_failures_total", cluster="c2") == 1
    assert value(t, "cpn_image_copy_bytes_total", cluster="c1") is None
