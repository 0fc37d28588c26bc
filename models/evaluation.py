"""Evaluation that cannot flatter itself: the same folds for every estimator (models.folds: `random`,
`leave_gpu_out`, `leave_model_out`), and optionally `external`: train on all of one table, score on
another.

Out-of-fold predictions are pooled per split before scoring. Metrics: MAPE and median
absolute percentage error of steps/s (fractions: 0.1 = 10%), R^2 of log steps/s
(throughputs span three orders of magnitude; a raw R^2 would be decided by the few
largest rows), and MAPE per GPU type.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.metrics import mean_absolute_percentage_error, r2_score

from cpn.formats.throughput import ThroughputRow
from cpn.model_names import model_key
from models.benchmarks import BenchmarkCatalog
from models.catalog import shipped_catalog
from models.estimators import Prediction, make_estimator
from models.features import PredictorInputError, Query
from models.folds import SPLITS, folds, out_of_fold, predict_rows, skip_reason
from models.memory import leave_gpu_out as memory_leave_gpu_out
from models.predictor import calibration_from, fit_predictor, log_errors, served_spread

DEFAULT_ESTIMATOR = "rf"


@dataclass(frozen=True)
class Target:
    """One figure the issue asks the default estimator to reach."""

    name: str
    value: float
    limit: float
    low: float | None = None
    """Lower bound, for a figure that must lie in a range (coverage)."""

    @property
    def met(self) -> bool:
        """True if the value is within the limit (and not below `low`)."""
        return self.value <= self.limit and (self.low is None or self.value >= self.low)


def metrics(
    actual: np.ndarray,
    prediction: Prediction,
    gpu_types: Sequence[str],
    models: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Scores of predicted vs actual steps/s (scikit-learn's metrics).

    mape, median_ape (fractions), r2 (of log steps/s), per_gpu (MAPE per GPU type),
    spread_coverage (share of rows whose actual value lies within the predicted value
    times/divided by exp(spread): about 0.68 for a calibrated spread) and n; with `models` (each row's
    model) also per_model (MAPE per model key) and catalogued_mape (over the rows of models the model
    catalog profiles, models.catalog; None if none is).
    """
    predicted = prediction.steps_per_sec
    ape = np.abs(predicted - actual) / actual
    log_a, log_p = np.log(actual), prediction.log_steps_per_sec
    gpus = np.asarray(gpu_types)
    by_model: dict[str, Any] = {}
    if models is not None:
        keys = np.array([model_key(m) for m in models])
        known = np.array([shipped_catalog().find(m) is not None for m in keys], dtype=bool)
        by_model = {
            "per_model": {m: float(ape[keys == m].mean()) for m in sorted(set(keys.tolist()))},
            "catalogued_mape": float(ape[known].mean()) if known.any() else None,
        }
    return by_model | {
        "mape": float(mean_absolute_percentage_error(actual, predicted)),
        "median_ape": float(np.median(ape)),
        "r2": float(r2_score(log_a, log_p)) if len(actual) > 1 and np.ptp(log_a) > 0 else None,
        "per_gpu": {
            g: float(mean_absolute_percentage_error(actual[gpus == g], predicted[gpus == g]))
            for g in sorted(set(gpu_types))
        },
        "spread_coverage": float(np.mean(np.abs(log_a - log_p) <= prediction.log_spread)),
        "n": len(actual),
    }


def calibrated_coverage(
    rows: Sequence[ThroughputRow], prediction: Prediction, split: str, seed: int = 0
) -> float | None:
    """Share of out-of-fold rows within the spread as the served Predictor states it (per-kind scales,
    models.predictor), each fold's scales calibrated on the *other* folds' errors only: how well the
    calibration carries to data it has not seen (None if there is a single fold)."""
    splits = folds(rows, split, seed)
    if len(splits) < 2 or prediction.kind is None:
        return None
    errors, raw, kinds = log_errors(rows, prediction), prediction.log_spread, prediction.kind
    inside = np.zeros(len(rows), dtype=bool)
    for _, test in splits:
        others = np.ones(len(rows), dtype=bool)
        others[test] = False
        dist = prediction.distance
        scale, floor, slope = calibration_from(errors[others], raw[others], kinds[others], dist[others])
        inside[test] = errors[test] <= served_spread(raw[test], kinds[test], scale, floor, dist[test], slope)
    return float(inside.mean())


def prediction_ms(
    predictor: Any, rows: Sequence[ThroughputRow], catalog: BenchmarkCatalog, seed: int = 0, pairs: int = 1000
) -> tuple[float, float]:
    """(first call, best of 5 calls) in ms for `predictor` (a models.predictor.Predictor) to estimate
    `pairs` (configuration, GPU type) pairs drawn from the rows' configurations and the catalog's GPU types.
    The first call computes every query's neighbour estimates; later calls on the same pairs (the scheduler
    asks about the same queue every round) find them cached."""
    configs = sorted({(r.model, r.batch_size, r.num_gpus, r.precision) for r in rows}, key=repr)
    gpus = catalog.gpu_types()
    picks = np.random.default_rng(seed).integers(0, len(configs), pairs)
    queries = [
        Query(configs[c][0], configs[c][1], gpus[i % len(gpus)], configs[c][2], precision=configs[c][3])
        for i, c in enumerate(picks)
    ]
    runs = []
    for _ in range(6):
        start = time.perf_counter()
        predictor.throughput(queries)
        runs.append((time.perf_counter() - start) * 1000)
    return runs[0], min(runs[1:])


