"""The live loop: scheduling rounds on a wall clock for as long as the service runs.

A round runs every `interval_s`, or as soon as something happens: a job arrives (the store's
listener wakes the loop), or, on simulated clusters, the next simulated event falls due. A stop
request (SIGINT/SIGTERM in `cpn run`) lets the round in progress finish, then the loop returns.

The scheduler renews the store's scheduler lease every round (cpn.engine.lease): the interval is what
bounds the time between renewals. Losing the lease to another process (or a write refused for a term the
lease has left, cpn.store.StaleTerm) ends the loop at once.

A replica that does not lead waits as a standby first (`standby`): it tries to take the lease every
`STANDBY_RETRY_S` seconds and runs rounds once it has it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cpn.engine.lease import LeaseLost
from cpn.engine.scheduler import RoundResult, Scheduler
from cpn.store import StoreUnavailable

log = logging.getLogger(__name__)

STANDBY_RETRY_S = 2.0
"""How often a standby tries to take the lease (client-go's leader election retries every 2 s): a
leader's death on this host is noticed within this; one elsewhere within its lease's ttl."""


class Simulation(Protocol):
    """Simulated clusters that follow the wall clock (cpn.sim.driver.SimDriver): the engine knows them only
    through this port, so it never imports the simulator."""

    def catch_up(self) -> float:
        """Bring the simulated clusters up to now; returns the simulated time."""
        ...

    def seconds_to_next_event(self) -> float | None:
        """Wall seconds until the next simulated event; None if none is due."""
        ...


@dataclass
class LoopStats:
    """What the loop has done so far."""

    rounds: int = 0
    placed: int = 0
    errors: int = 0


class LiveLoop:
    """Runs `scheduler` rounds until stopped."""

    def __init__(
        self,
        scheduler: Scheduler,
        interval_s: float,
        simulation: Simulation | None = None,
        on_round: Callable[[RoundResult], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.scheduler = scheduler
        self.interval_s = interval_s
        self.simulation = simulation
        self.on_round = on_round
        self.stats = LoopStats()
        self._wake = threading.Event()
        self._stop = threading.Event()
        scheduler.store.add_listener(self.wake)

    def wake(self) -> None:
        """Run the next round now (a job arrived, an event came back)."""
        self._wake.set()

    def stop(self) -> None:
        """Finish the round in progress, then return from `run`."""
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked for."""
        return self._stop.is_set()

    def standby(self, try_lead: Callable[[], bool], every_s: float = STANDBY_RETRY_S) -> bool:
        """Wait until `try_lead()` says this process leads (True), calling it every `every_s` seconds, or
        until a stop is asked for (False). A store that cannot be reached meanwhile is tried again."""
        while not self._stop.is_set():
            try:
                if try_lead():
                    return True
            except StoreUnavailable as exc:
                log.warning("standby: %s", exc)
            self._stop.wait(every_s)
        return False

    def run_once(self) -> RoundResult:
        """One round, simulated clusters first brought up to now."""
        if self.simulation is not None:
            self.simulation.catch_up()
        result = self.scheduler.round()
        self.stats.rounds += 1
        self.stats.placed += result.placed
        if self.on_round is not None:
            self.on_round(result)
        return result

    def run(self) -> LoopStats:
        """Rounds until `stop`; a round that raises is logged and counted, and the loop goes on, except
        that LeaseLost (another process now schedules the store) is raised at once."""
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.run_once()
            except LeaseLost:
                raise
            except Exception:
                self.stats.errors += 1
                log.exception("scheduling round failed; retrying in %.1f s", self.interval_s)
            timeout = self.interval_s
            if self.simulation is not None:
                due = self.simulation.seconds_to_next_event()
                if due is not None:
                    timeout = min(timeout, due)
            self._wake.wait(timeout)
        return self.stats
