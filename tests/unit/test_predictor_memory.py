"""GPU memory learnt from throughput tables (what fits which card) and measured peaks (models.memory).

A synthetic world with a known memory law per model, memory = fixed + per_sample x batch, where each card
runs the largest batch of a grid that fits its memory (as Lambda's table does), so the tests can say
what a correct model must recover.
"""

from __future__ import annotations

import pickle
from dataclasses import replace

import pytest

from config.benchmarks import BenchmarksConfig
from cpn.engine.feedback import CompletedRun
from cpn.formats.throughput import ThroughputRow, ThroughputTable
from cpn.jobs import JobSpec
from cpn.rules import MEMORY_MARGIN_GB
from models.benchmarks import BenchmarkCatalog
from models.features import training_rows
from models.memory import (
    CardEvidence,
    MemoryEstimate,
    MemoryModel,
    MemorySample,
    card_evidence,
    largest_fitting,
    leave_gpu_out,
)
from models.predictor import fit_predictor
from models.retrain import memory_sample
from tests.unit.test_predictor_support import catalog as three_gpu_catalog
from tests.unit.test_predictor_support import rows as all_fit_rows

CARDS = {"Tesla-K80": 12, "Tesla-V100-SXM2-16GB": 16, "NVIDIA-A10": 24, "NVIDIA-A100-PCIE-40GB": 40}
CARDS |= {"NVIDIA-RTX-A6000": 48, "NVIDIA-A100-SXM4-80GB": 80}
NEVER_RUN = "NVIDIA-H100-80GB-HBM3"
"""In the catalog but in no row: a card the models never ran on."""
LAWS = {"bert": (3.0, 0.5, 4), "cnn": (1.5, 0.09, 16)}
"""model -> (fixed GB, GB per sample, step of the batch sizes tried)."""


WORKLOADS = ("resnet50", "yolov8m", "llama3")


def catalog(cards: dict[str, int] = CARDS) -> BenchmarkCatalog:
    gpus = {**cards, NEVER_RUN: 80}
    return BenchmarkCatalog(
        BenchmarksConfig.model_validate(
            {
                "workloads": {
                    w: {"unit": "u/s", "method": "test"} for w in ("resnet50", "yolov8m", "llama3")
                },
                "gpus": {
                    g: {
                        "scores": {"resnet50": 10.0 + i, "yolov8m": 1.0 + i, "llama3": 30.0 + i},
                        "spec": {"memory_gb": mem, "mem_bw_gbps": 500, "fp32_tflops": 10, "source": "test"},
                    }
                    for i, (g, mem) in enumerate(gpus.items())
                },
            }
        )
    )


def true_memory(model: str, batch: int) -> float:
    fixed, per_sample, _ = LAWS[model]
    return fixed + per_sample * batch


def largest_fitting_batch(model: str, card_gb: float) -> int:
    step = LAWS[model][2]
    batch = step
    while true_memory(model, batch + step) <= card_gb:
        batch += step
    return batch


def table(cards: dict[str, int] = CARDS) -> list[ThroughputRow]:
    """Every model on every card at its largest fitting batch, on 1 and 2 GPUs (steps/s do not matter)."""
    return [
        ThroughputRow(m, largest_fitting_batch(m, mem), g, n, 100.0 / largest_fitting_batch(m, mem) * n)
        for m in LAWS
        for g, mem in cards.items()
        for n in (1, 2)
    ]


@pytest.mark.parametrize("model", sorted(LAWS))
def test_the_law_is_recovered_from_largest_fitting_batches(model):
    memory = MemoryModel(evidence=card_evidence(table(), catalog()))
    fixed, per_sample, step = LAWS[model]
    law = memory.law(model)
    assert law is not None
    assert law.per_sample_gb == pytest.approx(per_sample, rel=0.15)
    for batch in (step, 10 * step, 40 * step):
        # Within what the grid of tried batch sizes leaves open: one step's worth of activations.
        assert memory.predict(model, batch) == pytest.approx(
            true_memory(model, batch), abs=per_sample * step + 0.5
        )
    assert memory.estimate(model, 10 * step).source == "fitted"


@pytest.mark.parametrize("held_out", ["NVIDIA-A100-PCIE-40GB", "NVIDIA-RTX-A6000", "NVIDIA-A10"])
def test_a_card_never_seen_gets_its_largest_batch_fitting_and_the_next_one_not(held_out):
    cards = {g: m for g, m in CARDS.items() if g != held_out}
    memory = MemoryModel(evidence=card_evidence(table(cards), catalog()))
    card_gb = CARDS[held_out]
    for model in LAWS:
        batch = largest_fitting_batch(model, card_gb)
        assert memory.predict(model, batch) <= card_gb + 1e-9  # the line may pass through the card's level
        assert memory.predict(model, batch + 4 * LAWS[model][2]) > card_gb


