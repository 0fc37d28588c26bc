"""CLI start-up (issue 27, item 8): a command imports only its own module, and the client commands leave
out what they do not use (the store's SQLAlchemy for `--server`, the manifest reader, MLflow, Prefect, the
scheduler), so that `cpn jobs` answers in well under a second on a quiet machine."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from cli import COMMANDS, build_parser
from config.settings import REPO_ROOT
from cpn.jobs import JobSpec
from cpn.store import JobStore

HEAVY = ("alembic", "mlflow", "prefect", "sklearn", "pandas", "fastapi", "cpn.intake", "cpn.bootstrap")
"""What no client command needs: Alembic (a current store is opened without it), the predictor's and the
orchestrator's libraries, the web framework, the manifest reader, the scheduler's composition root."""


def test_each_command_is_added_by_the_module_the_table_names():
    for module in dict.fromkeys(COMMANDS.values()):
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        assert set(sub.choices) == {c for c, m in COMMANDS.items() if m == module}, module
    assert list(build_parser()._subparsers._group_actions[0].choices) == list(COMMANDS)


def loaded_by(argv: list[str], home) -> set[str]:
    """The top-level packages (and cpn modules) `cpn ARGV` imported, in a fresh interpreter."""
    script = (
        "import json, sys\nfrom cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *argv],
        cwd=REPO_ROOT,
        env={"CPN_HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def heavy(modules: set[str], names: tuple[str, ...] = HEAVY) -> set[str]:
    return {m for m in modules if any(m == h or m.startswith(h + ".") for h in names)}


@pytest.mark.integration  # starts interpreters: seconds on a busy machine
def test_the_client_commands_leave_out_what_they_do_not_use(tmp_path):
    home = tmp_path / "home"
    remote = loaded_by(["jobs", "--server", "http://127.0.0.1:9"], home)  # nothing answers there
    assert "httpx" in remote and not heavy(remote, (*HEAVY, "sqlalchemy", "cpn.store"))
    with JobStore(home / "jobs.db") as store:
        store.submit([JobSpec("lab/a", "ResNet-50")])
    local = loaded_by(["jobs"], home)
    assert "cpn.store" in local and not heavy(local)
