"""The folds every evaluation and the predictor's spread calibration share: the same folds for every
estimator, three splits.

- `random`: configurations (model, batch size, GPU type, GPU count) split into 5 folds
  at random; every row of a configuration lands in the same fold.
- `leave_gpu_out`: each GPU type in turn is held out; its benchmark scores and specs are
  known (a new GPU is benchmarked before jobs run on it), its throughputs are not.
- `leave_model_out`: each model in turn is held out (what `explore` is for).

`out_of_fold` predicts every row by a model that never saw it: models.evaluation scores those
predictions, models.predictor calibrates its stated spread on their errors.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.model_selection import GroupKFold, LeaveOneGroupOut

from cpn.formats.throughput import ThroughputRow
from cpn.model_names import model_key
from models.benchmarks import BenchmarkCatalog
from models.estimators import Estimator, Prediction, make_estimator
from models.features import PredictorInputError, query_of, workload_key

log = logging.getLogger(__name__)

SPLITS = ("random", "leave_gpu_out", "leave_model_out")
"""Splits every evaluation reports."""

RANDOM_FOLDS = 5
"""Folds of the `random` split."""


def config_key(row: ThroughputRow) -> tuple[str, int | None, str, int]:
    """What makes two rows the same configuration."""
    return workload_key(row.model, row.precision), row.batch_size, row.gpu_type, row.num_gpus


def folds(
    rows: Sequence[ThroughputRow], split: str, seed: int = 0, max_folds: int | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train indices, test indices) of each fold; empty when the data cannot support the split.

    scikit-learn's splitters: `random` is GroupKFold (shuffled) over configurations, the others
    LeaveOneGroupOut over GPU types or models, or, with `max_folds` and more groups than that,
    GroupKFold (shuffled) holding out several groups per fold.
    """
    if skip_reason(rows, split) is not None:
        return []
    X = np.zeros((len(rows), 1))
    if split == "random":
        keys = {k: i for i, k in enumerate(sorted({config_key(r) for r in rows}, key=repr))}
        groups = np.array([keys[config_key(r)] for r in rows])
        splitter = GroupKFold(n_splits=RANDOM_FOLDS, shuffle=True, random_state=seed)
    else:
        groups = np.array([r.gpu_type if split == "leave_gpu_out" else model_key(r.model) for r in rows])
        splitter = LeaveOneGroupOut()
        if max_folds is not None and len(set(groups)) > max_folds:
            splitter = GroupKFold(n_splits=max_folds, shuffle=True, random_state=seed)
    return list(splitter.split(X, groups=groups))


def skip_reason(rows: Sequence[ThroughputRow], split: str) -> str | None:
    """Why `split` cannot be run on `rows` (None if it can): what it needs and what the data has."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    if split == "random":
        n = len({config_key(r) for r in rows})
        if n < RANDOM_FOLDS:
            return f"needs >= {RANDOM_FOLDS} distinct configurations, the data has {n}"
        return None
    what, values = {
        "leave_gpu_out": ("GPU types", {r.gpu_type for r in rows}),
        "leave_model_out": ("models", {model_key(r.model) for r in rows}),
    }[split]
    if len(values) < 2:
        return f"needs >= 2 {what}, the data has {len(values)} ({', '.join(sorted(values)) or 'none'})"
    return None


def predict_rows(est: Estimator, rows: Sequence[ThroughputRow]) -> Prediction:
    """Predictions for measured rows; a row the estimator cannot take is named (file:line) in the error."""
    try:
        return est.predict([query_of(r) for r in rows])
    except PredictorInputError:
        for r in rows:
            try:
                est.predict([query_of(r)])
            except PredictorInputError as exc:
                raise PredictorInputError(f"{r.source or r}: {exc}") from None
        raise


def out_of_fold(
    rows: Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    estimator: str,
    split: str,
    seed: int = 0,
    params: dict[str, Any] | None = None,
    max_folds: int | None = None,
) -> Prediction | None:
    """Prediction of every row by a model that never saw it; None if the split is impossible."""
    splits = folds(rows, split, seed, max_folds)
    if not splits:
        return None
    mean, spread, seen = np.empty(len(rows)), np.empty(len(rows)), np.empty(len(rows), dtype=bool)
    kind = np.zeros(len(rows), dtype=np.int64)
    distance = np.zeros(len(rows))
    for i, (train, test) in enumerate(splits, start=1):
        log.info("%s, %s: fold %d of %d (%d rows held out)", estimator, split, i, len(splits), len(test))
        est = make_estimator(estimator, catalog, seed, **(params or {})).fit([rows[i] for i in train])
        p = predict_rows(est, [rows[i] for i in test])
        mean[test], spread[test], seen[test], kind[test] = p.log_steps_per_sec, p.log_spread, p.seen, p.kind
        distance[test] = p.distance
    return Prediction(mean, spread, seen, kind, distance)
