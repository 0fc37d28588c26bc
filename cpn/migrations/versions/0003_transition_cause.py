"""A transition's cause (cpn.jobs.Cause) as data: what it counts as, e.g. an OOM kill (hand-written schema 5).

Transitions recorded before the column existed said their cause in their reason's first words: those
get it from there. A store written before Alembic may have the column already: kept.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    if "cause" in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("transitions")}:
        return
    op.add_column("transitions", sa.Column("cause", sa.Text, nullable=False, server_default=""))
    transitions = sa.table("transitions", sa.column("cause"), sa.column("reason"))
    for cause, reason in (("oom-killed", "OOMKilled%"), ("migration-failed", "migration failed%")):
        op.execute(transitions.update().where(transitions.c.reason.like(reason)).values(cause=cause))
