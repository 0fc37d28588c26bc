"""Where the scheduler's runtime and memory beliefs come from, chosen by name in this one place.

- `champion` (what the service uses unless told otherwise): the model registered in MLflow under the
  `champion` alias, followed as the alias moves; a store without one first gets one, trained on the
  throughput table and registered (models.learning);
- `predictor`: the default random forest, trained now on the throughput table (no MLflow involved);
- `oracle`: the simulator's ground truth (perfect estimates), refused when a cluster is real (names a
  `kube_context`): there the table is only a fixed table, not what the cards do;
- `noisy:SIGMA`: ground truth times a seeded log-normal error of spread SIGMA (e.g. `noisy:0.3`), refused
  on real clusters as `oracle` is.

The composition root (cpn.bootstrap) takes the source this returns; the demo, the benchmarks, `cpn run`,
`cpn plan` and the schedule-round flow all ask here. MLflow and the estimators are imported only for the
kinds that need them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from config.benchmarks import BENCHMARKS_YAML
from config.runtime import runtime_settings
from config.settings import ClustersConfig
from cpn.engine.scheduler import EstimateSource
from cpn.formats.throughput import ThroughputTable
from cpn.sim.estimates import NoisyOracle, OracleEstimates

log = logging.getLogger(__name__)

KINDS = ("champion", "predictor", "oracle", "noisy:SIGMA")
"""The estimate sources by the names users type."""


def estimate_source(
    spec: str,
    table: ThroughputTable,
    *,
    seed: int = 0,
    benchmarks: Path | str | None = None,
    tracking_uri: str | None = None,
    clusters: ClustersConfig | None = None,
    progress: Callable[[str], None] = log.info,
) -> EstimateSource:
    """The estimate source `spec` names (see the module doc); ValueError naming the known kinds otherwise.

    `table` is the ground truth (oracle, noisy) or the training data (predictor, a first champion);
    `benchmarks` the GPU benchmark scores the predictor uses (default: the shipped file); `tracking_uri`
    the MLflow store of the champion (default: this cpn home's, as the environment says now); `clusters`
    the clusters it will estimate for: ground truth on a real one is refused with a ValueError naming
    `--estimates`. `progress` hears about training a first champion. A champion that cannot be loaded
    (PredictorUnavailable) fails here, at once.
    """
    if spec == "oracle" or spec.startswith("noisy:"):
        real = [c.name for c in clusters.clusters if c.kube_context] if clusters else []
        if real:
            raise ValueError(
                f"--estimates {spec}: the simulator's ground truth, for simulated clusters only; "
                f"{', '.join(real)} {'is a real cluster' if len(real) == 1 else 'are real clusters'} "
                "(kube_context), where the throughput table is not what the cards do: use champion (the "
                "default) or predictor"
            )
    if spec == "oracle":
        return OracleEstimates(table)
    if spec.startswith("noisy:"):
        try:
            sigma = float(spec.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"estimates {spec!r}: SIGMA must be a number, e.g. noisy:0.3") from None
        return NoisyOracle(table, sigma=sigma, seed=seed)
    if spec == "predictor":
        from models.benchmarks import BenchmarkCatalog
        from models.features import training_rows
        from models.predictor import fit_predictor

        log.info("training the predictor on the throughput table ...")
        catalog = BenchmarkCatalog.load(benchmarks) if benchmarks else BenchmarkCatalog.load()
        return fit_predictor(training_rows(table), catalog, memory_rows=table.rows)
    if spec == "champion":
        from models.learning import first_champion
        from models.registry import champion_loader, champion_version

        uri = tracking_uri or runtime_settings().mlflow_uri
        if champion_version(uri) is None:
            first_champion(table, benchmarks or BENCHMARKS_YAML, uri, progress)
        loader = champion_loader(uri)
        loader.load()
        return loader
    raise ValueError(f"estimates {spec!r}: use one of {', '.join(KINDS)}")
