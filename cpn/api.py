"""HTTP job intake: submit Kubernetes manifests, read jobs and their history.

- `POST /jobs`: a YAML body (`application/yaml`, `application/x-yaml`, `text/yaml`) or
  JSON `{"manifest": "<yaml>"}`. 201 with one outcome per job when any job is
  new, 200 when every job existed already, each with what was read of it (`read`,
  cpn.intake.Reading: pods, GPUs and where their count came from, pins, ...); 422
  with the list of problems when a document is invalid, 400 when the body cannot be
  read, 413 when it is too large, 415 for another content type (`text/plain` and
  forms are what a foreign web page can send without asking), 403 when a job is in
  a namespace the token may not write, 409 on a conflicting resubmission, 503 when
  the store cannot write (disk full, read-only). On any error nothing is stored.
- `GET /jobs?state=queued&limit=100&cursor=C`: job summaries in acceptance order, a
  page at a time (`next_cursor` is the `cursor` of the next page; null at the end),
  only of the namespaces the token may read.
- `GET /jobs/{namespace}/{name}`: one job with its spec, what was read of it (`read`), its
  manifest (with `env` values and secret-looking fields redacted) and its transition history (a failed
  run's end with the last lines of its pod log, secret-looking values redacted); while it waits, when
  it is predicted to start (`predicted_start_at`), the interval that start may fall in
  (`predicted_start_low_at`, `predicted_start_high_at`), when it ends (`predicted_end_at`; null for a
  service) and why the start last moved (`prediction_moved`), each null where nothing was predicted.
  While it runs (here and in `GET /jobs`): when it should end (`predicted_end_at`: its start plus the
  scheduler's runtime estimate on its card, cpn.engine.run_end) and the interval the estimate's spread
  allows (`predicted_end_low_at`, `predicted_end_high_at`; null where narrower than a second).
- `GET /jobs/{namespace}/{name}/logs?tail=100`: the last lines of the job's log (secret-looking values
  redacted), from its cluster while the cluster has it (`source: cluster`), else the log tail stored with
  its failed run (`source: store`); 404 when there is neither (a job that never ran, or one whose cluster
  kept no pod and whose run did not fail).
- `DELETE /jobs/{namespace}/{name}`: cancel a job (idempotent). A queued job leaves the queue at once
  (200, `cancelled`); one on a cluster gets a cancel request the scheduler's next round carries out,
  deleting it there (202, `requested`); a job that had ended is left as it was (200, `finished`). 403
  with another namespace's token, 404 for an unknown job; who cancelled and when is in its history.
- `GET /clusters`, `POST /clusters` (a cluster's YAML or JSON, as `cpn cluster add FILE`),
  `POST /clusters/{name}/cordon|uncordon`, `DELETE /clusters/{name}?force=true`: the cluster set, changed
  at the scheduler's next round (cpn.adapters.clusters); only for a token for every namespace (403 otherwise),
  404 for an unknown cluster, 409 for a change the set refuses, 422 for a cluster that fails validation.
- `GET /teams`: each team's weight, quota, borrowing limit, cards in use, borrowed cards, share and queued
  jobs, as `cpn teams` prints them (cpn.views.team_board), in `cpn run` with a teams file; a namespace token
  sees the teams of its namespaces only; 404 where the service has no teams.
- `GET /healthz`: the API is up (no token needed), and, in `cpn run`, `"leader"`: whether this replica
  leads the scheduling loop; job counts per state with a token for every namespace.
- `GET /metrics`: cpn's own metrics in Prometheus' text format (no token needed, like `/healthz`:
  Prometheus scrapes without one; cpn.telemetry, docs/metrics.md), where the app was given a registry.

Times: every answer that has times says which clock they are on. `"clock": "wall"`: each `..._at` field
is an ISO 8601 UTC timestamp (`2025-01-02T03:04:05.678Z`); `"clock": "simulated"` (`cpn run` over simulated
clusters only): each is a number, seconds of simulated time since the simulation started.
`accepted_at` is when the store accepted the job.

Every request but `/healthz` and `/metrics` needs `Authorization: Bearer <token>` (401 without; see
cpn.auth), a `Host` the server answers to, and no cross-site `Origin` (403). Every
error is JSON `{"error": "<what went wrong and what to do>", ...}`, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import yaml
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.concurrency import run_in_threadpool

from config.settings import ConfigError
from cpn.adapters.clusters import cluster_summary, cluster_to_add
from cpn.adapters.gateway import NoLog
from cpn.auth import ANONYMOUS, ApiSecurity, Principal, hide_other_jobs
from cpn.engine.run_end import PredictedEnd
from cpn.intake import IntakeError, Reading, read_manifests
from cpn.jobs import JobSpec, JobState
from cpn.safe_yaml import clip
from cpn.store import (
    CancelOutcome,
    ClusterRefused,
    JobConflict,
    JobRecord,
    JobStore,
    StoreUnavailable,
    SubmitOutcome,
    Transition,
    UnknownCluster,
    UnknownJob,
)
from cpn.times import SAME_S
from cpn.views.team_board import TeamBoard

log = logging.getLogger("cpn.api")

_STATES = ", ".join(s.value for s in JobState)
YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
"""Content types of a YAML body; JSON bodies are `application/json`."""
INLINE_BYTES = 64 * 1024
"""Bodies up to this size are parsed and stored on the event loop: a few milliseconds at most, and a hop to
a worker thread costs more CPU than parsing one job. Larger ones go to a worker thread, so that a big
submission does not hold up other requests."""
MAX_PAGE = 1000
"""Largest `limit` of `GET /jobs`."""
MAX_LOG_LINES = 10_000
"""Largest `tail` of `GET /jobs/{namespace}/{name}/logs`."""
LogSource = Callable[[str, int], str]
"""(job id, lines) -> the last lines of the job's log on its cluster (ClusterGateway.logs; raises NoLog)."""
REDACTED = "<redacted>"
"""What a secret value reads as in a returned manifest."""
_SECRET_KEY = re.compile(
    r"password|passwd|secret|token|api[-_]?key|access[-_]?key|private[-_]?key|credential", re.IGNORECASE
)
_SECRET_IN_TEXT = re.compile(
    rf"(?P<key>[\w.-]*(?:{_SECRET_KEY.pattern})[\w.-]*[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+"
    r"|(?P<scheme>\b(?:bearer|basic)\s+)[\w.~+/=-]+",
    re.IGNORECASE,
)
"""A secret-looking key's value (`KEY=v`, `key: v`, `"key": "v"`) or a credential after Bearer/Basic."""
_OPEN_PATHS = frozenset({"/healthz", "/metrics"})


