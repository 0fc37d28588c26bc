"""The champion loads from the store it is asked for, whatever MLflow's process-wide URI says.

`cpn predictor predict --tracking-uri sqlite:///X.db` runs in a fresh process whose MLflow default
is ./mlflow.db; resolving the registered version's `models:/m-...` source went through that default
and failed ("Registered Model ... not found"), or loaded another store's model of the same name.
"""

from __future__ import annotations

import shutil

import mlflow
import pytest
from mlflow.tracking import MlflowClient
from mlflow.tracking._model_registry import utils as registry_utils
from mlflow.tracking._tracking_service import utils as tracking_utils

from models.registry import ChampionLoader, train_and_register
from tests.unit.test_predictor_support import catalog, rows

pytestmark = pytest.mark.integration


@pytest.fixture
def stores(tmp_path_factory, tmp_path, monkeypatch):
    """Two empty SQLite stores: one elsewhere (asked for), one in the working directory (the default)."""
    template = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cwd").mkdir()
    shutil.copy(template, tmp_path / "elsewhere" / "store.db")
    shutil.copy(template, tmp_path / "cwd" / "mlflow.db")
    monkeypatch.chdir(tmp_path / "cwd")
    # MLflow's process-wide URIs (module globals and environment) are put back after the test.
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(tracking_utils, "_tracking_uri", tracking_utils._tracking_uri)
    monkeypatch.setattr(registry_utils, "_registry_uri", registry_utils._registry_uri)
    return f"sqlite:///{tmp_path / 'elsewhere' / 'store.db'}", f"sqlite:///{tmp_path / 'cwd' / 'mlflow.db'}"


def test_the_champion_loads_from_a_store_that_is_not_the_process_default(stores):
    asked, default = stores
    train_and_register(
        rows(), catalog(), estimators=["baseline"], tracking_uri=asked, model_name="m", splits=()
    )
    mlflow.set_tracking_uri(default)  # what a fresh process has
    mlflow.set_registry_uri(default)
    predictor = ChampionLoader(asked, "m").load()
    assert predictor.estimator.name == "baseline"
    assert mlflow.get_tracking_uri() == default and mlflow.get_registry_uri() == default  # left as found
