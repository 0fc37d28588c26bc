"""The scheduler lease: one row saying which process may schedule from the store, until when, in which term.

A store written before Alembic may have the table already (the hand-written schema 4 gained it): kept.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    if "scheduler_lease" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "scheduler_lease",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),  # one row: id 1
        sa.Column("holder", sa.Text, nullable=False),  # hostname:pid:purpose of the process that holds it
        sa.Column("term", sa.Integer, nullable=False),  # +1 whenever another holder takes it over
        sa.Column("expires_at", sa.Float, nullable=False),  # wall-clock (Unix) time; a released lease has 0
        sa.CheckConstraint("id = 1", name="scheduler_lease_one_row"),
    )
