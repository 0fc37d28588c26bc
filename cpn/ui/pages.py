"""The web UI's pages, served by the API's app under `/ui` (server-rendered, no scripts, no external assets).

- `/ui/login`: a form that takes an API token and keeps it in an HttpOnly, SameSite=Strict cookie; the
  token's namespaces are all the pages show (a server started with --no-auth shows everything);
- `/ui/queue`: every job with its state, GPUs, cluster, waiting reason, predicted start and age;
  filters by namespace, state, waiting reason and GPU type; paged;
- `/ui/jobs/{ns}/{name}`: one job: why it waits and since when, predicted start (and its interval, the
  predicted end and why the start last moved, where known; "never, unless the quota changes" for a job
  its team's limits never let start), while it runs its predicted end and interval, placement, transfer
  time, predicted vs measured runtime, transitions, its log tail (from its cluster, else the one stored
  with a failed run), its manifest (secrets redacted as the API redacts them) and a cancel button;
- `/ui/clusters`: free, used, unusable (by cause: CPU, pool, memory) and cordoned cards per cluster and
  GPU type (a cordoned cluster marked so), each cluster's metrics health and its age, the WAN bandwidth
  learnt from copies, utilisation over time and a Gantt of recent jobs, with a legend; with a teams file,
  each team's quota, cards in use, borrowed cards and queued jobs (as GET /teams).

Every page shows a namespace token its namespaces' jobs only: the Gantt leaves the others out and stored
texts hide their ids (cpn.api.reader). Times are formatted by cpn.times, as the CLI formats them.

Forms are POSTed; the API's guard (cpn.api) refuses cross-site requests (Origin, Sec-Fetch-Site) before
they get here, and the SameSite cookie is not sent with them anyway.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args
from urllib.parse import parse_qs, urlencode

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, pass_context, select_autoescape

from cpn.adapters.gateway import NoLog
from cpn.api import UI_COOKIE as COOKIE
from cpn.api import LogSource, cancel_answer, reader, redact_manifest, redact_text
from cpn.auth import ApiSecurity, Principal
from cpn.decisions import NEVER, Estimate, WaitCode, never_starts
from cpn.engine.run_end import predicted_end
from cpn.engine.scheduler import EstimateSource
from cpn.jobs import FINISHED, JobState
from cpn.store import JobRecord, JobStore, Transition, UnknownJob
from cpn.times import between, clock_time, duration, relative
from cpn.ui.capacity import CapacityView
from cpn.views.team_board import TeamBoard

PAGE_SIZE = 50
"""Jobs per queue page (more when a page of the store holds more matches)."""
_SCAN = 500
"""Jobs read from the store at a time while filtering the queue by reason or GPU type."""
_SCAN_MAX = 2000
"""Most jobs one queue page reads while filtering: a rare filter value then gives a short page with a
`next page` link, in bounded time, rather than one answer that reads the whole store."""
LOG_LINES = 50
"""Lines of a job's log its page shows."""

_env = Environment(loader=PackageLoader("cpn.ui", "templates"), autoescape=select_autoescape(["html"]))


_env.filters["when"] = pass_context(lambda ctx, t: clock_time(t, ctx.get("wall_of")))
_env.filters["span"] = duration
_env.filters["relative"] = relative
_env.globals["between"] = pass_context(lambda ctx, low, high: between(low, high, ctx.get("wall_of")))
_env.globals["inf"] = math.inf
_env.globals["never_starts"] = never_starts
_env.globals["NEVER"] = NEVER


def principal_of(request: Request) -> Principal | None:
    """The caller the API's guard admitted (by bearer token or the UI's cookie); None = not logged in."""
    return request.scope.get("cpn.principal")


