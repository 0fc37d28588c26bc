"""Time as an injected dependency, so the live loop and the simulator share code.

A clock tells two times: `now`, the time jobs and events are stamped with (Unix seconds live,
simulated seconds in a replay), and `monotonic`, a reading of real elapsed time for throttling work
by what it costs (a replay's simulated time jumps hours in a round that takes a millisecond).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    """Something that tells the time in seconds."""

    def now(self) -> float:
        """Current time in seconds."""
        ...

    def monotonic(self) -> float:
        """Seconds of real time from an arbitrary origin, never going back: for measuring how long work
        takes, never for stamping what happened."""
        ...


class WallClock:
    """Real time (Unix seconds)."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class SimClock:
    """Simulated time that only moves when the simulator moves it.

    Its `monotonic` reading is the real one (`wall`, default time.monotonic): the work a replay does
    costs real time; a test hands in a fake to decide how much time that work took.
    """

    def __init__(self, start: float = 0.0, wall: Callable[[], float] = time.monotonic) -> None:
        self._now = start
        self._wall = wall

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._wall()

    def advance_to(self, t: float) -> None:
        """Move time forward to `t`; time never goes back."""
        if t < self._now:
            raise ValueError(f"simulated time cannot go back from {self._now} to {t}")
        self._now = t
