"""Typed settings of each scheduling policy, one pydantic model per policy, discriminated by `name`.

`cpn.policies.make_policy` builds a policy from one of these (or from a name and overrides); the
command line's `--set key=value` pairs become overrides through `parse_overrides`. Every model is
strict: an unknown key or a bad value fails with the field and the reason.

`SchedulerPolicy` is what a config folder's `policy.yaml` holds, one flat mapping: the policy's name and
settings, and the scheduler's CPU threshold (`cpu_threshold`, not a policy's own setting). Every entrance
(`cpn run`, `cpn up`, `cpn plan`, `cpn demo`, the Prefect flows, `cpn bench`) reads it through
`SchedulerPolicy.of` and applies `--policy`/`--set` through `SchedulerPolicy.overridden`, so that the
service decides as the benchmark does::

    name: milp
    preemption: true
    rebalance: true
    time_limit_s: 2
    cpu_threshold: 0.7
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class BasePolicySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    preemption: bool = Field(
        False,
        description="May the policy preempt (cpn.policies.preemption, docs/teams.md): a team below its "
        "quota whose jobs wait reclaims the cards other teams borrowed, stopping their jobs and queueing "
        "them again with the progress of their last checkpoint. Off: a team waits for borrowed cards to "
        "free.",
    )
    rebalance: bool = Field(
        False,
        description="Re-balance for makespan (cpn.policies.rebalance, docs/teams.md): a queued job that "
        "would otherwise end past the makespan's bound starts first, on a GPU type fast enough (stopping "
        "jobs that checkpoint and can afford it, with `preemption=true`), and a running job that checkpoints "
        "moves to a faster free card when, restarted there from its last checkpoint, it ends sooner by more "
        "than a checkpoint interval.",
    )
    time_slicing: bool = Field(
        False,
        description="Suspend long running jobs that checkpoint for a short waiting job of the same team "
        "when its wait saved outweighs what they lose (their work since the last checkpoint, the restart, "
        "the short job's runtime), at most once per checkpoint interval (cpn.policies.slicing, "
        "docs/optimiser.md). Jobs that never checkpoint are never suspended.",
    )
    makespan_slack: float = Field(
        0.01,
        ge=0,
        description="With `rebalance`: how far past the time left to the makespan's bound a job may be "
        "planned to end, as a fraction of that time (0.01: 1%); a job starts that much before it must. "
        "Larger starts long jobs earlier, at a cost to the other jobs' completion times.",
    )


class FifoSettings(BasePolicySettings):
    """First in, first out (by priority, then arrival); `fifo-naive` ignores GPU memory."""

    name: Literal["fifo", "fifo-naive"] = "fifo"


class SjfSettings(BasePolicySettings):
    """Shortest estimated job first (by priority, then runtime)."""

    name: Literal["sjf"] = "sjf"


def _pessimism(default: float) -> Any:
    """The `pessimism` setting of a policy that chooses among GPU types by predicted runtime."""
    return Field(
        default,
        ge=0,
        le=3,
        description="Rank a job's GPU types by its runtime estimate this many stated spreads above it, "
        "runtime x (1 + uncertainty)^pessimism (cpn.policies.placement.pessimistic_runtime): a job is not "
        "sent to a GPU type whose estimate is a guess when a type it is surer of finishes first on that "
        "reckoning. 0 = the estimate itself (docs/optimiser.md, with the figures behind each default).",
    )


class GreedySettings(BasePolicySettings):
    """Earliest predicted finish on what is free now (jobs by priority, then arrival)."""

    name: Literal["greedy"] = "greedy"
    pessimism: float = _pessimism(1.0)
    wait_for_faster: bool = Field(
        True,
        description="A job waits for a faster GPU type that is busy now when, by the running jobs' "
        "predicted ends, starting there once it frees ends it sooner than starting now on the best free "
        "type (cpn.policies.greedy.FasterLater). Off: the fastest free type now, always.",
    )


class MilpSettings(BasePolicySettings):
    """The queue optimiser (docs/optimiser.md): a MILP over GPU groups and time buckets."""

    name: Literal["milp"] = "milp"
    pessimism: float = _pessimism(0.0)
    solver: Literal["highs", "cbc"] = Field(
        "highs", description="MILP solver: HiGHS (highspy) or CBC (bundled with PuLP)."
    )
    time_limit_s: float = Field(
        1.0,
        gt=0,
        description="Wall-clock limit per solve; past it the best plan found, or greedy's, is used.",
    )
    gap: float = Field(
        0.01, ge=0, lt=1, description="Relative MIP gap at which the solver stops: good enough, sooner."
    )
    objective: Literal["weighted-completion", "makespan"] = Field(
        "weighted-completion",
        description="Minimise priority-weighted predicted completion time, or the planned makespan "
        "(with weighted completion as a small tie-breaker).",
    )
    reservation: bool = Field(
        True,
        description="EASY-style: the oldest job, once it starves (it has waited longer than it would run "
        "and than the queue's backlog takes to drain) and cannot start now, is planned first; others start "
        "now only where they delay nothing the plan starts later.",
    )
    window: int = Field(
        120,
        ge=1,
        description="Queued jobs the MILP plans (by priority, then smallest GPU-time first); the rest are "
        "backfilled where they delay nothing planned.",
    )
    buckets: int = Field(
        8, ge=2, le=32, description="Time buckets of the plan's horizon, each twice the last."
    )
    first_bucket_s: float = Field(
        0.0,
        ge=0,
        description="Length of the first future bucket in seconds; 0 = the median predicted runtime of the "
        "planned jobs.",
    )


PolicySettings = Annotated[
    FifoSettings | SjfSettings | GreedySettings | MilpSettings, Field(discriminator="name")
]
"""The settings of any policy; `name` says which."""

_ADAPTER: TypeAdapter = TypeAdapter(PolicySettings)

POLICY_NAMES: tuple[str, ...] = ("fifo-naive", "fifo", "sjf", "greedy", "milp")
"""Every policy name, as the command line and reports spell it."""


DEFAULT_CPU_THRESHOLD = 0.7
"""A node whose CPU in use is above this fraction of its cores takes no more jobs (the seed's 70%)."""

DEFAULT_POLICY = "milp"
"""The policy of a config folder without a `policy.yaml`, or one that names none (with DEFAULT_SETTINGS)."""

DEFAULT_SETTINGS: dict[str, Any] = {
    "preemption": True,
    "rebalance": True,
    "time_slicing": True,
    "reservation": False,
}
"""The default policy's settings where they differ from its own defaults: the configuration that measured
best across the Sia workload, Gavel's static500 with checkpoints, the demo and the three-team traces
(README, docs/optimiser.md): a team below its share reclaims borrowed cards, long jobs are kept from
setting the makespan, short jobs suspend long ones that checkpoint, and no job is reserved (EASY's
reservation cost the Sia workload 0.5 h of mean JCT). A `policy.yaml` that names a policy gets that policy's
own defaults."""


def default_settings(**overrides: Any) -> PolicySettings:
    """The default policy with DEFAULT_SETTINGS and `overrides` (a `policy.yaml` that names no policy)."""
    return policy_settings(DEFAULT_POLICY, **{**DEFAULT_SETTINGS, **overrides})


class PolicySettingsError(ValueError):
    """Settings that name an unknown policy, an unknown key, or a bad value."""


def policy_settings(name: str, **overrides: Any) -> PolicySettings:
    """The settings of policy `name` with `overrides` applied; PolicySettingsError saying what is wrong."""
    if name not in POLICY_NAMES:
        raise PolicySettingsError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
    try:
        return _ADAPTER.validate_python({**overrides, "name": name})
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"][1:]) or "(settings)"
            problems.append(f"{field}: {err['msg']}")
        raise PolicySettingsError(f"policy {name}: {'; '.join(problems)}") from None


def cpu_threshold_of(value: Any, where: str = "cpu_threshold") -> float:
    """The scheduler's CPU threshold from a YAML number or a `--set` string; PolicySettingsError naming
    `where` unless it is a number in (0, 1]."""
    try:
        threshold = float(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        threshold = None
    if threshold is None or not 0 < threshold <= 1:
        raise PolicySettingsError(
            f"{where}: {value!r} is not a number in (0, 1] (a fraction of a node's cores)"
        )
    return threshold


class SchedulerPolicy(BaseModel):
    """How the scheduler decides: the policy with its settings, and the node CPU threshold (`policy.yaml`;
    read it with `SchedulerPolicy.of`, which takes the file's flat mapping and names the field at fault)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    settings: PolicySettings = Field(default_factory=lambda: default_settings())
    cpu_threshold: float = Field(
        DEFAULT_CPU_THRESHOLD,
        gt=0,
        le=1,
        description="A node whose CPU load is above this fraction takes no more jobs.",
    )

    @property
    def name(self) -> str:
        """The policy's name (`fifo`, `greedy`, `milp`, ...)."""
        return self.settings.name

    @classmethod
    def of(cls, raw: Any) -> SchedulerPolicy:
        """From `policy.yaml`'s flat mapping (`name`, the policy's settings, `cpu_threshold`; None or empty:
        the defaults). PolicySettingsError naming the field that is wrong."""
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise PolicySettingsError(
                f"expected a mapping of settings (name: ..., ...), got {type(raw).__name__}"
            )
        rest = dict(raw)
        cpu = rest.pop("cpu_threshold", DEFAULT_CPU_THRESHOLD)
        if "name" not in rest:
            return cls(settings=default_settings(**rest), cpu_threshold=cpu_threshold_of(cpu))
        name = rest.pop("name")
        if not isinstance(name, str):
            raise PolicySettingsError(
                f"name: {name!r} is not a policy name; known: {', '.join(POLICY_NAMES)}"
            )
        return cls(settings=policy_settings(name, **rest), cpu_threshold=cpu_threshold_of(cpu))

    def overridden(self, name: str | None = None, overrides: dict[str, str] | None = None) -> SchedulerPolicy:
        """These settings, or another policy `name` with its own defaults (none of these settings: `cpn demo
        --policy fifo` is plain FIFO whatever the file turns on), with `overrides` applied (`--set` pairs;
        `cpu_threshold` is the scheduler's and is kept). PolicySettingsError naming a key the policy does
        not take or a bad value."""
        overrides = dict(overrides or {})
        cpu = (
            cpu_threshold_of(overrides.pop("cpu_threshold"), "--set cpu_threshold")
            if "cpu_threshold" in overrides
            else self.cpu_threshold
        )
        settings = self.settings
        if name is not None and name != settings.name:
            if name not in POLICY_NAMES:
                raise PolicySettingsError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
            settings = policy_settings(name)
        if overrides:
            unknown = sorted(set(overrides) - set(setting_keys(settings.name)))
            if unknown:
                known = ", ".join((*setting_keys(settings.name), "cpu_threshold"))
                raise PolicySettingsError(
                    f"--set {', '.join(unknown)}: policy {settings.name} has no such setting; known: {known}"
                )
            given = settings.model_dump(exclude={"name"}, exclude_unset=True)
            settings = policy_settings(settings.name, **{**given, **overrides})
        return SchedulerPolicy(settings=settings, cpu_threshold=cpu)


def setting_keys(name: str) -> tuple[str, ...]:
    """The keys policy `name` takes besides `name` itself."""
    model = type(policy_settings(name))
    return tuple(k for k in model.model_fields if k != "name")


def run_name(settings: PolicySettings) -> str:
    """The policy's name, with the settings that differ from its defaults: `milp(objective=makespan)`."""
    changed = settings.model_dump(exclude_defaults=True, exclude={"name"})
    if not changed:
        return settings.name
    return f"{settings.name}({','.join(f'{k}={v}' for k, v in changed.items())})"


def parse_overrides(pairs: list[str]) -> dict[str, str]:
    """`["solver=cbc", "time_limit_s=2"]` -> `{"solver": "cbc", "time_limit_s": "2"}` (pydantic converts).

    ValueError naming the pair that is not `key=value`, or a key given twice.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set {pair!r}: write key=value, e.g. --set solver=cbc")
        if key in out:
            raise ValueError(f"--set {key} is given twice")
        out[key] = value.strip()
    return out
