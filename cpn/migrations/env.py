"""Alembic's environment for the job store: run the migrations on the connection the store hands over.

The store has begun its write transaction on that connection already, so the migrations run inside it
(`begin_transaction` adds none of its own).
"""

from alembic import context

context.configure(connection=context.config.attributes["connection"])
with context.begin_transaction():
    context.run_migrations()
