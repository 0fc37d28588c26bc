"""Why a queued job cannot start on the capacity a decision leaves: one reason code, shared by all policies.

A policy places what it places, then asks a `WaitingExplainer` over the same `Capacity` (what is left
free) about every job it leaves queued. The reasons are tried as a funnel over the cards still free,
the first that removes every card the job could use is the answer (codes: cpn.decisions.WaitCode):

1. `no-gpu-type`: no card is free at all, or none of a GPU type the job has an estimate for;
2. `pool-or-taint`: free cards are only on nodes whose pool or taints the job may not use; then the
   job's own pins on what is left (cpn.rules.constraint_problem): `no-gpu-type` when none is on a cluster
   serving its workload kind (its CRD installed) or of a GPU product it runs on, `pool-or-taint` when
   none is in a pool it asks for, `memory` when none has the card memory it asks for;
3. `pending-benchmark`: free cards it may use are of a GPU type whose benchmark is pending (no scores
   yet: Estimate.pending_benchmark); else `no-estimate`: free cards it may use are of GPU types it has
   no runtime estimate for, and it has none for any type;
4. `memory`: the free cards it may use have less GPU memory than it needs per card;
5. `gang`: not enough of those cards free together (on one node, or in one group for a wider gang);
6. `cpu-threshold`: the cards are there, but placing it would take the node over the CPU threshold;
7. otherwise it could start: `reserved` when the policy holds the cards for another job, else
   `queue-order` (the policy started others first and ran out of room, or does not skip ahead).
"""

from __future__ import annotations

import math

from cpn.admission import Room
from cpn.decisions import WaitCode, Waiting, shape_of
from cpn.jobs import JobSpec, workload_text
from cpn.policies.placement import Capacity, Group, allowed, memory_need
from cpn.rules import gpu_pinned, is_sharing, job_pins, serves


class WaitingExplainer:
    """Explains waits on one Capacity as the decision left it (ask once the decision is made: the
    capacity must not change after); answers are cached per job shape."""

    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self._cache: dict[tuple, tuple[WaitCode, str]] = {}
        self._free: list[Group] | None = None
        self._shared: list[Group] = []

    def explain(
        self,
        job: JobSpec,
        estimated: bool = False,
        held_for: str | None = None,
        predicted_start: float | None = None,
    ) -> Waiting:
        """The reason `job` waits. `estimated`: the policy uses only GPU types the job has a finite
        runtime estimate for (placement.usable_runtimes); `held_for`: the job the policy reserves the
        cards it could use for; `predicted_start`: the plan's start time for it, if the policy plans."""
        if self.capacity.exhausted:
            code, detail = "no-gpu-type", "no card is free"
        else:
            free = self._free_groups(job)
            row = self.capacity.snapshot.estimates.get(job.job_id, {})
            aware = self.capacity.memory_aware
            typed, mems = [], []
            for g in free:
                estimate = row.get(g.gpu_type)
                typed.append(not estimated or (estimate is not None and estimate.runtime_s < math.inf))
                mems.append(memory_need(job, estimate) if aware else None)
            has_any = not estimated or any(typed) or any(e.runtime_s < math.inf for e in row.values())
            pending = frozenset(gpu for gpu, e in row.items() if e.pending_benchmark)
            pins = job_pins(job)
            key = (shape_of(job), job.gpu_share, pins, tuple(typed), tuple(mems), has_any, pending)
            found = self._cache.get(key)
            if found is None:
                types = None if not estimated else {g.gpu_type for g, t in zip(free, typed, strict=True) if t}
                found = self._cache[key] = self._reason(job, types, free, has_any, pending)
            code, detail = found
            if code == "memory":
                need = max((m for m, t in zip(mems, typed, strict=True) if t and m is not None), default=0.0)
                detail = f"needs {need:g} GB per card; {detail}"
        if code == "queue-order" and held_for is not None:
            code, detail = "reserved", f"the cards it could use are held for {held_for}"
        return Waiting(job.job_id, code, detail, predicted_start)

    def _free_groups(self, job: JobSpec) -> list[Group]:
        """Groups with a free card (or, for a sharing job, a shared card with room)."""
        if self._free is None:
            groups = self.capacity.groups()
            self._free = [g for g in groups if g.free]
            self._shared = [g for g in groups if g.free or g.shared_room]
        return self._shared if is_sharing(job) else self._free

    def _reason(
        self, job: JobSpec, types: set[str] | None, free: list[Group], has_any: bool, pending: frozenset[str]
    ) -> tuple[WaitCode, str]:
        sharing = is_sharing(job)
        if not free:
            return "no-gpu-type", "no card is free"
        admitted = [g for g in free if _free_slots(g, job)]
        if not admitted:
            pools = ", ".join(sorted({g.usage for g in free}))
            return "pool-or-taint", f"free cards are only on nodes its pool or taints rule out ({pools})"
        pinned = {g: slots for g in admitted if (slots := allowed(job, tuple(_free_slots(g, job))))}
        if not pinned:
            return _pinned_out(job, [s for g in admitted for s in _free_slots(g, job)])
        typed = list(pinned) if types is None else [g for g in pinned if g.gpu_type in types]
        awaited = sorted({g.gpu_type for g in pinned} - {g.gpu_type for g in typed} & pending)
        if not typed:
            free_types = ", ".join(sorted({g.gpu_type for g in pinned}))
            if awaited:
                return "pending-benchmark", _awaits(awaited, f"free: {free_types}")
            if has_any:
                return "no-gpu-type", f"free: {free_types}; it has no runtime estimate for these types"
            return "no-estimate", f"no runtime estimate for the free GPU types ({free_types})"
        roomy = []
        for g in typed:
            mem = self.capacity.memory(job, g.gpu_type)
            slots = [s for s in pinned[g] if mem is None or mem <= _room_gb(s)]
            if slots:
                roomy.append((g, slots))
        if not roomy:
            code, detail = "memory", "the free cards it may use have less"
        elif self.capacity.fit(job, types).options:
            return "queue-order", "it could start, but the policy started other jobs first"
        else:
            n = 1 if sharing else job.num_gpus
            if not any(_cards_fit(g, slots, job, n) for g, slots in roomy):
                most = max(max((s.free for s in slots), default=0) for _, slots in roomy)
                code = "gang"
                detail = f"needs {n} cards together; at most {most} free together on a node it may use"
            else:
                code = "cpu-threshold"
                detail = f"the nodes with free cards would go over the CPU threshold with {job.cpu:g} cores"
        if awaited:  # what holds it up is the unscored type's benchmark, not what the scored types lack
            return "pending-benchmark", _awaits(
                awaited, f"on the scored GPU types it would wait on {code} ({detail})"
            )
        return code, detail


