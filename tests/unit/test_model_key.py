"""One model key (cpn.model_names): every part of cpn that looks a model up folds its spelling alike.

A job submitted as `ResNet-50`, `resnet50` or `resnet_50` runs the model the throughput table (and
Gavel's co-location table) names `ResNet-50`: the oracle, the predictor, the memory models and the
co-location factors give all three the same figures.
"""

from __future__ import annotations

import pytest
import yaml

from cpn.engine.explore import table_without
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.intake import IntakeError, parse_manifests
from cpn.model_names import ModelNameError, model_key
from cpn.sim.colocation import ColocationTable
from cpn.sim.estimates import OracleEstimates
from cpn.sim.memory import gpu_memory_gb
from cpn.sim.truth import GroundTruth
from models.memory import MemorySample
from models.predictor import fit_predictor
from tests.unit.test_predictor_support import catalog, law, rows

SPELLINGS = ("ResNet-50", "resnet50", "resnet_50")
TABLE = ThroughputTable(rows())
"""The synthetic predictor world (models spelt `ResNet-50`, `LM`, ...) as the simulator's truth."""

PAIRS_CSV = """gpu_type,job_a,num_gpus_a,job_b,num_gpus_b,steps_per_sec_a,steps_per_sec_b
v100,ResNet-50 (batch size 32),1,LM (batch size 20),1,{a},{b}
"""


def test_the_key_folds_case_spaces_and_punctuation_and_keeps_letters_and_digits():
    assert {model_key(name) for name in (*SPELLINGS, " RESNET 50 ", "ResNet.50")} == {"resnet50"}
    assert model_key("ResNet-18") != model_key("ResNet-50")
    assert model_key("bert_base") != model_key("bert_large")


@pytest.mark.parametrize("bad", ["", "--", " _ ", None, 50])
def test_a_name_without_letters_or_digits_has_no_key(bad):
    with pytest.raises(ModelNameError, match="model name"):
        model_key(bad)


def manifest(name: str, model: str, batch: int = 32) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "annotations": {
                "model_name": model,
                "data_size": "1",
                "epoch": "1",
                "batch_size": str(batch),
                "total_steps": "1000",
            },
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "example.com/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                }
            }
        },
    }


def test_intake_keeps_the_spelling_and_refuses_a_name_without_a_key_by_field():
    text = yaml.safe_dump_all([manifest("ok", "resnet_50"), manifest("bad", "--")])
    with pytest.raises(IntakeError) as caught:
        parse_manifests(text)
    (problem,) = caught.value.problems
    assert problem.field == "metadata.annotations.model_name" and "no letters or digits" in problem.reason
    (spec,) = parse_manifests(yaml.safe_dump(manifest("ok", "resnet_50")))
    assert spec.model == "resnet_50"


def test_three_spellings_of_one_model_get_the_same_runtime_memory_and_interference(tmp_path):
    jobs = parse_manifests(yaml.safe_dump_all([manifest(f"j{i}", m) for i, m in enumerate(SPELLINGS)]))
    assert [j.model for j in jobs] == list(SPELLINGS)
    (lm,) = parse_manifests(yaml.safe_dump(manifest("lm", "LM", batch=20)))
    alone_r50, alone_lm = law("ResNet-50", 32, "v100", 1), law("LM", 20, "v100", 1)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text(PAIRS_CSV.format(a=alone_r50 / 2, b=alone_lm * 0.75))
    truth = GroundTruth(TABLE, colocation=ColocationTable.load(TABLE, pairs))
    oracle = OracleEstimates(TABLE)
    predictor = fit_predictor(
        rows(), catalog(), "rf", [MemorySample("ResNet-50", 32, 6.0)], calibrate=False, n_estimators=10
    )

    oracle_estimates = {oracle.estimate(j, "v100") for j in jobs}
    predicted = {predictor.estimate(j, "v100") for j in jobs}
    sim_memory = {truth.memory_gb(j, 1) for j in jobs}
    slowed = {truth.shared_factor(j, "v100", [lm]) for j in jobs}
    slowing = {truth.shared_factor(lm, "v100", [j]) for j in jobs}

    (oracle_estimate,) = oracle_estimates
    assert oracle_estimate.runtime_s == pytest.approx(1000 / alone_r50)
    assert sim_memory == {oracle_estimate.gpu_mem_gb} == {gpu_memory_gb("ResNet-50", 32, 1)}
    (estimate,) = predicted
    assert estimate.explore is False  # the predictor knows the model it was trained on as `ResNet-50`
    assert estimate.gpu_mem_gb == 6.0  # the peak measured for `ResNet-50`
    assert estimate.runtime_s == pytest.approx(1000 / alone_r50, rel=0.15)
    ((slowed_by_lm,), (slowing_lm,)) = slowed, slowing
    assert slowed_by_lm == pytest.approx(0.5) and slowing_lm == pytest.approx(0.75)


def test_a_table_without_a_model_drops_every_spelling_of_it():
    table = ThroughputTable(
        [ThroughputRow("ResNet-50", 32, "v100", 1, 5.0), ThroughputRow("LM", 20, "v100", 1, 3.0)]
    )
    rest = table_without(table, "resnet_50")
    assert [r.model for r in rest.rows] == ["LM"]
    assert TABLE.steps_per_sec("resnet_50", 32, "v100", 1) == TABLE.steps_per_sec("ResNet-50", 32, "v100", 1)