def test_leave_one_gpu_type_out_figures_on_the_synthetic_table():
    report = leave_gpu_out(table(), catalog())
    assert report["pairs"] == len(LAWS) * len(CARDS)
    assert report["fits"] >= 0.9
    assert report["median_rel_error"] < 0.1
    assert report["sources"]["fitted"] == report["pairs"]


def holding_less(card: str, model: str) -> list[ThroughputRow]:
    """table() on CARDS plus an RTX 3090 (24 GB, as the A10), where `card` runs `model` one step of batch
    below its largest fitting one: it holds less than its size says (ECC, a larger context)."""
    step = LAWS[model][2]
    return [
        replace(r, batch_size=r.batch_size - step) if (r.gpu_type, r.model) == (card, model) else r
        for r in table(CARDS | {"NVIDIA-GeForce-RTX-3090": 24})
    ]


def test_a_card_that_holds_less_than_its_size_is_judged_by_its_own_rows():
    rows = holding_less("NVIDIA-A10", "bert")
    memory = MemoryModel(evidence=card_evidence(rows, catalog(CARDS | {"NVIDIA-GeForce-RTX-3090": 24})))
    full = largest_fitting_batch("bert", 24)
    assert memory.predict("bert", full) <= 24  # the law: fits a 24 GB card (the 3090 ran it)
    assert memory.predict("bert", full, gpu_type="rtx3090") <= 24
    assert memory.predict("bert", full, gpu_type="a10") > 24  # the A10 did not: no OOM there
    assert memory.predict("bert", full - LAWS["bert"][2], gpu_type="a10") <= 24  # what it ran still fits
    assert memory.estimate("bert", full, gpu_type="a10").source == "fitted"
    predictor = fit_predictor(
        rows, catalog(CARDS | {"NVIDIA-GeForce-RTX-3090": 24}), calibrate=False, n_estimators=5
    )
    job = JobSpec(job_id="ns/b", model="bert", batch_size=full, total_steps=100)
    assert predictor.estimate(job, "NVIDIA-A10").gpu_mem_gb > 24
    assert predictor.estimate(job, "NVIDIA-GeForce-RTX-3090").gpu_mem_gb <= 24


def test_leave_one_gpu_type_out_counts_what_no_card_blind_figure_can_get_right():
    cards = CARDS | {"NVIDIA-GeForce-RTX-3090": 24}
    report = leave_gpu_out(holding_less("NVIDIA-A10", "bert"), catalog(cards))
    # Held out, the A10 is predicted to take the batch the 3090 ran on the same 24 GB: one miss, and the
    # table itself says it fits such a card.
    missed = round((1 - report["next_over"]) * report["next_pairs"])
    assert missed >= 1
    assert report["next_contradicted"] == missed
    clean = leave_gpu_out(table(cards), catalog(cards))
    assert clean["next_contradicted"] == 0


def test_the_prediction_does_not_depend_on_the_card_and_reaches_the_predictor():
    predictor = fit_predictor(table(), catalog(), "rf", calibrate=False, n_estimators=10)
    job = JobSpec(job_id="ns/a", model="bert", batch_size=32, total_steps=100)
    never = predictor.estimate(job, NEVER_RUN).gpu_mem_gb
    assert never == predictor.estimate(job, "Tesla-K80").gpu_mem_gb
    assert never == pytest.approx(true_memory("bert", 32), abs=LAWS["bert"][1] * LAWS["bert"][2] + 0.5)


def test_a_measured_peak_overrides_the_table():
    evidence = card_evidence(table(), catalog())
    memory = MemoryModel([MemorySample("bert", 32, 30.0)], evidence)
    est = memory.estimate("bert", 32)
    assert (est.gpu_mem_gb, est.source) == (30.0, "measured")
    # One measured batch: the peak moved along the table's per-sample slope.
    law = MemoryModel(evidence=evidence).law("bert")
    assert memory.predict("bert", 64) == pytest.approx(30.0 + 32 * law.per_sample_gb)
    # A peak teaches its own precision's workload only: fp16 is answered by the fp16 table until an fp16
    # run reports its peak (retraining passes the job's precision on).
    fp16 = [CardEvidence(e.model, e.batch_size, e.gpu_type, e.card_gb, e.ran, "fp16") for e in evidence]
    both = MemoryModel([MemorySample("bert", 32, 30.0)], evidence + fp16)
    assert both.estimate("bert", 32, precision="fp16").source == "fitted"
    run = CompletedRun("ns/b", "bert", 32, "NVIDIA-A10", 1, 100, 10.0, 60.0, gpu_mem_gb=20.0, precision="amp")
    both = MemoryModel([MemorySample("bert", 32, 30.0), memory_sample(run)], evidence + fp16)
    assert both.estimate("bert", 32, precision="fp16") == MemoryEstimate(20.0, "measured")
    assert both.predict("bert", 32) == 30.0


