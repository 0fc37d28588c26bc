"""Teams: who shares the clusters, with what weight, quota and borrowing (`teams.yaml`, docs/teams.md).

```yaml
teams:
  - name: vision
    namespaces: [vision, vision-dev]
    weight: 2
    quota: {Tesla-V100-SXM2-16GB: 8, training: 16}   # cards per GPU product label or per pool
    borrowing_limit: 8                               # cards beyond quota; 0 = hard limit; omitted = no limit
```

Strict like every settings model: an unknown key, a namespace in two teams or a repeated team name fails
at load time naming the field. A quota larger than the clusters have is no error (clusters grow): the
scheduler and `cpn teams` warn about it (`quota_warnings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from config.settings import ConfigError, _Strict, load_model

DEFAULT_TEAM = "default"
"""The team of every namespace that belongs to no team; it has weight 1 and no quota."""


class TeamSettings(_Strict):
    """One team: the namespaces whose jobs are its own, its weight, quota and borrowing limit."""

    name: str = Field(min_length=1, description="The team's name in reports, `cpn teams` and GET /teams.")
    namespaces: tuple[str, ...] = Field(
        min_length=1,
        description="Kubernetes namespaces whose jobs belong to the team (a job's id is ns/name).",
    )
    weight: float = Field(
        1.0,
        gt=0,
        description="Its weight in fair share: teams are ordered by dominant share over weight, and a team "
        "with no quota is entitled to its weight's share of the cards no quota names.",
    )
    quota: dict[str, int] = Field(
        default_factory=dict,
        description="Cards it is entitled to, per GPU product label (nvidia.com/gpu.product, or its "
        "canonical "
        "GPU type) or per pool (training, inference, hybrid); empty = a share by weight alone. Cards of a "
        "type or pool no key names are borrowed.",
    )
    borrowing_limit: int | None = Field(
        None,
        ge=0,
        description="Most cards it may hold beyond its quota (borrowed from idle quota of others); "
        "0 = a hard "
        "limit; none = no limit.",
    )
    checkpoint_interval_s: float | None = Field(
        None,
        gt=0,
        description="How often its jobs checkpoint when they do not say (a job's `checkpoint_interval_s`); "
        "preemption reclaims their cards losing only the work since the last checkpoint. None = they "
        "never checkpoint: all their work is lost when their borrowed cards are reclaimed.",
    )

    @field_validator("quota")
    @classmethod
    def _quota_cards(cls, quota: dict[str, int]) -> dict[str, int]:
        bad = [f"{key}={cards}" for key, cards in quota.items() if cards < 0 or not key.strip()]
        if bad:
            raise ValueError(f"needs a non-empty key and cards >= 0, got {', '.join(bad)}")
        return quota


class TeamsConfig(_Strict):
    """Every team of the lab; namespaces in none of them share the default team."""

    teams: tuple[TeamSettings, ...] = Field((), description="The teams, each with its namespaces.")

    @model_validator(mode="after")
    def _distinct(self) -> TeamsConfig:
        names: set[str] = set()
        owner: dict[str, str] = {}
        for i, team in enumerate(self.teams):
            if team.name in names:
                raise ValueError(f"teams.{i}.name: {team.name!r} names two teams")
            names.add(team.name)
            for ns in team.namespaces:
                if ns in owner:
                    raise ValueError(f"teams.{i}.namespaces: {ns!r} is already in team {owner[ns]!r}")
                owner[ns] = team.name
        return self


def load_teams(path) -> TeamsConfig:
    """A teams file, or ConfigError naming the file, the field and the reason."""
    config = load_model(path, TeamsConfig)
    if any(team.name == DEFAULT_TEAM for team in config.teams):
        raise ConfigError(
            f"{path}: teams: {DEFAULT_TEAM!r} is the team of namespaces in no team; pick another name"
        )
    return config


TEAMS_FILE = "teams.yaml"
"""The teams file's name in a config folder."""


def folder_teams(folder: Path | str) -> TeamsConfig | None:
    """The teams file of a config folder, None when it has none (`cpn run` then keeps one queue); a bad
    one raises ConfigError naming the field."""
    path = Path(folder) / TEAMS_FILE
    return load_teams(path) if path.exists() else None


def quota_warnings(config: TeamsConfig, cards: Mapping[str, int]) -> list[str]:
    """A line for each quota larger than the clusters have: `cards` is key -> cards the clusters hold of
    that GPU product, GPU type or pool (keys they hold none of are 0)."""
    out = []
    for team in config.teams:
        for key, quota in team.quota.items():
            have = cards.get(key, 0)
            if quota > have:
                out.append(f"team {team.name}: quota {key}={quota} is more than the clusters have ({have})")
    return out
