"""HTTP job intake: submit Kubernetes manifests, read jobs and their history.

- `POST /jobs`: a YAML body (`application/yaml`, `text/yaml`, `text/plain`, ...) or
  JSON `{"manifest": "<yaml>"}`. 201 with one outcome per job when any job is
  new, 200 when every job existed already; 422 with the list of problems when a
  document is invalid, 400 when the body cannot be read, 409 on a conflicting
  resubmission. On any error nothing is stored.
- `GET /jobs?state=queued&state=running`: jobs in acceptance order, optionally by state.
- `GET /jobs/{namespace}/{name}`: one job with its spec and transition history.
- `GET /healthz`: the store answers; job counts per state.

Every error is JSON `{"error": "<what went wrong and what to do>", ...}`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from cpn.intake import IntakeError, parse_manifests
from cpn.jobs import JobState
from cpn.store import JobConflict, JobRecord, JobStore, Transition, UnknownJob

_STATES = ", ".join(s.value for s in JobState)


class _BadRequest(ValueError):
    """The request cannot be read (not UTF-8, bad JSON, unknown state); answered with 400 or 422."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def create_app(store: JobStore) -> FastAPI:
    """The intake API over `store`; the caller owns the store and closes it."""
    app = FastAPI(
        title="cpn job intake",
        description="Submit Kubernetes manifests with cpn annotations; read jobs and their history.",
    )
    _add_error_handlers(app)

    @app.post("/jobs", status_code=201)
    async def submit_jobs(request: Request) -> JSONResponse:
        """Accept every job in the manifest(s) of the body, or none."""
        text = _manifest_text(await request.body(), request.headers.get("content-type", ""))
        outcomes = await run_in_threadpool(lambda: store.submit(parse_manifests(text, "request body")))
        created = any(o.status == "created" for o in outcomes)
        jobs = [{"job_id": o.job_id, "status": o.status} for o in outcomes]
        return JSONResponse({"jobs": jobs}, status_code=201 if created else 200)

    @app.get("/jobs")
    def list_jobs(
        state: Annotated[list[str] | None, Query(description=f"Only jobs in these states: {_STATES}")] = None,
    ) -> dict[str, Any]:
        """Jobs in acceptance order (summaries, without manifests)."""
        try:
            states = [JobState(s) for s in state or ()]
        except ValueError as exc:
            raise _BadRequest(f"{exc}; use one of {_STATES}", status=422) from None
        return {"jobs": [_summary(r) for r in store.jobs(states or None)]}

    @app.get("/jobs/{namespace}/{name}")
    def get_job(namespace: str, name: str) -> dict[str, Any]:
        """One job: spec, state, placement and transition history."""
        job_id = f"{namespace}/{name}"
        record = store.get(job_id)
        return {
            **_summary(record),
            "spec": dataclasses.asdict(record.spec),
            "history": [_transition(t) for t in store.history(job_id)],
        }

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        """The API is up and its store answers."""
        return {"status": "ok", "jobs": {state.value: n for state, n in store.counts().items()}}

    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Turn the domain's exceptions into JSON errors; nothing was stored when one is raised."""

    @app.exception_handler(IntakeError)
    async def refused(request: Request, exc: IntakeError) -> JSONResponse:
        return _error(
            422,
            f"the manifest was refused and nothing was stored; fix these and resubmit:\n{exc}",
            problems=[dataclasses.asdict(p) for p in exc.problems],
        )

    @app.exception_handler(JobConflict)
    async def conflict(request: Request, exc: JobConflict) -> JSONResponse:
        return _error(409, str(exc), job_id=exc.job_id, differing=list(exc.differing))

    @app.exception_handler(UnknownJob)
    async def unknown(request: Request, exc: UnknownJob) -> JSONResponse:
        return _error(404, f"{exc}; list the jobs with GET /jobs")

    @app.exception_handler(_BadRequest)
    async def bad_request(request: Request, exc: _BadRequest) -> JSONResponse:
        return _error(exc.status, str(exc))


def _manifest_text(body: bytes, content_type: str) -> str:
    """The YAML text of a request body: the body itself, or the `manifest` of a JSON body."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _BadRequest("the request body is not UTF-8 text; send the YAML manifest as UTF-8") from None
    if content_type.split(";")[0].strip().lower() != "application/json":
        return text
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadRequest(
            f'the JSON body is not valid ({exc}); send {{"manifest": "<yaml>"}} or a YAML body'
        ) from None
    if not isinstance(payload, dict) or not isinstance(payload.get("manifest"), str):
        raise _BadRequest('a JSON body must be an object {"manifest": "<yaml text>"}')
    return payload["manifest"]


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _summary(record: JobRecord) -> dict[str, Any]:
    spec = record.spec
    return {
        "job_id": record.job_id,
        "state": record.state.value,
        "kind": spec.kind,
        "model": spec.model,
        "num_gpus": spec.num_gpus,
        "cluster": record.cluster,
        "node": record.node,
        "submitted_at": record.submitted_at,
        "updated_at": record.updated_at,
    }


def _transition(t: Transition) -> dict[str, Any]:
    return {
        "from": t.from_state.value if t.from_state else None,
        "to": t.to_state.value,
        "time": t.time,
        "reason": t.reason,
        "cluster": t.cluster,
        "node": t.node,
    }
