"""The service learns on its own: its first champion, then a retraining after every N completed jobs.

`cpn run`, `cpn up`, `cpn plan` and the schedule-round deployment estimate with the registered champion
by default (models.sources). A store with no champion yet gets one first (`first_champion`): a model
trained on the throughput table and registered, once, at start-up.

Under Prefect the retrain deployment retrains, triggered by the `cpn.job.completed` events the
schedule-round flow emits; `cpn run`'s own loop emits none, so the service counts its completions itself
(`ServiceRetraining`). After every N jobs that succeeded since it started or last retrained, a background
thread retrains on the table plus every completed job of the store (models.retrain.retrain: the training,
MLflow runs and champion rule every retraining uses), so a round never waits for training, and has the
champion source load the outcome at once. Before each round `ChampionFollower` looks at the alias (one
registry read, tens of milliseconds): when the champion moved, retrained here or promoted by the
deployment, that round estimates the queued jobs again with it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from config.runtime import hide_password, runtime_settings
from cpn.engine.feedback import CompletedRun, completed_runs
from cpn.engine.scheduler import Scheduler
from cpn.formats.throughput import ThroughputTable
from cpn.inventory import Node
from cpn.jobs import JobState

if TYPE_CHECKING:
    from models.registry import ChampionLoader, RunResult

log = logging.getLogger(__name__)

SERVICE_ESTIMATORS = ("rf",)
"""What the service trains itself (its first champion, its retrainings): the default random forest with no
cross-validated splits logged, seconds per training on the shipped table; the retrain deployment trains and
compares both estimators on every split."""


def _train(
    runs: Sequence[CompletedRun],
    table: ThroughputTable,
    benchmarks: Path | str,
    tracking_uri: str,
    session: str,
) -> list[RunResult]:
    from models.benchmarks import BenchmarkCatalog
    from models.retrain import retrain

    return retrain(
        runs,
        table,
        BenchmarkCatalog.load(benchmarks),
        tracking_uri=tracking_uri,
        estimators=SERVICE_ESTIMATORS,
        splits=(),
        session=session,
    )


def _outcome(results: Sequence[RunResult]) -> str:
    return "; ".join(
        f"{r.estimator}: {r.reason}" + (f" (version {r.version})" if r.version else "") for r in results
    )


def first_champion(
    table: ThroughputTable, benchmarks: Path | str, tracking_uri: str, progress: Callable[[str], None]
) -> None:
    """Train a model on `table` (GPU scores from `benchmarks`) and register it as the first champion of
    the store at `tracking_uri`, telling `progress` what it does and how long it took."""
    progress(f"no champion yet: training one on the throughput table ({hide_password(tracking_uri)}) ...")
    started = time.perf_counter()
    results = _train((), table, benchmarks, tracking_uri, "first-champion")
    progress(f"trained in {time.perf_counter() - started:.1f} s: {_outcome(results)}")


class ChampionFollower:
    """Has the scheduler serve the champion the alias names from the round after it moved: `before_round`
    runs on the loop's thread before each round (cpn.engine.live.LiveLoop)."""

    def __init__(self, scheduler: Scheduler, source: ChampionLoader) -> None:
        self.scheduler = scheduler
        self.source = source
        """The champion source the scheduler estimates with."""
        self.serving = source.last_good_version
        """The version the queued jobs were estimated with."""

    def before_round(self) -> None:
        """Look at the alias (the source keeps its last good model while MLflow fails) and, when another
        version serves now, estimate the queued jobs again with it."""
        self.source.load()
        if self.source.last_good_version != self.serving:
            log.info(
                "champion version %s serves now (was %s): estimating the queued jobs again",
                self.source.last_good_version,
                self.serving,
            )
            self.serving = self.source.last_good_version
            self.scheduler.forget_estimates()


def champion_follower(scheduler: Scheduler, estimates: str) -> ChampionFollower | None:
    """What keeps `cpn run`'s rounds on the current champion: None unless `estimates` is `champion` (the
    scheduler's source is then the champion loader)."""
    return ChampionFollower(scheduler, scheduler.estimator) if estimates == "champion" else None


class ServiceRetraining:
    """Retrains after every `every` completed jobs off the loop's thread (the new champion serves from the
    next round, ChampionFollower); `after_round` runs on the loop's thread after each round."""

    def __init__(
        self,
        scheduler: Scheduler,
        source: ChampionLoader,
        throughputs: Path | str,
        benchmarks: Path | str,
        every: int,
    ) -> None:
        if every < 1:
            raise ValueError(f"retrain_every_completions must be >= 1 to retrain, got {every}")
        self.scheduler = scheduler
        self.source = source
        """The champion source the scheduler estimates with; it loads each new champion."""
        self.throughputs = throughputs
        self.benchmarks = benchmarks
        self.every = every
        self.completed = 0
        """Jobs that succeeded since the service started or the latest retraining began."""
        self._cursor, _ = scheduler.store.changes_since(0)  # completions count from now on
        self._thread: threading.Thread | None = None

    @property
    def retraining(self) -> bool:
        """Whether a retraining is under way."""
        return self._thread is not None and self._thread.is_alive()

    def after_round(self) -> None:
        """Count the jobs that succeeded since the last call, and start a retraining in the background
        when `every` did and none is under way."""
        self._cursor, changes = self.scheduler.store.changes_since(self._cursor)
        self.completed += sum(c.state == JobState.SUCCEEDED for c in changes)
        if self.completed >= self.every and not self.retraining:
            log.info("%d jobs completed: retraining the predictor in the background", self.completed)
            self.completed = 0
            nodes = tuple(state.node for state in self.scheduler.gateway.inventory())
            self._thread = threading.Thread(target=self._retrain, args=(nodes,), name="retrain", daemon=True)
            self._thread.start()

    def _retrain(self, nodes: tuple[Node, ...]) -> None:
        started = time.perf_counter()
        try:
            runs = completed_runs(self.scheduler.store, nodes)
            table = ThroughputTable.load(self.throughputs)
            results = _train(runs, table, self.benchmarks, self.source.tracking_uri, "service-retrain")
            self.source.load()
        except Exception:  # the service goes on with the champion it has
            log.exception("retraining failed; the champion stays")
            return
        log.info(
            "retrained on the throughput table plus %d completed jobs in %.1f s: %s",
            len(runs),
            time.perf_counter() - started,
            _outcome(results),
        )


def service_retraining(
    scheduler: Scheduler, estimates: str, throughputs: Path | str, every: int
) -> ServiceRetraining | None:
    """What `cpn run` retrains on its own (see the module doc): None unless `estimates` is `champion` (the
    scheduler's source is then the champion loader) and `every` is above 0."""
    if estimates != "champion" or every == 0:
        return None
    benchmarks = runtime_settings().predictor_benchmarks
    return ServiceRetraining(scheduler, scheduler.estimator, throughputs, benchmarks, every)
