"""MLflow: one run per trained estimator, the model registry, the `champion` alias, loading with fallback.

`train_and_register` logs one top-level run per estimator, all of one training session tagged with the
same `cpn.training` id (no parent run: the experiment page lists and compares them directly, MLflow's
runs table groups them by that tag). Each run trains on the data less a held-out 20% of its
configurations, logs parameters, the cross-validated splits' metrics (the same names for every
estimator), timings, a predicted-vs-actual plot and feature importances, and logs the Predictor as a
pyfunc model with its signature. The `champion` alias moves to the new model only when it beats the
current champion on the held-out rows the champion did not train on (`challenge`); only then is a
version registered (tagged with its estimator). Every run says why it won or lost (tag
`champion_decision` and its description).

`ChampionLoader` loads `models:/NAME@champion` and, when MLflow cannot be reached or the
model cannot be loaded, keeps serving the last model it loaded and logs that it does.

The default tracking store is a SQLite file in the working directory (artifacts in
`mlruns/` beside it): no server is needed; `mlflow ui --backend-store-uri sqlite:///mlflow.db`
shows the runs side by side.
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from mlflow.artifacts import download_artifacts
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.tracking import MlflowClient
from mlflow.types import ColSpec, Schema
from sklearn.model_selection import GroupShuffleSplit

from config.runtime import hide_password, runtime_settings
from config.tracking import DEFAULT_TRACKING_URI, EXPERIMENT, REGISTERED_MODEL
from cpn.decisions import Estimate
from cpn.engine.feedback import CompletedRun
from cpn.formats.throughput import ThroughputRow
from cpn.jobs import JobSpec
from models.benchmarks import BenchmarkCatalog
from models.estimators import Prediction
from models.evaluation import metrics, prediction_ms
from models.features import PredictorInputError, Query, query_of
from models.folds import SPLITS, config_key, out_of_fold
from models.memory import MemorySample
from models.predictor import Predictor, fit_predictor

log = logging.getLogger(__name__)

CHAMPION = "champion"
"""Alias of the version the scheduler serves."""
HOLDOUT_FRACTION = 0.2
"""Share of configurations held out to decide the champion."""

LOGGED_METRICS = ("mape", "median_ape", "r2", "spread_coverage")
"""Metrics logged per split (and `holdout_`), besides MAPE per GPU type."""

INPUT_COLUMNS = ("model", "batch_size", "gpu_type", "num_gpus")
"""Columns of the pyfunc model's input; batch_size is NaN for fixed-batch models."""

SIGNATURE = ModelSignature(
    inputs=Schema(
        [
            ColSpec("string", "model"),
            ColSpec("double", "batch_size"),
            ColSpec("string", "gpu_type"),
            ColSpec("long", "num_gpus"),
        ]
    ),
    outputs=Schema(
        [ColSpec("double", "steps_per_sec"), ColSpec("double", "uncertainty"), ColSpec("boolean", "explore")]
    ),
)
"""The pyfunc model's signature: queries in, predicted steps/s, relative spread and explore flag out."""


class PredictorUnavailable(RuntimeError):
    """No model could be loaded and none was loaded before."""


class PredictorModel(mlflow.pyfunc.PythonModel):
    """The Predictor as an MLflow pyfunc model: a DataFrame of queries in, steps/s out."""

    def __init__(self, predictor: Predictor) -> None:
        self.predictor = predictor

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict | None = None) -> pd.DataFrame:
        """Columns model, batch_size, gpu_type, num_gpus -> steps_per_sec, uncertainty, explore."""
        queries = [
            Query(str(m), _whole(b, "batch_size"), str(g), _whole(n, "num_gpus"))
            for m, b, g, n in model_input[list(INPUT_COLUMNS)].itertuples(index=False)
        ]
        pred = self.predictor.throughput(queries)
        return pd.DataFrame(
            {
                "steps_per_sec": pred.steps_per_sec,
                "uncertainty": np.expm1(pred.log_spread),
                "explore": ~pred.seen,
            }
        )


