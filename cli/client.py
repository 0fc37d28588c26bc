"""`cpn jobs`, `cpn job`, `cpn job cancel` and `cpn job logs` with `--server URL`: the same commands as a
client of a cpn server's HTTP API (cpn.api), for people away from the store's host.

The token is `$CPN_TOKEN`, else the file `token` in `$CPN_HOME` (config.runtime `client_token_path`;
`cpn up` writes an admin token there). The server answers only for the namespaces the token may read.
Times are shown as the server says (cpn.api): UTC on the wall clock, else simulated seconds, marked so.
Exit status: 0 done; 1 the server refused or could not be reached; 2 invalid input.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import httpx

from config.runtime import runtime_settings
from cpn.times import between, clock_time, from_now, moment_now, parse_api_time

EXIT_REFUSED = 1
TIMEOUT_S = 30.0
"""Seconds to wait for the server's answer."""


class ClientError(Exception):
    """The server refused a request or could not be reached; the message says what to do."""


def token() -> str | None:
    """The API token: `$CPN_TOKEN`, else the contents of `$CPN_HOME/token`; None without either."""
    if os.environ.get("CPN_TOKEN"):
        return os.environ["CPN_TOKEN"].strip()
    path = runtime_settings().client_token_path
    if not path.is_file():
        return None
    return path.read_text().strip() or None


class Client:
    """A cpn server's job API at `server` (http://host:port), as the holder of `bearer`."""

    def __init__(self, server: str, bearer: str | None, transport: httpx.BaseTransport | None = None) -> None:
        headers = {"authorization": f"Bearer {bearer}"} if bearer else {}
        self.server = server.rstrip("/")
        self._http = httpx.Client(
            base_url=self.server, headers=headers, timeout=TIMEOUT_S, transport=transport
        )

    def request(self, method: str, path: str, **params: Any) -> dict[str, Any]:
        """The JSON answer to one request (parameters that are None left out); ClientError with the
        server's message on an error status."""
        query = {k: v for k, v in params.items() if v is not None}
        try:
            response = self._http.request(method, path, params=query)
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach the cpn server at {self.server}: {exc}") from None
        try:
            body = response.json()
        except ValueError:
            body = {"error": response.text[:200]}
        if response.status_code == 401:
            raise ClientError(
                f"the server refused the token ({body.get('error', 'unauthorized')}). Set CPN_TOKEN=<token>, "
                f"or write the token to {runtime_settings().client_token_path}; ask the server's admin for "
                "one (`cpn token create --name NAME --namespace NS` on its host)"
            )
        if response.status_code >= 400:
            raise ClientError(f"{body.get('error', response.reason_phrase)} (HTTP {response.status_code})")
        return body


def client_for(server: str) -> Client:
    """A client of `server` with this shell's token (`token`)."""
    return Client(server, token())


def _job_path(job_id: str) -> str:
    namespace, name = job_id.split("/", 1)
    return f"/jobs/{namespace}/{name}"


def _clock_note(clock: str) -> str:
    return "times: on the simulated clock (simulated clusters)" if clock == "simulated" else "times: local"


def list_jobs(client: Client, states: list[str] | None) -> int:
    """Print every job the token may read, oldest first, a page at a time from the server."""
    from cli.intake import _table

    rows = [("JOB", "STATE", "KIND", "MODEL", "GPUS", "CLUSTER", "NODE", "ACCEPTED", "ETA")]
    cursor, clock = None, "wall"
    while True:
        page = client.request("GET", "/jobs", state=states, limit=1000, cursor=cursor)
        clock = page["clock"]
        rows += [
            (
                j["job_id"],
                j["state"],
                j["kind"],
                j["model"],
                str(j["num_gpus"]),
                j["cluster"] or "-",
                j["node"] or "-",
                clock_time(parse_api_time(j["accepted_at"])),
                from_now(parse_api_time(j["predicted_start_at"])),
            )
            for j in page["jobs"]
        ]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    if len(rows) == 1:
        print("no jobs" + (f" in state {', '.join(states)}" if states else "") + f" on {client.server}")
        return 0
    print(_table(rows))
    print(f"{len(rows) - 1} job(s) on {client.server}; {_clock_note(clock)}")
    return 0


def show_job(client: Client, job_id: str, manifest: bool) -> int:
    """Print one job, its history and the log tails of its failed runs, as the server has them."""
    from cli.intake import _table, predicted
    from cpn.decisions import NEVER, never_starts

    job = client.request("GET", _job_path(job_id))
    clock = job["clock"]
    lines = [
        ("job", job["job_id"]),
        ("state", job["state"]),
        ("cluster", job["cluster"] or "-"),
        ("node", job["node"] or "-"),
        ("gpus", ", ".join(f"{p['node']}:{p['gpus']}" for p in job["placement"]) or "-"),
        ("accepted", moment_now(parse_api_time(job["accepted_at"]))),
        ("updated", moment_now(parse_api_time(job["updated_at"]))),
    ]
    if job["waiting"]:
        lines.append(("waiting", f"{job['waiting']['code']}: {job['waiting']['detail']}".rstrip(": ")))
        if never_starts(job["waiting"]["code"], job["waiting"]["detail"]):
            lines.append(("predicted start", NEVER))
        elif job["predicted_start_at"] is not None:
            start, low, high, end = (
                parse_api_time(job[key])
                for key in (
                    "predicted_start_at",
                    "predicted_start_low_at",
                    "predicted_start_high_at",
                    "predicted_end_at",
                )
            )
            lines.append(("predicted start", predicted(start, low, high, end)))
        if job["prediction_moved"]:
            lines.append(("moved", job["prediction_moved"]))
    elif job["predicted_end_at"] is not None:  # a running job's, by its start and estimate
        end, low, high = (parse_api_time(job[f"predicted_end{k}_at"]) for k in ("", "_low", "_high"))
        interval = between(low, high)
        lines.append(("predicted end", moment_now(end) + (f"; {interval}" if interval else "")))
    width = max(len(k) for k, _ in lines)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in lines))
    print(f"\nhistory ({_clock_note(clock)}):")
    rows = [("TIME", "FROM", "TO", "CLUSTER", "NODE", "REASON")]
    rows += [(clock_time(parse_api_time(h["at"])), *_placed(h)) for h in job["history"]]
    print(_table(rows, indent="  "))
    for h in job["history"]:
        if h["log_tail"]:
            ended = clock_time(parse_api_time(h["at"]))
            print(f"\nlog tail of the run that ended {ended} ({h['reason'] or h['to']}):")
            print("\n".join("  " + line for line in h["log_tail"].splitlines()))
    if manifest:
        print("\nmanifest:\n" + job["spec"]["manifest"].rstrip())
    return 0


def _placed(h: dict[str, Any]) -> tuple[str, ...]:
    return (h["from"] or "-", h["to"], h["cluster"] or "-", h["node"] or "-", h["reason"])


def cancel_job(client: Client, job_id: str) -> int:
    """Cancel one job on the server and print what that did."""
    answer = client.request("DELETE", _job_path(job_id))
    print(f"{answer['job_id']}: {answer['message']}")
    return 0


def print_logs(client: Client, job_id: str, tail: int) -> int:
    """Print the last `tail` lines of the job's log (from its cluster, else the stored tail of its failed
    run); where it came from goes to standard error, so the log can be piped."""
    answer = client.request("GET", f"{_job_path(job_id)}/logs", tail=tail)
    where = "its cluster" if answer["source"] == "cluster" else "the store (its failed run's log tail)"
    print(f"log of {answer['job_id']} from {where}:", file=sys.stderr)
    if answer["log"]:
        print(answer["log"])
    return 0
