"""Heterogeneity-aware greedy: each job to the free GPU type where it would finish earliest.

The idea behind Gavel's throughput-aware policies, without preemption. Jobs are taken in queue order
(higher `priority` first, then arrival); each goes to the option `cpn.policies.placement` offers now
that minimises its predicted finish, `now + transfer_s[job][cluster] + runtime_s[job][gpu type]` (no
transfer where the job already is), ties to the earlier option (own pool before hybrid, then inventory
order). Only what is free now counts: a job never waits for a faster type that is busy, and one that
cannot start now is skipped, not waited for. With teams, teams take turns in fair order and a team takes
only the options its quota and borrowing limit allow (cpn.policies.teams). GPU types without an
estimate for the job are unusable for
it. With `pessimism` (GreedySettings, default 1) > 0, runtimes are each estimate's upper quantile
(`placement.pessimistic_runtime`): a job is not sent to a type whose estimate is a guess when one it is
surer of finishes first on that reckoning. Memory-aware, as `fifo` is. A service (`JobSpec.is_service`)
needs no estimate: it runs on any GPU type until deleted, so it goes where it starts first
(`service_option`). A training job with no estimate at all is rejected with the reason in the round it
is new, as is a job no node could ever take (`Capacity.vet`), and so is one whose estimates are all
infinite (none awaiting a benchmark) when it is asked, while anything is free; every job left queued
gets its reason (cpn.policies.waiting). A round visits only the jobs of shapes that can start
(`worth_trying`), so its cost follows what can start, not the queue's length.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from config.policies import GreedySettings
from cpn.decisions import Decision, Placement, QueueLines, Rejection, Snapshot, Waiting
from cpn.jobs import JobSpec
from cpn.policies.base import Traits, by_priority
from cpn.policies.placement import (
    NO_ESTIMATE,
    Capacity,
    Option,
    awaits_benchmark,
    queue_lines,
    usable_runtimes,
)
from cpn.policies.plan import Projection, releases
from cpn.policies.teams import FairQueue
from cpn.policies.waiting import WaitingExplainer
from cpn.rules import is_sharing


def finish_time(snapshot: Snapshot, job: JobSpec, option: Option, runtimes: dict[str, float]) -> float:
    """When `job` would finish if it started now on `option`: transfer, then its runtime on the type."""
    return start_time(snapshot, job, option) + runtimes[option.gpu_type]


def start_time(snapshot: Snapshot, job: JobSpec, option: Option) -> float:
    """When `job` would start running if placed now on `option`: once its image and data are there."""
    return snapshot.now + snapshot.transfer_s.get(job.job_id, {}).get(option.placement.cluster, 0.0)


def service_option(snapshot: Snapshot, job: JobSpec, options: tuple[Option, ...]) -> Option:
    """Where a service goes among `options`: it has no end to finish early by, so where it starts first
    (least transfer), ties to the earlier option (own pool before hybrid, then inventory order)."""
    return min(options, key=lambda o: start_time(snapshot, job, o))


class GreedyPolicy:
    """Earliest predicted finish over the GPU types free now, jobs in queue order."""

    name = "greedy"

    def __init__(self, settings: GreedySettings | None = None) -> None:
        self.settings = settings or GreedySettings()
        self.traits = Traits(
            queue_order=not self.settings.wait_for_faster, skips_blocked=not self.settings.wait_for_faster
        )
        """Jobs in queue order, and one that cannot start now changes nothing for the rest; unless jobs may
        wait for a faster type: a job that waits books the cards it waits for (FasterLater), which later jobs
        then do not count on, so a forward look must ask about every job (cpn.engine.look_queue; its test
        compares both)."""

    def decide(self, snapshot: Snapshot) -> Decision:
        """Place each job where it finishes first while anything is free; reject jobs that can never run."""
        capacity = Capacity(snapshot)
        placements: list[Placement] = []
        rejections, pending = capacity.vet(estimated=True)
        done = {r.job_id for r in rejections}
        """Jobs placed or rejected this round."""
        for job in snapshot.pending if snapshot.fresh is None else snapshot.fresh:
            if job.job_id not in done and not job.is_service and not snapshot.estimates.get(job.job_id):
                rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                done.add(job.job_id)
        faster = FasterLater(snapshot, capacity, self.settings.wait_for_faster)
        lines = queue_lines(snapshot)
        queue = FairQueue(snapshot, by_priority(pending) if lines is None else ())
        for job in worth_trying(capacity, lines or queue, done, snapshot.shapes):
            service = job.is_service
            runtimes = None if service else usable_runtimes(snapshot, job, self.settings.pessimism)
            if runtimes is not None and not runtimes:
                if not awaits_benchmark(snapshot, job):
                    rejections.append(Rejection(job.job_id, NO_ESTIMATE))
                    done.add(job.job_id)
                continue
            fit = capacity.fit(job, runtimes)
            options = queue.allowed(job, fit.options)
            if not options:
                if fit.never is not None:
                    rejections.append(Rejection(job.job_id, fit.never))
                    done.add(job.job_id)
                continue
            if runtimes is None:
                best = service_option(snapshot, job, options)
            else:
                best = min(options, key=lambda o: finish_time(snapshot, job, o, runtimes))
                if faster.waits(job, runtimes, finish_time(snapshot, job, best, runtimes)):
                    continue
            queue.took(job, best)
            placements.append(capacity.take(best, job))
            done.add(job.job_id)
        waiting: tuple = ()
        if snapshot.explain:
            explainer = WaitingExplainer(capacity)
            left = (job for job in by_priority(pending) if job.job_id not in done)
            waiting = tuple(
                faster.waiting(job) or queue.waiting(explainer, job, estimated=not job.is_service)
                for job in left
            )
        return Decision(placements=tuple(placements), rejections=tuple(rejections), waiting=waiting)


class FasterLater:
    """Whether a job should wait for a faster GPU type that is busy now: when, by the running jobs'
    predicted ends (`plan.releases`), enough cards of a type it may use free soon enough that starting there
    then ends it sooner than starting now on the best free option. The wait is booked in a list schedule
    (`plan.Projection`), so the jobs after it in the round do not count on the same cards; the job waits
    with that start as its predicted one. Off (`wait_for_faster=false`): a job never waits for a busy type.
    With estimates, this is where their quality reaches the decision: a wrong runtime on the fast type
    makes a job wait for it, or not, wrongly."""

    def __init__(self, snapshot: Snapshot, capacity: Capacity, enabled: bool) -> None:
        self.snapshot = snapshot
        self.enabled = enabled and bool(snapshot.running)
        self._capacity = capacity
        self._projection: Projection | None = None
        self._groups: list | None = None
        self.starts: dict[str, float] = {}
        """job_id -> the start it waits for."""

    def waits(self, job: JobSpec, runtimes: dict[str, float], now_finish: float) -> bool:
        """Whether `job`, which could end at `now_finish` starting now, ends sooner waiting (booked if so)."""
        if not self.enabled or job.spread or is_sharing(job):
            return False
        if self._projection is None:
            groups = self._capacity.groups()
            self._groups = groups
            free = {g.key: g.free for g in groups}
            self._projection = Projection(self.snapshot.now, free, releases(self.snapshot).groups)
        transfer = self.snapshot.transfer_s.get(job.job_id, {})
        options = [
            (g.key, transfer.get(g.cluster, 0.0) + runtimes[g.gpu_type])
            for g in self._groups or ()
            if g.gpu_type in runtimes and g.admits_ever(job, self._capacity.memory(job, g.gpu_type))
        ]
        best = self._projection.best(options, job.num_gpus, self.snapshot.now)
        if best is None or best[1] <= self.snapshot.now or best[1] + best[2] >= now_finish:
            return False
        key, start, duration = best
        self._projection.book(key, job.num_gpus, start, duration)
        self.starts[job.job_id] = start
        return True

    def waiting(self, job: JobSpec) -> Waiting | None:
        """Why `job` waits when it waits for a faster type (`queue-order`, with its predicted start)."""
        start = self.starts.get(job.job_id)
        if start is None:
            return None
        detail = f"waiting for a faster GPU type that frees at {start:.0f}: it ends sooner there"
        return Waiting(job.job_id, "queue-order", detail, start)


def worth_trying(
    capacity: Capacity, queue: QueueLines | FairQueue, done: set[str], shapes: tuple[JobSpec, ...] | None
) -> Iterator[JobSpec]:
    """The queued jobs not in `done` that are worth trying (`Capacity.worth_trying`) on what `capacity`
    has left when each is asked, in the queue's order, until nothing is free (or none of `shapes`, the
    queue's shapes, is worth trying).

    Whether a job is worth trying depends only on its shape (`shape_of`), and once it is not, it stays
    not for the rest of the round (what is free only shrinks). So with the queue's lines (`QueueLines`:
    the scheduler's, without teams) the queue is taken one shape at a time, merged in queue order, and a
    shape is dropped at its first job not worth trying: a round visits the jobs of the shapes that can
    start, not the whole queue. Otherwise (`FairQueue`: teams in their fair order, or a forward look's
    copy of the snapshot) every job is asked in turn."""
    if capacity.hopeless(shapes):
        return
    if isinstance(queue, FairQueue):
        for job in queue:
            if capacity.exhausted:
                return
            if job.job_id not in done and capacity.worth_trying(job):
                yield job
        return
    lines = queue.lines
    heads = [(line[0][0], key, 0) for key, line in lines.items()]
    heapq.heapify(heads)
    while heads and not capacity.exhausted:
        _, key, i = heapq.heappop(heads)
        line = lines[key]
        job = line[i][1]
        if job.job_id in done:
            pass
        elif capacity.worth_trying(job):
            yield job
        else:
            continue  # nor is any job of its shape behind it
        if i + 1 < len(line):
            heapq.heappush(heads, (line[i + 1][0], key, i + 1))
