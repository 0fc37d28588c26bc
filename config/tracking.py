"""Where the predictor's MLflow runs and registered models live, by default.

Plain constants, free of MLflow, so the command line can show them without importing it.
"""

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
"""A local SQLite store beside the working directory: the demo and training need no server."""

EXPERIMENT = "cpn-predictor"
"""The MLflow experiment every training run is logged in."""

REGISTERED_MODEL = "cpn-predictor"
"""The registered model whose `champion` alias the scheduler loads."""
