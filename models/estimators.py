"""Throughput estimators: random forest (default), XGBoost (comparison), analytical baseline.

All three predict log steps/s of a query and a spread in log space (0.1 ~ +-10%),
widened for models never seen by how much model references differ (models.features):
- `rf`: scikit-learn RandomForests, two of them. The *local* forest serves queries
  with measured neighbours (models.features: the same model at other batch sizes, GPU
  types or counts): it learns the residual of the local prior from the global features
  plus the neighbour estimates. The *global* forest serves the rest (a GPU type or model
  never measured): the residual of the analytical prior from the global features.
  Spread = standard deviation across the trees of the forest that answered.
- `xgb`: the same two models, each an ensemble of XGBoost regressors (row and column
  subsampling, one seed each); spread = standard deviation across the members.
- `baseline`: no learning beyond lookups. The same model, batch size and GPU count
  measured on other GPU types, scaled by the ratio of the GPUs' benchmark speeds
  (geometric mean of scores); when there is none, the prior itself. Spread = disagreement
  between the GPU types it scaled from, else the prior's residual spread on training rows.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sklearn.base import clone as sk_clone
from sklearn.ensemble import RandomForestRegressor
from xgboost import XGBRegressor

from cpn.formats.throughput import ThroughputRow
from models.benchmarks import BenchmarkCatalog
from models.features import FeatureBuilder, Features, PredictorInputError, Query, query_of, workload_key


@dataclass(frozen=True)
class Prediction:
    """Predictions for a list of queries."""

    log_steps_per_sec: np.ndarray
    log_spread: np.ndarray
    """Standard deviation of the prediction in log space (relative spread)."""
    seen: np.ndarray
    """False where the model was not in the training data (the scheduler should explore it)."""
    kind: np.ndarray | None = None
    """Index into models.features.EXTRAPOLATION_KINDS per query (None where not computed)."""
    distance: np.ndarray | None = None
    """How far each query lies from the training data (models.features.FeatureBuilder.distances)."""

    @property
    def steps_per_sec(self) -> np.ndarray:
        """Predicted steps/s."""
        return np.exp(self.log_steps_per_sec)


class Estimator(ABC):
    """A throughput estimator: `fit(rows)` on measured rows, then `predict(queries)`."""

    name: ClassVar[str]
    """Short name used on the command line, in reports and in MLflow."""

    def __init__(self, catalog: BenchmarkCatalog, seed: int = 0, neighbours: bool = True) -> None:
        self.features = FeatureBuilder(catalog)
        self.seed = seed
        """Seed of any randomness in training (the baseline has none)."""
        self.uses_neighbours = neighbours
        """Whether a local model learns from the neighbour features (models.features); False: the global
        model answers every query, as before neighbour features existed."""

    def __setstate__(self, state: dict) -> None:
        # Estimators pickled before neighbour features existed have no local model.
        state.setdefault("uses_neighbours", False)
        self.__dict__.update(state)

    def fit(self, rows: Sequence[ThroughputRow]) -> Estimator:
        """Train on rows with steps_per_sec > 0 (see models.features.training_rows); returns self."""
        rows = list(rows)
        self.features.fit(rows)
        feats = self.features.transform([query_of(r) for r in rows], self.uses_neighbours)
        self._fit(rows, feats, np.log([r.steps_per_sec for r in rows]))
        return self

    def predict(self, queries: Sequence[Query]) -> Prediction:
        """Predictions for `queries`; PredictorInputError for inputs the estimator cannot use."""
        if not queries:
            raise PredictorInputError("no queries to predict")
        feats = self.features.transform(queries, self.uses_neighbours)
        mean, spread = self._predict(queries, feats)
        spread = np.where(feats.seen, spread, np.hypot(spread, self.features.unseen_spread))
        kinds = self.features.kinds(queries)
        return Prediction(mean, spread, feats.seen, kinds, self.features.distances(queries, kinds))

    def with_catalog(self, catalog: BenchmarkCatalog) -> Estimator:
        """A copy that knows the GPU types of `catalog` (new products need no retraining)."""
        clone = copy.copy(self)
        clone.features = self.features.with_catalog(catalog)
        return clone

    @abstractmethod
    def _fit(self, rows: list[ThroughputRow], feats: Features, log_y: np.ndarray) -> None: ...

    @abstractmethod
    def _predict(self, queries: Sequence[Query], feats: Features) -> tuple[np.ndarray, np.ndarray]: ...

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Hyperparameters, for MLflow."""

    def feature_importances(self) -> dict[str, float]:
        """Importance of each feature (empty for estimators without learnt features)."""
        return {}


