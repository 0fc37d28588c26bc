"""Where the scheduler's runtime and memory beliefs come from, chosen by name in this one place.

- `oracle`: the simulator's ground truth (perfect estimates; simulated clusters only);
- `noisy:SIGMA`: ground truth times a seeded log-normal error of spread SIGMA (e.g. `noisy:0.3`);
- `predictor`: the default random forest, trained now on the throughput table (no MLflow involved);
- `champion`: the model registered in MLflow under the `champion` alias, followed as the alias moves.

The composition root (cpn.bootstrap) takes the source this returns; the demo, the benchmarks and
`cpn run` all ask here. MLflow and the estimators are imported only for the kinds that need them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from cpn.engine.estimates import NoisyOracle, OracleEstimates
from cpn.engine.scheduler import EstimateSource
from cpn.formats.throughput import ThroughputTable

log = logging.getLogger(__name__)

KINDS = ("oracle", "noisy:SIGMA", "predictor", "champion")
"""The estimate sources by the names users type."""


def estimate_source(
    spec: str,
    table: ThroughputTable,
    *,
    seed: int = 0,
    benchmarks: Path | str | None = None,
    tracking_uri: str | None = None,
) -> EstimateSource:
    """The estimate source `spec` names (see the module doc); ValueError naming the known kinds otherwise.

    `table` is the ground truth (oracle, noisy) or the training data (predictor); `benchmarks` the GPU
    benchmark scores the predictor uses (default: the shipped file); `tracking_uri` the MLflow store of
    the champion (default: this cpn home's). A missing champion fails here, at once.
    """
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
        from config.tracking import DEFAULT_TRACKING_URI
        from models.registry import champion_loader

        loader = champion_loader(tracking_uri or DEFAULT_TRACKING_URI)
        loader.load()
        return loader
    raise ValueError(f"estimates {spec!r}: use one of {', '.join(KINDS)}")
