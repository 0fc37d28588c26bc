"""A journal of what simulated clusters were asked to run, so a restarted service finds them as it left them.

Real clusters keep running while cpn is stopped; simulated ones live in cpn's process. Each accepted
submission is appended (and flushed to disk) to a JSON-lines file beside the job store before the
scheduler records the job as submitted. On start-up the simulator replays the journal: the same
submissions at the same simulated times give the same runs (the simulator is deterministic), and
the events they produce are ones the store either has already (skipped) or missed while stopped.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from cpn.adapters.gateway import JobEvent
from cpn.decisions import Placement
from cpn.inventory import NodeState
from cpn.jobs import JobSpec
from cpn.sim.gateway import SimulatedGateway


class SubmissionJournal:
    """Append-only record of a simulated gateway's accepted submissions."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def record(self, time: float, job: JobSpec, placement: Placement) -> None:
        """Append one submission and make it durable before returning."""
        line = json.dumps(
            {"time": time, "job": dataclasses.asdict(job), "placement": dataclasses.asdict(placement)},
            separators=(",", ":"),
        )
        with self.path.open("a") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def entries(self) -> list[tuple[float, JobSpec, Placement]]:
        """Every recorded submission, oldest first; a torn last line (a crash mid-write) is ignored."""
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                continue
            placement = raw["placement"]
            placement["extra_nodes"] = tuple(tuple(n) for n in placement["extra_nodes"])
            out.append((raw["time"], JobSpec(**raw["job"]), Placement(**placement)))
        return out


class JournaledGateway:
    """A simulated gateway whose accepted submissions are journaled, and which restores them on start."""

    def __init__(self, gateway: SimulatedGateway, journal: SubmissionJournal) -> None:
        self.sim = gateway
        self.journal = journal

    def restore(self) -> int:
        """Replay the journal into the (fresh) simulator; returns how many submissions were replayed."""
        entries = self.journal.entries()
        for time, job, placement in entries:
            self.sim.advance(max(time, self.sim.clock.now()))
            self.sim.submit(job, placement)
        return len(entries)

    def inventory(self) -> tuple[NodeState, ...]:
        """The simulator's inventory."""
        return self.sim.inventory()

    def submit(self, job: JobSpec, placement: Placement) -> None:
        """Submit to the simulator; journal it once accepted."""
        self.sim.submit(job, placement)
        self.journal.record(self.sim.clock.now(), job, placement)

    def poll_events(self) -> list[JobEvent]:
        """The simulator's events."""
        return self.sim.poll_events()

    def held_jobs(self) -> frozenset[str]:
        """The simulator's held jobs."""
        return self.sim.held_jobs()