MIN_LOCAL_ROWS = 10
"""Fewer training rows with a local prior than this: no local model, the global one answers every query."""


def _local_rows(feats: Features) -> np.ndarray:
    """Training rows of the local model (none if too few: then the global model answers everything)."""
    return feats.has_local if int(feats.has_local.sum()) >= MIN_LOCAL_ROWS else np.zeros(len(feats.X), bool)


class RandomForestEstimator(Estimator):
    """scikit-learn RandomForest on the residual of the analytical prior (the default)."""

    name = "rf"

    def __init__(
        self,
        catalog: BenchmarkCatalog,
        n_estimators: int = 100,
        max_features: float = 0.5,
        min_samples_leaf: int = 1,
        seed: int = 0,
        neighbours: bool = True,
    ) -> None:
        super().__init__(catalog, seed, neighbours)
        self.model = RandomForestRegressor(
            n_estimators=n_estimators,
            max_features=max_features,
            min_samples_leaf=min_samples_leaf,
            random_state=seed,
            n_jobs=-1,
        )

    def _fit(self, rows: list[ThroughputRow], feats: Features, log_y: np.ndarray) -> None:
        self.model.fit(feats.X, log_y - feats.prior)
        local = _local_rows(feats)
        self.local_model = None
        if local.any():
            self.local_model = sk_clone(self.model).fit(
                feats.local_X()[local], (log_y - feats.local_prior)[local]
            )

    @staticmethod
    def _per_tree(model: RandomForestRegressor, X: np.ndarray) -> np.ndarray:
        # The trees' own Cython predict: sklearn's per-call checks cost more than the walk on small inputs.
        X = np.ascontiguousarray(X, dtype=np.float32)
        return np.stack([t.tree_.predict(X).reshape(len(X), -1)[:, 0] for t in model.estimators_])

    def _predict(self, queries: Sequence[Query], feats: Features) -> tuple[np.ndarray, np.ndarray]:
        local_model = getattr(self, "local_model", None)
        local = feats.has_local if local_model is not None else np.zeros(len(queries), bool)
        mean, spread = np.empty(len(queries)), np.empty(len(queries))
        if (~local).any():
            per_tree = self._per_tree(self.model, feats.X[~local])
            mean[~local] = feats.prior[~local] + per_tree.mean(axis=0)
            spread[~local] = per_tree.std(axis=0)
        if local.any():
            per_tree = self._per_tree(local_model, feats.local_X()[local])
            mean[local] = feats.local_prior[local] + per_tree.mean(axis=0)
            spread[local] = per_tree.std(axis=0)
        return mean, spread

    def params(self) -> dict[str, Any]:
        p = self.model.get_params()
        keep = ("n_estimators", "max_features", "min_samples_leaf", "random_state")
        return {**{k: p[k] for k in keep}, "neighbours": self.uses_neighbours}

    def feature_importances(self) -> dict[str, float]:
        out = dict(zip(self.features.feature_names, self.model.feature_importances_.tolist(), strict=True))
        if getattr(self, "local_model", None) is not None:
            names = (f"local:{n}" for n in self.features.local_feature_names)
            out |= dict(zip(names, self.local_model.feature_importances_.tolist(), strict=True))
        return out


