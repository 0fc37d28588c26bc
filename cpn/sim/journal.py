"""A journal of what simulated clusters were asked to run, so a restarted service finds them as it left them.

Real clusters keep running while cpn is stopped; simulated ones live in cpn's process. Each accepted
submission is made durable before the scheduler records the job as submitted, and so is each deletion:
appended (and flushed to disk) to a JSON-lines file beside a SQLite store file (SubmissionJournal), or
written into the store itself on a database server (StoreJournal), where every replica of `cpn run`
reads it and a leader's entries are fenced by its lease's term like its submissions. On start-up, or
when a standby takes over, the simulator replays the journal: the same submissions and deletions at the
same simulated times give the same runs (the simulator is deterministic), and the events they produce
are ones the store either has already (skipped) or missed while stopped.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import NamedTuple

from cpn.adapters.gateway import JobEvent
from cpn.decisions import Placement
from cpn.inventory import NodeState
from cpn.jobs import JobSpec
from cpn.sim.gateway import SimulatedGateway
from cpn.store import JobStore


class Entry(NamedTuple):
    """One journaled act: a submission (`job` and `placement`) or a deletion (`deleted`, the job id)."""

    time: float
    job: JobSpec | None
    placement: Placement | None
    deleted: str | None = None


class Journal:
    """Append-only record of a simulated gateway's accepted submissions and deletions, one JSON text per
    entry; subclasses say where the texts are kept (`_append`, `_texts`)."""

    def _append(self, entry: str) -> None:
        """Keep one entry durably before returning."""
        raise NotImplementedError

    def _texts(self) -> list[str]:
        """Every kept entry, oldest first."""
        raise NotImplementedError

    def record(self, time: float, job: JobSpec, placement: Placement) -> None:
        """Append one submission and make it durable before returning."""
        self._append(
            _text({"time": time, "job": dataclasses.asdict(job), "placement": dataclasses.asdict(placement)})
        )

    def record_delete(self, time: float, job_id: str) -> None:
        """Append one deletion and make it durable before returning."""
        self._append(_text({"time": time, "deleted": job_id}))

    def entries(self) -> list[Entry]:
        """Every recorded submission and deletion, oldest first; a torn entry (a crash mid-write) is
        ignored."""
        out = []
        for line in self._texts():
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "deleted" in raw:
                out.append(Entry(raw["time"], None, None, raw["deleted"]))
                continue
            placement = raw["placement"]
            placement["extra_nodes"] = tuple(tuple(n) for n in placement["extra_nodes"])
            out.append(Entry(raw["time"], JobSpec(**raw["job"]), Placement(**placement)))
        return out


def _text(entry: dict) -> str:
    return json.dumps(entry, separators=(",", ":"))


class SubmissionJournal(Journal):
    """The journal as a JSON-lines file (beside a SQLite store file), each entry fsynced."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def _append(self, entry: str) -> None:
        with self.path.open("a") as fh:
            fh.write(entry + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _texts(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


class StoreJournal(Journal):
    """The journal in the job store's own database (a store on a server): every replica reads the one
    journal, and an entry is refused (cpn.store.StaleTerm) from a leader whose term has passed."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def _append(self, entry: str) -> None:
        self.store.append_journal(entry)

    def _texts(self) -> list[str]:
        return self.store.journal()


class JournaledGateway:
    """A simulated gateway whose accepted submissions are journaled, and which restores them on start."""

    def __init__(self, gateway: SimulatedGateway, journal: Journal) -> None:
        self.sim = gateway
        self.journal = journal
        self._known = 0
        """Entries the simulator has (replayed, or written through this gateway): a replica that led, lost
        its lease and leads again replays only the entries its successor wrote meanwhile."""

    def restore(self) -> int:
        """Replay into the simulator the journal's entries it lacks (all of them into a fresh one); returns
        how many submissions were replayed."""
        submitted = 0
        entries = self.journal.entries()[self._known :]
        self._known += len(entries)
        for entry in entries:
            self.sim.advance(max(entry.time, self.sim.clock.now()))
            if entry.deleted is not None:
                self.sim.delete(entry.deleted)
            elif entry.job is not None and entry.placement is not None:
                self.sim.submit(entry.job, entry.placement)
                submitted += 1
        return submitted

    def inventory(self) -> tuple[NodeState, ...]:
        """The simulator's inventory."""
        return self.sim.inventory()

    def submit(self, job: JobSpec, placement: Placement) -> None:
        """Submit to the simulator; journal it once accepted. A submission that cannot be journaled (the
        store unreachable, a stale term) is taken back and the error raised: the simulator runs only what
        a restart or a successor replays."""
        self.sim.submit(job, placement)
        try:
            self.journal.record(self.sim.clock.now(), job, placement)
        except BaseException:
            self.sim.withdraw(job.job_id)
            raise
        self._known += 1

    def delete(self, job_id: str, grace_s: float | None = None) -> None:
        """Delete in the simulator; journal it once done."""
        self.sim.delete(job_id, grace_s)
        self.journal.record_delete(self.sim.clock.now(), job_id)
        self._known += 1

    def logs(self, job_id: str, tail_lines: int) -> str:
        """The simulator's synthetic log of the job."""
        return self.sim.logs(job_id, tail_lines)

    def poll_events(self) -> list[JobEvent]:
        """The simulator's events."""
        return self.sim.poll_events()

    def held_jobs(self) -> frozenset[str]:
        """The simulator's held jobs."""
        return self.sim.held_jobs()
