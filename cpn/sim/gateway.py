"""Simulated clusters behind the ClusterGateway port: a deterministic discrete-event executor.

Submitting a job holds specific cards from now until the job ends: all its cards at once (a gang), on
one node or, for a job wider than a node, on several nodes of one cluster. A job with a `gpu_share`
joins a card other sharing jobs hold while the shares sum to at most 1, or opens the lowest free card.
What the cluster takes is the admission rule's answer (`cpn.admission.admit`: nodes, gang, pools,
taints and pins, free cards, shared cards, the node's CPU), which also says which shared card a job
joins; its memory is checked when it starts training, against the card's memory or, on a shared card,
what its partners leave (OOM).

A service (`JobSpec.is_service`) serves for its trace lifetime (`JobSpec.duration_s`) or, without one,
until `delete`; it trains nothing, so card partners neither slow it nor are slowed by it. `delete` ends
any job now and frees its cards (a service `succeeded`, a training job `failed`, reason `deleted`).

Checkpoints (a preemption's work kept, issue #21): a training job on whole cards with a
`checkpoint_interval_s` checkpoints every that many seconds of training. Deleting it keeps the steps of its
last checkpoint (`checkpointed`; none for a job that never checkpoints); its next run starts from them
after a restart cost (the truth's load time), so only the work since the checkpoint, and the restart, are
lost (`preempted` records both). The grace period is not simulated: the run stops at once and saves
nothing on the way out.

The objects submitted with a workload (its manifest's documents after the first: ConfigMaps, Services, ...)
are kept per cluster while a running job holds them: a second job bringing one of the same name shares it
when its content is the same and is refused, naming it, when not (cpn.companions); the last job holding it
ending removes it. (A Kubernetes cluster keeps them until the job that created them is deleted.)

`logs` is a synthetic log for people (`cpn job logs`): the run's start, its step progress so far, its end;
the runs that ended last keep theirs (ENDED_LOGS_KEPT), as a real cluster keeps a finished pod a while.

A benchmark job (cpn.benchmarking) holds its card for its configured time (`JobSpec.duration_s`) and ends
printing one `CPN_BENCH` line per reference workload: the ground truth's one-GPU rate of the workload's
proxy configuration (`Workload.measured_as` in the benchmarks file) on the node's GPU type, in the file's
unit and method; on a GPU type the truth has no rate of, it fails saying so.

A job's end is an event on a heap ordered by (time, sequence number), so equal times resolve in
submission order and the same inputs always give the same event sequence. A job sharing a card trains
at its rate alone times the co-location factors of its partners (cpn.sim.colocation); when a partner
starts or ends, the job's progress so far is kept and its end is moved by pushing a new event, the old
one left on the heap and skipped when popped. Runs that fail do not slow their partners. Nothing reads
the wall clock and nothing is random; time moves only through `advance`.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import yaml

from config.benchmarks import Workload, load_benchmarks
from cpn.adapters.gateway import DELETED_REASON, OOM_REASON, JobEvent, NoLog, SubmitRejected
from cpn.admission import Refused, admit
from cpn.benchmarking import is_benchmark, node_driver
from cpn.booking import Booking, node_state
from cpn.clock import SimClock
from cpn.companions import conflict, content_difference
from cpn.decisions import Placement
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.rules import is_sharing
from cpn.sim.truth import GroundTruth, RunOutcome

__all__ = ["Execution", "GroundTruth", "SimulatedGateway"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: a job's manifest is read at each submission."""

CompanionKey = tuple[str, str, str, str]
"""(cluster, namespace, kind, name) of an object submitted with a workload (a ConfigMap, a Service)."""

ENDED_LOGS_KEPT = 256
"""`logs` answers for the runs that ended last, this many; a long-running service keeps no more."""
LOG_PROGRESS_LINES = 100
"""A synthetic log reports a run's progress at most this many times (every 1% of its steps)."""


