"""One cpn home, absolute wherever a command runs: the job store and the MLflow store."""

from __future__ import annotations

import pytest

from config.runtime import job_store, runtime_settings, store_exists


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("CPN_HOME", "CPN_STORE", "CPN_TRACKING_URI", "CPN_MLFLOW_UI"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_the_stores_live_in_the_home_and_do_not_move_with_the_working_directory(clean_env, tmp_path):
    clean_env.setenv("CPN_HOME", "state")
    clean_env.chdir(tmp_path)
    settings = runtime_settings()
    assert settings.home == tmp_path / "state"
    clean_env.chdir(tmp_path.parent)
    assert runtime_settings().home != settings.home  # a relative CPN_HOME is read where it is given...
    assert settings.store_path == tmp_path / "state" / "jobs.db"  # ...and kept absolute from then on
    assert settings.mlflow_uri == f"sqlite:///{tmp_path / 'state' / 'mlflow.db'}"


def test_a_relative_sqlite_tracking_uri_is_made_absolute(clean_env, tmp_path):
    clean_env.chdir(tmp_path)
    clean_env.setenv("CPN_TRACKING_URI", "sqlite:///mlflow.db")
    assert runtime_settings().mlflow_uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    clean_env.setenv("CPN_TRACKING_URI", "http://127.0.0.1:5000")
    assert runtime_settings().mlflow_uri == "http://127.0.0.1:5000"


def test_defaults_are_under_the_users_home_and_overrides_win(clean_env, tmp_path):
    clean_env.setenv("HOME", str(tmp_path))
    assert runtime_settings().store_path == tmp_path / ".cpn" / "jobs.db"
    clean_env.setenv("CPN_STORE", str(tmp_path / "elsewhere.db"))
    assert runtime_settings().store_path == tmp_path / "elsewhere.db"


def test_the_store_may_be_a_database_url_and_a_sqlite_url_names_a_file(clean_env, tmp_path):
    clean_env.chdir(tmp_path)
    clean_env.setenv("CPN_STORE", "postgresql://cpn@db.example.org/cpn")
    assert runtime_settings().store_path == "postgresql://cpn@db.example.org/cpn"
    assert job_store(None) == "postgresql://cpn@db.example.org/cpn" and store_exists(job_store(None))
    clean_env.setenv("CPN_STORE", "sqlite:///jobs.db")
    assert runtime_settings().store_path == tmp_path / "jobs.db"
    assert job_store("other.db") == tmp_path / "other.db" and not store_exists(job_store("other.db"))
