"""The task runs one scheduling round shows in Prefect, as a person reads them in the flow's graph: the
stages of `cpn.engine.scheduler.run_stages`, each a task of `flows/schedule.py` `TaskStages`
(`record-waiting` in a round that explains; a dry run runs only snapshot-and-estimates, optimise and
publish-decisions)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from uuid import UUID

ROUND_STAGES = frozenset(
    {
        "collect",
        "track-completions",
        "cancel",
        "snapshot-and-estimates",
        "optimise",
        "publish-decisions",
        "assign",
        "migrate",
        "submit",
        "record-waiting",
    }
)

PAGE = 200
"""Most task runs the Prefect API returns for one read."""


async def task_names(flow_run_id: UUID, expected: Collection[str] = (), timeout_s: float = 60.0) -> set[str]:
    """The names (less their run number) of flow run `flow_run_id`'s task runs, once `expected` are all
    there or `timeout_s` has passed. Prefect 3 records a task run from the events its client sends in the
    background, after the flow has returned: a read at once may miss the last stages on a busy machine."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    of_run = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
    async with get_client() as client:
        while True:
            names: set[str] = set()
            offset = 0
            while True:  # the API gives at most PAGE a call
                page = await client.read_task_runs(flow_run_filter=of_run, limit=PAGE, offset=offset)
                names |= {t.name.rsplit("-", 1)[0] for t in page}
                offset += PAGE
                if len(page) < PAGE:
                    break
            if set(expected) <= names or time.monotonic() > deadline:
                return names
            await asyncio.sleep(0.5)
