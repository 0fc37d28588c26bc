"""Typed settings of each scheduling policy, one pydantic model per policy, discriminated by `name`.

`cpn.policies.make_policy` builds a policy from one of these (or from a name and overrides); the
command line's `--set key=value` pairs become overrides through `parse_overrides`. Every model is
strict: an unknown key or a bad value fails with the field and the reason. The CPU threshold is the
scheduler's, not a policy's (config.settings.DEFAULT_CPU_THRESHOLD, `PolicySettings.cpu_threshold`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError


class _PolicyBase(BaseModel):
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
    makespan_slack: float = Field(
        0.01,
        ge=0,
        description="With `rebalance`: how far past the time left to the makespan's bound a job may be "
        "planned to end, as a fraction of that time (0.01: 1%); a job starts that much before it must. "
        "Larger starts long jobs earlier, at a cost to the other jobs' completion times.",
    )


class FifoSettings(_PolicyBase):
    """First in, first out (by priority, then arrival); `fifo-naive` ignores GPU memory."""

    name: Literal["fifo", "fifo-naive"] = "fifo"


class SjfSettings(_PolicyBase):
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


class GreedySettings(_PolicyBase):
    """Earliest predicted finish on what is free now (jobs by priority, then arrival)."""

    name: Literal["greedy"] = "greedy"
    pessimism: float = _pessimism(1.0)


class MilpSettings(_PolicyBase):
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
        description="EASY-style: the oldest job that has waited longer than it would run and cannot start "
        "now is planned first; others start now only where they delay nothing the plan starts later.",
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


def setting_keys(name: str) -> tuple[str, ...]:
    """The keys policy `name` takes besides `name` itself."""
    model = type(policy_settings(name))
    return tuple(k for k in model.model_fields if k != "name")


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