class _BadRequest(ValueError):
    """The request cannot be served as sent; answered with `status` and the message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def create_app(
    store: JobStore,
    *,
    security: ApiSecurity,
    metrics: CollectorRegistry | None = None,
    logs: LogSource | None = None,
    clock: Literal["wall", "simulated"] = "wall",
    leader: Callable[[], bool] | None = None,
    teams: TeamBoard | None = None,
    running_ends: Callable[[Sequence[JobRecord]], Mapping[str, PredictedEnd]] | None = None,
) -> FastAPI:
    """The intake API over `store`, admitting requests as `security` says; the caller owns the store.

    Tests and a loopback-only server without tokens pass `ApiSecurity.no_auth(...)`. The web UI
    (cpn.ui.pages.mount_ui) adds its pages to this app; the guard admits them by the UI's cookie.
    `metrics`: the registry `GET /metrics` serves (cpn.telemetry.Telemetry.registry); None: no `/metrics`.
    `logs` reads a job's log from the clusters (`cpn run` passes its gateway's; without it, as in `cpn
    serve`, only stored log tails are served); `clock` is the store's clock, which says how times are
    shown (module doc). `leader` says whether this process leads the store's scheduling (`cpn run`'s
    replicas), which `/healthz` answers as `"leader"`; None (`cpn serve`): not said. `teams`: the teams the
    scheduler shares the clusters by, which `GET /teams` shows (None: no teams file, 404). `running_ends`
    predicts when running jobs end (`cpn run` passes cpn.engine.run_end.running_ends over its estimate
    source and inventory); None: a running job's predicted end is null.
    """

    def ends(records: Sequence[JobRecord]) -> Mapping[str, PredictedEnd]:
        running = [r for r in records if r.state == JobState.RUNNING]
        return running_ends(running) if running_ends is not None and running else {}

    app = FastAPI(
        title="cpn job intake",
        description="Submit Kubernetes manifests with cpn annotations; read jobs and their history.",
    )
    _add_error_handlers(app)
    app.add_middleware(_Guard, security=security)

    @app.post("/jobs", status_code=201)
    async def submit_jobs(request: Request) -> JSONResponse:
        """Accept every job in the manifest(s) of the body, or none."""
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type not in YAML_TYPES and content_type != "application/json":
            raise _BadRequest(
                f"content type {clip(content_type, 60)!r} is not accepted; send the manifest as "
                'application/yaml, or as application/json {"manifest": "<yaml>"}',
                status=415,
            )
        body = await _read_body(request, security.max_body_bytes)
        text = _manifest_text(body, content_type == "application/json")
        principal = _principal(request)
        if len(body) <= INLINE_BYTES:
            outcomes = _submit(store, text, principal)
        else:
            outcomes = await run_in_threadpool(_submit, store, text, principal)
        created = any(o.status == "created" for o, _ in outcomes)
        jobs = [{"job_id": o.job_id, "status": o.status, "read": dataclasses.asdict(r)} for o, r in outcomes]
        return JSONResponse({"jobs": jobs}, status_code=201 if created else 200)

    @app.get("/jobs")
    def list_jobs(
        request: Request,
        state: Annotated[list[str] | None, Query(description=f"Only jobs in these states: {_STATES}")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Jobs per page")] = 100,
        cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page")] = None,
    ) -> dict[str, Any]:
        """A page of job summaries (without manifests) in acceptance order, of the caller's namespaces."""
        try:
            states = [JobState(s) for s in state or ()]
        except ValueError as exc:
            raise _BadRequest(f"{clip(str(exc))}; use one of {_STATES}", status=422) from None
        if cursor is not None and not (cursor.isdigit() and len(cursor) < 19):
            raise _BadRequest("cursor is not one this server gave; start again without it", status=422)
        principal = _principal(request)
        hide = reader(store, principal)
        records, after = store.page(
            states=states or None,
            namespaces=None if principal.namespaces is None else sorted(principal.namespaces),
            after=int(cursor or 0),
            limit=limit,
        )
        running = ends(records)
        return {
            "clock": clock,
            "jobs": [_summary(r, clock, hide, running.get(r.job_id)) for r in records],
            "next_cursor": None if after is None else str(after),
        }

    @app.get("/jobs/{namespace}/{name}")
    def get_job(request: Request, namespace: str, name: str) -> dict[str, Any]:
        """One job: spec, redacted manifest, state, placement and transition history."""
        principal = _principal(request)
        _authorize(principal, [namespace], "read")
        job_id = f"{namespace}/{name}"
        record = store.get(job_id)
        hide = reader(store, principal)
        return {
            **_summary(record, clock, hide, ends([record]).get(job_id)),
            **_prediction(record, clock, hide),
            "clock": clock,
            "spec": _public_spec(record.spec),
            "read": dataclasses.asdict(Reading.of(record.spec)),
            "history": [_transition(t, clock, hide) for t in store.history(job_id)],
        }

    @app.get("/jobs/{namespace}/{name}/logs")
    def job_logs(
        request: Request,
        namespace: str,
        name: str,
        tail: Annotated[int, Query(ge=1, le=MAX_LOG_LINES, description="Lines from the end")] = 100,
    ) -> dict[str, Any]:
        """The last `tail` lines of the job's log: from its cluster, else the tail stored with its failed
        run."""
        _authorize(_principal(request), [namespace], "read")
        job_id = f"{namespace}/{name}"
        record = store.get(job_id)
        if logs is not None:
            try:
                return _log_answer(job_id, "cluster", logs(job_id, tail))
            except NoLog:
                pass
        stored = next((t.log_tail for t in reversed(store.history(job_id)) if t.log_tail), "")
        if not stored:
            raise _BadRequest(
                f"no log of {job_id} (state {record.state.value}): no cluster holds its pod now and no "
                "failed run's log tail was stored",
                status=404,
            )
        return _log_answer(job_id, "store", "\n".join(stored.splitlines()[-tail:]))

    @app.delete("/jobs/{namespace}/{name}")
    def cancel_job(request: Request, namespace: str, name: str) -> JSONResponse:
        """Cancel one job (see `cancel_answer`): 200 when it is cancelled now or had ended already, 202 when
        the scheduler's next round deletes it from its cluster."""
        principal = _principal(request)
        _authorize(principal, [namespace], "cancel jobs of")
        outcome = store.cancel(f"{namespace}/{name}", principal.name)
        return JSONResponse(cancel_answer(outcome), status_code=202 if outcome.status == "requested" else 200)

    @app.get("/healthz")
    def healthz(request: Request) -> dict[str, Any]:
        """The API is up and its store answers; counts per state for a caller allowed every namespace."""
        counts = store.counts()
        answer: dict[str, Any] = {"status": "ok"}
        if leader is not None:
            answer["leader"] = leader()
        principal = request.scope.get("cpn.principal")
        if principal is None or principal.namespaces is not None:
            return answer
        return answer | {"jobs": {state.value: n for state, n in counts.items()}}

    @app.get("/teams")
    def list_teams(request: Request) -> dict[str, Any]:
        """Each team's standing (cpn.views.team_board.TeamBoard.rows), only the teams of the caller's
        namespaces for a namespace token."""
        if teams is None:
            raise _BadRequest("this service has no teams: put a teams.yaml in its config folder", 404)
        return {"teams": teams.rows(store, _principal(request).namespaces)}

    @app.get("/clusters")
    def list_clusters(request: Request) -> dict[str, Any]:
        """The cluster set (cpn.adapters.clusters.cluster_summary); a token for every namespace only."""
        _admin(_principal(request), "read the cluster set")
        return {"clusters": cluster_summary(store)}

    @app.post("/clusters", status_code=201)
    async def add_cluster(request: Request) -> dict[str, Any]:
        """Add the cluster the YAML or JSON body describes (as `cpn cluster add FILE`); 422 when it fails
        validation, 409 when the set has it already."""
        _admin(_principal(request), "add clusters")
        body = await _read_body(request, INLINE_BYTES)

        def add() -> str:
            try:
                name, spec = cluster_to_add(store.clusters(), yaml.safe_load(body))
            except (yaml.YAMLError, ConfigError) as exc:
                raise _BadRequest(f"the cluster was not added: {clip(str(exc))}", status=422) from None
            store.add_cluster(name, spec)
            return name

        return {"name": await run_in_threadpool(add), "state": "active"}

    @app.post("/clusters/{name}/{action}")
    def cordon_cluster(request: Request, name: str, action: Literal["cordon", "uncordon"]) -> dict[str, Any]:
        """Cordon (no new jobs) or uncordon a cluster; 404 for an unknown one."""
        _admin(_principal(request), "cordon clusters")
        state: Literal["active", "cordoned"] = "cordoned" if action == "cordon" else "active"
        return {"name": name, "state": state, "changed": store.set_cluster_state(name, state)}

    @app.delete("/clusters/{name}")
    def remove_cluster(request: Request, name: str, force: bool = False) -> dict[str, Any]:
        """Remove a cluster (as `cpn cluster remove`); 409 for the last one or one with jobs on it without
        `force`, which marks them lost and queues them again."""
        _admin(_principal(request), "remove clusters")
        return {"name": name, "state": "removed", "lost": store.remove_cluster(name, force=force)}

    if metrics is not None:

        @app.get("/metrics")
        def prometheus_metrics() -> Response:
            """The registry's series in Prometheus' text format."""
            return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    return app


