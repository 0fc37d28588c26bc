"""Simulated time for the live service: simulated clusters that run `time_scale` times faster than the wall.

In a replay, simulated time jumps from event to event. In `cpn run` on simulated clusters it follows
the wall clock, scaled: `--time-scale 600` shows a day of jobs in under three minutes. The mapping
(a wall-clock anchor, the simulated time at that anchor, the scale) is kept in a small file beside a
SQLite job store file, or in the store itself on a database server (shared by every replica), so a
restarted service, or a standby taking over, resumes the same simulated timeline: the clusters "kept
running" while cpn was down, and jobs that ended meanwhile are reported at once.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cpn.clock import SimClock


class Simulated(Protocol):
    """A simulated component that moves through time: the simulated gateway, the simulated migrator."""

    def next_event_time(self) -> float | None:
        """When its next event is due (simulated seconds), or None."""
        ...

    def advance(self, until: float) -> None:
        """Bring it up to simulated time `until`."""
        ...


@dataclass(frozen=True)
class Timeline:
    """Simulated time = `sim_anchor` + (wall time - `wall_anchor`) x `scale`."""

    wall_anchor: float
    sim_anchor: float
    scale: float

    def sim_at(self, wall: float) -> float:
        """Simulated time at wall-clock time `wall`."""
        return self.sim_anchor + (wall - self.wall_anchor) * self.scale

    def wall_delay(self, sim_from: float, sim_to: float) -> float:
        """Wall seconds from simulated time `sim_from` to `sim_to`."""
        return max(0.0, (sim_to - sim_from) / self.scale)

    @classmethod
    def resume(cls, path: Path, scale: float, wall_now: float, save: bool = True) -> Timeline:
        """The timeline saved at `path`, rescaled to `scale` from now on; a new one starting at 0 if none.

        Saved back to `path` unless `save` is off (a dry run, which writes nothing)."""
        timeline = cls.continued(path.read_text() if path.exists() else None, scale, wall_now)
        if save:
            path.write_text(timeline.saved())
        return timeline

    @classmethod
    def continued(cls, saved: str | None, scale: float, wall_now: float) -> Timeline:
        """The timeline `saved` (a `saved()` text) rescaled to `scale` from `wall_now` on; a new one
        starting at 0 if None."""
        if scale <= 0:
            raise ValueError(f"time scale must be > 0, got {scale}")
        sim_now = 0.0
        if saved is not None:
            old = json.loads(saved)
            sim_now = cls(old["wall_anchor"], old["sim_anchor"], old["scale"]).sim_at(wall_now)
        return cls(wall_now, sim_now, scale)

    def saved(self) -> str:
        """The timeline as text, for `continued`."""
        return json.dumps(dataclasses.asdict(self))


class SimDriver:
    """Moves simulated components and their shared SimClock along a Timeline."""

    def __init__(
        self,
        clock: SimClock,
        parts: Sequence[Simulated],
        timeline: Timeline,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.parts = tuple(parts)
        self.timeline = timeline
        self.wall = wall

    def catch_up(self) -> float:
        """Advance every part, and the clock, to the simulated time of now; returns it."""
        target = max(self.timeline.sim_at(self.wall()), self.clock.now())
        for part in self.parts:
            part.advance(target)
        if self.clock.now() < target:
            self.clock.advance_to(target)
        return target

    def seconds_to_next_event(self) -> float | None:
        """Wall seconds until the next simulated event (a job ending, a copy finishing); None if none."""
        times = [t for t in (p.next_event_time() for p in self.parts) if t is not None]
        if not times:
            return None
        return self.timeline.wall_delay(self.clock.now(), min(times))