def _awaits(types: list[str], context: str) -> str:
    """The detail of `pending-benchmark`: the GPU types whose benchmark it waits for, after `context`."""
    return (
        f"{context}; GPU type {', '.join(types)} has no benchmark scores yet: "
        "no runtime estimate there until its benchmark has run"
    )


def _pinned_out(job: JobSpec, slots: list[Room]) -> tuple[WaitCode, str]:
    """Why the free `slots` (of pools and taints the job may use) do not do for a job whose own pins
    (its workload kind's CRD, GPU products, pools, least card memory, HAMi, DRA device classes) rule every
    one of them out."""
    if job.workload and not any(serves(s.node, job) for s in slots):
        lacking = ", ".join(sorted({s.node.cluster for s in slots}))
        return (
            "no-gpu-type",
            f"free cards are only on clusters that do not serve {workload_text(job.workload)} ({lacking}): "
            "its CRD is not installed there",
        )
    if job.gpu_products and not any(gpu_pinned(s.node, job) for s in slots):
        return "no-gpu-type", f"no free card of the GPU products it runs on ({', '.join(job.gpu_products)})"
    if job.node_pools and all(s.node.usage not in job.node_pools for s in slots):
        return (
            "pool-or-taint",
            f"free cards are only in pools it does not ask for ({', '.join(job.node_pools)})",
        )
    if job.gpu_memory_min_gb is not None and all(s.node.gpu_memory_gb < job.gpu_memory_min_gb for s in slots):
        return "memory", f"the free cards have less than the {job.gpu_memory_min_gb:g} GB it asks for"
    if job.hami and not any(s.node.hami for s in slots):
        return "no-gpu-type", "no free card on a node that runs HAMi, which its card slices need"
    if job.device_classes and not any(set(job.device_classes) <= set(s.node.device_classes) for s in slots):
        return (
            "no-gpu-type",
            f"no free card on a node offering its DRA device classes ({', '.join(job.device_classes)})",
        )
    return "no-gpu-type", "no free card on a node of the GPU products, pools and card memory it asks for"


def _free_slots(group: Group, job: JobSpec) -> list[Room]:
    """Slots of `group` jobs of the job's kind may use with a free card (or, sharing, a shared card)."""
    return [s for s in group.admits[job.kind] if s.free or (is_sharing(job) and s.shared)]


def _room_gb(slot: Room) -> float:
    """GB the job could get per card on `slot`: a whole card's, or the most a shared card has left."""
    if slot.free:
        return slot.node.gpu_memory_gb
    return max((gb for _, gb in slot.shared), default=0.0)


def _cards_fit(group: Group, slots: list[Room], job: JobSpec, n: int) -> bool:
    """Whether the free cards of `slots` hold the job's gang (one node when a node is wide enough), CPU
    aside."""
    if is_sharing(job):
        return any(s.free or s.joins(job) is not None for s in slots)
    if job.spread:
        return sum(s.free >= max(job.pod_gpus) for s in slots) >= len(job.pod_gpus)
    if n <= group.sizes[job.kind][0]:
        return any(s.free >= n for s in slots)
    return sum(s.free for s in slots) >= n
