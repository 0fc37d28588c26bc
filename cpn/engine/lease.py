"""One scheduler per store: this process's hold on the job store's scheduler lease.

Two schedulers on one store would each take the same free cards for their own, and one's restart
reconciliation would queue again the jobs the other is migrating. So a process that writes
decisions (`cpn run`, a `schedule-round` run that is not dry) first takes the store's lease
(cpn.store `acquire_lease`) for a short term (LEASE_TTL_S), renews it on a thread of its own every third of
that, however long its rounds take, and stops scheduling the moment its rounds find it lost (`check`):
another holder took it, or it went unrenewed for its term. A process that stops releases it. One that
died frees the store when its lease expires, within LEASE_TTL_S, so that a standby on another host (with no
pid to look at) takes over within 10 s; at once for a process on this host: a holder whose pid no longer
runs here is taken over (a pid reused meanwhile only makes the newcomer wait for the expiry). That pid check
is switched off by CPN_LEASE_PID_CHECK=0 (config.runtime), so that replicas on one host take over as replicas
on separate hosts do, by expiry only (what `cpn bench replicas` measures).

Fencing: while it holds the lease, the process's store carries the lease's term (JobStore.fence), and the
store refuses every assignment, submission and simulated-cluster journal entry whose term the lease has
left (StaleTerm, a LeaseLost), in the write's own transaction: a leader paused past its lease, whose
successor took over, can never assign or submit again.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

from config.runtime import runtime_settings
from cpn.store import JobStore, LeaseLost, StoreError, StoreLeased

log = logging.getLogger(__name__)

LEASE_TTL_S = 6.0
"""How long the lease lasts unrenewed. Its keeper renews it every third of this, on its own thread, so
neither a long round nor a busy store for a moment loses it; a standby retrying every 2 s
(cpn.engine.live.STANDBY_RETRY_S) takes a dead leader's over within 8 s."""


def holder_name(purpose: str) -> str:
    """This process as a lease names it, `hostname:pid:purpose`, so a refusal says whom to stop."""
    return f"{socket.gethostname()}:{os.getpid()}:{purpose}"


def gone_from_this_host(holder: str) -> bool:
    """Whether `holder` names a process of this host that no longer runs."""
    host, pid, *_ = [*holder.split(":", 2), ""]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it runs, as another user
        return False
    return False


class SchedulerLease:
    """The lease this process holds on `store`, in one term, renewed by a keeper thread until released."""

    def __init__(
        self, store: JobStore, purpose: str, ttl_s: float = LEASE_TTL_S, *, pid_check: bool | None = None
    ) -> None:
        """Take the lease, fence `store` with its term and start renewing it (raises cpn.store.StoreLeased,
        naming the holder, while another holds it). `pid_check` takes a lease whose holder's process is gone
        from this host over at once (None: CPN_LEASE_PID_CHECK, on by default); off, only an expired one."""
        self.store = store
        self.holder = holder_name(purpose)
        self.ttl_s = ttl_s
        if pid_check is None:
            pid_check = runtime_settings().lease_pid_check
        try:
            self.term = store.acquire_lease(self.holder, ttl_s)
        except StoreLeased as refused:
            if not pid_check:
                raise
            held = store.lease()
            if held is None or held.holder != refused.holder or not gone_from_this_host(held.holder):
                raise
            log.warning("taking the store's scheduler lease over from %s: that process is gone", held.holder)
            store.release_lease(held.holder, held.term)
            self.term = store.acquire_lease(self.holder, ttl_s)
        store.fence(self.term)
        self._renewed_at = time.monotonic()
        self._lost: LeaseLost | None = None
        self.on_lost: Callable[[], None] | None = None
        """Called (on the keeper's thread) when the keeper finds the lease taken over: a loop waiting for its
        next round wakes, so that it stops leading at once (cpn.engine.live.LiveLoop.serve)."""
        self._stop = threading.Event()
        self._keeper = threading.Thread(target=self._keep, name="scheduler-lease", daemon=True)
        self._keeper.start()

    def _keep(self) -> None:
        """Renew every third of the ttl until released or lost; a store that fails for a moment is tried
        again at the next turn (`check` says lost once a whole ttl passed unrenewed). Anything else (a store
        closed under it) ends the keeping, and the lease lapses."""
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.renew()
            except LeaseLost as lost:
                self._lost = lost
                if self.on_lost is not None:
                    self.on_lost()
                return
            except StoreError as exc:
                log.warning("could not renew the scheduler lease: %s", exc)
            except Exception:
                log.exception("the scheduler lease's keeper stopped; the lease lapses")
                return

    def renew(self) -> None:
        """Extend the lease by its ttl from now; LeaseLost if another process holds it now."""
        if not self.store.renew_lease(self.holder, self.term, self.ttl_s):
            raise self._lost_to("taken over")
        self._renewed_at = time.monotonic()

    def check(self) -> None:
        """LeaseLost if this process may no longer schedule: another process holds the lease (read from the
        store now, so a round finds it before it writes anything), or it went unrenewed for its ttl (the
        store unreachable), after which another may have. Called before a round collects and before it
        records a decision; the store's fencing refuses a fenced write made regardless."""
        if self._lost is None:
            held = self.store.lease()
            if held is None or (held.holder, held.term) != (self.holder, self.term):
                self._lost = self._lost_to("taken over")
        if self._lost is not None:
            raise self._lost
        if time.monotonic() - self._renewed_at > self.ttl_s:
            raise self._lost_to(f"not renewed within {self.ttl_s:g} s")

    def _lost_to(self, why: str) -> LeaseLost:
        try:
            now = self.store.lease()
        except StoreError:  # unreachable: who holds it now is not known
            now = None
        by = f" to {now.holder} (term {now.term})" if now is not None and now.term != self.term else ""
        return LeaseLost(
            f"{self.store.path}: {self.holder} lost the scheduler lease of term {self.term}{by} ({why}); "
            "it stops scheduling"
        )

    def release(self) -> None:
        """Stop renewing, and free the store for the next scheduler now (nothing is freed if the lease was
        lost)."""
        self._stop.set()
        if self._keeper is not threading.current_thread():
            self._keeper.join(timeout=self.ttl_s)
        self.store.fence(None)
        self.store.release_lease(self.holder, self.term)
