"""Fencing and the simulated clusters' journal in the store, for replicas on one database server.

`transitions.term`: the scheduler lease's term under which an assignment or a submission was recorded
(NULL for every other transition, and for those recorded before), so the history says which leader did it.
`sim_journal`: what simulated clusters were asked to run, for a store on a database server, where no file
lies beside the store (cpn.sim.journal): a standby that takes over replays it.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    bind = op.get_bind()
    if "term" not in {c["name"] for c in sa.inspect(bind).get_columns("transitions")}:
        op.add_column("transitions", sa.Column("term", sa.Integer, nullable=True))
    if "sim_journal" not in sa.inspect(bind).get_table_names():
        op.create_table(
            "sim_journal",
            sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
            sa.Column("entry", sa.Text, nullable=False),  # one JSON entry (cpn.sim.journal)
            sa.Column("term", sa.Integer, nullable=True),  # the lease term it was written under
        )
