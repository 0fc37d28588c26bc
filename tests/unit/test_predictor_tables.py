"""Throughput tables with precision and samples/s, and the shipped Lambda table with its benchmarks."""

from __future__ import annotations

import pytest

from config.settings import DATA_DIR
from cpn.formats.throughput import ThroughputFormatError, ThroughputTable
from models.benchmarks import BenchmarkCatalog
from models.features import PredictorInputError, Query, training_rows, workload_key

LAMBDA = DATA_DIR / "lambda"


def _table(tmp_path, text: str) -> ThroughputTable:
    path = tmp_path / "t.csv"
    path.write_text(text)
    return ThroughputTable.load(path)


def test_samples_per_sec_gives_steps_counting_every_worker(tmp_path):
    table = _table(
        tmp_path,
        "model,batch_size,gpu_product,num_gpus,steps_per_sec,precision,samples_per_sec\n"
        "resnet50,640,NVIDIA-A100-80GB-PCIe,2,1.52891,fp32,1957\n"  # Lambda: steps of the whole gang
        "resnet50,640,NVIDIA-A100-80GB-PCIe,2,3.0578,AMP,1957\n"  # every worker's steps
        "resnet50,640,NVIDIA-A100-80GB-PCIe,1,,bf16,1014\n",  # steps/s left empty
    )
    gang, worker, single = table.rows
    assert gang.steps_per_sec == worker.steps_per_sec == pytest.approx(1957 / 640)
    assert (gang.precision, worker.precision, single.precision) == ("fp32", "fp16", "bf16")
    assert single.steps_per_sec == pytest.approx(1014 / 640)


def test_steps_and_samples_that_agree_with_no_convention_are_refused(tmp_path):
    with pytest.raises(ThroughputFormatError, match=r"t\.csv:2: columns steps_per_sec 9 and samples_per_sec"):
        head = "model,batch_size,gpu_product,num_gpus,steps_per_sec,samples_per_sec\n"
        _table(tmp_path, head + "m,64,a10,2,9,100\n")
    with pytest.raises(ThroughputFormatError, match=r"t\.csv:2: column precision: 'fp8' is not one of"):
        _table(tmp_path, "model,batch_size,gpu_product,num_gpus,steps_per_sec,precision\nm,64,a10,1,9,fp8\n")


def test_a_samples_only_table_needs_no_steps_column(tmp_path):
    table = _table(tmp_path, "model,batch_size,gpu_product,num_gpus,samples_per_sec\nm,64,a10,1,128\n")
    assert table.rows[0].steps_per_sec == pytest.approx(2.0)


def test_precision_is_part_of_what_the_predictor_learns_per_workload():
    assert workload_key("ResNet-50", "fp32") == "resnet50"
    assert workload_key("ResNet-50", "fp16") == "resnet50@fp16"
    assert Query("m", 8, "a10", 1, precision="AMP").precision == "fp16"
    with pytest.raises(PredictorInputError, match="precision"):
        Query("m", 8, "a10", 1, precision="int4")


def test_the_shipped_lambda_table_keeps_every_card_variant_apart():
    catalog = BenchmarkCatalog.load(LAMBDA / "benchmarks.yaml")
    rows = training_rows(ThroughputTable.load(LAMBDA / "throughputs.csv"))
    assert len(rows) == 620 and {r.precision for r in rows} == {"fp32", "fp16"}
    gpus = {r.gpu_type for r in rows}
    assert len(gpus) == 12 and gpus == set(catalog.gpu_types())
    assert {"a100-pcie-40gb", "a100-80gb-pcie", "a100-sxm4-80gb", "h100-pcie", "h100-80gb-hbm3"} <= gpus
    assert catalog.spec_warning() is None
    # The SXM5 H100 is faster than the PCIe one, as measured: distinct types keep that apart.
    by = {(r.model, r.gpu_type, r.num_gpus, r.precision): r.steps_per_sec * r.batch_size for r in rows}
    assert by[("resnet50", "h100-80gb-hbm3", 1, "fp32")] > 1.4 * by[("resnet50", "h100-pcie", 1, "fp32")]
