"""Scheduler facts that were once only in a scheduler's memory (cpn.store.facts), so that any process
(a restart, a `schedule-round` run, a standby that takes over) decides as the one that wrote them.

`saved_progress`: for each preempted job not ended yet, the fraction of its work left at the checkpoint
it was stopped at (its next run resumes from there). `copies`: for each job migrating, where its payload is
copied from, when the copy began, and whether it runs on whole cards (a sharing job to explore).
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    have = set(sa.inspect(op.get_bind()).get_table_names())
    if "saved_progress" not in have:
        op.create_table(
            "saved_progress",
            sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.job_id"), primary_key=True),
            sa.Column("work_left", sa.Float, nullable=False),
            sa.Column("saved_at", sa.Float, nullable=False),
        )
    if "copies" not in have:
        op.create_table(
            "copies",
            sa.Column("job_id", sa.Text, sa.ForeignKey("jobs.job_id"), primary_key=True),
            sa.Column("source", sa.Text, nullable=False),
            sa.Column("started_at", sa.Float, nullable=False),
            sa.Column("whole_cards", sa.Boolean, nullable=False),
        )