CANCEL_MESSAGES = {
    "cancelled": "cancelled: it has left the queue",
    "requested": "cancel requested: the scheduler's next round deletes it from its cluster and records it "
    "cancelled",
    "finished": "it had already ended ({state}); nothing changed",
}
"""What a cancel did, for people (the API's `message`, the CLI and the web UI)."""


def cancel_answer(outcome: CancelOutcome) -> dict[str, Any]:
    """The JSON answer to a cancel: the job, what happened (`status`: cancelled, requested or finished),
    its state now and a sentence saying so. Cancelling again is harmless: the same answer."""
    return {
        "job_id": outcome.job_id,
        "status": outcome.status,
        "state": outcome.state.value,
        "message": CANCEL_MESSAGES[outcome.status].format(state=outcome.state.value),
    }


def _submit(store: JobStore, text: str, principal: Principal) -> list[tuple[SubmitOutcome, Reading]]:
    """Each job's outcome in the store, with what intake read of it."""
    read = read_manifests(text, "request body")
    _authorize(principal, [s.job_id.split("/", 1)[0] for s, _ in read], "write")
    outcomes = store.submit([s for s, _ in read])
    return list(zip(outcomes, [r for _, r in read], strict=True))


def reader(store: JobStore, principal: Principal) -> Callable[[str], str]:
    """How a text of the store reads for `principal`: the ids of jobs of namespaces it may not read
    hidden (cpn.auth.hide_other_jobs); the API and the web UI pass every stored text through it."""
    if principal.namespaces is None:
        return str
    return lambda text: hide_other_jobs(text, principal, lambda ids: store.specs(ids).keys())