def _whole(value: Any, column: str) -> int | None:
    """A whole number from a frame cell (NaN -> None); PredictorInputError for a fraction."""
    if pd.isna(value):
        return None
    if float(value) != int(value):
        raise PredictorInputError(f"{column} must be a whole number, got {value!r}")
    return int(value)


def queries_frame(rows: Sequence[ThroughputRow]) -> pd.DataFrame:
    """The pyfunc input frame of measured rows."""
    return pd.DataFrame(
        {
            "model": [r.model for r in rows],
            "batch_size": [float(r.batch_size) if r.batch_size is not None else np.nan for r in rows],
            "gpu_type": [r.gpu_type for r in rows],
            "num_gpus": np.array([r.num_gpus for r in rows], dtype=np.int64),
        }
    )


@dataclass(frozen=True)
class RunResult:
    """What one estimator's training run produced."""

    estimator: str
    run_id: str
    version: str | None
    """Registered model version; None when the run did not take the champion alias (nothing registered)."""
    holdout_mape: float
    champion: bool
    """True if this version took the champion alias."""
    reason: str
    """Why the alias moved or stayed."""


def holdout_split(
    rows: Sequence[ThroughputRow], fraction: float = HOLDOUT_FRACTION, seed: int = 0
) -> tuple[list[ThroughputRow], list[ThroughputRow]]:
    """(train, held out): a random `fraction` of configurations (scikit-learn's GroupShuffleSplit), every
    row of one on the same side.

    The configurations of a workload measured in one configuration only are never held out: the
    registered model trains on the `train` side, and a model (a completed job's, say) that exists only
    in held-out rows would reach it unseen."""
    keys = {k: i for i, k in enumerate(sorted({config_key(r) for r in rows}, key=repr))}
    n_out = int(round(len(keys) * fraction))
    per_workload = Counter(k[0] for k in keys)
    eligible = [i for i, r in enumerate(rows) if per_workload[config_key(r)[0]] > 1]
    n_eligible = len({config_key(rows[i]) for i in eligible})
    if n_out < 1 or n_out >= len(keys) or n_eligible == 0:
        least = next((n for n in range(2, 10_000) if 1 <= round(n * fraction) < n), None)
        raise PredictorInputError(
            f"cannot hold out {fraction:.0%} of {len(keys)} distinct configurations (model, batch size, "
            f"GPU type, GPU count) and train on the rest; the table needs at least {least}, and a model "
            "measured in two or more configurations"
        )
    groups = [keys[config_key(rows[i])] for i in eligible]
    splitter = GroupShuffleSplit(n_splits=1, test_size=min(n_out, n_eligible), random_state=seed)
    _, held = next(splitter.split(np.zeros((len(eligible), 1)), groups=groups))
    out = {eligible[i] for i in held}
    return [r for i, r in enumerate(rows) if i not in out], [rows[i] for i in sorted(out)]


def _experiment_id(client: MlflowClient, tracking_uri: str, name: str) -> str:
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri.removeprefix("sqlite:///"))
        location = (db.resolve().parent / "mlruns").as_uri()
    elif tracking_uri.startswith("postgresql"):  # a database server (`cpn up --database`): the cpn home's
        location = (runtime_settings().home / "mlruns").as_uri()  # not the working directory's
    return client.create_experiment(name, artifact_location=location)


def _pip_requirements() -> list[str]:
    return [
        f"mlflow=={package_version('mlflow')}",
        f"scikit-learn=={package_version('scikit-learn')}",
        f"xgboost-cpu=={package_version('xgboost-cpu')}",
        f"numpy=={package_version('numpy')}",
        f"pandas=={package_version('pandas')}",
        f"pydantic=={package_version('pydantic')}",
    ]


