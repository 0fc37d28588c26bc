"""The live loop: scheduling rounds on a wall clock for as long as the service runs.

A round runs every `interval_s`, or as soon as something happens: a job arrives (the store's
listener wakes the loop), or, on simulated clusters, the next simulated event falls due. A stop
request (SIGINT/SIGTERM in `cpn run`) lets the round in progress finish, then the loop returns.

The store's scheduler lease is renewed on its own thread (cpn.engine.lease); each round checks it. Losing
it (another process took it over, it lapsed, or a write was refused for a term the lease has left,
cpn.store.StaleTerm) ends the rounds at once.

A replica that does not lead waits as a standby (`standby`): it tries to take the lease every
`STANDBY_RETRY_S` seconds and runs rounds once it has it. `serve` goes round that cycle until stopped: a
leader that loses the lease steps down and stands by again, instead of exiting.
"""

from __future__ import annotations

import logging
import threading
import time
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


class Leadership(Protocol):
    """Whether this process leads the store's scheduling, and the moves between leading and standing by
    (cpn.bootstrap.Service has them)."""

    @property
    def leads(self) -> bool:
        """Whether this process holds the store's scheduler lease."""
        ...

    def try_lead(self) -> bool:
        """Take the lease if it is free; whether this process leads now."""
        ...

    def start(self) -> None:
        """Bring the service up to where the last leader left the store (before its first round as leader)."""
        ...

    def step_down(self) -> None:
        """Lead no more: the lease was lost."""
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
        before_round: Callable[[], None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.scheduler = scheduler
        self.interval_s = interval_s
        self.simulation = simulation
        self.on_round = on_round
        """Called with each round's result, after the round."""
        self.before_round = before_round
        """Called before each round (the service looks at the champion's alias there)."""
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
        if self.before_round is not None:
            self.before_round()
        result = self.scheduler.round()
        self.stats.rounds += 1
        self.stats.placed += result.placed
        if self.on_round is not None:
            self.on_round(result)
        return result

    def serve(self, leadership: Leadership, every_s: float = STANDBY_RETRY_S) -> LoopStats:
        """Lead or stand by until stopped: rounds while this process leads, and, while another does, a
        standby's wait for the lease, then `start` and rounds. A leader that loses the lease (LeaseLost)
        steps down and stands by again. A process that leads when called must have been started; a standby
        tries to lead every `every_s` seconds."""
        while not self._stop.is_set():
            if not leadership.leads:
                log.warning(
                    "standby: another process leads the store; this one takes the lease when it is free"
                )
                waited = time.monotonic()
                if not self.standby(leadership.try_lead, every_s):
                    break
                log.warning(
                    "took the store's scheduler lease as a standby of %.1f s: leading; reconciling with the "
                    "clusters",
                    time.monotonic() - waited,
                )
                leadership.start()
            if self.scheduler.lease is not None:
                self.scheduler.lease.on_lost = self.wake
            try:
                self.run()
            except LeaseLost as lost:
                log.warning("%s; standing by", lost)
                leadership.step_down()
        return self.stats

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
