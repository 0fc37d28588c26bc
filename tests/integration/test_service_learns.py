"""The service learns by default: a store with no champion gets one trained on the throughput table, and
`cpn run`'s loop retrains after every N completed jobs in the background, so that the next rounds
estimate with the new champion, the jobs already queued included, without a restart; a champion promoted
by another process (the retrain deployment) serves from the next round.

A SQLite MLflow store and the job store in a temporary cpn home; simulated clusters on the wall clock."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import pytest
import yaml
from mlflow.tracking import MlflowClient

from cli.run import after_each_round, before_each_round, build
from config.benchmarks import BENCHMARKS_YAML
from config.settings import load_profile
from cpn.engine.live import LiveLoop
from cpn.formats.throughput import ThroughputTable
from cpn.jobs import JobSpec, JobState
from models.benchmarks import BenchmarkCatalog
from models.features import training_rows
from models.registry import REGISTERED_MODEL, ChampionLoader, champion_version, train_and_register
from models.sources import estimate_source
from tests.unit.test_predictor_support import rows, write_csv

pytestmark = pytest.mark.integration

OPTIMISM = 4.0
"""The champion the service starts with was trained on a table that has every card this much faster than
the simulated clusters' truth (another lab's table, say): completions teach the next one otherwise."""
CLUSTERS = {
    "clusters": [
        {
            "name": "lab",
            "node_groups": [
                {
                    "name": "v",
                    "gpu_product": "Tesla-V100-SXM2-16GB",
                    "gpus_per_node": 2,
                    "gpu_memory_gb": 16,
                    "cpu_cores": 16,
                }
            ],
        }
    ]
}


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh cpn home (job store, MLflow store) and a throughput table of the synthetic world."""
    monkeypatch.setenv("CPN_HOME", str(tmp_path))
    for var in ("CPN_STORE", "CPN_TRACKING_URI"):
        monkeypatch.delenv(var, raising=False)
    write_csv(tmp_path / "throughputs.csv", rows())
    return tmp_path


def test_a_store_without_a_champion_gets_one_trained_on_the_table_once(home):
    uri = f"sqlite:///{home / 'mlflow.db'}"
    table = ThroughputTable.load(home / "throughputs.csv")
    said: list[str] = []
    source = estimate_source("champion", table, tracking_uri=uri, progress=said.append)
    assert champion_version(uri) == "1"
    assert said[0] == f"no champion yet: training one on the throughput table ({uri}) ..."
    assert said[1].startswith("trained in ") and "first champion" in said[1]
    job = JobSpec(job_id="ns/a", model="ResNet-50", batch_size=32, total_steps=7000)
    assert source.estimates([job], ["v100"])["ns/a"]["v100"].runtime_s > 0
    estimate_source("champion", table, tracking_uri=uri, progress=said.append)
    assert len(said) == 2 and champion_version(uri) == "1", "a champion is there: nothing is trained"


def short(i: int) -> JobSpec:
    """70 steps/s on a V100 (the synthetic law): 100 simulated seconds."""
    return JobSpec(job_id=f"ns/short-{i}", model="ResNet-50", batch_size=32, total_steps=7_000)


