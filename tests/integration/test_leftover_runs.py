"""A flow run a killed `cpn up` left `Pending` holds its deployment's only concurrency slot: the next run
waits in `AwaitingConcurrencySlot`. The next `cpn up` cancels it before its worker starts
(cli.leftover_runs), with a message saying why, and the deployment's next run gets the slot. On a real
Prefect server (Prefect's test harness)."""

from __future__ import annotations

import asyncio

import pytest

from cli.leftover_runs import cancel_leftover_runs

pytestmark = [pytest.mark.integration, pytest.mark.prefect_server]


def test_a_run_left_pending_is_cancelled_and_frees_its_deployments_slot(prefect_harness):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL
    from prefect.states import Pending

    async def deployment(client) -> object:
        flow_id = await client.create_flow_from_name("leftover-check")
        await client.create_work_pool(WorkPoolCreate(name="leftover-pool", type="process"), overwrite=True)
        return await client.create_deployment(
            flow_id=flow_id,
            name="one-at-a-time",
            work_pool_name="leftover-pool",
            entrypoint="flows/none.py:none",
            concurrency_limit=1,
        )

    async def pend(client, deployment_id) -> tuple[object, str]:
        run = await client.create_flow_run_from_deployment(deployment_id)
        await client.set_flow_run_state(run.id, Pending())
        return run, (await client.read_flow_run(run.id)).state.name

    async def scenario() -> tuple[str, str, list[str], str, str]:
        async with get_client() as client:
            deployment_id = await deployment(client)
            stale, stale_state = await pend(
                client, deployment_id
            )  # the killed cpn up's run: it holds the slot
            waiting, waiting_state = await pend(client, deployment_id)
            left = await asyncio.to_thread(cancel_leftover_runs, PREFECT_API_URL.value().removesuffix("/api"))
            cancelled = (await client.read_flow_run(stale.id)).state
            _, next_state = await pend(client, deployment_id)
            return (
                stale_state,
                waiting_state,
                left,
                f"{cancelled.type.value}: {cancelled.message}",
                next_state,
            )

    stale_state, waiting_state, left, cancelled, next_state = asyncio.run(scenario())
    assert (stale_state, waiting_state) == ("Pending", "AwaitingConcurrencySlot")
    assert len(left) == 1
    assert (
        cancelled
        == "CANCELLED: cancelled by cpn up at start: left Pending by a cpn up that stopped before it ended"
    )
    assert next_state == "Pending"
