"""`cpn submit`, `cpn jobs`, `cpn job` (and `cpn job cancel`) and `cpn serve`: job intake and the job store
from the shell.

Every command takes `--store STORE` (a file or a database URL); without it the store is `$CPN_STORE`,
else `jobs.db` in `$CPN_HOME` (`~/.cpn` by default; config.runtime), the store `cpn run` uses.
Exit status: 0 done; 1 the store refused (conflicting resubmission, unknown job, unusable
store file, disk full); 2 invalid input (a manifest with problems, a file that cannot be read,
a `cpn serve` without any token configured).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from cpn.jobs import JobState
from cpn.times import between, clock_time, from_now, moment_now

# What the commands need is imported where they need it: `cpn jobs` reads the store, not the manifest
# reader; `cpn jobs --server` neither (cpn start-up time, README "CLI start-up").
if TYPE_CHECKING:
    from cli.client import Client
    from cpn.auth import ApiSecurity
    from cpn.intake import Reading
    from cpn.jobs import JobSpec
    from cpn.store import JobRecord, JobStore

_EXIT_REFUSED = 1
_EXIT_INVALID = 2
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `submit`, `jobs`, `job` and `serve` sub-commands."""
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--store",
        metavar="STORE",
        help=(
            "job store: a file or a database URL, e.g. postgresql://USER@HOST/DB (default: $CPN_STORE, "
            "else jobs.db in $CPN_HOME, ~/.cpn by default)"
        ),
    )
    server = argparse.ArgumentParser(add_help=False)
    server.add_argument(
        "--server",
        metavar="URL",
        help="ask a cpn server (http://HOST:PORT) instead of reading the store; token: $CPN_TOKEN, else "
        "the file token in $CPN_HOME (cli.client)",
    )

    p = sub.add_parser(
        "submit",
        parents=[store],
        help="queue the jobs of Kubernetes manifests (YAML)",
        description=(
            "Parse batch/v1 Jobs, Volcano Jobs and apps/v1 Deployments carrying cpn's annotations "
            "(model_name, data_size, epoch, ...) and queue them, all or none. Resubmitting an "
            "identical job is harmless; a changed job under a stored name is refused."
        ),
        epilog="Exit status: 0 queued; 1 refused by the store (conflict); 2 invalid or unreadable manifest.",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="manifest file(s); - reads standard input")
    p.set_defaults(func=run_submit)

    p = sub.add_parser(
        "jobs",
        parents=[store, server],
        help="list stored jobs",
        description="List the jobs in the store in the order they were accepted.",
    )
    p.add_argument(
        "--state",
        action="append",
        choices=[s.value for s in JobState],
        help="only jobs in this state (repeat for several)",
    )
    p.set_defaults(func=run_jobs)

    p = sub.add_parser(
        "job",
        parents=[store, server],
        usage="cpn job [--store PATH | --server URL] [--manifest] ID\n"
        "       cpn job [--store PATH | --server URL] cancel ID\n"
        "       cpn job --server URL [--tail N] logs ID",
        help="show one job and its transition history, cancel it, or print its log",
        description=(
            "Show one job's spec, state, placement and every state change it made. `cpn job cancel ID` "
            "cancels it: a queued job leaves the queue at once; one on a cluster is deleted there by the "
            "scheduler's next round (`cpn run`); a job that has ended is left as it is. Cancelling twice "
            "is harmless. `cpn job logs ID` prints the job's log from its cluster (else the stored tail of "
            "its failed run), through a server."
        ),
    )
    p.add_argument("job_id", metavar="ID", help="job id NAMESPACE/NAME (a bare NAME means default/NAME)")
    p.add_argument("cancel_id", nargs="?", metavar="ID", help=argparse.SUPPRESS)
    p.add_argument("--manifest", action="store_true", help="also print the manifest the job came in")
    p.add_argument("--tail", type=int, default=100, metavar="N", help="`logs`: last N lines (default: 100)")
    p.set_defaults(func=run_job)

    p = sub.add_parser(
        "serve",
        parents=[store],
        help="serve the HTTP job intake API",
        description=(
            "Serve POST /jobs, GET /jobs, GET /jobs/NAMESPACE/NAME and GET /healthz over the store. Every "
            "request needs a bearer token (`cpn token create`, or $CPN_API_TOKEN); without any token the "
            "server does not start unless --no-auth is given, and then listens on loopback only."
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default: %(default)s)")
    p.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="log every request (default: on; refused authentications are logged either way)",
    )
    add_security_arguments(p)
    p.set_defaults(func=run_serve)


