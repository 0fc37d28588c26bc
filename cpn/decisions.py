"""What a scheduling round decides, shared by policies, the scheduler and the adapters.

A policy sees one frozen `Snapshot` (pending jobs, node states, estimates, now) and returns one
`Decision`: `Placement`s to start now, `Rejection`s of jobs no placement can ever satisfy, and a
`Waiting` reason (and, where the plan gives one, a predicted start) for every job it leaves queued.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from config.policies import DEFAULT_CPU_THRESHOLD
from cpn.inventory import NodeState
from cpn.jobs import JobSpec


@dataclass(frozen=True)
class Estimate:
    """What the scheduler believes about one job on one GPU type."""

    runtime_s: float
    """Predicted run time on the GPU type, transfer excluded."""
    gpu_mem_gb: float | None = None
    """Predicted GPU memory per card; None = unknown."""
    uncertainty: float = 0.0
    """Relative spread of the runtime estimate (0.1 = +-10%)."""
    explore: bool = False
    """The estimate is a guess to learn from (a model the predictor has never seen, or whose data it cannot
    turn into steps): give its first run clean, exclusive resources."""
    pending_benchmark: bool = False
    """The GPU type has no benchmark scores yet, so there is no runtime (`runtime_s` is inf) until its
    benchmark runs (cpn.benchmarking): the job runs elsewhere or waits (`pending-benchmark`)."""


@dataclass(frozen=True, eq=False)
class NoEstimates(Mapping[str, "Estimate"]):
    """A job's estimates when its estimate source can estimate it on no GPU type: empty, as any job's
    with no estimate, but carrying the source's `reason` (what is wrong with the job and how to fix it),
    so the scheduler can tell its owner why the job is rejected instead of only logging it. Compares
    equal to any empty mapping."""

    reason: str

    def __getitem__(self, gpu_type: str) -> Estimate:
        raise KeyError(gpu_type)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def _frozen_empty() -> Mapping:
    return MappingProxyType({})


RESTART_S = 60.0
"""Seconds a run resumed from a checkpoint is taken to spend restoring it before it trains again (pulling
the image, loading data and the checkpoint): what a preempted or moved job's next run costs beyond its
work left. The simulated clusters charge their load time (cpn.sim.truth.LOAD_S, also 60 s)."""


@dataclass(frozen=True)
class RunningJob:
    """A running job as a plan over time sees it: when it should end and the whole cards it holds."""

    end: float
    """Predicted end (seconds, the snapshot's clock); inf for a service (it runs until deleted) and when
    there is no estimate to predict it by: its cards do not come back in any plan."""
    cards: tuple[tuple[str, int], ...] = ()
    """(`cluster/node`, cards) of its gang; empty for a job on a shared card."""
    started: float | None = None
    """When its current run started (the snapshot's clock); None = not known (work lost unknown)."""
    priority: int = 0
    """Its priority (JobSpec.priority): preemption takes the lowest first."""
    checkpoint_interval_s: float | None = None
    """How often it checkpoints (its own, or its team's default); None = never: all its work is lost."""
    preemptible: bool = True
    """False for a job marked not preemptible (JobSpec.preemptible): no preemption ever stops it."""
    gpu_type: str | None = None
    """The GPU type it runs on; None = not known (not cpn's job, or a node gone from the inventory)."""
    left: float = 1.0
    """Fraction of the job's work its current run had left when it began training: 1 for a first run,
    less for a run resumed from a checkpoint (what its earlier runs kept)."""
    restart_s: float = 0.0
    """Seconds its current run spent restoring a checkpoint before it trained (0 for a first run)."""
    estimates: Mapping[str, Estimate] = field(default_factory=_frozen_empty)
    """GPU type -> estimate of the whole job there (not what is left); filled only for a policy that
    moves running jobs (`rebalances`), else empty."""
    spec: JobSpec | None = None
    """The job as submitted, for a policy that moves running jobs; else None."""
    transfer_s: Mapping[str, float] = field(default_factory=_frozen_empty)
    """cluster -> seconds to move its image and data there from where it runs (for a policy that moves
    running jobs; empty: no transfer counted)."""

    def trained_s(self, now: float) -> float:
        """Seconds its current run has trained by `now`, its restart excluded (0 with no known start)."""
        return 0.0 if self.started is None else max(0.0, now - self.started - self.restart_s)

    def left_at_checkpoint(self, now: float, gpu_type: str) -> float | None:
        """Fraction of the job's work left at its last checkpoint by `now`, running on `gpu_type`: what a
        run resumed elsewhere would still have to do; None when that is not known (no start, no
        checkpoints, or no estimate for `gpu_type`)."""
        estimate = self.estimates.get(gpu_type)
        if self.started is None or not self.checkpoint_interval_s or estimate is None:
            return None
        if not 0 < estimate.runtime_s < math.inf:
            return None
        kept = math.floor(self.trained_s(now) / self.checkpoint_interval_s) * self.checkpoint_interval_s
        return max(0.0, self.left - kept / estimate.runtime_s)


@dataclass(frozen=True)
class Snapshot:
    """Everything a policy may look at for one decision."""

    now: float
    """Seconds; simulated or wall-clock."""
    pending: tuple[JobSpec, ...]
    """Queued jobs in arrival order."""
    nodes: tuple[NodeState, ...]
    """Every node of every cluster with what is free on it."""
    estimates: Mapping[str, Mapping[str, Estimate]] = field(default_factory=_frozen_empty)
    """job_id -> canonical GPU type -> estimate. May be empty (FIFO needs none)."""
    transfer_s: Mapping[str, Mapping[str, float]] = field(default_factory=_frozen_empty)
    """job_id -> cluster -> seconds to move the job's image and data there."""
    cpu_threshold: float = DEFAULT_CPU_THRESHOLD
    """Nodes whose CPU load is above this take no more jobs."""
    restart_s: float = RESTART_S
    """Seconds a run resumed from a checkpoint spends restoring it before it trains (RESTART_S)."""
    explain: bool = True
    """Whether the policy should say why each job it leaves queued waits (Decision.waiting). Explaining
    costs time in proportion to the queue; a replay asks only now and then (the scheduler throttles it).
    Without it a policy may still return its plan's predicted starts (code `queue-order`)."""
    shapes: tuple[JobSpec, ...] | None = None
    """One pending job of each shape (`shape_of`); None = not given. Lets a policy stop scanning
    a long queue once no shape that waits could start on what is left."""
    running: Mapping[str, RunningJob] = field(default_factory=_frozen_empty)
    """job_id -> predicted end and whole cards of each job running on the nodes: the only place a policy
    learns when cards free (policies keep nothing between rounds). The scheduler works them out from the
    store and the estimates, so a plan over time knows when cards free even for jobs started before a
    restart or by another round's process. A running job missing here holds its cards with no known end."""
    fresh: tuple[JobSpec, ...] | None = None
    """The pending jobs a policy has not seen yet: those that entered the queue, or whose needs changed,
    since the previous snapshot (the scheduler's); None = every pending job (a snapshot on its own, or
    after the nodes changed). A policy rejects those no placement could ever satisfy at once
    (cpn.policies.placement.Capacity.vet), and need not ask about the others again."""
    lines: QueueLines | None = None
    """The pending jobs grouped by shape, kept by the scheduler's queue view as jobs come and go; None =
    not given (a policy groups `pending` itself: cpn.policies.placement.queue_lines)."""
    teams: Teams | None = None
    """Teams, their quotas and weights (cpn.policies.teams orders and limits by them, counting each team's
    use from `running`); None = no teams: one queue, as before teams existed."""


@dataclass(frozen=True)
class Team:
    """One team as a policy sees it (config.teams): weight, quota and borrowing limit."""

    name: str
    weight: float = 1.0
    quota: tuple[tuple[str, int], ...] = ()
    """(GPU product label, canonical GPU type or pool, cards) it is entitled to; empty = by weight alone."""
    borrowing_limit: int | None = None
    """Most cards beyond its quota; 0 = a hard limit; None = no limit."""
    checkpoint_interval_s: float | None = None
    """How often its jobs checkpoint when they do not say (JobSpec.checkpoint_interval_s); None = never."""


@dataclass(frozen=True)
class Teams:
    """Who shares the clusters: each namespace's team; a namespace in none is the `default` team's."""

    teams: tuple[Team, ...]
    """Every team, the default one included."""
    namespaces: Mapping[str, str] = field(default_factory=_frozen_empty)
    """namespace -> team name."""
    default: str = "default"
    """The team of namespaces no team names (config.teams.DEFAULT_TEAM)."""

    def team_of(self, job_id: str) -> str:
        """The team of a job by its id's namespace (`ns/name`; an id with no namespace is the default's)."""
        ns, slash, _ = job_id.partition("/")
        return self.namespaces.get(ns, self.default) if slash else self.default

    def checkpoint_interval(self, job: JobSpec) -> float | None:
        """How often `job` checkpoints: its own interval, else its team's default; None = never."""
        if job.checkpoint_interval_s is not None:
            return job.checkpoint_interval_s
        name = self.team_of(job.job_id)
        return next((t.checkpoint_interval_s for t in self.teams if t.name == name), None)


@dataclass(frozen=True, eq=False)
class QueueLines:
    """Pending jobs grouped by shape (`shape_of`), each group in queue order (higher `priority` first,
    then arrival): a policy that skips jobs which cannot start now visits only the shapes that can."""

    pending: tuple[JobSpec, ...]
    """The very tuple of pending jobs these lines group: a snapshot copied with other pending jobs
    (`dataclasses.replace`) does not hold this tuple, so its policy groups its own."""
    lines: Mapping[tuple, tuple[tuple[tuple[int, int], JobSpec], ...]]
    """shape -> ((rank, job), ...) in rank order; a rank, (-priority, place in arrival order), orders
    jobs across shapes."""


def shape_of(job: JobSpec) -> tuple:
    """What decides whether a job can start on given free capacity, bar memory and estimates."""
    return (job.kind, job.num_gpus, job.gpu_share is not None, job.cpu, job.pod_gpus if job.spread else ())


@dataclass(frozen=True)
class Placement:
    """Run `job_id` as one gang: `num_gpus` cards of `node`, plus the cards of any `extra_nodes`.

    A job spans nodes only when it is wider than any node it may use; all its nodes are in one
    cluster and have one GPU type. A one-card job with a `gpu_share` shares a card of `node` (which
    one, the cluster decides: cpn.rules.pick_shared_card).
    """

    job_id: str
    cluster: str
    node: str
    num_gpus: int
    """Cards on `node`."""
    extra_nodes: tuple[tuple[str, int], ...] = ()
    """More nodes of the same cluster, with the cards the gang takes on each."""

    @property
    def nodes(self) -> tuple[tuple[str, int], ...]:
        """Every (node, cards) of the gang, `node` first."""
        return ((self.node, self.num_gpus), *self.extra_nodes)

    @property
    def total_gpus(self) -> int:
        """Cards the gang holds over all its nodes."""
        return self.num_gpus + sum(n for _, n in self.extra_nodes)


@dataclass(frozen=True)
class Rejection:
    """A job no placement can ever satisfy, and why (it goes to schedule-failed)."""

    job_id: str
    reason: str


WaitCode = Literal[
    "no-gpu-type",
    "memory",
    "pool-or-taint",
    "cpu-threshold",
    "gang",
    "reserved",
    "no-estimate",
    "migrating",
    "queue-order",
    "refused",
    "over-quota",
    "reclaiming",
    "pending-benchmark",
]
"""Why a job waits, one code per job and round:

- `no-gpu-type`: no card of a GPU type the job may use is free;
- `memory`: cards are free, but none has the GPU memory the job needs;
- `pool-or-taint`: the only free cards are on nodes of a pool, or with taints, the job may not use;
- `cpu-threshold`: free cards are on nodes whose CPU load is above the threshold;
- `gang`: free cards exist, but not enough together on one node (or one cluster for a multi-node gang);
- `reserved`: it could start, but the cards are held for an older job's reservation;
- `no-estimate`: no runtime estimate on any free GPU type, so the policy cannot place it;
- `migrating`: its image and data are being copied to the chosen cluster;
- `queue-order`: it could start, but the policy starts other jobs first (e.g. FIFO's head of line);
- `refused`: the policy placed it, but the cluster refused the submission for now (the detail says why);
  it is planned again next round;
- `over-quota`: its team is at its quota (cpn.policies.teams) and may borrow no more cards (a hard limit,
  or its borrowing limit reached); or its team's limits never let it hold the cards it needs, whatever
  runs (the detail ends with NEVER: no start is predicted);
- `reclaiming`: its team is below its quota and the policy preempts cards another team borrowed for it
  (cpn.policies.preemption); the detail names the victims and when their cards free;
- `pending-benchmark`: the free cards it may use are of a GPU type with no benchmark scores yet (the
  detail names it), so no runtime estimate until the benchmark loop measures it (Estimate.pending_benchmark).
"""


NEVER = "never, unless the quota changes"
"""How an `over-quota` detail ends, and what people are shown in place of a predicted start, for a job its
team's limits never let start (`never_starts`)."""


@dataclass(frozen=True)
class Waiting:
    """Why a queued job was left waiting this round, and when the plan expects it to start."""

    job_id: str
    code: WaitCode
    detail: str = ""
    """Human words: which GPU types, how much memory, which pool."""
    predicted_start: float | None = None
    """When the current plan starts it (seconds, the clock's time base); None = the policy has no plan."""
    predicted_end: float | None = None
    """When the forward look (cpn.engine.forecast) ends it; inf for a service; None = no forecast."""
    start_low: float | None = None
    """Earliest start the estimates' spread allows (Estimate.uncertainty); None = no forecast."""
    start_high: float | None = None
    """Latest start the estimates' spread allows; None = no forecast."""
    moved: str = ""
    """Why the predicted start moved since the previous forward look (an arrival with higher priority, a
    job ending earlier or later than predicted, the nodes); empty when it did not move."""


@dataclass(frozen=True)
class Preemption:
    """Stop running job `job_id` so that `for_job` gets its cards (cpn.policies.preemption): the scheduler
    deletes it with `grace_s` and queues it again with the progress of its last checkpoint."""

    job_id: str
    for_job: str
    """The waiting job the cards are reclaimed for."""
    reason: str
    """Human words: which team reclaims what from whom."""
    cards: tuple[tuple[str, int], ...]
    """(`cluster/node`, cards) it frees."""
    lost_gpu_hours: float
    """GPU-hours of work since its last checkpoint (all since its start when it never checkpoints)."""
    grace_s: float
    """Seconds it is given to stop (Kubernetes' termination grace period)."""


@dataclass(frozen=True)
class SolverRound:
    """How an optimising policy's solve went this round (record it with the round)."""

    solver: str
    """`highs` or `cbc`."""
    status: str
    """optimal, feasible (time limit hit with a plan), or why there was none (no-solution, error: ...)."""
    objective: float | None
    """The plan's objective (docs/optimiser.md); None without a plan."""
    gap: float | None
    """Relative MIP gap the solver proved; None where the solver does not report one (CBC via PuLP)."""
    solve_s: float
    """Wall time of building the model, greedy's warm start and the solve."""
    fallback: str | None = None
    """Why greedy's plan was used instead of the solver's; None when the solver's was."""
    jobs: int = 0
    """Queued jobs in the model."""
    variables: int = 0


@dataclass(frozen=True)
class Decision:
    """One round's outcome: jobs to start now and jobs to give up on; the rest keep waiting."""

    placements: tuple[Placement, ...] = ()
    rejections: tuple[Rejection, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    """Why each job left queued waits (a policy may leave some out; the scheduler fills in the rest)."""
    solver: SolverRound | None = None
    """The optimiser's solve this round; None for policies that do not solve a model."""
    preemptions: tuple[Preemption, ...] = ()
    """Running jobs to stop to reclaim cards (a policy set with `preemption=true`); the scheduler carries
    them out before it records the placements."""


def never_starts(code: str, detail: str) -> bool:
    """Whether a waiting reason (code and detail) says the job never starts under its team's limits
    (`over-quota` ending in NEVER): pages and the CLI show NEVER where a predicted start would be."""
    return code == "over-quota" and detail.endswith(NEVER)
