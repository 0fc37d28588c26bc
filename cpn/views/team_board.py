"""Each team's standing as the job store says it now: what `cpn teams`, `GET /teams` and the web UI's clusters
page show, from one function (docs/teams.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cpn.decisions import RunningJob, Teams
from cpn.inventory import Node
from cpn.jobs import ON_CLUSTER, JobState
from cpn.policies.teams import standing
from cpn.store import JobStore


@dataclass(frozen=True)
class TeamBoard:
    """The teams a service shares its clusters by, and the nodes their shares are counted against."""

    teams: Teams
    nodes: Sequence[Node]
    """The clusters' nodes (`cpn run`: those it started with, as the gateway is never asked from a web
    request)."""

    def rows(self, store: JobStore, namespaces: Iterable[str] | None = None) -> list[dict]:
        """Each team's weight, quota, borrowing limit, whole cards its jobs on the clusters hold, borrowed
        cards, weighted dominant share and queued jobs (cpn.policies.teams.standing); with `namespaces`
        (a token's), only the teams those namespaces belong to (a namespace in no team: the default
        team)."""
        placed = {
            r.job_id: RunningJob(math.inf, tuple((f"{r.cluster}/{n}", c) for n, c in r.placement))
            for r in store.jobs(ON_CLUSTER)
        }
        waiting = Counter(self.teams.team_of(r.job_id) for r in store.jobs(JobState.QUEUED))
        rows = standing(self.teams, self.nodes, placed, waiting)
        if namespaces is None:
            return rows
        mine = {self.teams.namespaces.get(ns, self.teams.default) for ns in namespaces}
        return [r for r in rows if r["team"] in mine]