def add_security_arguments(p: argparse.ArgumentParser) -> None:
    """The options that say who may use the HTTP API (for `cpn serve` and `cpn run`)."""
    from cli.tokens import tokens_file_argument

    tokens_file_argument(p)
    p.add_argument(
        "--no-auth",
        action="store_true",
        help="serve without tokens: anyone on this machine may submit and read; loopback --host only",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a host name clients use to reach the server (repeat for several; loopback names and a "
        "non-wildcard --host are always allowed; needed with --host 0.0.0.0)",
    )
    p.add_argument(
        "--allowed-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web origin (https://ui.example.com) whose pages may call the API; none by default",
    )


def security_from_args(args: argparse.Namespace) -> ApiSecurity:
    """The API's admission rules from `add_security_arguments`' options; ValueError says what is missing."""
    from cli.tokens import tokens_path
    from cpn.auth import LOOPBACK_HOSTS, ApiSecurity, Authenticator, TokenFileError

    host = args.host.strip("[]")
    if host in _WILDCARD_HOSTS and not args.allowed_host:
        raise ValueError(
            f"--host {args.host} listens on every address; name the host names clients will use with "
            "--allowed-host NAME (a foreign Host header is refused, against DNS rebinding)"
        )
    hosts = LOOPBACK_HOSTS | {h.lower() for h in args.allowed_host}
    if host not in _WILDCARD_HOSTS:
        hosts |= {host.lower()}
    origins = frozenset(args.allowed_origin)
    if args.no_auth:
        if host not in LOOPBACK_HOSTS:
            raise ValueError(
                f"--no-auth serves on loopback only (127.0.0.1, ::1, localhost), not {args.host}"
            )
        return ApiSecurity.no_auth(hosts, allowed_origins=origins)
    path = tokens_path(args.tokens_file)
    explicit = bool(args.tokens_file or os.environ.get("CPN_TOKENS_FILE"))
    env_token = os.environ.get("CPN_API_TOKEN") or None
    if not path.exists() and (explicit or env_token is None):
        raise ValueError(
            f"no API token is configured ({path} does not exist and CPN_API_TOKEN is not set); make one "
            "with `cpn token create --name NAME --namespace NS`, or pass --no-auth to serve on loopback "
            "without authentication"
        )
    try:
        authenticator = Authenticator(path if path.exists() else None, env_token)
    except TokenFileError as exc:
        raise ValueError(str(exc)) from None
    return ApiSecurity(authenticator, hosts, origins)


def store_path(arg: str | None) -> Path | str:
    """The store: `--store` (a file or a database URL), else the runtime settings' (`$CPN_STORE`, else
    `$CPN_HOME/jobs.db`)."""
    from config.runtime import job_store

    return job_store(arg)


def _open_store(arg: str | None) -> JobStore:
    from cpn.store import JobStore

    return JobStore(store_path(arg))


def _fail(command: str, message: str, status: int) -> int:
    print(f"cpn {command}: {message}", file=sys.stderr)
    return status


def run_submit(args: argparse.Namespace) -> int:
    """Parse every file, then queue all their jobs in one transaction; nothing is queued on any error."""
    from cpn.intake import IntakeError, read_manifests
    from cpn.safe_yaml import DEFAULT_LIMITS
    from cpn.store import JobConflict, StoreError

    specs: list[JobSpec] = []
    readings: list[Reading] = []
    errors: list[str] = []
    defined_in: dict[str, str] = {}
    for name in args.files:
        try:
            text = _read_limited(name, DEFAULT_LIMITS.max_bytes)
            read = read_manifests(text, "<stdin>" if name == "-" else name)
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(f"{name}: cannot read: {exc}")
            continue
        except IntakeError as exc:
            errors.append(str(exc))
            continue
        for spec, reading in read:
            if spec.job_id in defined_in:
                errors.append(f"{name}: job {spec.job_id} is also defined in {defined_in[spec.job_id]}")
            defined_in.setdefault(spec.job_id, name)
            specs.append(spec)
            readings.append(reading)
    if errors:
        problems = "\n".join(errors)
        return _fail("submit", f"nothing was queued; fix these and resubmit:\n{problems}", _EXIT_INVALID)
    try:
        with _open_store(args.store) as store:
            outcomes = store.submit(specs)
    except (JobConflict, StoreError) as exc:
        return _fail("submit", str(exc), _EXIT_REFUSED)
    new = 0
    for spec, reading, outcome in zip(specs, readings, outcomes, strict=True):
        new += outcome.status == "created"
        label = "queued " if outcome.status == "created" else "exists "
        print(f"{label} {spec.job_id}  {spec.kind} {spec.model}, {spec.num_gpus} GPU")
        print(f"         read: {reading.summary()}")
    print(f"{new} new job(s) queued, {len(specs) - new} already in {store_path(args.store)}")
    return 0


def _read_limited(name: str, limit: int) -> str:
    """The text of a file (`-`: standard input), reading no more than one character past `limit`.

    A larger input then fails in parse_manifests with its size limit, without being read whole.
    """
    if name == "-":
        return sys.stdin.read(limit + 1)
    with open(name, encoding="utf-8") as f:
        return f.read(limit + 1)


def run_jobs(args: argparse.Namespace) -> int:
    """Print a table of the stored jobs, oldest first; ETA: a queued job's predicted start (the latest
    round's forward look, cpn.engine.forecast). With --server, the server's jobs (cli.client)."""
    if args.server:
        from cli.client import list_jobs

        return _remote("jobs", args, lambda client: list_jobs(client, args.state))
    from config.runtime import store_exists
    from cpn.decisions import never_starts
    from cpn.store import StoreError

    if not store_exists(store_path(args.store)):
        print(
            f"no jobs: there is no store at {store_path(args.store)} yet; queue jobs with `cpn submit FILE`"
        )
        return 0
    try:
        with _open_store(args.store) as store:
            records = store.jobs(args.state)
    except StoreError as exc:
        return _fail("jobs", str(exc), _EXIT_REFUSED)
    if not records:
        print("no jobs" + (f" in state {', '.join(args.state)}" if args.state else ""))
        return 0
    rows = [("JOB", "STATE", "KIND", "MODEL", "GPUS", "CLUSTER", "NODE", "ACCEPTED", "ETA")]
    rows += [
        (
            r.job_id,
            r.state.value,
            r.spec.kind,
            r.spec.model,
            str(r.spec.num_gpus),
            r.cluster or "-",
            r.node or "-",
            clock_time(r.submitted_at),
            "never"
            if r.waiting and never_starts(r.waiting.code, r.waiting.detail)
            else from_now(r.waiting.predicted_start if r.waiting is not None else None),
        )
        for r in records
    ]
    print(_table(rows))
    print(f"{len(records)} job(s)")
    return 0


def _full_id(job_id: str) -> str:
    return job_id if "/" in job_id else f"default/{job_id}"


def run_cancel(job_id: str, store_arg: str | None) -> int:
    """Cancel one job in the store, recorded as cancelled by this shell's user; exit 0 whatever the job's
    state (cancelling is idempotent: the message says what happened), 1 for an unknown job."""
    from config.runtime import store_exists
    from cpn.api import cancel_answer
    from cpn.store import StoreError, UnknownJob

    job_id = _full_id(job_id)
    missing = f"no job {job_id} in {store_path(store_arg)}; list the jobs with `cpn jobs`"
    if not store_exists(store_path(store_arg)):
        return _fail("job cancel", missing, _EXIT_REFUSED)
    try:
        with _open_store(store_arg) as store:
            outcome = store.cancel(job_id, f"{getpass.getuser()} (cpn job cancel)")
    except UnknownJob:
        return _fail("job cancel", missing, _EXIT_REFUSED)
    except StoreError as exc:
        return _fail("job cancel", str(exc), _EXIT_REFUSED)
    print(f"{job_id}: {cancel_answer(outcome)['message']}")
    return 0


def run_job(args: argparse.Namespace) -> int:
    """Print one job: its spec, state and placement, its transitions, then the pod log tail of each failed
    run (secret-looking values redacted). `cpn job cancel ID` cancels the job instead (`run_cancel`); with
    --server all of it, and `cpn job logs ID`, go through the server (cli.client)."""
    if args.cancel_id is not None and args.job_id not in ("cancel", "logs"):
        return _fail(
            "job",
            f"unexpected argument {args.cancel_id!r}; use `cpn job cancel ID` or `cpn job logs ID`",
            _EXIT_INVALID,
        )
    if args.server:
        from cli import client

        if args.cancel_id is None:
            job_id = _full_id(args.job_id)
            return _remote("job", args, lambda c: client.show_job(c, job_id, args.manifest))
        job_id = _full_id(args.cancel_id)
        if args.job_id == "cancel":
            return _remote("job cancel", args, lambda c: client.cancel_job(c, job_id))
        if args.tail < 1:
            return _fail("job logs", f"--tail must be at least 1, not {args.tail}", _EXIT_INVALID)
        return _remote("job logs", args, lambda c: client.print_logs(c, job_id, args.tail))
    if args.job_id == "logs" and args.cancel_id is not None:
        return _fail(
            "job logs",
            "a job's log comes from its cluster through a cpn server: `cpn job logs --server URL ID` "
            "(`cpn job ID` shows the stored log tails of failed runs)",
            _EXIT_INVALID,
        )
    if args.cancel_id is not None:
        return run_cancel(args.cancel_id, args.store)
    from config.runtime import store_exists
    from cpn.store import StoreError, UnknownJob

    job_id = _full_id(args.job_id)
    missing = f"no job {job_id} in {store_path(args.store)}; list the jobs with `cpn jobs`"
    if not store_exists(store_path(args.store)):
        return _fail("job", missing, _EXIT_REFUSED)
    try:
        with _open_store(args.store) as store:
            record, history = store.get(job_id), store.history(job_id)
    except UnknownJob:
        return _fail("job", missing, _EXIT_REFUSED)
    except StoreError as exc:
        return _fail("job", str(exc), _EXIT_REFUSED)
    print(_describe(record))
    print("\nhistory:")
    rows = [("TIME", "FROM", "TO", "CLUSTER", "NODE", "REASON")]
    rows += [
        (
            clock_time(t.time),
            t.from_state.value if t.from_state else "-",
            t.to_state.value,
            t.cluster or "-",
            t.node or "-",
            t.reason,
        )
        for t in history
    ]
    print(_table(rows, indent="  "))
    tails = [t for t in history if t.log_tail]
    if tails:
        from cpn.api import redact_text

        for t in tails:
            why = t.reason or t.to_state.value
            print(f"\nlog tail of the run that ended {clock_time(t.time)} ({why}):")
            print("\n".join("  " + line for line in redact_text(t.log_tail).splitlines()))
    if args.manifest:
        print("\nmanifest:\n" + record.spec.manifest.rstrip())
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """Serve the HTTP API until interrupted."""
    import uvicorn

    from cpn.api import create_app
    from cpn.store import StoreError

    try:
        security = security_from_args(args)
    except ValueError as exc:
        return _fail("serve", str(exc), _EXIT_INVALID)
    try:
        store = _open_store(args.store)
    except StoreError as exc:
        return _fail("serve", str(exc), _EXIT_REFUSED)
    with store:
        who = "without authentication" if security.authenticator is None else "with bearer tokens"
        print(f"serving the job store {store_path(args.store)} on http://{args.host}:{args.port} {who}")
        uvicorn.run(
            create_app(store, security=security), host=args.host, port=args.port, access_log=args.access_log
        )
    return 0


def _remote(command: str, args: argparse.Namespace, call: Callable[[Client], int]) -> int:
    """Run `call` with a client of `--server`; the server's refusal is exit 1 (`--store` with it: 2)."""
    from cli.client import ClientError, client_for

    if args.store:
        message = "--store reads a store on this host, --server asks a server: give one of them"
        return _fail(command, message, _EXIT_INVALID)
    try:
        return call(client_for(args.server))
    except ClientError as exc:
        return _fail(command, str(exc), _EXIT_REFUSED)


def predicted(start: float, low: float | None, high: float | None, end: float | None) -> str:
    """A waiting job's predicted start for people (cpn.times), with what the forward look added to it
    (None: not predicted; an empty interval is left out): `T (in N min; between L and H), ends E`."""
    interval = between(low, high)
    text = moment_now(start) + (f"; {interval}" if interval else "")
    return text + (f", ends {moment_now(end)}" if end is not None else "")


def _describe(record: JobRecord) -> str:
    from cpn.decisions import NEVER, never_starts
    from cpn.intake import Reading

    lines = [
        ("job", record.job_id),
        ("state", record.state.value),
        ("cluster", record.cluster or "-"),
        ("node", record.node or "-"),
        ("gpus", ", ".join(f"{node}:{cards}" for node, cards in record.placement) or "-"),
        ("accepted", moment_now(record.submitted_at)),
        ("updated", moment_now(record.updated_at)),
        ("read", Reading.of(record.spec).summary()),
    ]
    if record.waiting is not None:
        waiting = record.waiting
        lines.append(("waiting", f"{waiting.code}: {waiting.detail}" if waiting.detail else waiting.code))
        if never_starts(waiting.code, waiting.detail):
            lines.append(("predicted start", NEVER))
        elif waiting.predicted_start is not None:
            end = None if waiting.predicted_end == math.inf else waiting.predicted_end
            lines.append(
                (
                    "predicted start",
                    predicted(waiting.predicted_start, waiting.start_low, waiting.start_high, end),
                )
            )
        if waiting.moved:
            lines.append(("moved", waiting.moved))
    lines += [
        (f.name, str(getattr(record.spec, f.name)))
        for f in dataclasses.fields(record.spec)
        if f.name not in ("job_id", "manifest")
    ]
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in lines)


def _table(rows: list[tuple[str, ...]], indent: str = "") -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        indent + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
