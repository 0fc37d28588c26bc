"""Clusters at run time: the cluster set lives in the store, and `cpn cluster add|cordon|uncordon|remove` (or
the API, for a token for every namespace) changes it for the live service's next round, with no restart."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from cli import main
from config.settings import ClustersConfig
from cpn.api import create_app
from cpn.auth import ApiSecurity, Authenticator, create_token
from cpn.bootstrap import Service, build_service
from cpn.engine.live import LiveLoop
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.jobs import ON_CLUSTER, JobSpec, JobState
from cpn.sim.estimates import OracleEstimates
from cpn.store import JobStore

TABLE = ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", 1, 1.0)])
V100 = {"gpu_product": "Tesla-V100-SXM2-16GB", "gpus_per_node": 1, "gpu_memory_gb": 16, "cpu_cores": 8}


def cluster(name: str, nodes: int = 1, **wan: float) -> dict:
    """A simulated cluster of `nodes` one-card V100 nodes, with its links to the clusters in `wan`."""
    return {"name": name, "node_groups": [{"name": f"{name}-n", "count": nodes, **V100}], "wan_gbps": wan}


CONFIG = ClustersConfig.model_validate(
    {
        "clusters": [
            {k: v for k, v in cluster(n, nodes=2).items() if k != "wan_gbps"} for n in ("a", "b", "c")
        ],
        "wan_gbps": {"a": {"b": 10, "c": 10}, "b": {"c": 10}},
    }
)
FOURTH = cluster("d", nodes=3, a=10, b=10, c=10)
"""The cluster added during the run: three more cards."""


class Wall:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def jobs(n: int) -> list[JobSpec]:
    """`n` one-card jobs that run for 10,000 simulated seconds: none ends during the test."""
    return [JobSpec(f"ns/j{i}", "ResNet-18", batch_size=32, num_gpus=1, total_steps=10_000) for i in range(n)]


def service(store: Path, wall: Wall) -> Service:
    built = build_service(
        CONFIG, store, "greedy", TABLE, estimator=OracleEstimates(TABLE), time_scale=1.0, wall=wall
    )
    built.start()
    return built


def rounds(svc: Service, wall: Wall, n: int) -> None:
    loop = LiveLoop(svc.scheduler, 1.0, simulation=svc.driver)
    for _ in range(n):
        wall.t += 1.0
        loop.run_once()


def placed_on(store: JobStore) -> dict[str, str | None]:
    return {r.job_id: r.cluster for r in store.jobs()}


def cli(store: Path, *args: str) -> int:
    """`cpn cluster ARGS` on `store`, whose set (if it has none yet) is CONFIG's."""
    config = store.parent / "config"
    config.mkdir(exist_ok=True)
    (config / "clusters.yaml").write_text(yaml.safe_dump(CONFIG.model_dump(mode="json")))
    return main(["cluster", "--store", str(store), "--config", str(config), *args])


def test_a_fourth_cluster_added_during_a_run_takes_queued_jobs_within_two_rounds(tmp_path, capsys):
    wall, store_path = Wall(), tmp_path / "jobs.db"
    svc = service(store_path, wall)
    svc.store.submit(jobs(8))
    rounds(svc, wall, 1)
    assert sorted(c for c in placed_on(svc.store).values() if c) == ["a", "a", "b", "b", "c", "c"]  # two wait
    (tmp_path / "d.yaml").write_text(yaml.safe_dump(FOURTH))
    assert cli(store_path, "add", str(tmp_path / "d.yaml")) == 0
    assert "added cluster d" in capsys.readouterr().out
    rounds(svc, wall, 2)
    assert sorted(placed_on(svc.store).values()) == ["a", "a", "b", "b", "c", "c", "d", "d"]
    assert {r.state for r in svc.store.jobs()} == {JobState.RUNNING}
    svc.close()


def test_a_cordoned_cluster_gets_no_new_jobs_from_the_next_round_and_keeps_its_running_ones(tmp_path):
    wall, store_path = Wall(), tmp_path / "jobs.db"
    svc = service(store_path, wall)
    svc.store.submit(jobs(1))
    rounds(svc, wall, 1)
    (first,) = placed_on(svc.store).values()
    assert cli(store_path, "cordon", first) == 0
    svc.store.submit(jobs(6)[1:])
    rounds(svc, wall, 1)
    records = svc.store.jobs()
    assert [r.cluster for r in records].count(first) == 1, "only the job placed before the cordon"
    assert records[0].state == JobState.RUNNING
    assert sum(r.state == JobState.QUEUED for r in records) == 1  # five jobs, four cards off the cordon
    assert cli(store_path, "uncordon", first) == 0
    rounds(svc, wall, 1)
    assert all(r.state in ON_CLUSTER for r in svc.store.jobs())
    assert [r.cluster for r in svc.store.jobs()].count(first) == 2
    svc.close()


