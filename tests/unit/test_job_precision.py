"""A job's training precision: read from its manifest, stored, and used by the predictor and the simulator.

Lambda's table measures tacotron2 at batch 256 on eight H100 SXM5 cards at fp32 and at fp16, fp16 much
faster; an fp16 job of that configuration must get the fp16 figure, an fp32 job the fp32 one.
"""

from __future__ import annotations

import pytest

from config.settings import DATA_DIR
from cpn.clock import SimClock
from cpn.engine.feedback import CompletedRun
from cpn.formats.manifests import to_manifest
from cpn.formats.throughput import ThroughputTable
from cpn.formats.trace_csv import TraceFormatError, load_trace_csv
from cpn.intake import IntakeError, parse_manifests
from cpn.jobs import JobSpec
from cpn.sim.truth import GroundTruth
from cpn.store import JobStore
from models.benchmarks import BenchmarkCatalog
from models.features import training_rows
from models.predictor import fit_predictor
from models.retrain import training_row

LAMBDA = DATA_DIR / "lambda"
GPU = "NVIDIA-H100-80GB-HBM3"

MANIFEST = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: tts
  annotations:
    model_name: tacotron2
    data_size: "1"
    epoch: "1"
    batch_size: "256"
    total_steps: "100000"
    precision: {precision}
spec:
  template:
    spec:
      containers:
        - name: main
          image: example.org/tts:1
          resources: {{limits: {{nvidia.com/gpu: 8}}}}
"""


@pytest.fixture(scope="module")
def lambda_table() -> ThroughputTable:
    return ThroughputTable.load(LAMBDA / "throughputs.csv")


def job(precision: str) -> JobSpec:
    (spec,) = parse_manifests(MANIFEST.format(precision=precision))
    return spec


def measured(table: ThroughputTable, precision: str) -> float:
    (rate,) = (
        r.steps_per_sec
        for r in table
        if (r.model, r.batch_size, r.gpu_type, r.num_gpus, r.precision)
        == ("tacotron2", 256, "h100-80gb-hbm3", 8, precision)
    )
    return rate


@pytest.mark.parametrize(("spelling", "precision"), [("fp32", "fp32"), ("AMP", "fp16"), ("bfloat16", "bf16")])
def test_the_precision_annotation_is_read_in_any_spelling_the_table_reads(spelling, precision):
    assert job(spelling).precision == precision


def test_without_the_annotation_a_job_is_fp32():
    text = MANIFEST.format(precision="none").replace("    precision: none\n", "")
    assert parse_manifests(text)[0].precision == "fp32"


def test_a_bad_precision_is_refused_naming_the_field_and_what_to_write():
    with pytest.raises(IntakeError) as err:
        job("fp8")
    message = str(err.value)
    assert "metadata.annotations.precision" in message and "'fp8'" in message
    assert "fp16 (also amp" in message


def test_the_precision_survives_the_store_and_the_manifest_writer(tmp_path):
    fp16 = job("fp16")
    with JobStore(tmp_path / "jobs.db", SimClock(0.0)) as store:
        store.submit([fp16])
        assert store.get(fp16.job_id).spec.precision == "fp16"
    written = to_manifest(fp16, "example.org")
    assert parse_manifests(written)[0].precision == "fp16"


def test_the_simulator_times_a_job_at_its_own_precision(lambda_table):
    truth = GroundTruth(lambda_table)
    assert truth.steps_per_sec(job("fp16"), GPU, 8) == pytest.approx(measured(lambda_table, "fp16"))
    assert truth.steps_per_sec(job("fp32"), GPU, 8) == pytest.approx(measured(lambda_table, "fp32"))
    assert measured(lambda_table, "fp16") > measured(lambda_table, "fp32")


def test_a_table_without_rows_of_the_precision_times_the_job_at_fp32(lambda_table):
    fp32_only = ThroughputTable([r for r in lambda_table if r.precision == "fp32"])
    truth = GroundTruth(fp32_only)
    assert truth.steps_per_sec(job("fp16"), GPU, 8) == pytest.approx(measured(lambda_table, "fp32"))


def test_an_fp16_job_gets_the_fp16_workloads_shorter_runtime_from_the_predictor(lambda_table):
    rows = [r for r in training_rows(lambda_table) if r.model in ("tacotron2", "resnet50")]
    predictor = fit_predictor(rows, BenchmarkCatalog.load(LAMBDA / "benchmarks.yaml"), calibrate=False)
    fp32, fp16 = (predictor.estimate(job(p), GPU) for p in ("fp32", "fp16"))
    assert fp16.runtime_s < fp32.runtime_s
    # both measured configurations: each near its own precision's figure, not the other's
    assert fp16.runtime_s == pytest.approx(100_000 / measured(lambda_table, "fp16"), rel=0.25)
    assert fp32.runtime_s == pytest.approx(100_000 / measured(lambda_table, "fp32"), rel=0.25)


def test_a_completed_fp16_run_teaches_the_fp16_workload():
    run = CompletedRun("ns/tts", "tacotron2", 256, GPU, 8, 100_000, 100.0, 500.0, precision="fp16")
    row = training_row(run)
    assert row.precision == "fp16" and row.steps_per_sec == pytest.approx(1000.0)
    amp = CompletedRun("ns/tts", "tacotron2", 256, GPU, 8, 100_000, 100.0, 500.0, precision="AMP")
    assert training_row(amp).precision == "fp16"


def test_a_trace_row_may_give_the_precision_and_a_bad_one_names_line_and_column(tmp_path):
    path = tmp_path / "trace.csv"
    head = "job_id,arrival_s,model,batch_size,num_gpus,total_steps,precision\n"
    path.write_text(head + "a,0,tacotron2,256,8,100000,amp\nb,0,tacotron2,256,8,100000,\n")
    assert [j.precision for j in load_trace_csv(path)] == ["fp16", "fp32"]
    path.write_text(head + "a,0,tacotron2,256,8,100000,fp8\n")
    with pytest.raises(TraceFormatError, match=r"trace\.csv:2: column precision: .*'fp8'"):
        load_trace_csv(path)
