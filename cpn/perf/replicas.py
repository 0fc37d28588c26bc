"""Two `cpn run` replicas on one database store, the leader SIGKILLed at random moments: does a standby
take over within the limit every time, with nothing lost, nothing submitted twice and every job finished?

`bench_replicas` starts the replica command it is given twice on an empty store (a PostgreSQL database,
which replicas on many machines share), each with its own cpn home and CPN_LEASE_PID_CHECK=0, so that a
standby takes a dead leader's lease over only when it expires, as one on another host must (no pid to
look at). It posts the demo's generated queue (`cpn generate --seed SEED`) in chunks of ten manifests
through both replicas, a share of it before each kill; waits a random moment (0.5 to 4 s); kills whichever
replica leads with SIGKILL; times until the other says it leads (`/healthz`); and starts the killed one
again, as a standby. After the kills a third holder takes the lease as a replica on another host would:
the leader must stand by instead of exiting, and lead again once that holder stops. Then it posts the rest,
waits for every job to end and reads the store: every accepted job present (`lost`), every submission the
simulated clusters got recorded once (`duplicated`: their journal, kept in the same database, against the
store's `submitted` transitions), every job ended (`unfinished`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from config.settings import DEMO_DIR, load_profile
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.jobs import FINISHED, JobState
from cpn.perf.intake import free_port
from cpn.sim.generated import generate_manifests
from cpn.sim.journal import StoreJournal
from cpn.store import JobStore, StoreError

CHUNK = 10
"""Manifests per POST."""

TAKEOVER_LIMIT_S = 10.0
"""The most a takeover may take (the issue's figure): the lease's ttl plus a standby's retry interval."""

ENDED = FINISHED | {JobState.SCHEDULE_FAILED}
"""States a job of the run may end in: the generated queue holds jobs too big for every card on purpose,
which no placement can satisfy (`schedule-failed`)."""

ReplicaCommand = Callable[[int], list[str]]
"""The command line of one `cpn run` replica serving its API on 127.0.0.1:`port`, over the store that
`CPN_STORE` in its environment names."""


@dataclass(frozen=True)
class ReplicasBenchResult:
    """What one run measured; `lost`, `duplicated`, `unfinished` and `slow_takeovers` must be 0."""

    jobs: int
    accepted: int
    kills: int
    takeovers_s: list[float]
    """Seconds from each SIGKILL of the leader until the other replica said it leads."""
    slow_takeovers: int
    """Takeovers that took longer than the limit."""
    step_down_s: float
    """Seconds until the leader whose lease a third holder took said it stands by."""
    lost: int
    """Accepted jobs missing from the store."""
    duplicated: int
    """Jobs the simulated clusters were asked to run more often than the store recorded a submission, or
    recorded more often than asked."""
    unfinished: int
    """Jobs not ended when the run stopped waiting."""
    terms: int
    """Distinct scheduler terms the store recorded assignments and submissions under."""
    seconds: float

    def to_json(self) -> dict:
        """The figures as a JSON-ready dict."""
        return asdict(self)


def bench_replicas(
    replica_command: ReplicaCommand,
    store: str,
    workdir: Path,
    *,
    jobs: int = 2000,
    kills: int = 10,
    seed: int = 2,
    finish_timeout_s: float = 1800.0,
    progress: Callable[[str], None] = lambda _: None,
) -> ReplicasBenchResult:
    """Run the load on `store` (an empty database, StoreError otherwise) with logs and homes in
    `workdir`; `finish_timeout_s` bounds the wait for the last jobs to end."""
    if jobs < 1 or kills < 1:
        raise ValueError("--jobs and --kills must be at least 1")
    with JobStore(store) as s:  # migrates a new store's schema once, before the replicas start
        if not s.on_server:
            raise StoreError(f"{s.path}: replicas share a database server's store: give postgresql://...")
        if held := sum(s.counts().values()):
            raise StoreError(f"{s.path}: the store holds {held:,} jobs already; the bench needs an empty one")
    profile = load_profile(DEMO_DIR)
    manifests = [
        m for _, m in generate_manifests(profile.clusters, ThroughputTable.load(GAVEL_ISOLATED), jobs, seed)
    ]
    chunks = ["---\n".join(manifests[i : i + CHUNK]) for i in range(0, jobs, CHUNK)]
    chunks.reverse()  # popped from the end: posted in the queue's order
    rng = random.Random(seed)
    started = time.monotonic()
    replicas = [_Replica(replica_command, store, workdir, name) for name in ("a", "b")]
    accepted: set[str] = set()
    takeovers: list[float] = []
    try:
        for replica in replicas:
            replica.start()
        share = max(1, len(chunks) // (kills + 1))
        for kill in range(1, kills + 1):
            for i in range(min(share, len(chunks))):
                accepted |= replicas[i % 2].post(chunks.pop())
            time.sleep(rng.uniform(0.5, 4.0))
            leader = _leader(replicas)
            killed_at = replicas[leader].kill()
            standby = replicas[1 - leader]
            while standby.leads() is not True:
                if time.monotonic() - killed_at > 3 * TAKEOVER_LIMIT_S:
                    raise RuntimeError(f"no takeover in {3 * TAKEOVER_LIMIT_S:g} s: {standby.tail()}")
                time.sleep(0.05)
            takeovers.append(round(time.monotonic() - killed_at, 2))
            progress(
                f"kill {kill}/{kills}: {replicas[leader].name} killed, {standby.name} led after "
                f"{takeovers[-1]:.2f} s; {len(accepted):,} jobs accepted"
            )
            replicas[leader].start()
        step_down = _take_lease_away(store, replicas)
        progress(f"a third holder took the lease: the leader stood by after {step_down:.2f} s")
        while chunks:
            accepted |= replicas[len(chunks) % 2].post(chunks.pop())
        progress(f"all {len(accepted):,} jobs accepted; waiting for them to end ...")
        deadline = time.monotonic() + finish_timeout_s
        while (left := _unfinished(store)) and time.monotonic() < deadline:
            progress(f"{left:,} jobs not ended yet")
            time.sleep(10)
    finally:
        for replica in replicas:
            replica.stop()
    with JobStore(store) as s:
        records = s.jobs()
        journaled = Counter(e.job.job_id for e in StoreJournal(s).entries() if e.job is not None)
        transitions = s.transitions_all()
        terms = len(s.terms())
    recorded = Counter(t.job_id for t in transitions if t.to_state == JobState.SUBMITTED)
    return ReplicasBenchResult(
        jobs=jobs,
        accepted=len(accepted),
        kills=kills,
        takeovers_s=takeovers,
        slow_takeovers=sum(1 for t in takeovers if t > TAKEOVER_LIMIT_S),
        step_down_s=round(step_down, 2),
        lost=len(accepted - {r.job_id for r in records}),
        duplicated=sum(1 for job in journaled.keys() | recorded.keys() if journaled[job] != recorded[job]),
        unfinished=sum(1 for r in records if r.state not in ENDED),
        terms=terms,
        seconds=round(time.monotonic() - started, 1),
    )


class _Replica:
    """One `cpn run` process (started again after each kill) with its own home, log and port."""

    def __init__(self, command: ReplicaCommand, store: str, workdir: Path, name: str) -> None:
        self.name = name
        self.port = free_port()
        self.log = workdir / f"replica-{name}.log"
        self.env = os.environ | {
            "CPN_STORE": store,
            "CPN_HOME": str(workdir / f"home-{name}"),
            "CPN_LEASE_PID_CHECK": "0",
        }
        self.command = command
        self.proc: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120.0) -> None:
        """Start it and wait until its API answers."""
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command(self.port),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while self.leads() is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"replica {self.name} did not start: {self.tail()}")
            time.sleep(0.2)

    def leads(self) -> bool | None:
        """What it says of itself in /healthz; None if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                return json.loads(response.read())["leader"]
        except (OSError, KeyError, ValueError):
            return None

    def post(self, body: str) -> set[str]:
        """POST manifests; the ids it accepted (RuntimeError on a refusal)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/jobs",
            data=body.encode(),
            method="POST",
            headers={"content-type": "application/yaml"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return {job["job_id"] for job in json.loads(response.read())["jobs"]}
        except urllib.error.HTTPError as exc:
            raise RuntimeError(
                f"replica {self.name} refused a chunk ({exc.code}): {exc.read()[:500]!r}"
            ) from None

    def kill(self) -> float:
        """SIGKILL it (its whole process group); the monotonic time it was gone."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return time.monotonic()

    def stop(self) -> None:
        """SIGTERM it, SIGKILL after 30 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def _leader(replicas: list[_Replica], timeout_s: float = 3 * TAKEOVER_LIMIT_S) -> int:
    """The index of the replica that leads (waiting for one to)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for i, replica in enumerate(replicas):
            if replica.leads():
                return i
        time.sleep(0.1)
    raise RuntimeError("no replica leads: " + " | ".join(r.tail() for r in replicas))


def _take_lease_away(store: str, replicas: list[_Replica]) -> float:
    """Take the lease from the leader as a replica on another host would; seconds until the leader stood
    by. Then free it again and wait until one of the two leads."""
    leader = replicas[_leader(replicas)]
    elsewhere = "elsewhere:1:cpn bench replicas"
    with JobStore(store) as s:
        held = s.lease()
        assert held is not None
        s.release_lease(held.holder, held.term)
        term = s.acquire_lease(elsewhere, 60.0)
        taken = time.monotonic()
        while leader.leads() is not False:
            if time.monotonic() - taken > 3 * TAKEOVER_LIMIT_S:
                raise RuntimeError(f"the leader whose lease was taken did not stand by: {leader.tail()}")
            time.sleep(0.05)
        stood_by = time.monotonic() - taken
        if leader.proc is None or leader.proc.poll() is not None:
            raise RuntimeError(
                f"the leader whose lease was taken exited instead of standing by: {leader.tail()}"
            )
        s.release_lease(elsewhere, term)
    _leader(replicas)
    return stood_by


def _unfinished(store: str) -> int:
    with JobStore(store) as s:
        counts = s.counts()
    return sum(n for state, n in counts.items() if state not in ENDED)