@dataclass(frozen=True)
class Execution:
    """One finished run of a job on cards of one node (a gang over several nodes has one per node)."""

    job_id: str
    cluster: str
    node: str
    gpus: tuple[int, ...]
    """Indices of the cards held, 0-based on the node."""
    start: float
    end: float
    outcome: Literal["succeeded", "failed"]
    reason: str = ""
    share: float = 1.0
    """Fraction of each card held: the job's gpu_share on a shared card, else 1."""


@dataclass(frozen=True)
class Stopped:
    """A training run `delete` stopped: what it kept at its last checkpoint and what it lost."""

    job_id: str
    time: float
    cards: int
    kept_gpu_s: float
    """GPU-seconds of training up to its last checkpoint: work done that its next run keeps."""
    lost_gpu_s: float
    """GPU-seconds since then (and the restart cost, for a run that resumed): work lost."""


@dataclass
class _NodeUse:
    free: list[int]
    """Free card indices, ascending."""
    held: dict[str, Booking] = field(default_factory=dict)
    """job_id -> what it holds here (cpn.booking), in start order."""

    def on_card(self, card: int) -> list[str]:
        """The jobs sharing card `card`, in start order."""
        return [job_id for job_id, booking in self.held.items() if booking.card == card]


@dataclass
class _Run:
    job: JobSpec
    held: tuple[tuple[Node, tuple[int, ...]], ...]
    """Each node of the gang and the cards held on it."""
    card: int | None
    """The shared card a sharing job is on (of the one node it holds); None = whole cards."""
    start: float
    outcome: RunOutcome
    rate: float
    """Steps/s now (0 for a run that fails)."""
    steps_left: float
    since: float
    """When steps_left was last brought up to date."""
    end: float
    trains_from: float = 0.0
    """When it began training: its start, or after the restart cost when it resumed from a checkpoint."""
    seq: int = -1
    """Sequence number of the heap event that is current; older ones are skipped."""
    companions: tuple[CompanionKey, ...] = ()
    """The objects submitted with it (its manifest's documents after the workload) it holds on its cluster."""

    @property
    def trains(self) -> bool:
        """Whether it trains (a run that fails, or a service, does not)."""
        return self.outcome.steps_per_sec > 0

    @property
    def share(self) -> float:
        """Fraction of each card held."""
        return 1.0 if self.card is None else _share(self.job)


def _share(job: JobSpec) -> float:
    return job.gpu_share if job.gpu_share is not None else 1.0


