"""The forward look's whole prediction for a waiting job (cpn.engine.forecast), not just its start.

`jobs.predicted_end`: when the forward look ends it (Infinity for a service, which never ends);
`jobs.start_low`, `jobs.start_high`: the interval its start may fall in, from the estimates' spread;
`jobs.moved`: why its predicted start last moved (NULL: it has not). All NULL where no forward look
predicted them, and cleared with the waiting reason when the job leaves the queue.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"

_COLUMNS = (
    ("predicted_end", sa.Float),
    ("start_low", sa.Float),
    ("start_high", sa.Float),
    ("moved", sa.Text),
)


def upgrade() -> None:
    have = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("jobs")}
    for name, kind in _COLUMNS:
        if name not in have:
            op.add_column("jobs", sa.Column(name, kind, nullable=True))
