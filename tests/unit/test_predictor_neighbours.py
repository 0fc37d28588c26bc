"""Neighbour features: estimates from measured configurations around a query, never from the query's own."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from cpn.formats.throughput import ThroughputRow
from models.estimators import make_estimator
from models.features import LOCAL_KINDS, NEIGHBOUR_FEATURES, FeatureBuilder, Query, query_of
from models.folds import out_of_fold
from tests.unit.test_predictor_support import catalog, law, rows

RECTANGLES = [NEIGHBOUR_FEATURES.index(n) for n in ("nb_rect_count", "nb_rect_gpu", "nb_rect_both")]


def _replace(data: list[ThroughputRow], target: Query, factor: float) -> list[ThroughputRow]:
    return [
        ThroughputRow(r.model, r.batch_size, r.gpu_type, r.num_gpus, r.steps_per_sec * factor)
        if query_of(r) == target
        else r
        for r in data
    ]


def test_a_rows_own_value_never_enters_its_features():
    """Leakage: scaling one training row by 10 changes nothing in its own neighbour features."""
    target = Query("Transformer", 64, "p100", 2)
    neighbour = Query("Transformer", 32, "p100", 2)
    before = FeatureBuilder(catalog()).fit(rows())
    after = FeatureBuilder(catalog()).fit(_replace(rows(), target, 10.0))
    own_before, own_after = before.transform([target]), after.transform([target])
    np.testing.assert_array_equal(own_before.neighbours, own_after.neighbours)
    # The local prior also weighs the physical prior, which (like the model references) is fitted on every
    # training row: on this exact law the exact neighbour families outweigh it by ~1e12, so the row's own
    # value (ten times too large) moves its local prior by a few parts in a billion.
    np.testing.assert_allclose(own_before.local_prior, own_after.local_prior, rtol=1e-8)
    # ...while a configuration next to it does see the change (the features are not blind to it).
    near_before, near_after = before.transform([neighbour]), after.transform([neighbour])
    assert not np.allclose(near_before.local_prior, near_after.local_prior)


def test_repeated_measurements_of_a_configuration_are_all_left_out():
    target = Query("LM", 20, "v100", 4)
    data = rows()
    repeated = data + [ThroughputRow("LM", 20, "v100", 4, 1e6)]
    a = FeatureBuilder(catalog()).fit(data).transform([target])
    b = FeatureBuilder(catalog()).fit(repeated).transform([target])
    np.testing.assert_array_equal(a.neighbours, b.neighbours)


def test_neighbours_recover_a_multiplicative_law_exactly():
    """On a law that is additive in log space every rectangle and line (but the count line) is exact."""
    builder = FeatureBuilder(catalog()).fit(rows())
    queries = [Query("ResNet-50", 32, "v100", 2), Query("LM", 40, "k80", 4), Query("A3C", None, "p100", 2)]
    feats = builder.transform(queries)
    truth = np.log([law(q.model, q.batch_size, q.gpu_type, q.num_gpus) for q in queries])
    np.testing.assert_allclose(feats.local_prior, truth, rtol=1e-9)
    for i, name in enumerate(NEIGHBOUR_FEATURES):
        if name == "nb_count":
            continue
        column = feats.neighbours[:, i]
        ok = ~np.isnan(column)
        np.testing.assert_allclose(column[ok], truth[ok], rtol=1e-9, err_msg=name)
    assert [LOCAL_KINDS[k] for k in feats.local_kind] == ["rectangle", "rectangle", "same_model_line"]
    # A fixed-batch model has no other batch size: no rectangle, no batch line.
    assert np.isnan(feats.neighbours[2, RECTANGLES]).all()


def test_unmeasured_batch_size_uses_the_batch_line():
    builder = FeatureBuilder(catalog()).fit(rows())
    feats = builder.transform([Query("ResNet-50", 24, "p100", 2)])
    assert np.isnan(feats.neighbours[0, RECTANGLES]).all()
    assert not math.isnan(feats.neighbours[0, NEIGHBOUR_FEATURES.index("nb_batch")])
    assert LOCAL_KINDS[feats.local_kind[0]] == "same_model_line"


def test_gpu_type_or_model_never_measured_has_no_local_prior():
    builder = FeatureBuilder(catalog()).fit(rows(gpus=("k80", "p100")))
    feats = builder.transform([Query("ResNet-50", 32, "v100", 2), Query("bert", 8, "k80", 1)])
    assert np.isnan(feats.neighbours).all()
    assert np.isnan(feats.local_prior).all() and feats.local_kind.tolist() == [0, 0]
    assert not feats.has_local.any()


def test_features_without_neighbours_are_nan_and_the_rest_unchanged():
    builder = FeatureBuilder(catalog()).fit(rows())
    q = [Query("LM", 20, "v100", 2)]
    full, bare = builder.transform(q), builder.transform(q, with_neighbours=False)
    np.testing.assert_array_equal(full.X, bare.X)
    assert np.isnan(bare.neighbours).all() and not bare.has_local.any()
    assert full.local_X().shape[1] == len(builder.local_feature_names)


def test_builder_pickled_without_neighbour_index_still_predicts_globally():
    builder = FeatureBuilder(catalog()).fit(rows())
    state = builder.__dict__.copy()
    for k in ("_measured", "_by_model", "_cell_ratio", "_gpus", "_measured_nb", "_siblings", "local_weights"):
        del state[k]
    old = FeatureBuilder.__new__(FeatureBuilder)
    old.__setstate__(state)
    feats = pickle.loads(pickle.dumps(old)).transform([Query("LM", 20, "v100", 2)])
    assert not feats.has_local.any()


def test_builder_pickled_before_the_weighted_local_prior_answers_globally_and_knows_what_it_measured():
    """Its local model learnt from other columns: no local prior (the global model answers), while the
    extrapolation kinds (which set the spread) still come from its measurements."""
    builder = FeatureBuilder(catalog()).fit(rows())
    state = builder.__dict__.copy()
    del state["local_weights"], state["_siblings"]
    state["_measured_nb"] = {k: (nb, 0.0, kind) for k, (nb, kind) in state["_measured_nb"].items()}
    old = FeatureBuilder.__new__(FeatureBuilder)
    old.__setstate__(state)
    measured = Query("LM", 20, "v100", 2)
    feats = pickle.loads(pickle.dumps(old)).transform([measured])
    assert not feats.has_local.any()
    assert old.kinds([measured]).tolist() == [0]


def test_local_forest_answers_measured_neighbourhoods_and_the_global_one_the_rest():
    est = make_estimator("rf", catalog(), n_estimators=50).fit(rows(gpus=("k80", "p100")))
    assert est.local_model is not None
    pred = est.predict([Query("LM", 20, "p100", 2), Query("LM", 20, "v100", 2)])
    truth = np.array([law("LM", 20, "p100", 2), law("LM", 20, "v100", 2)])
    assert np.abs(pred.steps_per_sec / truth - 1).max() < 0.05
    assert any(k.startswith("local:nb_") for k in est.feature_importances())


@pytest.mark.parametrize("name", ["rf", "xgb"])
def test_out_of_fold_prediction_ignores_the_held_out_rows_value(name):
    """Corrupting one row changes its own out-of-fold prediction not at all."""
    target = Query("Transformer", 64, "v100", 2)
    params = {"rf": {"n_estimators": 30}, "xgb": {"n_estimators": 50, "members": 2}}[name]
    data = rows(affinity=0.3)
    i = next(j for j, r in enumerate(data) if query_of(r) == target)
    clean = out_of_fold(data, catalog(), name, "random", params=params)
    dirty = out_of_fold(_replace(data, target, 50.0), catalog(), name, "random", params=params)
    assert clean.log_steps_per_sec[i] == pytest.approx(dirty.log_steps_per_sec[i])


@pytest.mark.parametrize("name", ["rf", "xgb"])
def test_neighbours_can_be_switched_off(name):
    params = {"rf": {"n_estimators": 30}, "xgb": {"n_estimators": 50, "members": 2}}[name]
    est = make_estimator(name, catalog(), neighbours=False, **params).fit(rows())
    assert est.params()["neighbours"] is False
    assert not any(k.startswith("local:") for k in est.feature_importances())
    assert make_estimator(name, catalog(), **params).params()["neighbours"] is True


SPEED_LINE = NEIGHBOUR_FEATURES.index("nb_speed")


def test_speed_line_interpolates_between_slower_and_faster_gpu_types_only():
    """A configuration measured on a slower and a faster GPU type is interpolated at the query's speed;
    on the slowest or fastest type there is nothing to interpolate between (no extrapolation). A3C is
    never measured on p100, so only the speed line and other models' ratios know anything there."""
    data = [r for r in rows() if r.model == "A3C" and r.gpu_type != "p100"]
    data += [r for r in rows() if r.model == "LM" and r.gpu_type == "p100"]
    builder = FeatureBuilder(catalog()).fit(data)
    middle, fastest = Query("A3C", None, "p100", 2), Query("A3C", None, "v100", 2)
    feats = builder.transform([middle, fastest])
    cat = catalog()
    s = {g: cat.find(g).log_speed for g in ("k80", "p100", "v100")}
    y = {g: math.log(law("A3C", None, g, 2)) for g in ("k80", "v100")}
    expected = y["k80"] + (y["v100"] - y["k80"]) * (s["p100"] - s["k80"]) / (s["v100"] - s["k80"])
    assert feats.neighbours[0, SPEED_LINE] == pytest.approx(expected, rel=1e-12)
    assert LOCAL_KINDS[feats.local_kind[0]] == "speed_line"
    assert math.isnan(feats.neighbours[1, SPEED_LINE])
    assert LOCAL_KINDS[feats.local_kind[1]] != "speed_line"


