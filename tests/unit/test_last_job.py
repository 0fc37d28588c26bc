"""The demo's check on the job that ended last (cpn.perf.last_job): it fails when a faster card the job
fits stood free long enough to end it sooner, and passes when that card was busy or too small."""

from __future__ import annotations

from cpn.decisions import Estimate
from cpn.perf.last_job import idle_faster
from cpn.sim.gateway import Execution
from tests.unit.test_milp import job, node

H = 3600.0
K, V = node("k", "k80", 4), node("v", "v100", 4)


class _Oracle:
    """10 h on a K80, 2 h on a V100, for every job."""

    def estimate(self, spec, gpu_type):
        return Estimate({"k80": 10 * H, "v100": 2 * H}[gpu_type])


def _run(job_id, where, start, end, cards=4):
    return Execution(job_id, where.cluster, where.name, tuple(range(cards)), start, end, "succeeded")


def test_the_last_job_on_a_slow_card_while_a_fast_one_stood_free_fails_the_check():
    jobs = {"long": job("long", gpus=4), "short": job("short", gpus=4)}
    runs = [_run("long", K, 0.0, 10 * H), _run("short", V, 0.0, H)]
    found = idle_faster(jobs, runs, [K, V], _Oracle())
    assert found is not None and found.job_id == "long" and found.node == V.key
    assert found.free_from == H and found.could_end == 3 * H and found.ended == 10 * H


def test_it_passes_when_the_fast_card_was_busy_or_too_small():
    jobs = {"long": job("long", gpus=4), "busy": job("busy", gpus=4)}
    runs = [_run("long", K, 0.0, 10 * H), _run("busy", V, 0.0, 9 * H)]
    assert idle_faster(jobs, runs, [K, V], _Oracle()) is None  # 1 h free: too short for its 2 h there
    small = node("v2", "v100", 2)
    assert idle_faster({"long": jobs["long"]}, runs[:1], [K, small], _Oracle()) is None
