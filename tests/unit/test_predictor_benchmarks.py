"""Benchmarks: the YAML schema, the catalog with devices.csv specs, the job log parser and ingestion."""

from __future__ import annotations

import argparse
import copy
import json
import math
import re

import pytest
import yaml
from pydantic import ValidationError

from cli.predictor import register
from config.benchmarks import BENCHMARKS_YAML, BenchmarksConfig, dump_benchmarks, load_benchmarks
from config.settings import REPO_ROOT, ConfigError
from models.benchmarks import (
    BenchmarkCatalog,
    BenchmarkError,
    BenchmarkResult,
    merge_results,
    parse_benchmark_log,
)
from tests.unit.test_predictor_support import benchmarks_dict, catalog

MANIFEST = REPO_ROOT / "examples" / "benchmark-job.yaml"


def _line(**fields) -> str:
    rec = {
        "workload": "resnet50",
        "score": 280.0,
        "unit": "images/s",
        "method": "cpn-bench/1",
        "gpu_product": "Tesla-V100-SXM2-16GB",
        "node": "gpu-a",
    } | fields
    return "CPN_BENCH " + json.dumps(rec)


def test_shipped_benchmarks_cover_every_gavel_gpu_with_specs():
    cat = BenchmarkCatalog.load()
    assert set(cat.gpu_types()) >= {"k80", "p100", "v100"}
    k80 = cat.find("k80")
    assert (k80.memory_gb, k80.mem_bw_gbps) == (12, 240)  # from the YAML: devices.csv has no K80
    v100 = cat.find("Tesla V100-SXM2-16GB")
    assert v100.mem_bw_gbps == 900  # from data/gpus/devices.csv
    assert v100.log_speed > cat.find("p100").log_speed > k80.log_speed


def test_every_workload_must_be_scored(tmp_path):
    data = benchmarks_dict()
    del data["gpus"]["v100"]["scores"]["llama3"]
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"gpus\.v100: no score for workload\(s\) \['llama3'\]"):
        load_benchmarks(path)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["gpus"]["v100"]["scores"].update(bert=1.0), "unknown workload"),
        (lambda d: d["gpus"]["v100"]["scores"].update(resnet50=0), "greater than 0"),
        (lambda d: d["gpus"].update({"V100 [16GB]!": d["gpus"]["v100"]}), "is not a GPU product name"),
        (lambda d: d.update(nodes={"n1": {"gpu": "h100", "scores": {}}}), "is not a key of gpus"),
        (lambda d: d.update(typo=1), "Extra inputs are not permitted"),
    ],
)
def test_invalid_benchmarks_are_refused(tmp_path, mutate, message):
    data = copy.deepcopy(benchmarks_dict())
    mutate(data)
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=message):
        load_benchmarks(path)


def test_a_new_product_without_specs_has_missing_spec_features_and_says_so():
    data = benchmarks_dict({"h20": 20.0})
    del data["gpus"]["h20"]["spec"]
    cat = BenchmarkCatalog(BenchmarksConfig.model_validate(data))
    assert math.isnan(cat.find("h20").mem_bw_gbps)
    assert re.search(r"gpus\.h20: no spec", cat.spec_warning())


def test_a_user_file_adds_a_product_the_project_never_saw():
    cat = catalog({"k80": 1.0, "NVIDIA-H100-80GB-HBM3": 30.0})
    assert cat.find("NVIDIA H100 80GB HBM3").key == "h100-80gb-hbm3"
    assert cat.find("NVIDIA-H100-PCIe") is None  # another variant: not the same GPU type
    assert cat.find("a100") is None


def test_two_spellings_of_one_product_in_a_file_are_refused():
    data = benchmarks_dict()
    data["gpus"]["Tesla-V100-SXM2-16GB"] = data["gpus"]["v100"]
    with pytest.raises(BenchmarkError, match=r"gpus.Tesla-V100-SXM2-16GB and gpus.v100 name one GPU product"):
        BenchmarkCatalog(BenchmarksConfig.model_validate(data))


def test_a_file_mixing_scoring_methods_is_refused():
    data = benchmarks_dict()
    data["workloads"]["llama3"]["method"] = "cpn-bench/1"
    with pytest.raises(ValidationError, match="scored by 2 methods"):
        BenchmarksConfig.model_validate(data)


def test_specs_come_from_the_label_keyed_specs_table():
    data = benchmarks_dict({"v100": 1.0, "NVIDIA-A100-PCIE-40GB": 3.0, "NVIDIA-A100-SXM4-80GB": 4.0})
    for entry in data["gpus"].values():
        entry.pop("spec")
    cat = BenchmarkCatalog(BenchmarksConfig.model_validate(data))
    assert cat.find("NVIDIA-A100-PCIE-40GB").memory_gb == 40  # data/gpus/specs.csv
    assert cat.find("NVIDIA-A100-SXM4-80GB").memory_gb == 80


def test_node_scores_override_their_product():
    data = benchmarks_dict()
    data["nodes"] = {"slow-v100": {"gpu": "v100", "scores": {"resnet50": 140.0}}}
    cat = BenchmarkCatalog(BenchmarksConfig.model_validate(data))
    assert cat.find("v100", node="slow-v100").scores[0] == 140.0
    assert cat.find("v100").scores[0] == 280.0
    assert cat.find("v100", node="other").scores[0] == 280.0