def test_neighbours_kept_from_training_are_never_stale():
    """Measured configurations keep their neighbour estimates from training; training again on other data,
    or serving another catalog, recomputes them."""
    target, neighbour = Query("Transformer", 64, "p100", 2), Query("Transformer", 32, "p100", 2)
    builder = FeatureBuilder(catalog()).fit(rows())
    first = builder.transform([target])
    np.testing.assert_array_equal(
        first.neighbours[0], FeatureBuilder(catalog()).fit(rows())._neighbours("transformer", 64, "p100", 2)
    )
    builder.fit(_replace(rows(), neighbour, 10.0))
    assert not np.allclose(builder.transform([target]).local_prior, first.local_prior)
    faster_p100 = builder.with_catalog(catalog({"k80": 1.0, "p100": 5.0, "v100": 7.0}))
    speed_line = NEIGHBOUR_FEATURES.index("nb_speed")
    a3c = Query("A3C", None, "p100", 2)
    assert (
        builder.transform([a3c]).neighbours[0, speed_line]
        != faster_p100.transform([a3c]).neighbours[0, speed_line]
    )


PRECISION_RECT = NEIGHBOUR_FEATURES.index("nb_rect_precision")
SPEED_OF = ("k80", "p100", "v100")
GPU_COUNTS = (1, 2, 4)