def _principal(request: Request) -> Principal:
    return request.scope["cpn.principal"]


def _admin(principal: Principal, action: str) -> None:
    """Refuse (403) a token that is not for every namespace: only such a token may change the cluster set."""
    if principal.namespaces is not None:
        raise _BadRequest(
            f"the token {principal.name!r} may not {action}: that takes a token for every namespace", 403
        )


def _authorize(principal: Principal, namespaces: list[str], action: str) -> None:
    denied = sorted({ns for ns in namespaces if not principal.may(ns)})
    if denied:
        raise _BadRequest(
            f"the token {principal.name!r} may not {action} namespace(s) "
            f"{clip(', '.join(denied))}; nothing was stored. Ask for a token of those namespaces",
            status=403,
        )


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` bytes (whatever Content-Length said)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _BadRequest(_too_large(limit), status=413)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> str:
    return f"the request body is larger than {limit:,} bytes; split the manifests over several requests"


def _add_error_handlers(app: FastAPI) -> None:
    """Turn the domain's exceptions into short JSON errors; nothing was stored when one is raised."""

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

    @app.exception_handler(ClusterRefused)
    async def cluster_refused(request: Request, exc: ClusterRefused) -> JSONResponse:
        return _error(404 if isinstance(exc, UnknownCluster) else 409, str(exc))

    @app.exception_handler(UnknownJob)
    async def unknown(request: Request, exc: UnknownJob) -> JSONResponse:
        return _error(404, f"{clip(str(exc))}; list the jobs with GET /jobs")

    @app.exception_handler(StoreUnavailable)
    async def unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
        log.error("store unavailable: %s", exc)
        response = _error(503, f"{exc}; nothing was stored, retry later", kind=exc.kind)
        response.headers["Retry-After"] = "5"
        return response

    @app.exception_handler(_BadRequest)
    async def bad_request(request: Request, exc: _BadRequest) -> JSONResponse:
        return _error(exc.status, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid_parameters(request: Request, exc: RequestValidationError) -> JSONResponse:
        where = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', '')}"
            for err in exc.errors()[:5]
        )
        return _error(422, f"invalid request parameters: {clip(where, 400)}")

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s %s", request.method, request.url.path)
        return _error(500, "internal error; nothing was stored. The server log has the details")


class _Guard:
    """ASGI middleware in front of the app: Host, cross-site requests, authentication, body size.

    Runs before FastAPI parses anything, so a refused request costs almost nothing.
    """

    def __init__(self, app: Any, security: ApiSecurity) -> None:
        self.app = app
        self.security = security

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            status, message, extra = refusal
            await _send_json(send, status, {"error": message}, extra)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: dict, headers: dict[bytes, bytes]) -> tuple[int, str, list] | None:
        sec = self.security
        host = _host_name(headers.get(b"host", b""))
        if host not in sec.allowed_hosts:
            return 421, f"this server does not answer to host {clip(host, 60)!r}; use one it was told to", []
        origin = headers.get(b"origin")
        if (
            origin is not None
            and not _same_origin(origin, headers)
            and origin.decode("latin-1") not in sec.allowed_origins
        ):
            return 403, "cross-site requests are refused; call the API from a client, not a web page", []
        if origin is None and headers.get(b"sec-fetch-site", b"") == b"cross-site":
            return 403, "cross-site requests are refused; call the API from a client, not a web page", []
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > sec.max_body_bytes):
            return 413, _too_large(sec.max_body_bytes), []
        if sec.authenticator is None:
            scope["cpn.principal"] = ANONYMOUS
            return None
        auth = headers.get(b"authorization", b"")
        scheme, _, token = auth.partition(b" ")
        principal = None
        if scheme.lower() == b"bearer" and token.strip():
            principal = sec.authenticator.authenticate(token.strip().decode("latin-1"))
        if principal is None and _is_ui(scope["path"]):
            principal = sec.authenticator.authenticate(_cookie(headers, UI_COOKIE))
        if principal is not None:
            scope["cpn.principal"] = principal
            return None
        if scope["path"] in _OPEN_PATHS or _is_ui(scope["path"]):
            return None  # the UI's pages send a browser without a valid cookie to its login form
        client = scope.get("client") or ("?", 0)
        reason = "unknown token" if token.strip() else "no bearer token"
        log.warning("refused %s %s from %s: %s", scope["method"], clip(scope["path"], 100), client[0], reason)
        return (
            401,
            f"{reason}; send Authorization: Bearer <token> (tokens are made with `cpn token create`; "
            "`cpn up` keeps an admin token in $CPN_HOME/token, ~/.cpn/token by default)",
            [(b"www-authenticate", b"Bearer")],
        )


UI_COOKIE = "cpn_token"
"""The cookie the web UI keeps a logged-in browser's token in (HttpOnly, SameSite=Strict, path /ui)."""


def _is_ui(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


def _cookie(headers: dict[bytes, bytes], name: str) -> str:
    """The value of one cookie of the request ('' without it)."""
    for part in headers.get(b"cookie", b"").decode("latin-1").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return ""


def _same_origin(origin: bytes, headers: dict[bytes, bytes]) -> bool:
    """Whether an Origin header names the server itself (a form of its own pages): its host and port are
    the request's Host."""
    return origin.partition(b"://")[2].lower() == headers.get(b"host", b"").strip().lower()


def _headers(scope: dict) -> dict[bytes, bytes]:
    """Request headers by lowercase name; a repeated header keeps its first value."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.lower(), value)
    return found


def _host_name(host: bytes) -> str:
    """The name part of a Host header: `127.0.0.1:8080` -> `127.0.0.1`, `[::1]:80` -> `::1`."""
    text = host.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:].split("]", 1)[0]
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


async def _send_json(send: Any, status: int, payload: dict, extra_headers: list) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + extra_headers})
    await send({"type": "http.response.body", "body": body})


def _manifest_text(body: bytes, is_json: bool) -> str:
    """The YAML text of a request body: the body itself, or the `manifest` of a JSON body."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise _BadRequest("the request body is not UTF-8 text; send the YAML manifest as UTF-8") from None
    if not is_json:
        return text
    try:
        payload = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _BadRequest(
            f'the JSON body is not valid ({clip(str(exc))}); send {{"manifest": "<yaml>"}} or a YAML body'
        ) from None
    if not isinstance(payload, dict) or not isinstance(payload.get("manifest"), str):
        raise _BadRequest('a JSON body must be an object {"manifest": "<yaml text>"}')
    return payload["manifest"]


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _log_answer(job_id: str, source: str, text: str) -> dict[str, Any]:
    return {"job_id": job_id, "source": source, "log": redact_text(text)}


def _at(t: float | None, clock: str) -> str | float | None:
    """A store time as the API shows it (module doc): ISO 8601 UTC on the wall clock, else seconds."""
    if t is None or clock == "simulated":
        return t
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _summary(
    record: JobRecord, clock: str, hide: Callable[[str], str], running_end: PredictedEnd | None = None
) -> dict[str, Any]:
    spec = record.spec
    return {
        "job_id": record.job_id,
        "state": record.state.value,
        "kind": spec.kind,
        "model": spec.model,
        "num_gpus": spec.num_gpus,
        "cluster": record.cluster,
        "node": record.node,
        "placement": [{"node": node, "gpus": cards} for node, cards in record.placement],
        "gpus": record.gpus,
        "accepted_at": _at(record.submitted_at, clock),
        "updated_at": _at(record.updated_at, clock),
        "waiting": None
        if record.waiting is None
        else {"code": record.waiting.code, "detail": hide(record.waiting.detail)},
        "predicted_start_at": _at(record.waiting.predicted_start if record.waiting else None, clock),
        **_end(record, clock, running_end),
    }


def _end(record: JobRecord, clock: str, running_end: PredictedEnd | None) -> dict[str, Any]:
    """When the job should end: a running one by its start and estimate (`running_end`, with the interval
    its spread allows), a waiting one by the forward look (no interval); null where none is known, for a
    service (it never ends), and for an interval narrower than a second (cpn.times.SAME_S: no interval)."""
    w = record.waiting
    if running_end is not None:
        end, low, high = running_end.at, running_end.low, running_end.high
    else:
        end = None if w is None or w.predicted_end == math.inf else w.predicted_end
        low = high = None
    if low is None or high is None or high - low < SAME_S:
        low = high = None
    return {
        "predicted_end_at": _at(end, clock),
        "predicted_end_low_at": _at(low, clock),
        "predicted_end_high_at": _at(high, clock),
    }


def _prediction(record: JobRecord, clock: str, hide: Callable[[str], str]) -> dict[str, Any]:
    """A waiting job's forward look beyond its start (cpn.engine.forecast), null where none was made: the
    interval its start may fall in and why its start last moved (null: it has not)."""
    w = record.waiting
    return {
        "predicted_start_low_at": _at(w.start_low if w else None, clock),
        "predicted_start_high_at": _at(w.start_high if w else None, clock),
        "prediction_moved": hide(w.moved if w else "") or None,
    }


def _public_spec(spec: JobSpec) -> dict[str, Any]:
    """The spec as JSON, its manifest with secrets redacted."""
    return {**dataclasses.asdict(spec), "manifest": redact_manifest(spec.manifest)}


def redact_manifest(manifest: str) -> str:
    """The manifest with every `env` value and every value under a secret-looking key replaced by REDACTED.

    `valueFrom` references (to a Secret or ConfigMap) are kept: they name, not hold, the secret.
    """
    if not manifest:
        return manifest
    doc = yaml.load(manifest, Loader=yaml.CSafeLoader)  # written by cpn.intake, within its limits
    return yaml.dump(_redact(doc), Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True)


def _redact(value: Any) -> Any:
    if isinstance(value, list):
        return [_redact(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key == "env" and isinstance(item, list):
            out[key] = [{**e, "value": REDACTED} if isinstance(e, dict) and "value" in e else e for e in item]
        elif isinstance(key, str) and _SECRET_KEY.search(key) and not isinstance(item, dict | list):
            out[key] = REDACTED
        else:
            out[key] = _redact(item)
    return out


def redact_text(text: str) -> str:
    """Free text (a pod log) with the values of secret-looking keys and Bearer/Basic credentials replaced
    by REDACTED."""
    return _SECRET_IN_TEXT.sub(lambda m: (m.group("key") or m.group("scheme")) + REDACTED, text)


def _transition(t: Transition, clock: str, hide: Callable[[str], str]) -> dict[str, Any]:
    return {
        "from": t.from_state.value if t.from_state else None,
        "to": t.to_state.value,
        "at": _at(t.time, clock),
        "reason": hide(t.reason),
        "cluster": t.cluster,
        "node": t.node,
        "log_tail": redact_text(t.log_tail),
    }