def _plot_predicted_vs_actual(
    actual: np.ndarray, predicted: np.ndarray, gpus: list[str], title: str, path: Path
):
    fig = Figure(figsize=(5.5, 5))
    ax = fig.subplots()
    for gpu in sorted(set(gpus)):
        mask = np.array(gpus) == gpu
        ax.scatter(actual[mask], predicted[mask], s=14, label=gpu)
    lo, hi = min(actual.min(), predicted.min()) / 1.5, max(actual.max(), predicted.max()) * 1.5
    ax.plot([lo, hi], [lo, hi], color="grey", linewidth=1)
    ax.set(xscale="log", yscale="log", xlabel="measured steps/s", ylabel="predicted steps/s", title=title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _plot_importances(importances: dict[str, float], path: Path) -> None:
    items = sorted(importances.items(), key=lambda kv: kv[1])
    fig = Figure(figsize=(6, 0.25 * len(items) + 1))
    ax = fig.subplots()
    ax.barh([k for k, _ in items], [v for _, v in items])
    ax.set(xlabel="importance", title="feature importances")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _log_evaluation(
    rows: Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    estimator: str,
    seed: int,
    params: dict[str, Any],
    splits: Sequence[str],
) -> None:
    actual = np.array([r.steps_per_sec for r in rows])
    gpus = [r.gpu_type for r in rows]
    for split in splits:
        log.info("%s: cross-validating (%s)", estimator, split)
        predicted = out_of_fold(rows, catalog, estimator, split, seed, params)
        if predicted is None:
            continue
        m = metrics(actual, predicted, gpus)
        mlflow.log_metrics({f"{split}_{k}": m[k] for k in LOGGED_METRICS if m[k] is not None})
        mlflow.log_metrics({f"{split}_mape_{g}": v for g, v in m["per_gpu"].items()})


def _log_artifacts(
    predictor: Predictor, holdout: Sequence[ThroughputRow], predicted: Prediction, title: str
) -> None:
    """Predicted-vs-actual plot, feature importances (JSON and plot) and the held-out rows."""
    actual = np.array([r.steps_per_sec for r in holdout])
    with tempfile.TemporaryDirectory() as tmp:
        plot = Path(tmp) / "predicted_vs_actual.png"
        _plot_predicted_vs_actual(actual, predicted.steps_per_sec, [r.gpu_type for r in holdout], title, plot)
        mlflow.log_artifact(str(plot))
        importances = predictor.estimator.feature_importances()
        if importances:
            mlflow.log_dict(importances, "feature_importances.json")
            _plot_importances(importances, Path(tmp) / "feature_importances.png")
            mlflow.log_artifact(str(Path(tmp) / "feature_importances.png"))
    mlflow.log_table(queries_frame(holdout).assign(steps_per_sec=actual), "holdout.json")


def train_and_register(
    rows: Sequence[ThroughputRow],
    catalog: BenchmarkCatalog,
    *,
    memory_samples: Sequence[MemorySample] = (),
    work_runs: Sequence[CompletedRun] = (),
    estimators: Sequence[str] = ("rf", "xgb"),
    params: dict[str, dict[str, Any]] | None = None,
    tracking_uri: str = DEFAULT_TRACKING_URI,
    experiment: str = EXPERIMENT,
    model_name: str = REGISTERED_MODEL,
    splits: Sequence[str] = SPLITS,
    seed: int = 0,
    data_source: str = "",
    tags: dict[str, str] | None = None,
    session: str = "train",
) -> list[RunResult]:
    """Train, log each estimator as a top-level run tagged with the session's `cpn.training` id, register
    what wins.

    Sets MLflow's process-wide tracking URI to `tracking_uri`. `params` maps an estimator name to
    hyperparameters; `splits` are the cross-validated splits to log; `tags` are set on every run
    (retraining records what it trained on there). A version is registered only when
    it takes the champion alias (the first one always does): a session where no estimator beats the
    champion adds no version. Progress is logged on the `models.registry` logger at INFO.
    """
    rows = list(rows)
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    experiment_id = _experiment_id(client, tracking_uri, experiment)
    train, holdout = holdout_split(rows, seed=seed)
    holdout_actual = np.array([r.steps_per_sec for r in holdout])
    holdout_gpus = [r.gpu_type for r in holdout]
    results = []
    log.info(
        "%s: %d rows (%d held out to decide the champion), estimators %s",
        session,
        len(rows),
        len(holdout),
        ", ".join(estimators),
    )
    training = f"{session}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}"
    for name in estimators:
        est_params = (params or {}).get(name, {})
        with mlflow.start_run(experiment_id=experiment_id, run_name=f"{name} ({session})") as run:
            mlflow.set_tags({**(tags or {}), "cpn.session": session, TRAINING_TAG: training})
            log.info("%s: fitting on %d rows", name, len(train))
            start = time.perf_counter()
            predictor = fit_predictor(
                train, catalog, name, memory_samples, seed=seed, work_runs=work_runs, **est_params
            )
            train_s = time.perf_counter() - start
            log.info("%s: fitted in %.1f s", name, train_s)
            first_ms, warm_ms = prediction_ms(predictor, rows, catalog, seed)
            mlflow.log_metrics(
                {"train_s": train_s, "predict_1000_ms": warm_ms, "predict_1000_first_ms": first_ms}
            )
            mlflow.log_params(
                {
                    "estimator": name,
                    **predictor.estimator.params(),
                    "seed": seed,
                    "spread_scale": predictor.spread_scale,
                    **{f"spread_floor_{k}": v for k, v in predictor.spread_floor.items()},
                    **{f"spread_slope_{k}": v for k, v in predictor.spread_slope.items()},
                    "rows": len(rows),
                    "holdout_rows": len(holdout),
                    "work_runs": len(predictor.work),
                    "data": data_source,
                    "gpu_types": ",".join(catalog.gpu_types()),
                    "workloads": ",".join(catalog.workloads),
                }
            )
            _log_evaluation(rows, catalog, name, seed, est_params, splits)
            predicted = predictor.throughput([query_of(r) for r in holdout])
            m = metrics(holdout_actual, predicted, holdout_gpus)
            mlflow.log_metrics({f"holdout_{k}": m[k] for k in LOGGED_METRICS if m[k] is not None})
            _log_artifacts(
                predictor, holdout, predicted, f"{name}: held-out configurations, MAPE {m['mape']:.1%}"
            )
            info = mlflow.pyfunc.log_model(
                name="model",
                python_model=PredictorModel(predictor),
                signature=SIGNATURE,
                input_example=queries_frame(holdout[:5]),
                pip_requirements=_pip_requirements(),
            )
            won, reason = challenge(
                tracking_uri,
                model_name,
                holdout,
                predicted.steps_per_sec,
                catalog.gpu_types(),
                work_runs=len(predictor.work),
            )
            version = None
            if won:
                version = _register(client, model_name, info.model_uri, run.info.run_id, name, reason)
            mlflow.set_tags(
                {
                    "champion_decision": reason,
                    "cpn.champion": str(won).lower(),
                    "registered_version": version or "none",
                    "mlflow.note.content": f"{name}: {reason}",
                }
            )
            log.info(
                "%s: run %s, held-out MAPE %.3f; %s%s",
                name,
                run.info.run_id,
                m["mape"],
                reason,
                f" (version {version})" if version else " (no version registered)",
            )
            results.append(RunResult(name, run.info.run_id, version, m["mape"], won, reason))
    log.info("%s: training %s, runs %s", session, training, ", ".join(r.run_id for r in results))
    return results


def _register(
    client: MlflowClient, model_name: str, model_uri: str, run_id: str, estimator: str, reason: str
) -> str:
    """Register the logged model as a version tagged with its estimator, and give it the champion alias."""
    try:
        client.create_registered_model(model_name)
    except MlflowException:
        pass  # it exists
    version = client.create_model_version(
        model_name,
        model_uri,
        run_id=run_id,
        tags={"estimator": estimator},
        description=reason,
    ).version
    client.set_registered_model_alias(model_name, CHAMPION, str(version))
    return str(version)


@dataclass(frozen=True)
class LastTraining:
    """The newest training run of an experiment: when it started and which completions it had seen."""

    started_s: float
    """Wall-clock start, seconds since the epoch."""
    completions_until: float | None
    """The latest completion time (job store clock) it trained on; None = it trained on no completions."""


TRAINING_TAG = "cpn.training"
"""Run tag: the training session's id (`SESSION-UTCSTAMP-RANDOM`), the same on each estimator's run."""
COMPLETIONS_UNTIL_TAG = "cpn.completions_until"
"""Run tag: the latest completion time (job store clock) a retraining run included."""


def last_training(
    tracking_uri: str = DEFAULT_TRACKING_URI, experiment: str = EXPERIMENT
) -> LastTraining | None:
    """The newest run of `experiment` (None if there is none yet, or no such experiment)."""
    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    runs = client.search_runs([found.experiment_id], order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        return None
    until = runs[0].data.tags.get(COMPLETIONS_UNTIL_TAG)
    return LastTraining(runs[0].info.start_time / 1000.0, float(until) if until is not None else None)


def _load_version(tracking_uri: str, name: str, version: str) -> Predictor:
    # Ask this store's client where the version's files are: `download_artifacts("models:/NAME/V")`
    # follows the version's source (`models:/m-...`, a logged model) through MLflow's *process-wide*
    # registry, so a fresh process (`cpn predictor predict --tracking-uri X`) looked in ./mlflow.db and
    # failed, or loaded another store's model of the same name.
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    location = client.get_model_version_download_uri(name, version)
    path = download_artifacts(artifact_uri=location, tracking_uri=tracking_uri)
    return mlflow.pyfunc.load_model(path).unwrap_python_model().predictor


def challenge(
    tracking_uri: str,
    model_name: str,
    holdout: Sequence[ThroughputRow],
    candidate: np.ndarray,
    gpu_types: Sequence[str] = (),
    work_runs: int = 0,
) -> tuple[bool, str]:
    """(should the candidate take the champion alias, why): it must beat the current champion on the
    held-out rows the champion did not train on, a fair comparison (both predict rows they never saw),
    or, having learnt seconds per GB-epoch from more completed runs without steps (`work_runs`,
    models.work) than the champion, do no worse there (those runs are not throughput rows, so the held-out
    rows cannot show what they taught).

    `candidate` is the candidate's predicted steps/s of `holdout`; `gpu_types` the GPU types its
    benchmarks score. No champion yet, one that cannot predict these rows, or one whose benchmarks lack a
    type the candidate's score (a new card type just benchmarked, which the champion cannot estimate at
    all): the candidate wins. No held-out row the champion did not train on: it keeps the alias (no fair
    comparison is possible).
    """
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    actual = np.array([r.steps_per_sec for r in holdout])
    mine = float(np.mean(np.abs(candidate - actual) / actual))
    try:
        current = client.get_model_version_by_alias(model_name, CHAMPION)
    except MlflowException:
        return True, f"champion: first champion (held-out MAPE {mine:.3f})"
    try:
        champion = _load_version(tracking_uri, model_name, current.version)
        if new := sorted(set(gpu_types) - set(champion.catalog.gpu_types())):
            return True, (
                f"champion: scores GPU types version {current.version} cannot estimate ({', '.join(new)}); "
                f"held-out MAPE {mine:.3f}"
            )
        learnt = work_runs - len(champion.work)
        fair = ~champion.trained_on([query_of(r) for r in holdout])
        if not fair.any() and learnt > 0:
            return True, (
                f"champion: learnt from {learnt} more completed runs without steps than version "
                f"{current.version}, which trained on every held-out row"
            )
        if not fair.any():
            return False, (
                f"not champion: version {current.version} trained on all {len(holdout)} held-out rows, so no "
                "fair comparison is possible; it keeps the alias"
            )
        theirs_pred = champion.throughput([query_of(r) for r, f in zip(holdout, fair, strict=True) if f])
    except PredictorInputError as exc:
        return True, f"champion: version {current.version} cannot predict the held-out rows ({exc})"
    mine = float(np.mean(np.abs(candidate[fair] - actual[fair]) / actual[fair]))
    theirs = float(np.mean(np.abs(theirs_pred.steps_per_sec - actual[fair]) / actual[fair]))
    versus = (
        f"held-out MAPE {mine:.3f} vs {theirs:.3f} of version {current.version} on the {int(fair.sum())} "
        f"of {len(holdout)} held-out rows it did not train on"
    )
    if mine < theirs:
        return True, f"champion: {versus}"
    if learnt > 0 and mine <= theirs:
        return True, f"champion: learnt from {learnt} more completed runs without steps; {versus}"
    return False, f"not champion: {versus}"


def champion_version(tracking_uri: str, name: str = REGISTERED_MODEL) -> str | None:
    """The version that holds the champion alias; None when the store has no champion yet (no such model,
    or no version took the alias). PredictorUnavailable when the store cannot be read."""
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        model = client.get_registered_model(name)
    except Exception as exc:  # an unreachable store surfaces as many exception types
        if isinstance(exc, MlflowException) and exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        store = hide_password(tracking_uri)
        raise PredictorUnavailable(f"cannot read the MLflow store {store}: {exc}") from exc
    version = model.aliases.get(CHAMPION)
    return None if version is None else str(version)


class ChampionLoader:
    """Loads `models:/NAME@ALIAS`; if that fails, keeps serving the last model it loaded.

    The scheduler holds one loader and calls `load()` whenever it wants the newest
    champion, or uses the loader itself as its estimate source (`estimates`), which
    re-reads the alias at most every `refresh_s` seconds. A version already loaded is
    not downloaded again.
    """

    def __init__(
        self,
        tracking_uri: str = DEFAULT_TRACKING_URI,
        name: str = REGISTERED_MODEL,
        alias: str = CHAMPION,
        catalog: BenchmarkCatalog | None = None,
        refresh_s: float = 60.0,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.name = name
        self.alias = alias
        self.catalog = catalog
        """GPU types to serve beyond those the model was trained with (same scoring), if given."""
        self.last_good: Predictor | None = None
        self.last_good_version: str | None = None
        self.loaded_at: datetime | None = None
        self.refresh_s = refresh_s
        """Seconds between two looks at the alias when serving `estimates`."""
        self._checked = -math.inf

    def estimates(
        self, jobs: Sequence[JobSpec], gpu_types: Sequence[str]
    ) -> dict[str, Mapping[str, Estimate]]:
        """The scheduler's EstimateSource (cpn.engine.scheduler): the champion's estimates, following the
        alias (looked up at most every `refresh_s` seconds; the last good model while MLflow fails)."""
        now = time.monotonic()
        if self.last_good is None or now - self._checked >= self.refresh_s:
            self._checked = now
            return self.load().estimates(jobs, gpu_types)
        return self.last_good.estimates(jobs, gpu_types)

    def load(self) -> Predictor:
        """The champion; the last good model if MLflow fails; PredictorUnavailable if there is none."""
        where = f"models:/{self.name}@{self.alias} at {hide_password(self.tracking_uri)}"
        try:
            client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
            version = str(client.get_model_version_by_alias(self.name, self.alias).version)
            if self.last_good is not None and version == self.last_good_version:
                return self.last_good
            predictor = _load_version(self.tracking_uri, self.name, version)
            if self.catalog is not None:
                predictor = predictor.with_catalog(self.catalog)
        except Exception as exc:  # MLflow surfaces an unreachable store as many exception types
            if self.last_good is None:
                raise PredictorUnavailable(f"cannot load {where}: {type(exc).__name__}: {exc}") from exc
            log.warning(
                "cannot load %s (%s: %s); keeping version %s loaded at %s",
                where,
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
                self.last_good_version,
                self.loaded_at.isoformat() if self.loaded_at else "?",
            )
            return self.last_good
        self.last_good, self.last_good_version, self.loaded_at = predictor, version, datetime.now(UTC)
        log.info("loaded %s: version %s (%s)", where, version, predictor.estimator.name)
        return predictor


_loaders: dict[tuple[str, str], ChampionLoader] = {}


def champion_loader(tracking_uri: str = DEFAULT_TRACKING_URI, name: str = REGISTERED_MODEL) -> ChampionLoader:
    """This process's one loader of the champion of `name` in the store at `tracking_uri`."""
    return _loaders.setdefault((tracking_uri, name), ChampionLoader(tracking_uri, name))


def load_champion(tracking_uri: str = DEFAULT_TRACKING_URI, name: str = REGISTERED_MODEL) -> Predictor:
    """The champion Predictor; falls back to the last one this process loaded from the same store.

    Raises PredictorUnavailable only if MLflow fails and nothing was loaded before.
    """
    return champion_loader(tracking_uri, name).load()