class SimulatedGateway:
    """Simulated clusters: `inventory`, `submit`, `poll_events` of the port, plus time controls.

    Every run ends in exactly one `succeeded` or `failed` event; finished runs are kept in
    `executions` in the order they ended (one per node of a gang).
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        truth: GroundTruth,
        clock: SimClock,
        keep_executions: bool = True,
        bench_workloads: Mapping[str, Workload] | None = None,
    ) -> None:
        self.truth = truth
        self._bench_workloads = bench_workloads
        """Workloads a benchmark job measures; None = the shipped benchmarks file's, read when first asked."""
        self.keep_executions = keep_executions
        """Keep every finished run in `executions` (for reports); a long-running service turns it off."""
        self.clock = clock
        self._nodes: dict[tuple[str, str], Node] = {}
        for node in nodes:
            if (node.cluster, node.name) in self._nodes:
                raise ValueError(f"node {node.key} is listed twice")
            self._nodes[(node.cluster, node.name)] = node
        self._use = {key: _NodeUse(free=list(range(n.gpu_count))) for key, n in self._nodes.items()}
        self._states = {key: self._state(key) for key in self._nodes}
        self._runs: dict[str, _Run] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0
        self._events: list[JobEvent] = []
        self.executions: list[Execution] = []
        self.checkpointed: dict[str, float] = {}
        """job_id -> steps at the last checkpoint of a run `delete` stopped: its next run starts there."""
        self.preempted: list[Stopped] = []
        """Every training run on whole cards `delete` stopped (preempted or cancelled), in order."""
        self._objects: dict[CompanionKey, tuple[dict, set[str]]] = {}
        """Objects submitted with workloads, with the running jobs that hold them (module doc)."""
        self._ended: OrderedDict[str, tuple[_Run, float, str]] = OrderedDict()
        """job_id -> its last run, when it ended and the end line of its log (ENDED_LOGS_KEPT of them)."""

    def add_nodes(self, nodes: Sequence[Node]) -> None:
        """Let `nodes` join the simulated clusters (a cluster added while cpn runs); a node here already with
        nothing running on it is replaced (a cluster removed and added again)."""
        for node in nodes:
            key = (node.cluster, node.name)
            if key in self._use and self._use[key].held:
                raise ValueError(f"node {node.key} is here already and runs jobs")
            self._nodes[key] = node
            self._use[key] = _NodeUse(free=list(range(node.gpu_count)))
            self._states[key] = self._state(key)

    def _companions(self, job: JobSpec, cluster: str) -> list[tuple[CompanionKey, dict]]:
        """The objects submitted with `job` on `cluster` (its manifest's documents after the workload), each
        checked against one of the same name there: the same content is shared, other content refuses the
        job (SubmitRejected naming the object, cpn.companions), as on a Kubernetes cluster."""
        if not job.manifest:
            return []
        namespace = job.job_id.rpartition("/")[0] or "default"
        docs = [d for d in yaml.load_all(job.manifest, Loader=_LOADER) if isinstance(d, dict)][1:]
        found = []
        for doc in docs:
            obj = {**doc, "metadata": {**(doc.get("metadata") or {}), "namespace": namespace}}
            key = (cluster, namespace, str(obj.get("kind")), str(obj["metadata"].get("name")))
            there = self._objects.get(key)
            if there is not None and job.job_id not in there[1]:
                differs = content_difference(obj, there[0])
                if differs is not None:
                    origin = f"it came with job {min(there[1])}"
                    raise SubmitRejected(conflict(obj, cluster, differs, origin))
            found.append((key, obj))
        return found

    def _state(self, key: tuple[str, str]) -> NodeState:
        """The node's state from what its jobs hold (cpn.booking.node_state)."""
        return node_state(self._nodes[key], self._use[key].held.values())

    def inventory(self) -> tuple[NodeState, ...]:
        """Every node, in the order given, with its free and shared cards, CPU in use and running jobs."""
        return tuple(self._states.values())

    def submit(self, job: JobSpec, placement: Placement) -> None:
        """Start `job` as placed; emit `running` now.

        Raises SubmitRejected, changing nothing, when the placement names another job, the job is
        already running, or the admission rule refuses it (`cpn.admission.admit`, its reason).
        """
        if placement.job_id != job.job_id:
            raise SubmitRejected(f"placement is for {placement.job_id}, not {job.job_id}")
        if job.job_id in self._runs:
            raise SubmitRejected(f"job {job.job_id} is already running")
        admitted = admit(job, placement, self._states)
        if isinstance(admitted, Refused):
            raise SubmitRejected(admitted.reason)
        companions = self._companions(job, placement.cluster)
        plan = admitted.nodes
        node = plan[0][0]
        card = admitted.card
        if card is None and is_sharing(job):  # opens a free card: the lowest
            card = self._use[(node.cluster, node.name)].free[0]
        now = self.clock.now()
        free_gb = node.gpu_memory_gb
        if card is not None:
            shared = self._states[(node.cluster, node.name)].shared
            free_gb = next((c.free_memory_gb for c in shared if c.index == card), free_gb)
        if is_benchmark(job):
            outcome = self._bench_outcome(job, node)
        else:
            outcome = self.truth.outcome(
                job, node.gpu_type, job.num_gpus, free_gb, consolidated=len(plan) == 1
            )
        # An OOM-killed job never got its memory; any other on a shared card holds what it uses until it ends.
        held_gb = 0.0 if card is None or outcome.reason == OOM_REASON else self.truth.memory_gb(job, 1) or 0.0
        run = _Run(
            job=job,
            held=self._hold(job, plan, card, held_gb),
            card=card,
            start=now,
            outcome=outcome,
            rate=outcome.steps_per_sec,
            steps_left=outcome.steps,
            since=now,
            end=now + outcome.duration_s,
            trains_from=now,
        )
        done = self.checkpointed.get(job.job_id)
        if done is not None and card is None and run.trains:  # resumes from its checkpoint, after a restart
            run.trains_from = run.since = now + self.truth.load_s
            run.steps_left = max(0.0, run.steps_left - done)
            run.end = run.trains_from + run.steps_left / run.rate
        self._runs[job.job_id] = run
        for key, obj in companions:
            self._objects.setdefault(key, (obj, set()))[1].add(job.job_id)
        run.companions = tuple(key for key, _ in companions)
        self._events.append(JobEvent(job.job_id, "running", now))
        if card is None:
            self._push(run)
        elif run.trains:
            self._reschedule(node, card, now)
        else:
            self._push(run)

    def _bench_scores(self, node: Node) -> list[dict] | str:
        """A benchmark's result lines on `node` (as JSON objects), or why it cannot measure them."""
        if self._bench_workloads is None:
            self._bench_workloads = load_benchmarks().workloads
        results = []
        for name, workload in self._bench_workloads.items():
            proxy = workload.measured_as
            if proxy is None:
                return f"workload {name} names no measured_as configuration to run"
            probe = JobSpec(job_id="bench", model=proxy.model, batch_size=proxy.batch_size, total_steps=1)
            sps = self.truth.steps_per_sec(probe, node.gpu_type, 1)
            if sps is None or sps <= 0:
                return (
                    f"no measured throughput for {proxy.model} batch {proxy.batch_size} on 1x {node.gpu_type}"
                )
            line = {"workload": name, "score": round(sps * proxy.per_step, 4), "unit": workload.unit}
            line |= {"method": workload.method, "gpu_product": node.gpu_product, "node": node.name}
            if (driver := node_driver(node)) is not None:
                line["driver"] = driver
            results.append(line)
        return results

    def _bench_outcome(self, job: JobSpec, node: Node) -> RunOutcome:
        """A benchmark job runs its configured time, or fails at start-up where it cannot measure."""
        scores = self._bench_scores(node)
        if isinstance(scores, str):
            return RunOutcome(self.truth.load_s, False, scores)
        return RunOutcome(job.duration_s or 0.0, True)

    def _hold(
        self, job: JobSpec, plan: tuple[tuple[Node, int, float], ...], card: int | None, held_gb: float
    ) -> tuple[tuple[Node, tuple[int, ...]], ...]:
        """Book the gang on every node as admitted (node, cards, CPU): which cards it holds (the lowest
        free ones; a sharing job its card, with `held_gb` of its memory) and the booking (cpn.booking)."""
        held = []
        for node, count, cpu in plan:
            key = (node.cluster, node.name)
            use = self._use[key]
            if card is None:
                gpus = tuple(use.free[:count])
                del use.free[:count]
                booking = Booking(job.job_id, count, cpu)
            else:
                gpus = (card,)
                if card in use.free:
                    use.free.remove(card)
                booking = Booking(job.job_id, count, cpu, card, _share(job), held_gb)
            use.held[job.job_id] = booking
            self._states[key] = self._state(key)
            held.append((node, gpus))
        return tuple(held)

    def _push(self, run: _Run) -> None:
        run.seq = self._seq
        self._seq += 1
        if run.end < math.inf:  # a service with no lifetime has no end to wait for
            heapq.heappush(self._heap, (run.end, run.seq, run.job.job_id))

    def _reschedule(self, node: Node, card: int, now: float) -> None:
        """Bring the training jobs on a shared card up to `now` and move their ends to their new rates."""
        training = [self._runs[j] for j in self._use[(node.cluster, node.name)].on_card(card)]
        training = [run for run in training if run.trains]
        for run in training:
            run.steps_left = max(0.0, run.steps_left - run.rate * (now - run.since))
            run.since = now
            partners = [other.job for other in training if other is not run]
            run.rate = run.outcome.steps_per_sec * self.truth.shared_factor(run.job, node.gpu_type, partners)
            run.end = now + run.steps_left / run.rate
            self._push(run)

    def poll_events(self) -> list[JobEvent]:
        """Events since the last call, oldest first."""
        events, self._events = self._events, []
        return events

    def delete(self, job_id: str, grace_s: float | None = None) -> None:
        """End the job now and free its cards (reason DELETED_REASON: a service `succeeded`, a training
        job `failed`); a job not running here is left alone. A training job on whole cards keeps the steps
        of its last checkpoint for its next run (module doc); `grace_s` is not simulated."""
        run = self._runs.pop(job_id, None)
        if run is None:
            return
        now = self.clock.now()
        if run.card is None and run.trains:
            self._checkpoint(run, now)
        self._finish(run, now, deleted=True)

    def _checkpoint(self, run: _Run, now: float) -> None:
        """Keep the steps of the stopped run's last checkpoint, and record what it kept and lost."""
        interval = run.job.checkpoint_interval_s
        trained = max(0.0, now - run.trains_from)
        kept_s = math.floor(trained / interval) * interval if interval else 0.0
        total = run.outcome.steps
        self.checkpointed[run.job.job_id] = min(total, total - run.steps_left + kept_s * run.rate)
        cards = sum(len(gpus) for _, gpus in run.held)
        lost_s = now - run.start - kept_s
        self.preempted.append(Stopped(run.job.job_id, now, cards, kept_s * cards, lost_s * cards))

    def logs(self, job_id: str, tail_lines: int) -> str:
        """The last `tail_lines` lines of a synthetic log of the job's run: where it started, its steps done
        by now (or by its end) and how it ended; NoLog for a job neither running nor among the runs that
        ended last. Simulated times, in seconds."""
        run = self._runs.get(job_id)
        if run is not None:
            lines = _log_lines(run, self.clock.now(), None)
        elif (ended := self._ended.get(job_id)) is not None:
            lines = _log_lines(*ended)
        else:
            raise NoLog(f"the simulated clusters have no run of {job_id}")
        return "\n".join(lines[-tail_lines:] if tail_lines > 0 else [])

    def held_jobs(self) -> frozenset[str]:
        """Jobs running now, and those whose end is not yet polled."""
        return frozenset(self._runs) | {e.job_id for e in self._events}

    def _drop_stale(self) -> None:
        while self._heap:
            _, seq, job_id = self._heap[0]
            run = self._runs.get(job_id)
            if run is not None and run.seq == seq:
                return
            heapq.heappop(self._heap)

    def next_event_time(self) -> float | None:
        """When the next job ends, or None when nothing is running."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def advance(self, until: float) -> None:
        """End every job due at or before `until`, in (time, submission) order; then set the clock to it."""
        while (t := self.next_event_time()) is not None and t <= until:
            end, _, job_id = heapq.heappop(self._heap)
            self.clock.advance_to(end)
            self._finish(self._runs.pop(job_id), end)
        self.clock.advance_to(until)

    def withdraw(self, job_id: str) -> None:
        """Take back the submission of `job_id` just made (no time has passed since), leaving no trace: no
        event, no execution; for a submission that could not be journaled (cpn.sim.journal)."""
        run = self._runs.pop(job_id)
        self._events = [e for e in self._events if not (e.job_id == job_id and e.kind == "running")]
        self._release(run)
        node = run.held[0][0]
        if run.card is not None and self._use[(node.cluster, node.name)].on_card(run.card):
            self._reschedule(node, run.card, self.clock.now())

    def _release(self, run: _Run) -> None:
        """Free the cards `run` holds (a shared card once its last job is gone)."""
        job_id = run.job.job_id
        for node, gpus in run.held:
            key = (node.cluster, node.name)
            use = self._use[key]
            del use.held[job_id]
            if run.card is None:
                use.free = sorted(use.free + list(gpus))
            elif not use.on_card(run.card):
                use.free = sorted([*use.free, run.card])
            self._states[key] = self._state(key)

    def _finish(self, run: _Run, end: float, deleted: bool = False) -> None:
        kind = "succeeded" if run.outcome.succeeded else "failed"
        reason = run.outcome.reason
        if deleted:
            kind, reason = ("succeeded" if run.job.is_service else "failed"), DELETED_REASON
        job_id = run.job.job_id
        self._release(run)
        for key in run.companions:
            owners = self._objects[key][1]
            owners.discard(job_id)
            if not owners:
                del self._objects[key]
        if self.keep_executions:
            self.executions.extend(
                Execution(job_id, node.cluster, node.name, gpus, run.start, end, kind, reason, run.share)
                for node, gpus in run.held
            )
        self._events.append(JobEvent(job_id, kind, end, reason, self._measured_gb(run)))
        last = f"[{end:.1f}s] {kind}" + (f": {reason}" if reason else "")
        if is_benchmark(run.job) and kind == "succeeded" and not deleted:
            scores = self._bench_scores(run.held[0][0])
            last = "\n".join([*(f"CPN_BENCH {json.dumps(s)}" for s in scores), last])
        self._ended[job_id] = (run, end, last)
        self._ended.move_to_end(job_id)
        while len(self._ended) > ENDED_LOGS_KEPT:
            self._ended.popitem(last=False)
        node = run.held[0][0]
        if run.card is not None and self._use[(node.cluster, node.name)].on_card(run.card):
            self._reschedule(node, run.card, end)

    def _measured_gb(self, run: _Run) -> float | None:
        """Peak GPU memory per card the run used, as DCGM would report it; None if it never got it (OOM)."""
        if run.outcome.reason == OOM_REASON:
            return None
        return self.truth.memory_gb(run.job, sum(len(gpus) for _, gpus in run.held))

    def card_use(self) -> dict[tuple[str, str], dict[int, tuple[float, float]]]:
        """(cluster, node) -> card index -> (utilisation 0..1, GB of its memory in use), busy cards only.

        What a DCGM exporter would read now (cpn.sim.exporter): a training run or a service keeps its cards
        busy (by its share on a shared card); every run but an OOM-killed one holds the memory it uses.
        """
        use: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
        for run in self._runs.values():
            gb = self._measured_gb(run) or 0.0
            util = run.share if run.trains or run.job.is_service else 0.0
            for node, gpus in run.held:
                cards = use.setdefault((node.cluster, node.name), {})
                for i in gpus:
                    old_util, old_gb = cards.get(i, (0.0, 0.0))
                    cards[i] = (min(1.0, old_util + util), old_gb + gb)
        return use

    def running_jobs(self) -> tuple[str, ...]:
        """Ids of the jobs running now, in start order."""
        return tuple(self._runs)


def _log_lines(run: _Run, now: float, last: str | None) -> list[str]:
    """A run's synthetic log up to `now`: its start, a line per 1% of its steps done by then, and `last`
    (its end) if it ended."""
    job = run.job
    where = ", ".join(f"{n.cluster}/{n.name} cards {','.join(map(str, gpus))}" for n, gpus in run.held)
    lines = [f"[{run.start:.1f}s] started {job.job_id} ({job.model}) on {where} (simulated cluster)"]
    total = round(run.outcome.steps)
    if job.is_service:
        lines.append(f"[{run.start:.1f}s] serving {job.model}")
    elif run.trains and total:
        done = total - max(0.0, run.steps_left - run.rate * (now - run.since))
        every = max(1, math.ceil(total / LOG_PROGRESS_LINES))
        lines += [f"step {step}/{total}" for step in range(every, int(done + 1e-6) + 1, every)]
    if last is not None:
        lines += last.splitlines()
    return lines
