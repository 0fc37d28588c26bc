"""After a restart the scheduler still knows when running jobs should end: the snapshot carries each
running job's predicted end and cards (from the store and the estimates), and a plan over time frees
their cards then, not never."""

from __future__ import annotations

import math

from cpn.jobs import JobState
from cpn.policies.plan import releases
from tests.unit.test_live_service import JOBS, TABLE, Wall, drive, open_service


def test_a_restarted_scheduler_predicts_when_the_running_jobs_end(tmp_path):
    store_path, wall = tmp_path / "jobs.db", Wall()
    service = open_service(store_path, wall)
    service.store.submit(JOBS)
    service.start()
    for _ in range(40):
        drive(service, wall, 1)
        if service.store.jobs(JobState.RUNNING):
            break
    service.close()

    restarted = open_service(store_path, wall)
    restarted.start()
    snapshot = restarted.scheduler.snapshot()
    running = {r.job_id: r for r in restarted.store.jobs(JobState.RUNNING)}
    assert running, "some jobs run when the service stops"
    on_nodes = {j for state in snapshot.nodes for j in state.running}
    assert set(running) <= on_nodes
    gpu_of = {(s.node.cluster, s.node.name): s.node.gpu_type for s in snapshot.nodes}
    for job_id, record in running.items():
        predicted = snapshot.running[job_id]
        rate = TABLE.steps_per_sec(
            record.spec.model, 32, gpu_of[(record.cluster, record.node)], record.spec.num_gpus
        )
        assert predicted.end == record.updated_at + record.spec.total_steps / rate
        assert predicted.cards == tuple((f"{record.cluster}/{n}", c) for n, c in record.placement)

    # A plan over time, from the snapshot alone, frees those cards at the predicted ends.
    ends = sorted(t for held in releases(snapshot).groups.values() for t, _ in held)
    assert ends and all(t < math.inf for t in ends)
    assert sorted({snapshot.running[j].end for j in running}) == sorted(set(ends))
    restarted.close()
