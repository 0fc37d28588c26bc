"""Child processes that never outlive the command that started them.

`Supervisor` starts each service (a Prefect server, a worker, an MLflow server, ...) under a small
keeper process (`python -m cpn.processes`) that leads a process group of its own: the service and
everything it spawns stay in that group. However the command ends, the group goes with it:

- the command returns or raises (Ctrl-C, or SIGTERM/SIGHUP turned into `Stopped` by `stop_on_signals`):
  `Supervisor.stop` asks each keeper to stop its group, last started first;
- the command is killed outright (`kill -9`, an OOM kill): on Linux the kernel sends each keeper
  SIGTERM (`PR_SET_PDEATHSIG`), and the keeper stops its group the same way;
- the service exits by itself: its keeper stops what is left of its group and exits with its status.

A keeper stops its group with the service's `stop_signal` (a Prefect worker ignores SIGTERM and needs
SIGINT), waits `grace_s`, then kills whatever is left.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """Raised in the main thread when the command is asked to stop (SIGTERM or SIGHUP)."""


class ServiceFailed(RuntimeError):
    """A supervised service exited, or did not answer in time; the message names it and its log."""


def set_parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    return True


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Stopped` in the main thread (as Ctrl-C raises
    KeyboardInterrupt), so that `finally` blocks and context managers stop what was started."""

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signal.Signals(signum).name)

    previous = {s: signal.signal(s, _raise) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@dataclass
class Service:
    """One supervised service: its keeper process and where its output goes."""

    name: str
    keeper: subprocess.Popen
    log_path: Path | None

    @property
    def pid(self) -> int:
        """The keeper's pid, which is also the id of the service's process group."""
        return self.keeper.pid

    def running(self) -> bool:
        """True while the keeper (and so the service) runs."""
        return self.keeper.poll() is None

    def describe_exit(self) -> str:
        """`NAME exited with status N (log: PATH)`."""
        where = f" (log: {self.log_path})" if self.log_path else ""
        return f"{self.name} exited with status {self.keeper.returncode}{where}"


class Supervisor:
    """Starts services in process groups of their own and stops every one of them on the way out.

    Use it as a context manager; `start` services inside, `wait_ready` on their URLs, and leave the
    block in any way to stop them all.
    """

    def __init__(self, grace_s: float = 10.0) -> None:
        self.grace_s = grace_s
        self.services: list[Service] = []

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        log_path: Path | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> Service:
        """Start `argv` under a keeper; its output goes to `log_path` (else this process's output)."""
        keeper_argv = [
            sys.executable,
            "-m",
            "cpn.processes",
            "--parent",
            str(os.getpid()),
            "--stop-signal",
            str(int(stop_signal)),
            "--grace",
            str(self.grace_s),
            "--",
            *argv,
        ]
        out = None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            out = log_path.open("ab")
        try:
            keeper = subprocess.Popen(
                keeper_argv,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if out is not None else None,
                start_new_session=True,
            )
        finally:
            if out is not None:
                out.close()
        service = Service(name, keeper, log_path)
        self.services.append(service)
        return service

    def run_step(self, name: str, argv: Sequence[str], **options: object) -> None:
        """Run a one-off command (same options as `start`) to its end, supervised like a service while
        it runs; ServiceFailed names it and its log if it exits non-zero."""
        step = self.start(name, argv, **options)  # type: ignore[arg-type]
        try:
            code = step.keeper.wait()
        finally:
            if not step.running():
                self.services.remove(step)
        if code != 0:
            raise ServiceFailed(step.describe_exit())

    def wait_ready(
        self, service: Service, url: str, timeout_s: float, ok: Collection[int] | None = None
    ) -> float:
        """Poll `url` until it answers with a status in `ok` (default: any below 500); returns the
        seconds it took. Raises ServiceFailed if the service exits first or does not answer in time.
        """
        started = time.monotonic()
        while True:
            if not service.running():
                raise ServiceFailed(f"{service.describe_exit()} before answering on {url}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    status = response.status
            except urllib.error.HTTPError as exc:
                status = exc.code
            except (OSError, urllib.error.URLError):
                status = None
            if status is not None and (status in ok if ok is not None else status < 500):
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                where = f"; see {service.log_path}" if service.log_path else ""
                raise ServiceFailed(f"{service.name} did not answer on {url} within {timeout_s:.0f} s{where}")
            time.sleep(0.25)

    def failed(self) -> list[Service]:
        """Services that exited although nobody asked them to stop."""
        return [s for s in self.services if not s.running()]

    def stop(self) -> None:
        """Stop every service, the last started first; each keeper stops its whole group."""
        for service in reversed(self.services):
            if service.running():
                with contextlib.suppress(ProcessLookupError):
                    service.keeper.send_signal(signal.SIGTERM)
            try:
                service.keeper.wait(timeout=self.grace_s + 5)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.pid, signal.SIGKILL)
                service.keeper.wait()
        self.services.clear()


def _group_members(pgid: int) -> set[int]:
    """Pids in process group `pgid` (read from /proc on Linux; elsewhere: none known)."""
    members = set()
    proc = Path("/proc")
    if not proc.is_dir():
        return members
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.add(int(entry.name))
    return members


def _stop_group(child: subprocess.Popen, stop_signal: int, grace_s: float) -> None:
    """Send `stop_signal` to the group, wait up to `grace_s` for all of it to go, then kill the rest."""
    me = os.getpid()
    pgid = os.getpgid(0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, stop_signal)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        child.poll()
        if child.returncode is not None and not (_group_members(pgid) - {me}):
            return
        time.sleep(0.05)
    for pid in _group_members(pgid) - {me}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    child.wait()


def _keep(parent: int, stop_signal: int, grace_s: float, argv: Sequence[str]) -> int:
    """Run `argv` in this process's group until it exits or this keeper is asked to stop."""
    asked: list[int] = []

    def _note(signum: int, frame: FrameType | None) -> None:
        asked.append(signum)

    for s in {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, stop_signal}:
        signal.signal(s, _note)
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the death signal was armed
        return 143
    child = subprocess.Popen(argv, preexec_fn=lambda: set_parent_death_signal(stop_signal))
    while child.poll() is None and not asked:
        time.sleep(0.1)
    _stop_group(child, stop_signal, grace_s)
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


def main(argv: Sequence[str] | None = None) -> int:
    """The keeper: `python -m cpn.processes --parent PID --stop-signal N --grace S -- COMMAND...`."""
    p = argparse.ArgumentParser(prog="python -m cpn.processes", description=main.__doc__)
    p.add_argument("--parent", type=int, required=True, help="pid of the supervising process")
    p.add_argument("--stop-signal", type=int, default=int(signal.SIGTERM), help="signal that stops it")
    p.add_argument("--grace", type=float, default=10.0, help="seconds before the rest is killed")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the service's command line, after --")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given after --")
    return _keep(args.parent, args.stop_signal, args.grace, command)


if __name__ == "__main__":
    sys.exit(main())