def test_a_removed_cluster_must_be_drained_or_its_jobs_are_lost_and_queued_again(tmp_path, capsys):
    wall, store_path = Wall(), tmp_path / "jobs.db"
    svc = service(store_path, wall)
    svc.store.submit(jobs(1))
    rounds(svc, wall, 1)
    (where,) = placed_on(svc.store).values()
    assert cli(store_path, "remove", where) == 2
    assert f"cluster '{where}' has 1 job(s) on it" in capsys.readouterr().err
    assert [r.name for r in svc.store.clusters()] == ["a", "b", "c"]
    assert cli(store_path, "remove", where, "--force") == 0
    rounds(svc, wall, 1)
    (record,) = svc.store.jobs()
    assert record.state in ON_CLUSTER and record.cluster not in (where, None)
    lost = [t for t in svc.store.history("ns/j0") if t.to_state == JobState.QUEUED and t.from_state]
    assert [t.reason for t in lost] == [
        f"lost: its cluster {where} was removed while it was there; queued again"
    ]
    assert where not in svc.gateway.clusters
    assert svc.simulator is not None and svc.simulator.running_jobs() == ("ns/j0",), "deleted where it was"
    svc.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cordon", "nope"), "no cluster 'nope'; known: a, b, c"),
        (("remove", "nope"), "no cluster 'nope'"),
        (("add", "{file}"), "node_groups.0.gpus_per_node: Input should be greater than or equal to 1"),
        (("add", "{missing_link}"), "wan_gbps has no bandwidth for c->e"),
        (("add", "{same_name}"), "name: cluster 'a' exists already"),
        (("add", "{no_file}"), "cannot read"),
    ],
)
def test_bad_input_gets_a_clear_error_and_changes_nothing(tmp_path, capsys, args, message):
    store_path = tmp_path / "jobs.db"
    files = {
        "file": {**cluster("e", a=1, b=1, c=1), "node_groups": [{"name": "x", **V100, "gpus_per_node": 0}]},
        "missing_link": cluster("e", a=1, b=1),
        "same_name": cluster("a", b=1, c=1),
    }
    for name, data in files.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(data))
    paths = {name: str(tmp_path / f"{name}.yaml") for name in [*files, "no_file"]}
    assert cli(store_path, "list") == 0
    with JobStore(store_path) as store:
        before = (store.clusters(removed=True), store.clusters_version())
    assert cli(store_path, *(a.format(**paths) for a in args)) == 2
    assert message in capsys.readouterr().err
    with JobStore(store_path) as store:
        assert (store.clusters(removed=True), store.clusters_version()) == before


def test_the_last_cluster_cannot_be_removed(tmp_path, capsys):
    store_path = tmp_path / "jobs.db"
    assert cli(store_path, "remove", "a") == 0
    assert cli(store_path, "remove", "b") == 0
    assert cli(store_path, "remove", "c") == 2
    assert "cluster 'c' is the last one" in capsys.readouterr().err
    with JobStore(store_path) as store:
        assert [r.name for r in store.clusters()] == ["c"]


def test_the_api_changes_the_set_with_a_token_for_every_namespace_and_refuses_a_namespace_token(tmp_path):
    tokens = tmp_path / "tokens.yaml"
    admin, team = (
        {"authorization": f"Bearer {create_token(tokens, n, ns)}"} for n, ns in (("op", ["*"]), ("t", ["ns"]))
    )
    security = ApiSecurity(Authenticator(tokens), allowed_hosts=frozenset({"testserver"}))
    with JobStore(tmp_path / "jobs.db") as store:
        build_service(CONFIG, tmp_path / "jobs.db", "greedy", TABLE, time_scale=1.0).close()  # seeds the set
        client = TestClient(create_app(store, security=security))
        body = yaml.safe_dump(FOURTH)
        assert client.post("/clusters", content=body, headers=team).status_code == 403
        assert client.post("/clusters/a/cordon", headers=team).status_code == 403
        assert client.delete("/clusters/a", headers=team).status_code == 403
        assert client.get("/clusters", headers=team).status_code == 403
        assert [r.name for r in store.clusters()] == ["a", "b", "c"]
        assert client.post("/clusters", content=body, headers=admin).status_code == 201
        assert client.post("/clusters", content=body, headers=admin).status_code == 422
        assert client.post("/clusters/a/cordon", headers=admin).json() == {
            "name": "a",
            "state": "cordoned",
            "changed": True,
        }
        assert client.post("/clusters/zz/cordon", headers=admin).status_code == 404
        assert client.delete("/clusters/b", headers=admin).json() == {
            "name": "b",
            "state": "removed",
            "lost": 0,
        }
        listed = client.get("/clusters", headers=admin).json()["clusters"]
        assert [(c["name"], c["state"]) for c in listed] == [
            ("a", "cordoned"),
            ("c", "active"),
            ("d", "active"),
        ]
