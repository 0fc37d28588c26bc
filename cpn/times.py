"""Times and durations for people, one way everywhere: the web UI, the CLI and the texts the scheduler
stores ("cancelled by ops (asked at ...)").

A store time is seconds on the store's clock: Unix time on the wall clock, or, for `cpn run` over
simulated clusters, seconds since the simulation began. Wall times read as local time with the zone
(`2026-11-27 21:04:05 CET`); simulated ones say so (`t = 2.8 h (simulated)`), since they are no time of
day. Beside a time, how far it is from now (`in 4.1 min`, `3 s ago`). Durations always carry
their unit (`42 s`, `4.1 min`, `2.8 h`, `1.5 d`). The API gives ISO 8601 with the zone (cpn.api);
`parse_api_time` reads those back.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime

SIMULATED_BELOW = 1e9
"""Store times below this are simulated seconds: no wall clock reads earlier than 2001-09-09."""
SAME_S = 1.0
"""Times closer than this (seconds) read as one: an interval this narrow is no interval."""


def is_simulated(t: float) -> bool:
    """Whether store time `t` is on a simulated clock (seconds since the simulation began)."""
    return t < SIMULATED_BELOW


def duration(seconds: float | None) -> str:
    """A length of time with its unit: `42 s`, `4.1 min`, `2.8 h`, `1.5 d`; `-` for None, `never` for inf."""
    if seconds is None:
        return "-"
    if seconds == math.inf:
        return "never"
    sign, s = ("-" if seconds < 0 else ""), abs(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{sign}{s / size:.1f} {unit}"
    return f"{sign}{s:.0f} s"


def clock_time(t: float | None, wall_of: Callable[[float], float] | None = None) -> str:
    """A store time: local date and time with the zone on the wall clock, else labelled simulated, with
    the wall-clock time it maps to where `wall_of` (simulated -> Unix time, a live simulation's
    timeline) is given; `-` for None, `never` for inf (a service's end)."""
    if t is None:
        return "-"
    if t == math.inf:
        return "never"
    if is_simulated(t):
        at = "" if wall_of is None else f"; {_local(wall_of(t))}"
        return f"t = {duration(t)} (simulated{at})"
    return _local(t)


def _local(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def relative(t: float | None, now: float) -> str:
    """How far store time `t` is from `now` (same clock): `in 4.1 min`, `3 s ago`, `now`."""
    if t is None:
        return "-"
    if t == math.inf:
        return "never"
    if abs(t - now) < SAME_S:
        return "now"
    return f"in {duration(t - now)}" if t > now else f"{duration(now - t)} ago"


def moment(t: float | None, now: float | None = None) -> str:
    """A store time with how far it is from `now` (None: not said): `2026-11-27 21:04:05 CET (in 4.1 min)`."""
    if t is None or t == math.inf or now is None:
        return clock_time(t)
    return f"{clock_time(t)} ({relative(t, now)})"


def from_now(t: float | None) -> str:
    """How far store time `t` is from now for a reader outside the service (the CLI): on the wall clock
    `in 4.1 min`; a simulated time as its clock time (only the service knows the simulation's now)."""
    if t is None or t == math.inf or is_simulated(t):
        return clock_time(t)
    return relative(t, time.time())


def moment_now(t: float | None) -> str:
    """`moment` for a reader outside the service: the time, and on the wall clock how far from now."""
    return moment(t, None if t is None or is_simulated(t) else time.time())


def between(
    low: float | None, high: float | None, wall_of: Callable[[float], float] | None = None
) -> str | None:
    """`between L and H` for an interval of store times (`wall_of` as `clock_time` takes it); None where
    there is none to show (an end not known, or both ends the same moment: an empty interval says
    nothing)."""
    if low is None or high is None or high - low < SAME_S:
        return None
    return f"between {clock_time(low, wall_of)} and {clock_time(high, wall_of)}"


def stamp(t: float) -> str:
    """A store time inside a stored text, read later by anyone anywhere: ISO 8601 UTC on the wall clock,
    `t = 27.1 min (simulated)` on a simulated one."""
    if is_simulated(t):
        return clock_time(t)
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_api_time(value: str | float | None) -> float | None:
    """A time as the API answers it (ISO 8601 with the zone, or simulated seconds) as a store time."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(value).timestamp()
