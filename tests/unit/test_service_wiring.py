"""What the composition root picks from settings: metrics where a cluster names a Prometheus (and the
fallback to inventory when it does not answer), real copies where every cluster names a registry; and what
an entrance hands it (counters at the ports, an observer of decisions, teams) is wired in as it builds."""

from __future__ import annotations

import logging

from config.settings import ClustersConfig
from cpn.adapters.registry import SkopeoMigrator
from cpn.bootstrap import build_service
from cpn.decisions import Team, Teams
from cpn.engine.live_load import MeasuredLoad
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.jobs import JobSpec, JobState
from cpn.sim.estimates import OracleEstimates
from cpn.sim.migrator import SimulatedMigrator
from cpn.telemetry import PortCounts

TABLE = ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", 1, 1.0)])


def clusters(**extra) -> ClustersConfig:
    group = {"name": "g", "gpu_product": "v100", "gpus_per_node": 2, "gpu_memory_gb": 16, "cpu_cores": 8}
    return ClustersConfig.model_validate(
        {
            "clusters": [{"name": c, "node_groups": [group], **extra} for c in ("a", "b")],
            "wan_gbps": {"a": {"b": 10}},
        }
    )


def test_an_unreachable_prometheus_means_inventory_alone_and_a_warning(tmp_path, caplog):
    config = clusters(prometheus_url="http://127.0.0.1:9")  # nothing listens on the discard port
    service = build_service(
        config, tmp_path / "jobs.db", "greedy", TABLE, estimator=OracleEstimates(TABLE), time_scale=1.0
    )
    assert isinstance(service.scheduler.node_load, MeasuredLoad)
    service.store.submit([JobSpec(job_id="ns/j", model="ResNet-18", batch_size=32, total_steps=10)])
    with caplog.at_level(logging.WARNING, logger="cpn.bootstrap"):
        service.scheduler.round()
    assert service.store.get("ns/j").state == JobState.SUBMITTED
    assert service.scheduler.node_load.health == {"a": "unknown", "b": "unknown"}
    assert "scheduling it on inventory alone" in caplog.text
    service.close()


def test_no_prometheus_means_no_metrics_source(tmp_path):
    service = build_service(clusters(), tmp_path / "jobs.db", "greedy", TABLE, time_scale=1.0)
    assert service.scheduler.node_load is None
    service.close()


def test_live_clusters_with_registries_copy_for_real_and_replays_never_do(tmp_path):
    config = clusters(registry="127.0.0.1:5000")
    live = build_service(config, tmp_path / "live.db", "greedy", TABLE, time_scale=1.0)
    replay = build_service(config, tmp_path / "replay.db", "greedy", TABLE)
    assert isinstance(live.migrator, SkopeoMigrator)
    assert isinstance(replay.migrator, SimulatedMigrator)
    assert isinstance(
        build_service(clusters(), ":memory:", "fifo", TABLE, time_scale=1.0).migrator, SimulatedMigrator
    )


def test_what_an_entrance_adds_is_wired_in_as_the_scheduler_is_built(tmp_path):
    # cpn run's counters at the ports, a recorder's observer, the config folder's teams: given to the root,
    # in place from the first round, with nothing set on the built scheduler
    counts, seen = PortCounts(), []
    teams = Teams((Team("a", quota=(("v100", 1),)),), namespaces={"ns": "a"})
    service = build_service(
        clusters(),
        ":memory:",
        "greedy",
        TABLE,
        estimator=OracleEstimates(TABLE),
        ports=counts,
        on_decision=lambda snapshot, decision: seen.append(len(decision.placements)),
        teams=teams,
    )
    service.store.submit([JobSpec(job_id="ns/j", model="ResNet-18", batch_size=32, total_steps=10)])
    service.scheduler.round()
    assert service.store.get("ns/j").state == JobState.SUBMITTED
    accepted = [
        counts.registry.get_sample_value("cpn_submissions_total", {"cluster": c, "outcome": "accepted"}) or 0
        for c in ("a", "b")
    ]
    assert sum(accepted) == 1
    assert seen == [1]
    assert service.scheduler.snapshot().teams is teams
    service.close()
