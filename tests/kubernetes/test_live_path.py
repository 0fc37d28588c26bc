"""The gateway's live path costs O(1) per job and keeps no record of jobs whose objects are gone."""

from __future__ import annotations

import pytest

from cpn.decisions import Placement
from cpn.jobs import JobSpec
from cpn.perf.gateway import bench_gateway
from tests.kubernetes.conftest import gpu_labels, make_gateway, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.kubernetes]


def test_after_warm_up_a_job_costs_one_call_and_no_list_whatever_the_cluster_holds():
    small = bench_gateway(nodes=5, pods=20, jobs=12)
    large = bench_gateway(nodes=60, pods=600, jobs=12)
    assert small.calls == large.calls == {"batch.volcano.sh/jobs create": 12}
    assert small.listed == large.listed == 0
    assert (small.warmup_listed, large.warmup_listed) == (25, 660)  # the one list of nodes and pods


def test_records_of_ended_jobs_go_with_their_objects(server):
    server.add_node("t-0", gpu_labels("training", "Tesla-V100-SXM2-16GB", 4, 16384), 4)
    gw = make_gateway(server)
    ids = [f"team/j{i}" for i in range(12)]
    for batch in (ids[:4], ids[4:8], ids[8:]):
        for job_id in batch:
            gw.submit(JobSpec(job_id, "m", image="i", cpu=1), Placement(job_id, "east", "t-0", 1))
        for job_id in batch:
            server.finish(*job_id.split("/"))
        ended: set[str] = set()

        def all_ended(batch: list[str] = batch, ended: set[str] = ended) -> bool:
            ended.update(e.job_id for e in gw.poll_events() if e.kind != "running")
            return ended >= set(batch)

        wait_for(all_ended)
        assert gw._ended == set(batch)  # the cluster still holds them
        for job_id in batch:
            gw.delete(job_id)  # as a TTL controller or a person would
        wait_for(lambda: not gw._seen and not gw._ended)
    assert gw.held_jobs() == frozenset()
    assert {s.node.name: s.free_gpus for s in gw.inventory()} == {"t-0": 4}