class XGBoostEstimator(Estimator):
    """An ensemble of XGBoost regressors on the residual of the analytical prior (the comparison)."""

    name = "xgb"

    def __init__(
        self,
        catalog: BenchmarkCatalog,
        n_estimators: int = 300,
        max_depth: int = 6,
        learning_rate: float = 0.05,
        members: int = 5,
        seed: int = 0,
        neighbours: bool = True,
    ) -> None:
        super().__init__(catalog, seed, neighbours)
        if members < 2:
            raise ValueError("xgb needs at least 2 members to give a spread")
        self.members = [
            XGBRegressor(
                n_estimators=n_estimators,
                max_depth=max_depth,
                learning_rate=learning_rate,
                subsample=0.8,
                colsample_bytree=0.8,
                random_state=seed + i,
                n_jobs=1,
            )
            for i in range(members)
        ]
        self.local_members: list[XGBRegressor] = []

    def _fit(self, rows: list[ThroughputRow], feats: Features, log_y: np.ndarray) -> None:
        for m in self.members:
            m.fit(feats.X, log_y - feats.prior)
        local = _local_rows(feats)
        self.local_members = []
        if local.any():
            X, target = feats.local_X()[local], (log_y - feats.local_prior)[local]
            self.local_members = [sk_clone(m).fit(X, target) for m in self.members]

    def _predict(self, queries: Sequence[Query], feats: Features) -> tuple[np.ndarray, np.ndarray]:
        local_members = getattr(self, "local_members", [])
        local = feats.has_local if local_members else np.zeros(len(queries), bool)
        mean, spread = np.empty(len(queries)), np.empty(len(queries))
        if (~local).any():
            per_member = np.stack([m.predict(feats.X[~local]) for m in self.members])
            mean[~local] = feats.prior[~local] + per_member.mean(axis=0)
            spread[~local] = per_member.std(axis=0)
        if local.any():
            X = feats.local_X()[local]
            per_member = np.stack([m.predict(X) for m in local_members])
            mean[local] = feats.local_prior[local] + per_member.mean(axis=0)
            spread[local] = per_member.std(axis=0)
        return mean, spread

    def params(self) -> dict[str, Any]:
        p = self.members[0].get_params()
        keep = ("n_estimators", "max_depth", "learning_rate", "subsample", "colsample_bytree")
        return {
            **{k: p[k] for k in keep},
            "members": len(self.members),
            "seed": p["random_state"],
            "neighbours": self.uses_neighbours,
        }

    def feature_importances(self) -> dict[str, float]:
        mean = np.mean([m.feature_importances_ for m in self.members], axis=0)
        out = dict(zip(self.features.feature_names, mean.tolist(), strict=True))
        if getattr(self, "local_members", []):
            mean = np.mean([m.feature_importances_ for m in self.local_members], axis=0)
            names = (f"local:{n}" for n in self.features.local_feature_names)
            out |= dict(zip(names, mean.tolist(), strict=True))
        return out


class BaselineEstimator(Estimator):
    """Measured throughput of the same configuration on other GPUs, scaled by benchmark speed."""

    name = "baseline"

    def __init__(self, catalog: BenchmarkCatalog, seed: int = 0) -> None:
        super().__init__(catalog, seed, neighbours=False)

    def _fit(self, rows: list[ThroughputRow], feats: Features, log_y: np.ndarray) -> None:
        self._scaled: dict[tuple[str, int | None, int], list[float]] = defaultdict(list)
        for row, y, speed in zip(rows, log_y, feats.log_speed, strict=True):
            key = (workload_key(row.model, row.precision), row.batch_size, row.num_gpus)
            self._scaled[key].append(float(y - speed))
        self._prior_spread = float(np.std(log_y - feats.prior))

    def _predict(self, queries: Sequence[Query], feats: Features) -> tuple[np.ndarray, np.ndarray]:
        mean, spread = feats.prior.copy(), np.full(len(queries), self._prior_spread)
        for i, q in enumerate(queries):
            scaled = self._scaled.get((workload_key(q.model, q.precision), q.batch_size, q.num_gpus))
            if scaled:
                mean[i] = float(np.mean(scaled)) + feats.log_speed[i]
                if len(scaled) > 1:
                    spread[i] = float(np.std(scaled))
        return mean, spread

    def params(self) -> dict[str, Any]:
        return {}


ESTIMATORS: dict[str, type[Estimator]] = {
    cls.name: cls for cls in (RandomForestEstimator, XGBoostEstimator, BaselineEstimator)
}
"""Estimators by name; `rf` is the default."""


def make_estimator(name: str, catalog: BenchmarkCatalog, seed: int = 0, **params: Any) -> Estimator:
    """A fresh estimator by name (`rf`, `xgb`, `baseline`); PredictorInputError naming the known ones."""
    try:
        cls = ESTIMATORS[name]
    except KeyError:
        raise PredictorInputError(f"unknown estimator {name!r}; known: {', '.join(ESTIMATORS)}") from None
    return cls(catalog, seed=seed, **params)