def test_no_evidence_gives_none():
    memory = MemoryModel([MemorySample("cnn", 16, 3.0)], card_evidence(table(), catalog()))
    assert memory.predict("densenet121", 32) is None
    assert memory.estimate("densenet121", 32) is None
    assert MemoryModel().predict("bert", 32) is None


def test_a_table_that_measures_the_same_batches_everywhere_gives_bounds_only():
    # Every card ran every batch (Gavel's shape): no level, only "fits in the smallest card it ran on".
    evidence = card_evidence(all_fit_rows(), three_gpu_catalog())
    assert not largest_fitting([e for e in evidence if e.model == "LM"])
    memory = MemoryModel(evidence=evidence)
    assert memory.law("LM") is None
    est = memory.estimate("LM", 20)
    assert (est.gpu_mem_gb, est.source) == (12.0, "bound")  # ran on a 12 GB K80
    assert memory.predict("LM", 80) == pytest.approx(12.0 * 80 / 40)  # beyond the batches that ran
    # A bound is served only to a job that declares nothing: the scheduler takes the larger of declared
    # and estimated, and would turn "at most 12 GB" into a need of 12 GB.
    assert memory.for_job("LM", 20, 1, declared_gb=None) == 12.0
    assert memory.for_job("LM", 20, 1, declared_gb=3.0) is None


def test_a_table_forced_largest_fitting_or_not():
    evidence = card_evidence(table(), catalog())
    assert MemoryModel(evidence=evidence, largest_fits=False).law("bert") is None
    assert MemoryModel(evidence=evidence, largest_fits=False).estimate("bert", 32).source == "bound"


def test_models_pickled_before_tables_were_read_still_load():
    # The state of a model pickled before this change: measured peaks only.
    state = {"_peaks": {"lm": {10: 4.0}}, "_by_count": {}}
    restored = MemoryModel.__new__(MemoryModel)
    restored.__setstate__(state)
    restored = pickle.loads(pickle.dumps(restored))
    assert restored.predict("LM", 10) == 4.0
    assert restored.predict("bert", 10) is None


def test_a_gang_measured_not_to_run_needs_a_larger_card():
    # Gavel's shape: batch 128 ran on one 12 GB card, not on a gang of them, and on gangs of 16 GB cards.
    single = CardEvidence("r", 128, "k80", 12.0, True)
    gang_oom = CardEvidence("r", 128, "k80", 12.0, False, num_gpus=2)
    gang_ran = CardEvidence("r", 128, "p100", 16.0, True, num_gpus=2)
    memory = MemoryModel(evidence=[single, gang_oom, gang_ran])
    assert memory.predict("r", 128, num_gpus=1) == 12.0
    assert memory.predict("r", 128, num_gpus=4) == 16.0  # at most 16: a gang's bound comes from gangs
    assert memory.predict("r", 64, num_gpus=4) == 16.0  # the smaller batch may fit 12 GB: not said
    alone = MemoryModel(evidence=[single, gang_oom])
    assert alone.predict("r", 128, num_gpus=2) == pytest.approx(12.0 + MEMORY_MARGIN_GB)
    assert alone.estimate("r", 128, num_gpus=2).source == "bound"


def test_the_predictor_learns_what_gavel_measured_not_to_run():
    table = ThroughputTable.load()
    predictor = fit_predictor(
        training_rows(table),
        BenchmarkCatalog.load(),
        "rf",
        calibrate=False,
        n_estimators=5,
        memory_rows=table.rows,
    )
    job = JobSpec(job_id="ns/r", model="ResNet-50", batch_size=128, num_gpus=4, total_steps=100)
    # Measured not to run on 2, 4 and 8 K80s (12 GB), run on gangs of 16 GB cards: no K80 for it.
    assert predictor.estimate(job, "k80").gpu_mem_gb == 16.0
    assert predictor.estimate(replace(job, num_gpus=1), "k80").gpu_mem_gb == 12.0
    assert (
        predictor.estimate(replace(job, gpu_mem_gb=9.0), "k80").gpu_mem_gb is None
    )  # declared: a bound adds nothing