def test_dump_and_load_round_trip(tmp_path):
    config = load_benchmarks(BENCHMARKS_YAML)
    dump_benchmarks(config, tmp_path / "b.yaml")
    assert load_benchmarks(tmp_path / "b.yaml") == config


def test_parser_reads_result_lines_and_skips_the_rest():
    log = "\n".join(
        ["pip install ...", _line(), "  " + _line(workload="llama3", score=1500, unit="tokens/s")]
    )
    results = parse_benchmark_log(log)
    assert [(r.workload, r.score, r.node) for r in results] == [
        ("resnet50", 280.0, "gpu-a"),
        ("llama3", 1500.0, "gpu-a"),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("CPN_BENCH {not json", "log:2: result is not JSON"),
        ("CPN_BENCH [1, 2]", "must be a JSON object"),
        (_line(score=-1), "'score' must be a positive number"),
        (_line(score="fast"), "'score' must be a positive number"),
        (_line(score=float("nan")), "'score' must be a positive number"),
        (_line(node=""), "'node' must be a non-empty string"),
        (_line(workload=None), "'workload' must be a non-empty string"),
    ],
)
def test_parser_names_the_bad_line(line, message):
    with pytest.raises(BenchmarkError, match=message):
        parse_benchmark_log(_line() + "\n" + line, source="log")


def test_a_log_without_results_is_an_error():
    with pytest.raises(BenchmarkError, match="no `CPN_BENCH` result lines"):
        parse_benchmark_log("Traceback ...\nCUDA out of memory", source="node.log")


def _results(node: str, product: str, factor: float) -> list[BenchmarkResult]:
    return [
        BenchmarkResult("resnet50", 100 * factor, "images/s", "cpn-bench/1", product, node),
        BenchmarkResult("yolov8m", 20 * factor, "images/s", "cpn-bench/1", product, node),
        BenchmarkResult("llama3", 1000 * factor, "tokens/s", "cpn-bench/1", product, node),
    ]


def test_merge_keeps_every_node_and_the_median_per_product():
    results = (
        _results("a", "Tesla-V100-SXM2-16GB", 1.0)
        + _results("b", "Tesla V100-PCIE-16GB", 3.0)
        + _results("c", "Tesla-V100-SXM2-16GB", 2.0)
        + _results("d", "Tesla-P100-PCIE-16GB", 0.5)
    )
    merged = merge_results(results)
    # The PCIe card is a product of its own: nodes a and c make the SXM2 card's median.
    sxm2 = merged.gpus["Tesla-V100-SXM2-16GB"]
    assert sxm2.scores == {"resnet50": 150.0, "yolov8m": 30.0, "llama3": 1500.0}
    assert merged.nodes["b"].gpu == "Tesla V100-PCIE-16GB" and merged.nodes["b"].scores["resnet50"] == 300.0
    assert merged.workloads["llama3"].unit == "tokens/s"
    cat = BenchmarkCatalog(merged)
    assert cat.find("Tesla-V100-PCIE-16GB", node="b").scores == (300.0, 60.0, 3000.0)
    assert cat.find("Tesla V100-SXM2-16GB").scores == (150.0, 30.0, 1500.0)
    assert cat.find("v100").mem_bw_gbps == 900  # data/gpus/specs.csv


def test_merge_refuses_scores_measured_another_way():
    with pytest.raises(BenchmarkError, match="ingest into a new benchmarks file"):
        merge_results(_results("a", "V100", 1.0), base=load_benchmarks(BENCHMARKS_YAML))


def test_merge_reports_products_left_without_a_workload():
    with pytest.raises(BenchmarkError, match=r"gpus\.T4: no score for workload\(s\) \['llama3'\]"):
        merge_results(_results("a", "V100", 1.0) + _results("c", "T4", 1.0)[:2])


def test_benchmark_job_manifest_is_valid_and_its_script_compiles():
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    config_map, job = yaml.safe_load_all(MANIFEST.read_text())
    for doc in (config_map, job):
        kubernetes_validate.validate(doc, "1.33.0", strict=True)
    compile(config_map["data"]["cpn_bench.py"], "cpn_bench.py", "exec")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "cpn_bench.py" in container["args"][0]


def test_cpn_predictor_ingest_writes_a_benchmarks_file(tmp_path, capsys):
    def log(node: str, product: str) -> str:
        return "\n".join(
            _line(node=node, gpu_product=product, workload=w, unit=u)
            for w, u in (("resnet50", "img/s"), ("llama3", "tok/s"))
        )

    (tmp_path / "n1.log").write_text(log("n1", "Tesla-V100-SXM2-16GB"))
    (tmp_path / "n2.log").write_text(log("n2", "NVIDIA-H100-80GB-HBM3"))
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    out = tmp_path / "measured.yaml"
    argv = ["predictor", "ingest", str(tmp_path / "n1.log"), str(tmp_path / "n2.log"), "--out", str(out)]
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    config = load_benchmarks(out)
    assert set(config.gpus) == {"Tesla-V100-SXM2-16GB", "NVIDIA-H100-80GB-HBM3"}
    assert set(config.nodes) == {"n1", "n2"}
    assert "no spec" not in capsys.readouterr().err  # data/gpus/specs.csv has both

    args = parser.parse_args(["predictor", "ingest", str(tmp_path / "missing.log"), "--out", str(out)])
    assert args.func(args) == 2
    assert "missing.log: cannot read" in capsys.readouterr().err
