"""The `benchmark-nodes` flow under Prefect on simulated clusters: a GPU type no benchmarks file knows is
measured, the round is logged in MLflow, the predictor is retrained on the new scores, and the next run
finds nothing to do."""

from __future__ import annotations

import pytest
import yaml

from config.benchmarks import load_benchmarks
from cpn.formats.throughput import GAVEL_ISOLATED
from flows.benchmarks import benchmark_nodes
from models.benchmark_runs import BENCHMARK_EXPERIMENT

pytestmark = pytest.mark.e2e

A10 = "NVIDIA-A10"
# The new type's truth, in the Gavel table's own format: the three proxies config/benchmarks.yaml measures.
A10_ROWS = """\
a10,consolidated,ResNet-50,64,1,5.0
a10,consolidated,CycleGAN,,1,6.0
a10,consolidated,Transformer,64,1,10.0
"""


def world(folder, store) -> tuple[str, str]:
    """A config folder (one V100 and one A10 node group) benchmarking into `store`, and the simulated
    clusters' truth: Gavel's table plus the A10's rows."""
    groups = [
        {"name": name, "gpu_product": product, "gpus_per_node": 2, "gpu_memory_gb": 16, "cpu_cores": 16}
        for name, product in (("v", "Tesla-V100-SXM2-16GB"), ("a", A10))
    ]
    folder.mkdir()
    (folder / "clusters.yaml").write_text(
        yaml.safe_dump({"clusters": [{"name": "bj", "node_groups": groups}]})
    )
    (folder / "benchmarking.yaml").write_text(f"store: {store}\nseconds_per_workload: 60\n")
    truth = folder / "throughputs.csv"
    truth.write_text(GAVEL_ISOLATED.read_text().rstrip("\n") + "\n" + A10_ROWS)
    return str(folder), str(truth)


def test_the_flow_measures_a_new_type_logs_the_round_retrains_and_then_has_nothing_to_do(
    prefect_harness, tmp_path, monkeypatch
):
    monkeypatch.setenv("CPN_HOME", str(tmp_path / "home"))
    store = tmp_path / "home" / "measured.yaml"
    config, truth = world(tmp_path / "config", store)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    summary = benchmark_nodes(config_dir=config, throughputs=truth, tracking_uri=uri)
    assert summary["planned"] == ["bj/a-0"] and summary["outcomes"] == {"bj/a-0": "succeeded"}
    assert summary["changed"] and summary["store"] == str(store)
    scores = load_benchmarks(store).gpus[A10].scores
    assert scores == pytest.approx({"resnet50": 320.0, "yolov8m": 6.0, "llama3": 640.0})

    import mlflow

    from models.registry import REGISTERED_MODEL, load_champion

    client = mlflow.MlflowClient(uri)
    (bench,) = client.search_runs([client.get_experiment_by_name(BENCHMARK_EXPERIMENT).experiment_id])
    assert bench.data.metrics == pytest.approx(
        {"a-0.resnet50": 320.0, "a-0.yolov8m": 6.0, "a-0.llama3": 640.0}
    )
    assert bench.data.tags["node.bj.a-0"].startswith("a10: succeeded")
    # The scores changed: retraining ran on them, and the champion it registered scores the new type.
    trained = client.search_runs([client.get_experiment_by_name("cpn-predictor").experiment_id])
    children = [r.data.params for r in trained if "estimator" in r.data.params]
    assert {p["estimator"] for p in children} == {"rf", "xgb"}
    assert all("a10" in p["gpu_types"].split(",") for p in children)
    assert client.get_model_version_by_alias(REGISTERED_MODEL, "champion") is not None
    assert load_champion(uri).catalog.find("a10") is not None

    again = benchmark_nodes(config_dir=config, throughputs=truth, tracking_uri=uri)
    assert again == {"planned": [], "reported": []}
    assert len(client.search_runs([client.get_experiment_by_name(BENCHMARK_EXPERIMENT).experiment_id])) == 1
