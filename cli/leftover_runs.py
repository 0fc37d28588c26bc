"""What a stopped `cpn up` leaves in Prefect, cleared by the next one before its worker starts.

A `cpn up` killed mid-run (SIGKILL, a power cut) leaves flow runs `Pending` or `Running` in Prefect's
database with no worker or process behind them. Each holds its deployment's concurrency slot (the
deployments allow one run at a time), so every later run of that deployment waits in
`AwaitingConcurrencySlot` for ever. Before the new worker starts, no run of this `cpn up` can be in
those states, so each one found is a leftover: it is set `Cancelled` with a message saying why, which
releases its slot (Prefect releases a run's slot when it leaves Pending, Running or Cancelling).
"""

from __future__ import annotations

import httpx

LEFTOVER_STATES = ("PENDING", "RUNNING", "CANCELLING")
"""Flow run states that hold a concurrency slot and need a worker or process to leave."""
MESSAGE = "cancelled by cpn up at start: left {state} by a cpn up that stopped before it ended"
"""The Cancelled state's message, on the run's page in the Prefect UI."""
PAGE = 200
"""Runs read from the Prefect API at a time."""


def cancel_leftover_runs(api_url: str, timeout_s: float = 30.0) -> list[str]:
    """Cancel every flow run `Pending`, `Running` or `Cancelling` on the Prefect server at `api_url`
    (`http://127.0.0.1:4200`); returns their names. Call it only while no worker of this server runs."""
    cancelled: list[str] = []
    with httpx.Client(base_url=f"{api_url.rstrip('/')}/api", timeout=timeout_s) as client:
        while True:
            answer = client.post(
                "/flow_runs/filter",
                json={"flow_runs": {"state": {"type": {"any_": list(LEFTOVER_STATES)}}}, "limit": PAGE},
            )
            answer.raise_for_status()
            runs = answer.json()
            for run in runs:
                state = run["state"]["name"] if run.get("state") else "unknown"
                cancel = {"type": "CANCELLED", "name": "Cancelled", "message": MESSAGE.format(state=state)}
                client.post(f"/flow_runs/{run['id']}/set_state", json={"state": cancel, "force": True})
                cancelled.append(run["name"])
            if len(runs) < PAGE:
                return cancelled
