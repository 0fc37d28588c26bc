"""Where a running cpn keeps its state: one home folder, read from the environment in one place.

`CPN_HOME` (default `~/.cpn`) holds the job store (`jobs.db`), the MLflow store (`mlflow.db`, model
artifacts in `mlruns/` beside it), ingested benchmark scores (`benchmarks.yaml`, from the logs in
`benchmark-logs/`) and the logs of `cpn up`'s services (`logs/`). `CPN_STORE` and `CPN_TRACKING_URI`
override one of them. Every path is made absolute when the settings are read, so a command run from
another directory, a Prefect worker whose flow runs change directory, and the MLflow server all see the
same files.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from config.benchmarks import BENCHMARKS_YAML


class RuntimeSettings(BaseSettings):
    """The state folder of a running cpn and the stores in it (environment variables `CPN_*`)."""

    model_config = SettingsConfigDict(env_prefix="CPN_", extra="ignore", frozen=True)

    home: Path = Field(
        default_factory=lambda: Path.home() / ".cpn",
        description="Folder of the job store and the MLflow store (CPN_HOME).",
    )
    store: Path | None = Field(
        None, description="Job store file (CPN_STORE); default: jobs.db in the home folder."
    )
    tracking_uri: str | None = Field(
        None,
        description="MLflow tracking URI (CPN_TRACKING_URI); default: mlflow.db in the home folder.",
    )

    tokens_file: Path | None = Field(
        None,
        description="API tokens file, hashes only (CPN_TOKENS_FILE); default: tokens.yaml in the home.",
    )

    mlflow_ui: str | None = Field(
        None, description="Base URL of the MLflow UI on this store (CPN_MLFLOW_UI; `cpn up` sets it)."
    )

    @field_validator("home", "store", "tokens_file", mode="after")
    @classmethod
    def _absolute(cls, path: Path | None) -> Path | None:
        return None if path is None else path.expanduser().resolve()

    @field_validator("tracking_uri", mode="after")
    @classmethod
    def _absolute_sqlite(cls, uri: str | None) -> str | None:
        if uri is None or not uri.startswith("sqlite:///"):
            return uri
        return sqlite_uri(Path(uri.removeprefix("sqlite:///")))

    @property
    def store_path(self) -> Path:
        """The job store file, absolute."""
        return self.store or self.home / "jobs.db"

    @property
    def tokens_path(self) -> Path:
        """The API tokens file (hashes only), absolute."""
        return self.tokens_file or self.home / "tokens.yaml"

    @property
    def client_token_path(self) -> Path:
        """The admin token `cpn up` makes on its first start, kept for the person who started it (0600)."""
        return self.home / "token"

    @property
    def benchmarks_path(self) -> Path:
        """Benchmark scores ingested from this home's benchmark jobs (`ingest-benchmarks` writes it)."""
        return self.home / "benchmarks.yaml"

    @property
    def predictor_benchmarks(self) -> Path:
        """The benchmark scores the predictor trains with: this home's ingested ones once
        `ingest-benchmarks` wrote them, else the shipped file."""
        return self.benchmarks_path if self.benchmarks_path.exists() else BENCHMARKS_YAML

    @property
    def benchmark_logs(self) -> Path:
        """Folder the benchmark jobs' logs are collected in, for `ingest-benchmarks`."""
        return self.home / "benchmark-logs"

    @property
    def mlflow_uri(self) -> str:
        """The MLflow tracking URI; a SQLite one names an absolute file."""
        return self.tracking_uri or sqlite_uri(self.home / "mlflow.db")


def sqlite_uri(path: Path) -> str:
    """`sqlite:///` URI of `path`, made absolute (SQLAlchemy reads `sqlite:////abs/file.db`)."""
    return f"sqlite:///{path.expanduser().resolve()}"


def runtime_settings() -> RuntimeSettings:
    """The settings as the environment says now (read on every call: tests and `cpn up` set them)."""
    return RuntimeSettings()
