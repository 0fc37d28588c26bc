"""Jobs and their transitions: the schema the store had when it moved to Alembic (hand-written schema 4).

A store written before Alembic has these tables already, perhaps from an older schema (1 to 3) without
the columns later ones added: the missing columns and indexes are added, as the hand-written upgrades
did, and every stored row is kept.
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None

_SEQ = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""Row order: SQLite's rowid (an INTEGER primary key), a 64-bit identity on PostgreSQL."""


def _jobs() -> list[sa.Column]:
    return [
        sa.Column("seq", _SEQ, primary_key=True),  # acceptance order
        sa.Column("job_id", sa.Text, nullable=False, unique=True),
        sa.Column("spec", sa.Text, nullable=False),  # canonical JSON of the JobSpec, manifest included
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("cluster", sa.Text),
        sa.Column("node", sa.Text),
        sa.Column("location", sa.Text),  # cluster holding the job's image and data now
        sa.Column("submitted_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("placement", sa.Text),  # JSON [[node, cards], ...] of the gang while placed
        sa.Column("wait_code", sa.Text),  # why it waits (cpn.decisions.WaitCode), latest round
        sa.Column("wait_detail", sa.Text),
        sa.Column("predicted_start", sa.Float),  # when the latest plan starts it
        sa.Column("first_predicted_start", sa.Float),  # the first start any plan gave it
        sa.Column("image", sa.Text),  # the image to run, pinned by digest once migrated
        sa.Column("needs_more_than_gb", sa.Float),  # GPU memory per card it was OOM-killed with
    ]


def _transitions() -> list[sa.Column]:
    return [
        sa.Column("seq", _SEQ, primary_key=True),
        sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.job_id"), nullable=False),
        sa.Column("from_state", sa.Text),  # NULL: the job entered the store
        sa.Column("to_state", sa.Text, nullable=False),
        sa.Column("time", sa.Float, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("cluster", sa.Text),
        sa.Column("node", sa.Text),
        sa.Column("gpu_mem_gb", sa.Float),  # peak GPU memory per card the cluster measured, if any
        # a failed run's last pod log lines, as the gateway bounds them
        sa.Column("log_tail", sa.Text, nullable=False, server_default=""),
    ]


_TABLES = {
    "jobs": (_jobs, "jobs_by_state", ["state", "seq"]),
    "transitions": (_transitions, "transitions_by_job", ["job_id", "seq"]),
}


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    existing = set(inspector.get_table_names())
    for table, (columns, index, indexed) in _TABLES.items():
        if table not in existing:
            op.create_table(table, *columns())
        else:  # a store from before Alembic: add what its schema lacked
            present = {c["name"] for c in inspector.get_columns(table)}
            for column in columns():
                if column.name not in present:
                    op.add_column(table, column)
        if table not in existing or index not in {i["name"] for i in inspector.get_indexes(table)}:
            op.create_index(index, table, indexed)
