"""Time as an injected dependency, so the live loop and the simulator share code."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Something that tells the time in seconds."""

    def now(self) -> float:
        """Current time in seconds."""
        ...


class WallClock:
    """Real time (Unix seconds)."""

    def now(self) -> float:
        return time.time()


class SimClock:
    """Simulated time that only moves when the simulator moves it."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance_to(self, t: float) -> None:
        """Move time forward to `t`; time never goes back."""
        if t < self._now:
            raise ValueError(f"simulated time cannot go back from {self._now} to {t}")
        self._now = t
