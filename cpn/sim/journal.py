"""A journal of what simulated clusters were asked to run, so a restarted service finds them as it left them.

Real clusters keep running while cpn is stopped; simulated ones live in cpn's process. Each accepted
submission is appended (and flushed to disk) to a JSON-lines file beside the job store before the
scheduler records the job as submitted, and so is each deletion. On start-up the simulator replays the
journal: the same submissions and deletions at the same simulated times give the same runs (the
simulator is deterministic), and the events they produce are ones the store either has already
(skipped) or missed while stopped.
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


class Entry(NamedTuple):
    """One journaled act: a submission (`job` and `placement`) or a deletion (`deleted`, the job id)."""

    time: float
    job: JobSpec | None
    placement: Placement | None
    deleted: str | None = None


class SubmissionJournal:
    """Append-only record of a simulated gateway's accepted submissions and deletions."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def record(self, time: float, job: JobSpec, placement: Placement) -> None:
        """Append one submission and make it durable before returning."""
        self._append(
            {"time": time, "job": dataclasses.asdict(job), "placement": dataclasses.asdict(placement)}
        )

    def record_delete(self, time: float, job_id: str) -> None:
        """Append one deletion and make it durable before returning."""
        self._append({"time": time, "deleted": job_id})

    def _append(self, entry: dict) -> None:
        line = json.dumps(entry, separators=(",", ":"))
        with self.path.open("a") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def entries(self) -> list[Entry]:
        """Every recorded submission and deletion, oldest first; a torn last line (a crash mid-write) is
        ignored."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
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


class JournaledGateway:
    """A simulated gateway whose accepted submissions are journaled, and which restores them on start."""

    def __init__(self, gateway: SimulatedGateway, journal: SubmissionJournal) -> None:
        self.sim = gateway
        self.journal = journal

    def restore(self) -> int:
        """Replay the journal into the (fresh) simulator; returns how many submissions were replayed."""
        submitted = 0
        for entry in self.journal.entries():
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
        """Submit to the simulator; journal it once accepted."""
        self.sim.submit(job, placement)
        self.journal.record(self.sim.clock.now(), job, placement)

    def delete(self, job_id: str) -> None:
        """Delete in the simulator; journal it once done."""
        self.sim.delete(job_id)
        self.journal.record_delete(self.sim.clock.now(), job_id)

    def logs(self, job_id: str, tail_lines: int) -> str:
        """The simulator's synthetic log of the job."""
        return self.sim.logs(job_id, tail_lines)

    def poll_events(self) -> list[JobEvent]:
        """The simulator's events."""
        return self.sim.poll_events()

    def held_jobs(self) -> frozenset[str]:
        """The simulator's held jobs."""
        return self.sim.held_jobs()
