"""The queue of a forward look (cpn.engine.forecast), and the part of it a policy is asked about at a
simulated end.

A look asks the policy again at every simulated end. Asked with the whole queue, each of those
decisions costs what the queue is long, and a look costs the queue times the ends. What the policy
declares of itself (`cpn.policies.base.Traits`) says which jobs its decision can depend on:

- a policy that `skips_blocked` passes over a job it cannot start now and changes nothing for the rest:
  it is asked only about the jobs that may start on what is free (`Capacity.may_start`: jobs alike, of
  one shape and whose memory per card fits the same cards, may start alike; what is free only shrinks
  within a decision). "Cannot start" is as `Capacity` counts it, GPU memory included: a policy that
  skips and ignores memory would have to say so;
- a policy that keeps `queue_order` decides each job on what the jobs ahead of it left: it is asked about
  the queue a part at a time, in its order, each part on what the parts before it left, and only while a
  later part could start (for a policy that does not skip, while every job asked so far started).

Both give the very decision the policy makes on the whole queue. A policy that declares neither, or a
snapshot with teams (their fair order is not the queue's), is asked about the whole queue.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import islice

from cpn.decisions import Snapshot, shape_of
from cpn.jobs import JobSpec
from cpn.policies.base import Traits
from cpn.policies.placement import Capacity, job_memory_gb

FIRST_PART = 8
"""Jobs in the first part a `queue_order` policy is asked about at one end; each further part is twice
the last (an end frees the cards of a few jobs, so one part is the common case)."""

Rank = tuple[int, int]
"""(-priority, place in the look's queue): the order of `by_priority` (higher priority, then arrival)."""


class LookQueue:
    """The jobs a look still has queued: in arrival order, and by shape in rank order."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.jobs: dict[str, JobSpec] = {}
        """job_id -> spec, in arrival order."""
        self.rank: dict[str, Rank] = {}
        self.alike: dict[str, tuple] = {}
        """job_id -> its shape and, for each GPU type and card memory of the nodes, whether its memory per
        card fits: jobs alike may start alike (`Capacity.may_start`)."""
        self.lines: dict[tuple, tuple[list[Rank], list[JobSpec]]] = {}
        """alike -> (ranks, jobs) of its queued jobs, in rank order."""
        self.by_shape: dict[tuple, dict[tuple, None]] = {}
        """shape -> the alikes of that shape with jobs queued."""
        cards = tuple(
            dict.fromkeys((state.node.gpu_type, state.node.gpu_memory_gb) for state in snapshot.nodes)
        )
        for i, job in enumerate(snapshot.pending):
            self.jobs[job.job_id] = job
            rank = (-job.priority, i)
            self.rank[job.job_id] = rank
            need = {gpu: job_memory_gb(job, snapshot.estimates, gpu) for gpu, _ in cards}
            alike = (shape_of(job), tuple(need[gpu] is None or need[gpu] <= gb for gpu, gb in cards))
            self.alike[job.job_id] = alike
            ranks, jobs = self.lines.setdefault(alike, ([], []))
            self.by_shape.setdefault(alike[0], {})[alike] = None
            ranks.append(rank)
            jobs.append(job)
        for ranks, jobs in self.lines.values():
            if any(a > b for a, b in zip(ranks, ranks[1:], strict=False)):
                ordered = sorted(zip(ranks, jobs, strict=True), key=lambda entry: entry[0])
                ranks[:] = [r for r, _ in ordered]
                jobs[:] = [j for _, j in ordered]

    def __len__(self) -> int:
        return len(self.jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.jobs

    def drop(self, job_id: str) -> None:
        """Take a job out of the queue (the look placed or rejected it)."""
        del self.jobs[job_id]
        key = self.alike.pop(job_id)
        ranks, jobs = self.lines[key]
        i = bisect_left(ranks, self.rank.pop(job_id))
        del ranks[i], jobs[i]
        if not ranks:
            del self.lines[key]
            del self.by_shape[key[0]][key]
            if not self.by_shape[key[0]]:
                del self.by_shape[key[0]]

    def whole(self) -> tuple[JobSpec, ...]:
        """Every queued job, in arrival order."""
        return tuple(self.jobs.values())

    def shapes(self) -> tuple[JobSpec, ...]:
        """One queued job of each shape (`Snapshot.shapes`)."""
        return tuple({alike[0]: jobs[0] for alike, (_, jobs) in self.lines.items()}.values())

    def may_start(self, capacity: Capacity) -> tuple[JobSpec, ...]:
        """Every queued job that may start on `capacity` (`Capacity.may_start`), in rank order."""
        return tuple(job for _, job in self._merged(capacity, None, None))

    def part(self, after: Rank | None, size: int, capacity: Capacity | None) -> tuple[JobSpec, ...]:
        """Up to `size` queued jobs ranked after `after` (None: from the head), in rank order; with
        `capacity`, only those that may start on it (`Capacity.may_start`)."""
        return tuple(job for _, job in islice(self._merged(capacity, after, size), size))

    def _merged(
        self, capacity: Capacity | None, after: Rank | None, size: int | None
    ) -> Iterator[tuple[Rank, JobSpec]]:
        """The queued jobs ranked after `after`, at most `size` of each alike, in rank order."""
        if capacity is not None and capacity.exhausted:
            return iter(())  # nothing free: no job may start (nor is any asked, to be rejected)
        lines = []
        for alikes in self.by_shape.values():
            if capacity is not None and not capacity.worth_trying(self.lines[next(iter(alikes))][1][0]):
                continue
            for alike in alikes:
                ranks, jobs = self.lines[alike]
                if capacity is not None and not capacity.may_start(jobs[0]):
                    continue
                start = 0 if after is None else bisect_right(ranks, after)
                stop = len(ranks) if size is None else start + size
                if start < len(ranks):
                    lines.append(zip(ranks[start:stop], jobs[start:stop], strict=True))
        if len(lines) == 1:
            return lines[0]
        return heapq.merge(*lines, key=_rank)


def _rank(entry: tuple[Rank, JobSpec]) -> Rank:
    return entry[0]


def asked_whole(traits: Traits, teams: bool) -> bool:
    """Whether the policy must be asked about the whole queue at each end (see the module doc)."""
    return teams or not (traits.queue_order or traits.skips_blocked)
