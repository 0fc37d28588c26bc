"""`cpn submit`, `cpn jobs`, `cpn job` and `cpn serve`: job intake and the job store from the shell.

Every command takes `--store PATH`; without it the store is `$CPN_STORE`, else `.cpn/jobs.db`.
Exit status: 0 done; 1 the store refused (conflicting resubmission, unknown job, unusable
store file); 2 invalid input (a manifest with problems, a file that cannot be read).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

from cpn.intake import IntakeError, parse_manifests
from cpn.jobs import JobSpec, JobState
from cpn.store import JobConflict, JobRecord, JobStore, StoreError, UnknownJob

DEFAULT_STORE = Path(".cpn") / "jobs.db"
"""Store used when neither --store nor CPN_STORE is given, relative to the working directory."""

_EXIT_REFUSED = 1
_EXIT_INVALID = 2


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `submit`, `jobs`, `job` and `serve` sub-commands."""
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--store",
        metavar="PATH",
        help=f"job store file (default: $CPN_STORE, else {DEFAULT_STORE})",
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
        help="show one job and its transition history",
        description="Show one job's spec, state, placement and every state change it made.",
    )
    p.add_argument("job_id", metavar="ID", help="job id NAMESPACE/NAME (a bare NAME means default/NAME)")
    p.add_argument("--manifest", action="store_true", help="also print the manifest the job came in")
    p.set_defaults(func=run_job)

    p = sub.add_parser(
        "serve",
        parents=[store],
        help="serve the HTTP job intake API",
        description="Serve POST /jobs, GET /jobs, GET /jobs/NAMESPACE/NAME and GET /healthz over the store.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default: %(default)s)")
    p.set_defaults(func=run_serve)


def store_path(arg: str | None) -> Path:
    """The store file: `--store`, else `$CPN_STORE`, else DEFAULT_STORE."""
    return Path(arg or os.environ.get("CPN_STORE") or DEFAULT_STORE)


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
    errors: list[str] = []
    defined_in: dict[str, str] = {}
    for name in args.files:
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
            parsed = parse_manifests(text, "<stdin>" if name == "-" else name)
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(f"{name}: cannot read: {exc}")
            continue
        except IntakeError as exc:
            errors.append(str(exc))
            continue
        for spec in parsed:
            if spec.job_id in defined_in:
                errors.append(f"{name}: job {spec.job_id} is also defined in {defined_in[spec.job_id]}")
            defined_in.setdefault(spec.job_id, name)
        specs.extend(parsed)
    if errors:
        problems = "\n".join(errors)
        return _fail("submit", f"nothing was queued; fix these and resubmit:\n{problems}", _EXIT_INVALID)
    try:
        with _open_store(args.store) as store:
            outcomes = store.submit(specs)
    except (JobConflict, StoreError) as exc:
        return _fail("submit", str(exc), _EXIT_REFUSED)
    new = 0
    for spec, outcome in zip(specs, outcomes, strict=True):
        new += outcome.status == "created"
        label = "queued " if outcome.status == "created" else "exists "
        print(f"{label} {spec.job_id}  {spec.kind} {spec.model}, {spec.num_gpus} GPU")
    print(f"{new} new job(s) queued, {len(specs) - new} already in {store_path(args.store)}")
    return 0


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


def run_job(args: argparse.Namespace) -> int:
    """Print one job: its spec, state and placement, then its transitions."""
    job_id = args.job_id if "/" in args.job_id else f"default/{args.job_id}"
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
    if args.manifest:
        print("\nmanifest:\n" + record.spec.manifest.rstrip())
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """Serve the HTTP API until interrupted."""
    import uvicorn

    from cpn.api import create_app

    try:
        store = _open_store(args.store)
    except StoreError as exc:
        return _fail("serve", str(exc), _EXIT_REFUSED)
    with store:
        print(f"serving the job store {store_path(args.store)} on http://{args.host}:{args.port}")
        uvicorn.run(create_app(store), host=args.host, port=args.port)
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
        ("accepted", _format_time(record.submitted_at)),
        ("updated", _format_time(record.updated_at)),
    ]
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
