"""Cancels asked for jobs on a cluster, which the scheduler's next round carries out (hand-written schema 6).

A store written before Alembic may have the table already: kept.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    if "cancel_requests" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "cancel_requests",
        sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.job_id"), primary_key=True),
        sa.Column("requested_by", sa.Text, nullable=False),  # the token's name (cpn.auth.Principal.name)
        sa.Column("requested_at", sa.Float, nullable=False),
    )
