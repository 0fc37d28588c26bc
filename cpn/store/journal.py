"""The simulated clusters' journal in a server's store: what they were asked to run, one JSON entry a row
(cpn.sim.journal), each entry fenced like a submission, so that a leader whose term passed adds none."""

from __future__ import annotations

from sqlalchemy import insert, select

from cpn.store.database import StoreDatabase
from cpn.store.lease import Fence
from cpn.store.schema import SIM_JOURNAL


class Journal:
    """SIM_JOURNAL's entries, appended under the store's fence."""

    def __init__(self, database: StoreDatabase, fence: Fence) -> None:
        self._database = database
        self._fence = fence

    def append_journal(self, entry: str) -> None:
        """Append one simulated-cluster journal entry (JSON text), fenced like a submission."""
        with self._database.write() as db:
            self._fence.check(db)
            db.execute(insert(SIM_JOURNAL).values(entry=entry, term=self._fence.term))

    def journal(self) -> list[str]:
        """Every simulated-cluster journal entry, oldest first."""
        rows = self._database.read(select(SIM_JOURNAL.c.entry).order_by(SIM_JOURNAL.c.seq))
        return [entry for (entry,) in rows]
