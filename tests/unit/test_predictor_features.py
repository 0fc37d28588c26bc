"""Feature building: valid inputs give the documented features, invalid ones a clear error."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cpn.formats.throughput import ThroughputRow, ThroughputTable
from models.features import FeatureBuilder, PredictorInputError, Query, training_rows
from tests.unit.test_predictor_support import catalog, rows


@pytest.fixture(scope="module")
def builder() -> FeatureBuilder:
    return FeatureBuilder(catalog()).fit(rows())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"batch_size": 32.5}, "batch_size must be a positive integer"),
        ({"batch_size": True}, "batch_size must be a positive integer"),
        ({"num_gpus": 0}, "num_gpus must be a positive integer"),
        ({"num_gpus": "2"}, "num_gpus must be a positive integer"),
        ({"gpu_type": " "}, "gpu_type must be a non-empty string"),
        ({"model": ""}, "no letters or digits"),
    ],
)
def test_malformed_queries_are_rejected(kwargs, message):
    args = {"model": "ResNet-50", "batch_size": 32, "gpu_type": "v100", "num_gpus": 1} | kwargs
    with pytest.raises(PredictorInputError, match=message):
        Query(**args)


def test_features_of_a_known_configuration(builder):
    feats = builder.transform([Query("ResNet-50", 32, "Tesla-V100-SXM2-16GB", 2)])
    names = builder.feature_names
    x = dict(zip(names, feats.X[0], strict=True))
    assert feats.X.shape == (1, len(names))
    assert x["log_batch_size"] == pytest.approx(math.log(32))
    assert x["log_num_gpus"] == pytest.approx(math.log(2))
    assert x["log_score_resnet50"] == pytest.approx(math.log(40 * 7))
    assert x["log_mem_bw"] == pytest.approx(math.log(900))
    assert x["memory_gb"] == 16
    assert x["model=resnet50"] == 1.0 and x["model=lm"] == 0.0
    assert feats.seen.tolist() == [True]
    # The prior alone is within the law's GPU-count exponent of the truth.
    truth = 10.0 * 7 * 2**0.9
    assert math.exp(feats.prior[0]) == pytest.approx(truth, rel=0.15)


def test_fixed_batch_model_has_nan_batch_and_nothing_else_missing(builder):
    feats = builder.transform([Query("A3C", None, "k80", 1)])
    assert math.isnan(feats.X[0, 0])
    assert not np.isnan(feats.X[0, 1:]).any()


def test_unseen_batch_size_is_interpolated_between_measured_ones(builder):
    at_16, at_24, at_32 = builder.transform([Query("ResNet-50", b, "p100", 1) for b in (16, 24, 32)]).prior
    assert at_32 < at_24 < at_16
    # The model reference feature, beyond the measured range: constant samples/s, so steps/s halves when
    # the batch doubles.
    feats = builder.transform([Query("ResNet-50", b, "p100", 1) for b in (64, 128)])
    at_64, at_128 = feats.X[:, builder.feature_names.index("model_ref")]
    assert at_64 - at_128 == pytest.approx(math.log(2))


def test_unseen_model_is_flagged_and_gets_the_median_reference(builder):
    feats = builder.transform([Query("bert-large", 32, "v100", 1), Query("LM", 20, "v100", 1)])
    assert feats.seen.tolist() == [False, True]
    assert not any(n.startswith("model=bert") for n in builder.feature_names)
    assert feats.X[0, builder.feature_names.index("model=lm")] == 0.0


def test_unknown_gpu_type_names_the_known_ones(builder):
    with pytest.raises(PredictorInputError, match=r"unknown GPU type 'A100-SXM4-80GB'.*k80.*p100.*v100"):
        builder.transform([Query("LM", 20, "A100-SXM4-80GB", 1)])


def test_batch_size_mismatches_are_rejected(builder):
    with pytest.raises(PredictorInputError, match="needs a batch size"):
        builder.transform([Query("ResNet-50", None, "v100", 1)])
    with pytest.raises(PredictorInputError, match="fixed batch"):
        builder.transform([Query("A3C", 32, "v100", 1)])


def test_training_rows_must_run_and_gpu_types_must_be_known():
    with pytest.raises(PredictorInputError, match="steps_per_sec must be positive"):
        FeatureBuilder(catalog()).fit([ThroughputRow("LM", 20, "v100", 1, 0.0)])
    with pytest.raises(PredictorInputError, match="unknown GPU type 'h100'"):
        FeatureBuilder(catalog()).fit([ThroughputRow("LM", 20, "h100", 1, 3.0)])
    with pytest.raises(PredictorInputError, match="no training rows"):
        FeatureBuilder(catalog()).fit([])
    with pytest.raises(PredictorInputError, match="before fit"):
        FeatureBuilder(catalog()).transform([Query("LM", 20, "v100", 1)])


def test_training_rows_keep_consolidated_rows_that_ran():
    table = ThroughputTable(
        [
            ThroughputRow("LM", 20, "v100", 2, 5.0),
            ThroughputRow("LM", 20, "v100", 2, 3.0, consolidated=False),
            ThroughputRow("LM", 40, "v100", 8, 0.0),
        ]
    )
    assert training_rows(table) == [ThroughputRow("LM", 20, "v100", 2, 5.0)]
