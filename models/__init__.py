"""The runtime/memory predictor: features, estimators, evaluation, MLflow registry, retraining.

MLflow decides on telemetry when it is first imported, so it is switched off here,
before any module of this package can import it (set the variable to override). Model
versions do not copy the project's uv.lock and pyproject.toml (MLflow does when the
working directory is a uv project): their pinned `requirements.txt` says what they need.
"""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_LOG_UV_FILES", "false")
