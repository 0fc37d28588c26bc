"""`cpn submit`, `cpn jobs`, `cpn job` (and `cpn job cancel`) and `cpn serve`: job intake and the job store
from the shell.

Every command takes `--store PATH`; without it the store is `$CPN_STORE`, else `jobs.db` in
`$CPN_HOME` (`~/.cpn` by default; config.runtime), the store `cpn run` uses.
Exit status: 0 done; 1 the store refused (conflicting resubmission, unknown job, unusable
store file, disk full); 2 invalid input (a manifest with problems, a file that cannot be read,
a `cpn serve` without any token configured).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from cli.tokens import tokens_file_argument, tokens_path
from config.runtime import runtime_settings
from cpn.auth import LOOPBACK_HOSTS, ApiSecurity, Authenticator, TokenFileError
from cpn.intake import IntakeError, Reading, read_manifests
from cpn.jobs import JobSpec, JobState
from cpn.safe_yaml import DEFAULT_LIMITS
from cpn.store import JobConflict, JobRecord, JobStore, StoreError, UnknownJob

_EXIT_REFUSED = 1
_EXIT_INVALID = 2
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `submit`, `jobs`, `job` and `serve` sub-commands."""
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--store",
        metavar="PATH",
        help="job store file (default: $CPN_STORE, else jobs.db in $CPN_HOME, ~/.cpn by default)",
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
        parents=[store],
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
        parents=[store],
        usage="cpn job [--store PATH] [--manifest] ID\n       cpn job [--store PATH] cancel ID",
        help="show one job and its transition history, or cancel it",
        description=(
            "Show one job's spec, state, placement and every state change it made. `cpn job cancel ID` "
            "cancels it: a queued job leaves the queue at once; one on a cluster is deleted there by the "
            "scheduler's next round (`cpn run`); a job that has ended is left as it is. Cancelling twice "
            "is harmless."
        ),
    )
    p.add_argument("job_id", metavar="ID", help="job id NAMESPACE/NAME (a bare NAME means default/NAME)")
    p.add_argument("cancel_id", nargs="?", metavar="ID", help=argparse.SUPPRESS)
    p.add_argument("--manifest", action="store_true", help="also print the manifest the job came in")
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


def store_path(arg: str | None) -> Path:
    """The store file: `--store`, else the runtime settings' (`$CPN_STORE`, else `$CPN_HOME/jobs.db`)."""
    return Path(arg) if arg else runtime_settings().store_path


def _open_store(arg: str | None) -> JobStore:
    path = store_path(arg)
    path.parent.mkdir(parents=True, exist_ok=True)
    return JobStore(path)


def _fail(command: str, message: str, status: int) -> int:
    print(f"cpn {command}: {message}", file=sys.stderr)
    return status


def run_submit(args: argparse.Namespace) -> int:
    """Parse every file, then queue all their jobs in one transaction; nothing is queued on any error."""
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
    """Print a table of the stored jobs, oldest first."""
    if not store_path(args.store).exists():
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
    rows = [("JOB", "STATE", "KIND", "MODEL", "GPUS", "CLUSTER", "NODE", "ACCEPTED")]
    rows += [
        (
            r.job_id,
            r.state.value,
            r.spec.kind,
            r.spec.model,
            str(r.spec.num_gpus),
            r.cluster or "-",
            r.node or "-",
            _format_time(r.submitted_at),
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
    from cpn.api import cancel_answer

    job_id = _full_id(job_id)
    missing = f"no job {job_id} in {store_path(store_arg)}; list the jobs with `cpn jobs`"
    if not store_path(store_arg).exists():
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
    run (secret-looking values redacted). `cpn job cancel ID` cancels the job instead (`run_cancel`)."""
    if args.cancel_id is not None:
        if args.job_id != "cancel":
            return _fail(
                "job", f"unexpected argument {args.cancel_id!r}; use `cpn job cancel ID`", _EXIT_INVALID
            )
        return run_cancel(args.cancel_id, args.store)
    job_id = _full_id(args.job_id)
    missing = f"no job {job_id} in {store_path(args.store)}; list the jobs with `cpn jobs`"
    if not store_path(args.store).exists():
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
            _format_time(t.time),
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
            print(f"\nlog tail of the run that ended {_format_time(t.time)} ({why}):")
            print("\n".join("  " + line for line in redact_text(t.log_tail).splitlines()))
    if args.manifest:
        print("\nmanifest:\n" + record.spec.manifest.rstrip())
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """Serve the HTTP API until interrupted."""
    import uvicorn

    from cpn.api import create_app

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


def _format_time(t: float) -> str:
    """Store times for people: Unix times (wall clock) as UTC ISO 8601, simulated ones as seconds."""
    if t >= 1e9:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{t:.1f}s"


def _describe(record: JobRecord) -> str:
    lines = [
        ("job", record.job_id),
        ("state", record.state.value),
        ("cluster", record.cluster or "-"),
        ("node", record.node or "-"),
        ("gpus", ", ".join(f"{node}:{cards}" for node, cards in record.placement) or "-"),
        ("accepted", _format_time(record.submitted_at)),
        ("updated", _format_time(record.updated_at)),
        ("read", Reading.of(record.spec).summary()),
    ]
    if record.waiting is not None:
        waiting = record.waiting
        lines.append(("waiting", f"{waiting.code}: {waiting.detail}" if waiting.detail else waiting.code))
        if waiting.predicted_start is not None:
            lines.append(("predicted start", _format_time(waiting.predicted_start)))
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