def timing(
    rows: Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    estimator: str,
    seed: int = 0,
    params: dict[str, Any] | None = None,
) -> tuple[float, float, float]:
    """(seconds to train a served Predictor on all rows, spread calibration included; ms of its first
    call on 1,000 pairs; ms of its best of 5 later calls on them): see prediction_ms."""
    start = time.perf_counter()
    predictor = fit_predictor(rows, catalog, estimator, seed=seed, **(params or {}))
    train_s = time.perf_counter() - start
    return train_s, *prediction_ms(predictor, rows, catalog, seed)


def bench(
    rows: Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    estimators: Sequence[str] = ("rf", "xgb", "baseline"),
    test_rows: Sequence[ThroughputRow] | None = None,
    seed: int = 0,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every split for every estimator, with timings and the issue's targets for the default estimator.

    `progress` is told each step (split and estimator) before it starts.

    Shape: {"splits": {split: {estimator: metrics}}, "train_s": {...}, "predict_1000_ms": {...},
    "targets": [...], "rows": n, "skipped_splits": [...], "skipped_reasons": {split: why},
    "memory_leave_gpu_out": models.memory.leave_gpu_out's figures or None}.
    A split the data cannot support (one GPU type, one model, fewer than 5 configurations) is
    skipped, not an error; PredictorInputError names the row (file:line) a model cannot predict.
    """
    rows = list(rows)
    actual = np.array([r.steps_per_sec for r in rows])
    gpu_types = [r.gpu_type for r in rows]
    report: dict[str, Any] = {
        "splits": {},
        "train_s": {},
        "predict_1000_ms": {},
        "predict_1000_first_ms": {},
        "rows": len(rows),
    }
    if not rows:
        raise PredictorInputError("no training rows (steps_per_sec > 0, consolidated)")
    skipped: dict[str, str] = {}
    for split in SPLITS:
        if (reason := skip_reason(rows, split)) is not None:
            skipped[split] = reason
            continue
        for name in estimators:
            progress(f"{split}: {name} ({len(folds(rows, split, seed))} folds)")
            predicted = out_of_fold(rows, catalog, name, split, seed)
            if predicted is None:  # skip_reason and folds agree; kept for safety
                skipped[split] = "the data cannot support it"
                break
            scores = metrics(actual, predicted, gpu_types, [r.model for r in rows])
            scores["calibrated_coverage"] = calibrated_coverage(rows, predicted, split, seed)
            report["splits"].setdefault(split, {})[name] = scores
    if test_rows is not None:
        if not test_rows:
            raise PredictorInputError("no test rows (steps_per_sec > 0, consolidated)")
        test_actual = np.array([r.steps_per_sec for r in test_rows])
        for name in estimators:
            progress(f"external: {name} (trained on all {len(rows)} rows, {len(test_rows)} test rows)")
            est = make_estimator(name, catalog, seed).fit(rows)
            predicted = predict_rows(est, test_rows)
            report["splits"].setdefault("external", {})[name] = metrics(
                test_actual, predicted, [r.gpu_type for r in test_rows]
            )
    for name in estimators:
        progress(f"timing: {name}")
        train_s, first_ms, warm_ms = timing(rows, catalog, name, seed)
        report["train_s"][name], report["predict_1000_first_ms"][name] = train_s, first_ms
        report["predict_1000_ms"][name] = warm_ms
    report["skipped_splits"] = list(skipped)
    report["skipped_reasons"] = skipped
    report["memory_leave_gpu_out"] = memory_leave_gpu_out(rows, catalog)
    report["targets"] = [t.__dict__ | {"met": t.met} for t in targets(report)]
    return report


def targets(report: dict[str, Any], estimator: str = DEFAULT_ESTIMATOR) -> list[Target]:
    """The issue's targets for `estimator`, from a `bench` report (those its splits allow)."""
    out = []
    splits = report["splits"]
    if estimator in splits.get("random", {}):
        # The issue asks <= 8% on Lambda's table and <= 10% on Gavel's; a report does not know which
        # table it measured, so the stricter target is printed for every one.
        out.append(Target("random MAPE", splits["random"][estimator]["mape"], 0.08))
    if estimator in splits.get("leave_gpu_out", {}):
        logo = splits["leave_gpu_out"][estimator]
        # Issue 29: <= 15% on a table of 4 or more GPU types, <= 25% on one of 3 (Gavel's).
        few = len(logo["per_gpu"]) < 4
        name = f"leave-one-GPU-type-out MAPE ({len(logo['per_gpu'])} types)"
        out.append(Target(name, logo["mape"], 0.25 if few else 0.15))
    for split, label in (
        ("random", "random"),
        ("leave_gpu_out", "leave-one-GPU-type-out"),
        ("leave_model_out", "leave-one-model-out"),
    ):
        coverage = splits.get(split, {}).get(estimator, {}).get("calibrated_coverage")
        if coverage is not None:
            out.append(Target(f"{label} coverage of the stated spread", coverage, 0.80, 0.60))
    lmo = splits.get("leave_model_out", {}).get(estimator, {})
    if lmo.get("catalogued_mape") is not None:
        out.append(Target("leave-one-model-out MAPE, catalogued models", lmo["catalogued_mape"], 0.40))
    if estimator in report["train_s"]:
        out.append(Target("training time on the full table (s)", report["train_s"][estimator], 20.0))
        out.append(Target("1,000 predictions (ms)", report["predict_1000_ms"][estimator], 50.0))
        if (first := report.get("predict_1000_first_ms", {}).get(estimator)) is not None:
            # The later calls find every answer cached (models.predictor.Predictor.throughput): the first
            # call is what 1,000 configurations never asked before cost.
            out.append(Target("1,000 predictions, first call (ms)", first, 50.0))
    return out


def format_report(report: dict[str, Any]) -> str:
    """The report as a plain-text table."""
    head = f"{'split':<16} {'estimator':<9} {'MAPE':>7} {'medAPE':>7} {'R2(log)':>8}"
    head += f" {'cover':>6} {'calib':>6}"
    lines = [f"{head}  MAPE per GPU type (leave_model_out: per model)"]
    for split, by_est in report["splits"].items():
        for name, m in by_est.items():
            r2 = f"{m['r2']:8.3f}" if m["r2"] is not None else f"{'n/a':>8}"
            per_gpu = " ".join(f"{g}={v:.1%}" for g, v in m["per_gpu"].items())
            if split == "leave_model_out" and m.get("per_model"):
                # Held-out models, not GPU types, are what this split varies.
                per_gpu = " ".join(f"{k}={v:.1%}" for k, v in m["per_model"].items())
                if m.get("catalogued_mape") is not None:
                    per_gpu = f"catalogued {m['catalogued_mape']:.1%}: {per_gpu}"
            calibrated = m.get("calibrated_coverage")
            calib = f"{calibrated:6.0%}" if calibrated is not None else f"{'n/a':>6}"
            cover = f"{m['spread_coverage']:6.0%} {calib}"
            lines.append(
                f"{split:<16} {name:<9} {m['mape']:7.1%} {m['median_ape']:7.1%} {r2} {cover}  {per_gpu}"
            )
    reasons = report.get("skipped_reasons", {})
    for split in report.get("skipped_splits", []):
        why = reasons.get(split, "the data has too few distinct values to hold one out")
        lines.append(f"{split:<16} (skipped: {why})")
    lines.append("R2 of log steps/s; cover: share of rows within the estimator's raw spread; calib: within")
    lines.append("the spread the served Predictor states (scale and per-kind floors from the other folds)")
    lines.append("")
    head = f"{'estimator':<9} {'train, calibrated (s)':>22} {'1,000 predictions (ms)':>24}"
    lines.append(f"{head} {'first':>7}")
    for name, s in report["train_s"].items():
        first = report.get("predict_1000_first_ms", {}).get(name, float("nan"))
        lines.append(f"{name:<9} {s:22.2f} {report['predict_1000_ms'][name]:24.1f} {first:7.1f}")
    lines.append("1,000 predictions: best of 5 calls on the same pairs (answers cached per configuration, as")
    lines.append(
        "when the scheduler asks about its queue every round); first: the first call, computing them all"
    )
    if (mem := report.get("memory_leave_gpu_out")) is not None:
        over = f"{mem['next_over']:.1%}" if mem["next_over"] is not None else "n/a"
        lines.append("")
        lines.append(
            f"GPU memory, leave-one-GPU-type-out ({mem['pairs']} workload x card pairs at the largest batch "
            f"that fits): predicted to fit {mem['fits']:.1%},"
        )
        lines.append(
            f"next larger batch predicted not to fit {over} (of {mem['next_pairs']}), median |predicted - "
            f"card memory| / card memory {mem['median_rel_error']:.1%}"
        )
        if mem["next_pairs"]:
            missed = round((1 - mem["next_over"]) * mem["next_pairs"])
            lines.append(
                f"next larger batches predicted to fit: {missed}, of which {mem.get('next_contradicted', 0)} "
                "ran on another card of the same or less memory (the table says they fit such a card)"
            )
    lines.append("")
    lines.append(f"targets for the default estimator ({DEFAULT_ESTIMATOR}):")
    if not report["targets"]:
        lines.append(f"  none checked: {DEFAULT_ESTIMATOR} was not evaluated")
    for t in report["targets"]:
        share = "MAPE" in t["name"] or "coverage" in t["name"]
        value = f"{t['value']:.1%}" if share else f"{t['value']:.2f}"
        limit = f"{t['limit']:.0%}" if share else f"{t['limit']:g}"
        bound = f"between {t['low']:.0%} and {limit}" if t.get("low") is not None else f"<= {limit}"
        lines.append(f"  {'met ' if t['met'] else 'MISS'} {t['name']}: {value} (target {bound})")
    return "\n".join(lines)