def run_rounds(loop: LiveLoop, until, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline, "the loop did not get there in time"
        loop.run_once()
        time.sleep(0.02)


def test_cpn_run_retrains_after_n_completions_and_estimates_with_the_new_champion(home):
    config = home / "config"
    config.mkdir()
    (config / "clusters.yaml").write_text(yaml.safe_dump(CLUSTERS))
    (config / "loop.yaml").write_text("retrain_every_completions: 4\n")
    uri = f"sqlite:///{home / 'mlflow.db'}"
    table = ThroughputTable.load(home / "throughputs.csv")
    catalog = BenchmarkCatalog.load(BENCHMARKS_YAML)
    optimistic = [replace(r, steps_per_sec=r.steps_per_sec * OPTIMISM) for r in training_rows(table)]
    small = {"rf": {"n_estimators": 20}}
    (first,) = train_and_register(
        optimistic, catalog, estimators=["rf"], params=small, tracking_uri=uri, splits=()
    )
    assert first.version == "1"

    service, loop = _serve(config, home)
    try:
        store = service.store
        store.submit([short(i) for i in range(4)])
        run_rounds(loop, lambda: store.counts()[JobState.SUCCEEDED] == 4)
        # The round that saw the fourth completion started the retraining; meanwhile both cards go to a
        # long job, and a job queues behind it, estimated by the champion of the moment.
        long = JobSpec(job_id="ns/long", model="ResNet-50", batch_size=32, num_gpus=2, total_steps=10**9)
        queued = JobSpec(job_id="ns/queued", model="ResNet-50", batch_size=64, total_steps=7_000)
        store.submit([long])
        run_rounds(loop, lambda: store.get("ns/long").state == JobState.RUNNING)
        store.submit([queued])
        loop.run_once()
        serving = service.scheduler.estimator
        assert serving.last_good_version == "1", "the retraining is still under way"
        before = service.scheduler.snapshot().estimates["ns/queued"]["v100"].runtime_s
        assert before == pytest.approx(serving.last_good.estimate(queued, "v100").runtime_s)

        deadline = time.monotonic() + 120
        while champion_version(uri) == "1":
            assert time.monotonic() < deadline, "no new champion after the retraining"
            time.sleep(0.5)
        run_rounds(loop, lambda: serving.last_good_version == "2")
        loop.run_once()  # the round after the champion moved re-estimates the queue
        v2 = ChampionLoader(uri).load()
        view = service.scheduler.snapshot()
        assert store.get("ns/queued").state == JobState.QUEUED, "still waiting behind the long job"
        after = view.estimates["ns/queued"]["v100"].runtime_s
        assert after == pytest.approx(v2.estimate(queued, "v100").runtime_s)
        truth = 7_000 / 35.0  # the synthetic law: ResNet-50 at batch 64 on one V100, 35 steps/s
        assert before == pytest.approx(truth / OPTIMISM, rel=0.1) and after == pytest.approx(truth, rel=0.1)
    finally:
        service.close()

    client = MlflowClient(tracking_uri=uri)
    version = client.get_model_version(REGISTERED_MODEL, "2")
    run = client.get_run(version.run_id)
    assert run.data.tags["cpn.session"] == "service-retrain" and "cpn.completions_until" in run.data.tags
    assert run.data.params["data"] == "table + 4 completed jobs"


def test_a_champion_promoted_elsewhere_serves_from_the_next_round(home):
    """The retrain deployment promotes a version while `cpn run` runs (its own retraining off): the very
    next round estimates the queued job with it, though that job entered the queue under the old one."""
    config = home / "config"
    config.mkdir()
    (config / "clusters.yaml").write_text(yaml.safe_dump(CLUSTERS))
    (config / "loop.yaml").write_text("retrain_every_completions: 0\n")
    uri = f"sqlite:///{home / 'mlflow.db'}"
    table = ThroughputTable.load(home / "throughputs.csv")
    catalog = BenchmarkCatalog.load(BENCHMARKS_YAML)
    truth = training_rows(table)
    small = {"rf": {"n_estimators": 20}}
    optimistic = [replace(r, steps_per_sec=r.steps_per_sec * OPTIMISM) for r in truth]
    train_and_register(optimistic, catalog, estimators=["rf"], params=small, tracking_uri=uri, splits=())
    service, loop = _serve(config, home)
    try:
        store = service.store
        long = JobSpec(job_id="ns/long", model="ResNet-50", batch_size=32, num_gpus=2, total_steps=10**9)
        queued = JobSpec(job_id="ns/queued", model="ResNet-50", batch_size=64, total_steps=7_000)
        store.submit([long])
        run_rounds(loop, lambda: store.get("ns/long").state == JobState.RUNNING)
        store.submit([queued])
        loop.run_once()
        before = service.scheduler.snapshot().estimates["ns/queued"]["v100"].runtime_s

        (promoted,) = train_and_register(
            truth, catalog, estimators=["rf"], params=small, tracking_uri=uri, splits=(), session="retrain"
        )
        assert promoted.champion and promoted.version == "2", promoted.reason
        loop.run_once()
        after = service.scheduler.snapshot().estimates["ns/queued"]["v100"].runtime_s
        assert service.scheduler.estimator.last_good_version == "2"
        assert after == pytest.approx(ChampionLoader(uri).load().estimate(queued, "v100").runtime_s)
        seconds = 7_000 / 35.0  # the synthetic law: ResNet-50 at batch 64 on one V100, 35 steps/s
        assert before == pytest.approx(seconds / OPTIMISM, rel=0.1)
        assert after == pytest.approx(seconds, rel=0.1)
        assert store.get("ns/queued").state == JobState.QUEUED, "still waiting behind the long job"
    finally:
        service.close()


def _serve(config, home):
    """`cpn run --config CONFIG --estimates champion --policy greedy`'s service, started, and its live loop
    with the hooks `cpn run` gives it (retraining after rounds, the champion read before each)."""
    args = argparse.Namespace(
        config=str(config),
        throughputs=str(home / "throughputs.csv"),
        store=None,
        policy="greedy",
        set=[],
        estimates="champion",
        time_scale=3600.0,
        interval=None,
    )
    profile = load_profile(config)
    service = build(args, profile).started()
    loop = LiveLoop(
        service.scheduler,
        1.0,
        simulation=service.driver,
        on_round=after_each_round(args, profile, service),
        before_round=before_each_round(args, service),
    )
    return service, loop
