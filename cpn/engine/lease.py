"""One scheduler per store: this process's hold on the job store's scheduler lease.

Two schedulers on one store would each take the same free cards for their own, and one's restart
reconciliation would queue again the jobs the other is migrating. So a process that writes
decisions (`cpn run`, a `schedule-round` run that is not dry) first takes the store's lease
(cpn.store `acquire_lease`), renews it every round, and stops the moment a renewal finds another
holder. A process that stops releases it. One that died frees the store when its lease expires, or
at once for a process on this host: a holder whose pid no longer runs here is taken over (a pid
reused meanwhile only makes the newcomer wait for the expiry).

Fencing: while it holds the lease, the process's store carries the lease's term (JobStore.fence), and the
store refuses every assignment, submission and simulated-cluster journal entry whose term the lease has
left (StaleTerm, a LeaseLost), in the write's own transaction: a leader paused past its lease, whose
successor took over, can never assign or submit again.
"""

from __future__ import annotations

import logging
import os
import socket

from cpn.store import JobStore, LeaseLost, StoreLeased

log = logging.getLogger(__name__)

MIN_TTL_S = 15.0
"""The shortest lease: long enough that a slow round on a loaded machine does not lose it."""


def lease_ttl(interval_s: float) -> float:
    """How long a lease renewed once a round lasts: three rounds' interval, and at least `MIN_TTL_S`."""
    return max(MIN_TTL_S, 3 * interval_s)


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
    """The lease this process holds on `store`, in one term."""

    def __init__(self, store: JobStore, purpose: str, ttl_s: float) -> None:
        """Take the lease and fence `store` with its term (raises cpn.store.StoreLeased, naming the holder,
        while another holds it)."""
        self.store = store
        self.holder = holder_name(purpose)
        self.ttl_s = ttl_s
        try:
            self.term = store.acquire_lease(self.holder, ttl_s)
        except StoreLeased as refused:
            held = store.lease()
            if held is None or held.holder != refused.holder or not gone_from_this_host(held.holder):
                raise
            log.warning("taking the store's scheduler lease over from %s: that process is gone", held.holder)
            store.release_lease(held.holder, held.term)
            self.term = store.acquire_lease(self.holder, ttl_s)
        store.fence(self.term)

    def renew(self) -> None:
        """Extend the lease by its ttl from now; LeaseLost if another process holds it now."""
        if not self.store.renew_lease(self.holder, self.term, self.ttl_s):
            now = self.store.lease()
            by = f" to {now.holder} (term {now.term})" if now is not None else ""
            raise LeaseLost(
                f"{self.store.path}: {self.holder} lost the scheduler lease of term {self.term}{by} "
                f"(not renewed within {self.ttl_s:g} s); it stops scheduling"
            )

    def release(self) -> None:
        """Free the store for the next scheduler now (nothing happens if the lease was lost)."""
        self.store.fence(None)
        self.store.release_lease(self.holder, self.term)
