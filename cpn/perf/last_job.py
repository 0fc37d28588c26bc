"""Did the job that ended last end on a slower GPU type while a faster one it fits stood free (issue #30)?

A replay's makespan is set by the job that ends last. If, while its last run went on, a node of a faster GPU
type with room for it (its cards, its GPU memory) stood free long enough to finish the work it had left
sooner than it did finish, the policy left the fast cards idle and lengthened the makespan: `cpn demo`
prints this check beside the makespan and its lower bound (`cpn.perf.bound.lower_bound`).

What "long enough" means: the last run's work left when it began is taken as the fraction of its runtime
on its own type that the run lasted; on the faster type that work takes the same fraction of the runtime
there (the ground truth's, as the lower bound's). Free is read from the replay's executions, whole cards
per node; a gang wider than any node of the faster type is not checked there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from cpn.engine.scheduler import EstimateSource
from cpn.inventory import Node
from cpn.jobs import JobSpec
from cpn.rules import job_admission_problem
from cpn.sim.gateway import Execution


@dataclass(frozen=True)
class IdleFaster:
    """The last job could have ended sooner on `node`, free from `free_from` (seconds, the replay's clock)."""

    job_id: str
    ran_on: str
    """GPU type of its last run."""
    node: str
    """`cluster/node` of the faster type that stood free."""
    free_from: float
    could_end: float
    ended: float

    def as_dict(self) -> dict:
        """For summary.json."""
        return asdict(self)


def idle_faster(
    jobs: Mapping[str, JobSpec],
    executions: Sequence[Execution],
    nodes: Sequence[Node],
    oracle: EstimateSource,
) -> IdleFaster | None:
    """The check of the module doc for the job that ended last; None when it passes (or nothing ran).
    `oracle`: the ground truth's runtimes (cpn.sim.estimates.OracleEstimates)."""
    done = [e for e in executions if e.outcome == "succeeded" and e.job_id in jobs]
    if not done:
        return None
    last = max(done, key=lambda e: e.end)
    job = jobs[last.job_id]
    by_key = {f"{n.cluster}/{n.name}": n for n in nodes}
    own = by_key.get(f"{last.cluster}/{last.node}")
    if own is None:
        return None
    mine = oracle.estimate(job, own.gpu_type)
    if mine is None or not 0 < mine.runtime_s < math.inf:
        return None
    start = min(e.start for e in done if e.job_id == last.job_id and e.end == last.end)
    fraction = (last.end - start) / mine.runtime_s
    found: IdleFaster | None = None
    for node in nodes:
        if node.gpu_count < job.num_gpus or node.gpu_type == own.gpu_type:
            continue
        if job_admission_problem(node, job) is not None:  # its pool, taints or pins keep it off
            continue
        there = oracle.estimate(job, node.gpu_type)
        if there is None or not there.runtime_s < mine.runtime_s:
            continue
        need_gb = there.gpu_mem_gb or job.gpu_mem_gb
        if need_gb is not None and need_gb > node.gpu_memory_gb:
            continue
        work = fraction * there.runtime_s
        key = f"{node.cluster}/{node.name}"
        for begin, end in _free_spans(key, node.gpu_count, job.num_gpus, executions, start, last.end):
            t = max(begin, start)
            if t + work <= end and t + work < last.end - 1e-6 * max(1.0, last.end):
                if found is None or t + work < found.could_end:
                    found = IdleFaster(job.job_id, own.gpu_type, key, t, t + work, last.end)
                break
    return found


def _free_spans(
    key: str, cards: int, need: int, executions: Sequence[Execution], since: float, until: float
) -> list[tuple[float, float]]:
    """Spans within [since, until] in which node `key` had at least `need` whole cards free."""
    events: list[tuple[float, float]] = []
    for e in executions:
        if f"{e.cluster}/{e.node}" == key and e.end > since and e.start < until:
            held = math.ceil(len(e.gpus) * e.share)
            events += [(max(e.start, since), held), (min(e.end, until), -held)]
    events.sort(key=lambda ev: (ev[0], -ev[1]))  # at one moment, cards taken before cards freed
    spans: list[tuple[float, float]] = []
    busy = 0
    opened = since if cards >= need else None
    for time, delta in events:
        busy += delta
        if cards - busy >= need and opened is None:
            opened = time
        elif cards - busy < need and opened is not None:
            if time > opened:
                spans.append((opened, time))
            opened = None
    if opened is not None and until > opened:
        spans.append((opened, until))
    return spans
