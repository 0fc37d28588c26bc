"""`cpn plan` is the scheduling round without an executor: on the store a live service left (jobs running,
teams, a preempting policy) it gives every queued job the outcome the `schedule-round` flow's dry run gives,
the flow's own snapshot and decide tasks over the service its dry run opens; jobs of manifests are planned
after the store's queue; and neither writes anything."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from cli import main
from config.settings import load_profile
from cpn.bootstrap import Service, build_service, open_dry_run, service_teams
from cpn.decisions import Decision, Estimate
from cpn.dry_run import planned_jobs
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.jobs import ON_CLUSTER, JobSpec, JobState
from cpn.sim.estimates import OracleEstimates
from cpn.store import JobStore
from tasks import schedule as stage
from tests.unit.test_teams_service import CLUSTERS, TEAMS

TABLE = ThroughputTable.load(GAVEL_ISOLATED)
STEPS = 1_000_000
"""Steps of every job: days on a V100, so none ends between the service's round and the dry runs."""
FIRST = ("a/j1", "a/j2")
"""Started by the live service on the node's two cards: team a's quota (1) and one card borrowed."""
QUEUED = ("a/j3", "b/j1", "other/j1")
"""Queued behind them: b is below its quota, the namespace `other` in no team."""
MANIFEST = """
apiVersion: batch/v1
kind: Job
metadata:
  name: j2
  namespace: b
  annotations: {model_name: ResNet-18, data_size: "1", epoch: "1", batch_size: "32", total_steps: "1000000"}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: m, image: x:1, resources: {limits: {nvidia.com/gpu: 1}}}]
"""


def job(job_id: str) -> JobSpec:
    return JobSpec(job_id, "ResNet-18", batch_size=32, num_gpus=1, total_steps=STEPS)


def config_folder(tmp_path: Path) -> Path:
    config = tmp_path / "config"
    config.mkdir()
    (config / "clusters.yaml").write_text(yaml.safe_dump(CLUSTERS))
    (config / "teams.yaml").write_text(yaml.safe_dump(TEAMS))
    (config / "policy.yaml").write_text("name: greedy\npreemption: true\n")
    return config


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Iterator[Path]:
    """A cpn home (CPN_HOME) whose store is as `cpn run` left it: two jobs running on the simulated clusters
    (journaled beside the store), three queued; its config folder is `config` in it. Shared by the tests,
    which only read it (the first asserts that)."""
    home = tmp_path_factory.mktemp("home")
    config = config_folder(home)
    profile = load_profile(config)
    service = build_service(
        profile.clusters,
        home / "jobs.db",
        "fifo",  # no teams, no preemption: a borrows the second card
        TABLE,
        estimator=OracleEstimates(TABLE),
        time_scale=1.0,
    )
    try:
        service.start()
        service.store.submit([job(j) for j in FIRST])
        service.scheduler.round()
        service.store.submit([job(j) for j in QUEUED])
        assert sorted(r.job_id for r in service.store.jobs(ON_CLUSTER)) == list(FIRST)
    finally:
        service.close()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CPN_HOME", str(home))
        for name in ("CPN_STORE", "CPN_POLICY", "CPN_POLICY_SET"):
            env.delenv(name, raising=False)
        yield home


def flow_dry_run(config: Path, store: Path) -> tuple[Service, Decision]:
    """What `schedule_round(dry_run=True)` decides: the service its open_service task opens for a dry run,
    and the snapshot and optimise tasks' own functions on it."""
    profile = load_profile(config)
    service = open_dry_run(
        profile.clusters,
        store,
        profile.policy,
        TABLE,
        estimator=OracleEstimates(TABLE),
        teams=service_teams(config, profile.clusters),
    )
    view = stage.snapshot.fn(service.scheduler)
    decision, _ = stage.decide.fn(service.scheduler, view)
    return service, decision


def outcomes_of(decision: Decision) -> dict[str, tuple]:
    """Per job: placed (cluster, nodes), rejected (reason) or waiting (code)."""
    out: dict[str, tuple] = {w.job_id: ("waiting", w.code) for w in decision.waiting}
    out.update({r.job_id: ("rejected", r.reason) for r in decision.rejections})
    out.update({p.job_id: ("placed", p.cluster, [list(n) for n in p.nodes]) for p in decision.placements})
    return out