def mount_ui(
    app: FastAPI,
    store: JobStore,
    security: ApiSecurity,
    capacity: Callable[[], CapacityView] | None = None,
    now: Callable[[], float] = time.time,
    logs: LogSource | None = None,
    estimates: EstimateSource | None = None,
    teams: TeamBoard | None = None,
    wall_of: Callable[[float], float] | None = None,
) -> FastAPI:
    """Add the `/ui` pages to `app` (cpn.api.create_app's, with the same `security`), reading `store`, and
    return it; `capacity` is the running service's latest inventory (None: the clusters page says there is
    none); `now` is the store's clock (ages, predicted starts); `logs` reads a job's log from its cluster
    (the callable create_app gets; None: only stored log tails); `estimates` is the scheduler's estimate
    source, whose runtime a job's page sets beside the measured one (None: not shown); `teams` the teams the
    clusters page shows, those of the caller's namespaces (None: no teams table); `wall_of` maps a
    simulated store time to the wall clock (a live simulation's timeline), so that pages give simulated
    times their time of day too (None: the store is on the wall clock, or no mapping is known)."""

    def page(name: str, request: Request, status: int = 200, **values: Any) -> HTMLResponse:
        principal = principal_of(request)
        hide = str if principal is None else reader(store, principal)
        html = _env.get_template(name).render(principal=principal, hide=hide, wall_of=wall_of, **values)
        return HTMLResponse(html, status_code=status)

    def login_first() -> Response:
        return RedirectResponse("/ui/login", status_code=303)

    @app.get("/ui", include_in_schema=False)
    def home() -> Response:
        return RedirectResponse("/ui/queue", status_code=303)

    @app.get("/ui/login", include_in_schema=False)
    def login_form(request: Request) -> HTMLResponse:
        return page("login.html", request, auth=security.authenticator is not None)

    @app.post("/ui/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        token = (form.get("token") or [""])[0].strip()
        if security.authenticator is None or security.authenticator.authenticate(token) is None:
            return page("login.html", request, 401, auth=security.authenticator is not None, failed=True)
        response = RedirectResponse("/ui/queue", status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/ui")
        return response

    @app.post("/ui/logout", include_in_schema=False)
    def logout() -> Response:
        response = login_first()
        response.delete_cookie(COOKIE, path="/ui")
        return response

    @app.get("/ui/queue", include_in_schema=False)
    def queue(
        request: Request,
        namespace: str = "",
        state: str = "",
        reason: str = "",
        gpu: str = "",
        cursor: int = 0,
    ) -> Response:
        principal = principal_of(request)
        if principal is None:
            return login_first()
        states = [JobState(state)] if state in {s.value for s in JobState} else None
        allowed = principal.namespaces
        if namespace:
            namespaces: list[str] | None = [namespace] if principal.may(namespace) else []
        else:
            namespaces = None if allowed is None else sorted(allowed)
        view = capacity() if capacity is not None else CapacityView()
        node_gpu = view.node_gpu or {}
        rows, after, scanned = [], cursor, 0
        while True:
            records, after = store.page(
                states=states, namespaces=namespaces, after=after, limit=_SCAN if reason or gpu else PAGE_SIZE
            )
            for r in records:
                gpu_type = _gpu_type(r, node_gpu)
                if reason and (r.waiting is None or r.waiting.code != reason):
                    continue
                if gpu and gpu != gpu_type and gpu not in r.spec.gpu_products:
                    continue
                rows.append((r, gpu_type))
            scanned += len(records)
            if after is None or len(rows) >= PAGE_SIZE or scanned >= _SCAN_MAX:
                break
        query = {"namespace": namespace, "state": state, "reason": reason, "gpu": gpu}
        next_url = None if after is None else "/ui/queue?" + urlencode({**query, "cursor": after})
        gpu_types = sorted({c.gpu_type for c in view.counts})
        return page(
            "queue.html",
            request,
            rows=rows,
            now=now(),
            query=query,
            states=[s.value for s in JobState],
            reasons=_REASONS,
            gpu_types=gpu_types,
            namespaces=[] if allowed is None else sorted(allowed),
            next_url=next_url,
            first=cursor == 0,
        )

    @app.get("/ui/jobs/{namespace}/{name}", include_in_schema=False)
    def job(request: Request, namespace: str, name: str, message: str = "") -> Response:
        principal = principal_of(request)
        if principal is None:
            return login_first()
        if not principal.may(namespace):
            return page("error.html", request, 403, error=f"this token may not read namespace {namespace}")
        try:
            record = store.get(f"{namespace}/{name}")
        except UnknownJob:
            return page("error.html", request, 404, error=f"no job {namespace}/{name}")
        history = store.history(record.job_id)
        waiting_since = record.updated_at if record.state == JobState.QUEUED else None
        node_gpu = (capacity().node_gpu if capacity is not None else None) or {}
        timing = run_timing(history, now())
        ran_on = node_gpu.get((timing.cluster or "", timing.node or ""))
        predicted: Estimate | None = None
        if estimates is not None and ran_on and not record.spec.is_service:
            predicted = estimates.estimates((record.spec,), (ran_on,)).get(record.job_id, {}).get(ran_on)
        running_end = None
        if record.state == JobState.RUNNING and timing.ended is None:
            running_end = predicted_end(timing.started, predicted)
        live_log = None
        if logs is not None:
            try:
                live_log = redact_text(logs(record.job_id, LOG_LINES))
            except NoLog:
                pass
        return page(
            "job.html",
            request,
            job=record,
            gpu_type=_gpu_type(record, node_gpu),
            history=history,
            timing=timing,
            ran_on=ran_on,
            predicted=predicted,
            running_end=running_end,
            live_log=live_log,
            tails=[(t, redact_text(t.log_tail)) for t in history if t.log_tail],
            manifest=redact_manifest(record.spec.manifest),
            waiting_since=waiting_since,
            now=now(),
            cancellable=record.state not in FINISHED,
            message=message,
            log_lines=LOG_LINES,
        )

    @app.post("/ui/jobs/{namespace}/{name}/cancel", include_in_schema=False)
    def cancel(request: Request, namespace: str, name: str) -> Response:
        principal = principal_of(request)
        if principal is None:
            return login_first()
        if not principal.may(namespace):
            return page("error.html", request, 403, error=f"this token may not cancel jobs of {namespace}")
        try:
            outcome = store.cancel(f"{namespace}/{name}", principal.name)
        except UnknownJob:
            return page("error.html", request, 404, error=f"no job {namespace}/{name}")
        message = cancel_answer(outcome)["message"]
        return RedirectResponse(
            f"/ui/jobs/{namespace}/{name}?" + urlencode({"message": message}), status_code=303
        )

    @app.get("/ui/clusters", include_in_schema=False)
    def clusters(request: Request) -> Response:
        principal = principal_of(request)
        if principal is None:
            return login_first()
        view = capacity() if capacity is not None else CapacityView()
        return page(
            "clusters.html",
            request,
            view=view,
            chart=utilisation_chart(view),
            gantt=gantt(view, principal),
            teams=None if teams is None else teams.rows(store, principal.namespaces),
        )

    return app


_REASONS = get_args(WaitCode)
"""Waiting reasons the queue can be filtered by (cpn.decisions.WaitCode)."""


def _gpu_type(record: JobRecord, node_gpu: dict[tuple[str, str], str]) -> str:
    """The GPU type a job holds (where placed) or asks for (its allowed products), else `any`."""
    if record.cluster and record.node and (record.cluster, record.node) in node_gpu:
        return node_gpu[(record.cluster, record.node)]
    return ", ".join(record.spec.gpu_products) or "any"


@dataclass(frozen=True)
class RunTiming:
    """What a job's transitions measured: time spent copying, and its latest run."""

    transfer_s: float
    """Seconds spent migrating (copying image and data to another cluster), over every copy; 0 = none."""
    started: float | None
    """When its latest run began (entry into `running`); None = it never ran."""
    ended: float | None
    """When that run ended (the transition out of `running`); None while it runs, or if it never ran."""
    measured_s: float | None
    """Length of the latest run (so far, while it runs); None = it never ran."""
    cluster: str | None = None
    """Where the latest run ran."""
    node: str | None = None


def run_timing(history: list[Transition], now: float) -> RunTiming:
    """Transfer time and the latest run of a job, from its transitions (oldest first); a state still held
    lasts until `now`."""
    transfer, run = 0.0, None
    for i, t in enumerate(history):
        until = history[i + 1].time if i + 1 < len(history) else now
        if t.to_state == JobState.MIGRATING:
            transfer += until - t.time
        elif t.to_state == JobState.RUNNING:
            run = (t, history[i + 1].time if i + 1 < len(history) else None)
    if run is None:
        return RunTiming(transfer, None, None, None)
    start, end = run
    return RunTiming(
        transfer, start.time, end, (now if end is None else end) - start.time, start.cluster, start.node
    )


CHART_W, CHART_H = 720, 200
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def utilisation_chart(view: CapacityView) -> list[dict[str, str]]:
    """One SVG polyline per cluster (points in a CHART_W x CHART_H box: time across, 0-100% up), drawn
    server-side from the utilisation history; empty with fewer than two samples."""
    if len(view.history) < 2:
        return []
    t0, t1 = view.history[0][0], view.history[-1][0]
    span = (t1 - t0) or 1.0
    clusters = sorted({c for _, shares in view.history for c in shares})
    lines = []
    for i, cluster in enumerate(clusters):
        points = " ".join(
            f"{(t - t0) / span * CHART_W:.1f},{CHART_H - shares[cluster] * CHART_H:.1f}"
            for t, shares in view.history
            if cluster in shares
        )
        lines.append({"cluster": cluster, "points": points, "colour": _COLOURS[i % len(_COLOURS)]})
    return lines


GANTT_ROWS = 30
"""Most jobs per cluster the Gantt draws (the latest to start): a readable chart on a laptop screen."""
GANTT_ROW_H = 14


def gantt(view: CapacityView, principal: Principal) -> list[dict[str, Any]]:
    """Per cluster, bars of the jobs of `principal`'s namespaces seen on it within the utilisation
    history's window (x in a CHART_W box over that window, one GANTT_ROW_H row per job), drawn
    server-side; empty before two samples. Other namespaces' jobs are left out, not even counted: their
    ids and number are theirs (docs/security.md)."""
    if len(view.history) < 2:
        return []
    t0, t1 = view.history[0][0], view.history[-1][0]
    span = (t1 - t0) or 1.0
    charts: dict[str, list[Any]] = {}
    for run in view.runs:
        if not principal.may(run.job_id.split("/", 1)[0]):
            continue
        charts.setdefault(run.cluster, []).append(run)
    out = []
    for cluster, runs in charts.items():
        runs = runs[-GANTT_ROWS:]
        bars = [
            {
                "job_id": r.job_id,
                "x": f"{(max(r.start, t0) - t0) / span * CHART_W:.1f}",
                "w": f"{max((r.end - max(r.start, t0)) / span * CHART_W, 2.0):.1f}",
                "y": i * GANTT_ROW_H,
                "running": r.running,
                "start": r.start,
                "end": r.end,
            }
            for i, r in enumerate(runs)
        ]
        out.append(
            {
                "cluster": cluster,
                "bars": bars,
                "height": len(bars) * GANTT_ROW_H,
                "hidden": len(charts[cluster]) - len(runs),
            }
        )
    return out
