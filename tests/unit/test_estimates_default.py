"""The service estimates with the champion unless told otherwise; the simulator's ground truth (oracle,
noisy) is refused at start-up on a real cluster, naming the flag, before anything is built or read."""

from __future__ import annotations

import math

import pytest
import yaml

from cli import build_parser, main
from config.settings import REPO_ROOT, ClustersConfig, ConfigError, load_profile
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.jobs import JobSpec
from models.predictor import fit_predictor
from models.sources import estimate_source
from tests.unit.test_predictor_support import catalog, rows

TABLE = ThroughputTable([ThroughputRow("ResNet-18", 32, "v100", 1, 2.0)])
GROUP = {
    "name": "g",
    "gpu_product": "Tesla-V100-SXM2-16GB",
    "gpus_per_node": 2,
    "gpu_memory_gb": 16,
    "cpu_cores": 8,
}
SIMULATED = {"name": "sim", "node_groups": [GROUP]}
REAL = {"name": "lab", "kube_context": "lab", "kubeconfig": "/nonexistent/kubeconfig"}


def clusters(*entries: dict) -> ClustersConfig:
    names = [e["name"] for e in entries]
    wan = {names[0]: {n: 10 for n in names[1:]}} if len(names) > 1 else {}
    return ClustersConfig.model_validate({"clusters": list(entries), "wan_gbps": wan})


def config_folder(tmp_path, *entries: dict, loop: str | None = None):
    folder = tmp_path / "config"
    folder.mkdir(parents=True)
    (folder / "clusters.yaml").write_text(
        yaml.safe_dump(clusters(*entries).model_dump(exclude_defaults=True))
    )
    if loop is not None:
        (folder / "loop.yaml").write_text(loop)
    return folder


def test_ground_truth_is_served_on_simulated_clusters():
    source = estimate_source("oracle", TABLE, clusters=clusters(SIMULATED))
    job = JobSpec(job_id="ns/a", model="ResNet-18", batch_size=32, total_steps=100)
    assert source.estimates([job], ["v100"])["ns/a"]["v100"].runtime_s == 50.0


def test_ground_truth_is_refused_on_a_real_cluster_naming_the_flag_and_the_cluster():
    for spec in ("oracle", "noisy:0.3"):
        with pytest.raises(ValueError) as refused:
            estimate_source(spec, TABLE, clusters=clusters(SIMULATED, REAL))
        message = str(refused.value)
        assert message.startswith(f"--estimates {spec}: ") and "; lab is a real cluster" in message
        assert "sim" not in message.split(";")[1], "only the real cluster is named"


def test_cpn_run_and_plan_refuse_oracle_on_a_real_cluster_at_start_up(tmp_path, capsys):
    folder = config_folder(tmp_path, REAL)
    store = tmp_path / "jobs.db"
    argv = ["run", "--config", str(folder), "--store", str(store), "--no-auth", "--estimates", "oracle"]
    assert main(argv) == 2
    assert "cpn run: --estimates oracle: " in capsys.readouterr().err
    assert not store.exists(), "refused before the service was built"

    plan = ["plan", "--config", str(folder), "--out", str(tmp_path / "out"), "--estimates", "oracle"]
    assert main([*plan, str(REPO_ROOT / "examples" / "plan" / "volcano-tensorflow.yaml")]) == 2
    assert "cpn plan: --estimates oracle: " in capsys.readouterr().err


def test_the_champion_is_every_entry_points_default():
    parser = build_parser()
    assert parser.parse_args(["run"]).estimates == "champion"
    assert parser.parse_args(["up"]).estimates == "champion"
    assert parser.parse_args(["plan", "--out", "o", "f.yaml"]).estimates == "champion"


def test_the_retrain_interval_is_a_loop_setting_and_must_not_be_negative(tmp_path):
    assert load_profile(config_folder(tmp_path / "a", SIMULATED)).loop.retrain_every_completions == 50
    folder = config_folder(tmp_path / "b", SIMULATED, loop="retrain_every_completions: -1\n")
    with pytest.raises(ConfigError, match="retrain_every_completions"):
        load_profile(folder)


def test_the_predictor_leaves_out_what_it_cannot_estimate_instead_of_failing_the_round():
    # The champion is a Predictor: one inference service without steps, or one card type the benchmarks do
    # not score, must not stop every other job from being estimated (the oracle leaves them out too).
    predictor = fit_predictor(rows(), catalog(), "rf", calibrate=False, n_estimators=10)
    training = JobSpec(job_id="ns/train", model="ResNet-50", batch_size=32, total_steps=7_000)
    service = JobSpec(job_id="ns/chat", model="chat", kind="inference", data_size_gb=1.0)
    unseen = JobSpec(job_id="ns/new", model="NeverSeen", batch_size=32, total_steps=7_000)
    out = predictor.estimates((training, service, unseen), ("v100", "h20"))
    assert set(out) == {"ns/train", "ns/chat", "ns/new"} and out["ns/chat"] == {}
    assert out["ns/train"]["v100"].runtime_s == pytest.approx(100, rel=0.05)  # 70 steps/s by the law
    # The unscored H20: no runtime for a known model until its benchmark has run; a job to explore may go.
    pending = out["ns/train"]["h20"]
    assert (pending.runtime_s, pending.pending_benchmark, pending.explore) == (math.inf, True, False)
    assert pending.gpu_mem_gb == out["ns/train"]["v100"].gpu_mem_gb
    guess = out["ns/new"]["h20"]
    assert guess.explore and not guess.pending_benchmark
    assert guess.runtime_s == max(e.runtime_s for gpu, e in out["ns/new"].items() if gpu != "h20")