def planned(plan: dict) -> dict[str, tuple]:
    out = {}
    for j in plan["jobs"]:
        if j["outcome"] == "placed":
            out[j["job_id"]] = ("placed", j["cluster"], [[n["node"], n["gpus"]] for n in j["nodes"]])
        elif j["outcome"] == "rejected":
            out[j["job_id"]] = ("rejected", j["reason"])
        else:
            out[j["job_id"]] = ("waiting", j["waiting"])
    return out


def test_cpn_plan_gives_every_queued_job_the_flow_dry_runs_outcome(home, tmp_path):
    config, store = home / "config", home / "jobs.db"  # the store cpn plan reads by default: this home's
    before = store.read_bytes()
    out = tmp_path / "plan"
    assert main(["plan", "--config", str(config), "--out", str(out), "--estimates", "oracle"]) == 0
    plan = json.loads((out / "plan.json").read_text())
    service, decision = flow_dry_run(config, store)
    service.close()

    assert [j["job_id"] for j in plan["jobs"]] == list(QUEUED)
    by_flow = {j: o for j, o in outcomes_of(decision).items() if j in QUEUED}
    assert planned(plan) == by_flow
    # the running jobs and the teams count: b, below its quota, reclaims the card a borrowed
    assert by_flow == {
        "a/j3": ("waiting", "no-gpu-type"),
        "b/j1": ("waiting", "reclaiming"),
        "other/j1": ("waiting", "no-gpu-type"),
    }
    stops = [(s["job_id"], s["for_job"]) for s in plan["preemptions"]]
    assert stops == [(p.job_id, p.for_job) for p in decision.preemptions]
    assert [(stopped in FIRST, for_job) for stopped, for_job in stops] == [(True, "b/j1")]
    assert store.read_bytes() == before, "a dry run writes nothing"


def test_manifests_are_planned_after_the_stores_queue_and_stored_nowhere(home, tmp_path):
    config, store = home / "config", home / "jobs.db"
    manifest = tmp_path / "b-j2.yaml"
    manifest.write_text(MANIFEST)
    out = tmp_path / "plan"
    assert (
        main(["plan", "--config", str(config), "--out", str(out), "--estimates", "oracle", str(manifest)])
        == 0
    )
    plan = json.loads((out / "plan.json").read_text())
    assert [j["job_id"] for j in plan["jobs"]] == [*QUEUED, "b/j2"]
    assert plan["jobs"][-1]["outcome"] == "waiting"  # behind b/j1, which takes b's one card
    with JobStore(store, read_only=True) as stored:
        assert [r.job_id for r in stored.jobs([JobState.QUEUED])] == list(QUEUED)


def test_a_manifest_whose_job_is_stored_with_other_content_is_refused(home, tmp_path, capsys):
    manifest = tmp_path / "a-j3.yaml"
    manifest.write_text(MANIFEST.replace("name: j2", "name: j3").replace("namespace: b", "namespace: a"))
    argv = [
        "plan",
        "--config",
        str(home / "config"),
        "--out",
        str(tmp_path / "plan"),
        "--estimates",
        "oracle",
    ]
    assert main([*argv, str(manifest)]) == 2
    assert "job a/j3 is in the job store with other content" in capsys.readouterr().err


class Exploring:
    """Estimates that say every job is to explore (a model the predictor has never seen)."""

    def estimates(self, jobs, gpu_types):
        return {
            j.job_id: {g: Estimate(3600.0, uncertainty=1.0, explore=True) for g in gpu_types} for j in jobs
        }


class Binding:
    """A binder that keeps the spec and placement it binds, as the objects it would submit."""

    def bind(self, job: JobSpec, placement) -> tuple[dict, ...]:
        return ({"spec": job, "placement": placement},)


def test_a_sharing_job_to_explore_is_planned_alone_on_a_whole_card_before_any_store_exists(home, tmp_path):
    profile = load_profile(home / "config")
    sharing = replace(job("c/share"), gpu_share=0.5)
    missing = tmp_path / "no-store-yet.db"
    service = open_dry_run(
        profile.clusters, missing, profile.policy, TABLE, estimator=Exploring(), proposed=[sharing]
    )
    try:
        view = service.scheduler.snapshot()
        (planned,) = planned_jobs(
            view, service.scheduler.decide(view), binders={"c": Binding()}, validate=lambda *_: None
        )
    finally:
        service.close()
    assert (planned.outcome, planned.explore, planned.gpus) == ("placed", True, 1)
    (bound,) = planned.objects
    assert bound["spec"] == replace(sharing, gpu_share=None, arrival_s=bound["spec"].arrival_s)
    assert not missing.exists(), "an empty store in memory: no file made"
