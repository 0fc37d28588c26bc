"""The migration port: copy a job's image, model and data to another cluster.

The real implementation copies images between OCI registries; the simulated one
(cpn.sim.migrator) charges WAN transfer time. While a job's copy runs, the scheduler holds the cards
it was assigned (no other job takes them); when the copy is done the job is submitted to them, its payload
now held by the destination as well as by the clusters that held it before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cpn.jobs import JobSpec


@dataclass(frozen=True)
class MigrationDone:
    """A finished (or failed) copy of a job's image and data to `cluster`."""

    job_id: str
    cluster: str
    time: float
    ok: bool = True
    reason: str = ""
    image: str = ""
    """The image reference at the destination, pinned by digest (empty when nothing was copied)."""
    bytes: int | None = None
    """Bytes the copy moved (0 when the destination already had the image); None = not measured."""
    seconds: float | None = None
    """Wall seconds the copy took; None = not measured (the simulator charges modelled time instead)."""


class Migrator(Protocol):
    """Moves jobs' payloads between clusters."""

    def start(self, job: JobSpec, src: str, dst: str, started_at: float | None = None) -> None:
        """Begin copying `job`'s image and data from `src` to `dst`. `started_at`: when a copy that another
        process began (before a restart, a takeover, or in an earlier `schedule-round` run) started, which
        this one goes on with (cpn.store.facts.CopyStarted): it finishes when that copy would have, and
        moves only what the destination lacks (a registry copy skips the layers it has)."""
        ...

    def poll(self) -> list[MigrationDone]:
        """Copies finished since the last call, oldest first."""
        ...
