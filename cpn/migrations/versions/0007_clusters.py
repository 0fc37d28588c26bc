"""The cluster set in the store, so clusters are added, cordoned and removed while cpn runs.

`clusters`: one row per cluster cpn schedules onto, seeded from the config on a service's first start:
its config (JSON, as config.settings.Cluster reads it, with its WAN links to the clusters before it),
its state (`active`, `cordoned`: no new jobs; `removed`: kept so that a restart can still replay what
simulated clusters ran there) and when it was added. `seq` keeps the order they were added in.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    if "clusters" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "clusters",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.Text, nullable=False, unique=True),
        sa.Column("spec", sa.Text, nullable=False),  # JSON: the cluster's config and its wan_gbps row
        sa.Column("state", sa.Text, nullable=False),  # active | cordoned | removed
        sa.Column("added_at", sa.Float, nullable=False),  # wall clock (unix time)
    )
