"""Progress of a replay for the person waiting on `cpn bench policies`: jobs finished out of the trace's,
the wall time spent, and the time left at the pace so far.

A replay runs thousands of rounds a second, so `ReplayProgress.tick` is called every round and costs a
clock read until a line is due: every `TTY_EVERY_S` on a terminal, where the line is rewritten in place,
else every `LOG_EVERY_S`, a line each (a log, a CI job's output).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from cpn.times import duration

TTY_EVERY_S = 0.5
"""Seconds between updates of the line on a terminal (rewritten in place)."""
LOG_EVERY_S = 5.0
"""Seconds between lines written to anything else (a file, a pipe)."""


def seconds_left(done: int, total: int, elapsed_s: float) -> float | None:
    """Wall seconds the rest of `total` jobs takes at the pace of the first `done` (`elapsed_s` for them);
    None before the first job finished (no pace yet)."""
    if done <= 0:
        return None
    return max(0, total - done) * elapsed_s / done


def progress_line(name: str, done: int, total: int, elapsed_s: float) -> str:
    """`greedy: 1,234/15,264 jobs finished (8.1%), 12 s spent, about 2.3 min left`."""
    share = done / total if total else 1.0
    left = seconds_left(done, total, elapsed_s)
    eta = "time left unknown until a job finishes" if left is None else f"about {duration(left)} left"
    return f"{name}: {done:,}/{total:,} jobs finished ({share:.1%}), {duration(elapsed_s)} spent, {eta}"


class ReplayProgress:
    """Reports one policy's replay as it goes (`tick` each round, `close` at its end).

    `write` takes text as is (no newline added): on a terminal (`tty`) the line is rewritten in place
    (a carriage return, the line, the rest of the old one cleared) and cleared at `close`, so the
    replay's summary line takes its place; elsewhere each line ends with a newline."""

    def __init__(
        self,
        name: str,
        total: int,
        write: Callable[[str], None],
        tty: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.total = total
        self._write = write
        self._tty = tty
        self._clock = clock
        self._every_s = TTY_EVERY_S if tty else LOG_EVERY_S
        self._started = clock()
        self._due = self._started + self._every_s
        self._shown = False

    def tick(self, finished: Callable[[], int]) -> None:
        """Write the line if one is due; `finished` (jobs finished so far) is asked only then."""
        now = self._clock()
        if now < self._due:
            return
        self._due = now + self._every_s
        line = progress_line(self.name, finished(), self.total, now - self._started)
        self._write(f"\r{line}\x1b[K" if self._tty else f"{line}\n")
        self._shown = True

    def close(self) -> None:
        """End the report: on a terminal, clear the line written in place."""
        if self._tty and self._shown:
            self._write("\r\x1b[K")
