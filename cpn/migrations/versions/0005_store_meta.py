"""Facts about the store itself, as key/value rows: `copy_in_progress` while `cpn store copy` fills it."""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    if "store_meta" in sa.inspect(op.get_bind()).get_table_names():
        return
    op.create_table(
        "store_meta",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )
