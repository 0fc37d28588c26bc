"""Where the predictor's MLflow runs and registered models live, by default.

Plain values, free of MLflow, so the command line can show them without importing it.
"""

from config.runtime import runtime_settings

DEFAULT_TRACKING_URI = runtime_settings().mlflow_uri
"""The MLflow store of this cpn home (`$CPN_HOME/mlflow.db`, or `$CPN_TRACKING_URI`), as an absolute URI
read once when cpn starts: every command, whatever its working directory, uses the same store."""

EXPERIMENT = "cpn-predictor"
"""The MLflow experiment every training run is logged in."""

REGISTERED_MODEL = "cpn-predictor"
"""The registered model whose `champion` alias the scheduler loads."""
