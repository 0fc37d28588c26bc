"""The runtime/memory predictor: features, estimators, evaluation, MLflow registry, retraining.

MLflow decides on telemetry when it is first imported, so it is switched off here,
before any module of this package can import it (set the variable to override).
"""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
