"""Where a running cpn keeps its state: one home folder, read from the environment in one place.

`CPN_HOME` (default `~/.cpn`) holds the job store (`jobs.db`), the MLflow store (`mlflow.db`, model
artifacts in `mlruns/` beside it), ingested benchmark scores (`benchmarks.yaml`, from the logs in
`benchmark-logs/`) and the logs of `cpn up`'s services (`logs/`). `CPN_STORE` and `CPN_TRACKING_URI`
override one of them; the job store may also be a PostgreSQL database (`CPN_STORE=postgresql://...`,
docs/store.md). `CPN_CONFIG` names the config folder of the running cpn (`cpn up` sets it for its
worker). Every path is made absolute when the settings are read, so a command run from another
directory, a Prefect worker whose flow runs change directory, and the MLflow server all see the same
files.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class RuntimeSettings(BaseSettings):
    """The state folder of a running cpn and the stores in it (environment variables `CPN_*`)."""

    model_config = SettingsConfigDict(env_prefix="CPN_", extra="ignore", frozen=True)

    home: Path = Field(
        default_factory=lambda: Path.home() / ".cpn",
        description="Folder of the job store and the MLflow store (CPN_HOME).",
    )
    store: str | None = Field(
        None,
        description=(
            "Job store (CPN_STORE): a file, or a database URL (sqlite:///FILE, "
            "postgresql://USER@HOST/DATABASE); default: jobs.db in the home folder."
        ),
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

    config: Path | None = Field(
        None,
        description="Config folder of the running cpn (CPN_CONFIG; `cpn up` sets it to its --config for "
        "the Prefect worker, so every deployment's flow runs on the clusters and policy the service "
        "runs); default: the built-in demo profile.",
    )

    policy: str | None = Field(
        None,
        description="Policy replacing the config folder's (CPN_POLICY; `cpn up --policy` sets it for the "
        "worker).",
    )
    policy_set: str = Field(
        "",
        description="Policy settings overriding the config folder's policy.yaml, `KEY=VALUE` pairs separated "
        "by commas (CPN_POLICY_SET; `cpn up --set` sets it for the worker).",
    )

    lease_pid_check: bool = Field(
        True,
        description="Whether a scheduler taking the store's lease over looks at its holder's pid on this "
        "host (CPN_LEASE_PID_CHECK): a holder whose process is gone is taken over at once instead of when "
        "its lease expires. 0: by expiry only, as replicas on separate hosts always do.",
    )

    @field_validator("home", "tokens_file", "config", mode="after")
    @classmethod
    def _absolute(cls, path: Path | None) -> Path | None:
        return None if path is None else path.expanduser().resolve()

    @field_validator("store", mode="after")
    @classmethod
    def _absolute_store(cls, store: str | None) -> str | None:
        return None if store is None else str(store_target(store))

    @field_validator("tracking_uri", mode="after")
    @classmethod
    def _absolute_sqlite(cls, uri: str | None) -> str | None:
        if uri is None or not uri.startswith("sqlite:///"):
            return uri
        return sqlite_uri(Path(uri.removeprefix("sqlite:///")))

    @property
    def config_dir(self) -> Path:
        """The config folder flows and commands use when none is named: CPN_CONFIG, else the demo's."""
        from config.settings import DEMO_DIR  # the config models: not for every command's start (cli)

        return self.config or DEMO_DIR

    @property
    def policy_overrides(self) -> dict[str, str]:
        """CPN_POLICY_SET as `--set` pairs (ValueError naming a pair that is not KEY=VALUE)."""
        from config.policies import parse_overrides

        return parse_overrides([p for p in self.policy_set.split(",") if p.strip()])

    @property
    def store_path(self) -> Path | str:
        """The job store: an absolute file, or a database server's URL."""
        return store_target(self.store) if self.store else self.home / "jobs.db"

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
        from config.benchmarks import BENCHMARKS_YAML

        return self.benchmarks_path if self.benchmarks_path.exists() else BENCHMARKS_YAML

    @property
    def benchmark_logs(self) -> Path:
        """Folder the benchmark jobs' logs are collected in, for `ingest-benchmarks`."""
        return self.home / "benchmark-logs"

    @property
    def mlflow_uri(self) -> str:
        """The MLflow tracking URI; a SQLite one names an absolute file."""
        return self.tracking_uri or sqlite_uri(self.home / "mlflow.db")


PASSWORD_IN_URL = re.compile(r"(?<=://)([^/@:?#]*):[^/@?#]*@")
"""The `USER:PASSWORD@` part of a URL (the password percent-encoded, as URLs require)."""


def hide_password(url: str) -> str:
    """`url` with its password, if any, shown as `***`: every message that names a store uses it."""
    return PASSWORD_IN_URL.sub(r"\1:***@", url)


def sqlite_uri(path: Path) -> str:
    """`sqlite:///` URI of `path`, made absolute (SQLAlchemy reads `sqlite:////abs/file.db`)."""
    return f"sqlite:///{path.expanduser().resolve()}"


def store_target(value: str | Path) -> Path | str:
    """The job store a `--store` or CPN_STORE value names: a file (a path, or a `sqlite:///` URL) as an
    absolute Path; a database server's URL (`postgresql://...`) as given."""
    text = str(value)
    if "://" in text and not text.startswith("sqlite:///"):
        return text
    return Path(text.removeprefix("sqlite:///")).expanduser().resolve()


def job_store(arg: str | None) -> Path | str:
    """The job store a command uses: its `--store` value, else this home's (CPN_STORE, else its jobs.db)."""
    return store_target(arg) if arg else runtime_settings().store_path


def store_exists(target: Path | str) -> bool:
    """False only for a store file not made yet: a server's database is there (opening it says if not)."""
    return not isinstance(target, Path) or target.exists()


def runtime_settings() -> RuntimeSettings:
    """The settings as the environment says now (read on every call: tests and `cpn up` set them)."""
    return RuntimeSettings()
