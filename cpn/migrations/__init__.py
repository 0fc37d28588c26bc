"""The job store's schema history: Alembic migrations that the store runs itself whenever it opens.

`versions/` holds one small migration per schema change, written with Alembic's operations so that one
history builds both SQLite and PostgreSQL stores. `upgrade(connection)` brings the database on
`connection` to `HEAD`; the store calls it inside its own write transaction, so two processes that open
a new store at once migrate it once, and a failed migration leaves nothing half done. Nothing is read from
an alembic.ini: the configuration is built here.

The revision is the store's one schema number. The first revisions retrace the hand-written history of
the SQLite store (schemas 1 to 6, once versioned by `PRAGMA user_version`, which cpn reads no more). A
store written before Alembic records no revision and may hold any part of that history, so the store runs
every migration on it, and every migration first looks (by inspection) whether the store has its change
already and then skips it. A new schema change is a new file in `versions/`, written the same way, whose
`down_revision` is the current head, and a new `HEAD`.

Alembic itself is imported only when a store needs migrating or names a revision this cpn lacks: it
costs a fifth of a second, which every command that merely opens a current store would pay otherwise.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

HEAD = "0009"
"""The newest revision in versions/: the schema this cpn reads and writes (a test checks it is)."""

_LOCATION = "cpn:migrations"
"""Where Alembic finds env.py and versions/: this package, as a package resource."""


def _config(connection: Connection | None = None) -> Config:
    # Alembic says at INFO what it sets up and runs, a dozen lines in the log of every service that
    # opens a new store; the store logs one line instead.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", _LOCATION)
    config.attributes["connection"] = connection
    return config


@cache
def scripts() -> ScriptDirectory:
    """Alembic's reading of versions/: every revision this cpn knows."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config())


def current(connection: Connection) -> str | None:
    """The revision the database on `connection` is at; None for an empty or a pre-Alembic store."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def known(revision: str) -> bool:
    """Whether `revision` is in this cpn's history (False: a newer cpn wrote the store); the head is known
    without Alembic (an open of a current store imports none of it)."""
    if revision == HEAD:
        return True
    history = scripts()
    from alembic.util import CommandError

    try:
        return history.get_revision(revision) is not None
    except CommandError:
        return False


def upgrade(connection: Connection) -> None:
    """Run every migration the database on `connection` lacks, in the caller's transaction."""
    config = _config(connection)
    from alembic import command

    command.upgrade(config, "head")