def _machine_world() -> list[ThroughputRow]:
    """Lambda's shape: one batch size per (model, precision, GPU type), fp16 runs 1.6x faster at a larger
    batch, and the 4-card v100 machine scales badly for every model (a property of the machine)."""
    out = []
    for m in ("LM", "Transformer"):
        for precision, factor, batch in (("fp32", 1.0, 20), ("fp16", 1.6, 40)):
            for g in SPEED_OF:
                b = batch * (2 if g == "v100" else 1)
                for n in GPU_COUNTS:
                    machine = 0.6 if (g, n) == ("v100", 4) else 1.0
                    tp = law(m, b, g, n) * factor * machine
                    out.append(ThroughputRow(m, b, g, n, tp, precision=precision))
    return out


def test_precision_rectangle_carries_the_same_machines_count_scaling():
    """The 4-card v100 run of LM in fp16 was never measured: its fp32 sibling on the same machine shows
    how badly that machine scales, so the precision rectangle is exact where the linear count line is not."""
    target = Query("LM", 80, "v100", 4, precision="fp16")
    data = [r for r in _machine_world() if query_of(r) != target]
    feats = FeatureBuilder(catalog()).fit(data).transform([target])
    truth = math.log(law("LM", 80, "v100", 4) * 1.6 * 0.6)
    assert feats.neighbours[0, PRECISION_RECT] == pytest.approx(truth, rel=1e-12)
    count_line = feats.neighbours[0, NEIGHBOUR_FEATURES.index("nb_count")]
    assert abs(count_line - truth) > 0.4
    assert LOCAL_KINDS[feats.local_kind[0]] == "rectangle"
    # Without the other precision there is no such rectangle.
    alone = FeatureBuilder(catalog()).fit([r for r in data if r.precision == "fp16"]).transform([target])
    assert math.isnan(alone.neighbours[0, PRECISION_RECT])


def test_local_weights_follow_each_estimates_typical_training_error():
    """1 / (1.4826 x median |error|)^2 per column: twice the error, a quarter of the weight; one wild row
    does not move it; a column with fewer than 5 rows has no weight."""
    rng = np.random.default_rng(0)
    log_y = rng.normal(size=40)
    signs = np.where(rng.random(40) < 0.5, -1.0, 1.0)
    tight, loose = log_y + 0.05 * signs, log_y + 0.10 * signs
    loose[0] += 5.0
    rare = np.full(40, np.nan)
    rare[:4] = log_y[:4]
    weights = FeatureBuilder.weights_of(np.column_stack([tight, loose, rare]), log_y)
    assert weights[0] == pytest.approx(1 / (1.4826 * 0.05) ** 2)
    assert weights[1] == pytest.approx(weights[0] / 4)
    assert weights[2] == 0.0


def test_local_prior_is_the_weighted_mean_of_what_exists_and_needs_a_neighbour():
    builder = FeatureBuilder(catalog())
    builder.local_weights = np.array([4.0, *[0.0] * (len(NEIGHBOUR_FEATURES) - 1), 1.0])
    neighbours = np.full((2, len(NEIGHBOUR_FEATURES)), np.nan)
    neighbours[0, 0] = 1.0
    prior = np.array([2.0, 3.0])
    local = builder.local_prior(neighbours, prior)
    assert local[0] == pytest.approx((4 * 1.0 + 1 * 2.0) / 5)
    assert math.isnan(local[1])  # the prior alone is not a local prior: the global model answers
