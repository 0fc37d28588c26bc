"""How good the estimates of jobs with the seed's annotations only are, against the simulated clusters' truth.

Run: `.venv/bin/python scripts/work_estimates.py`. A calibrated RF on Gavel's table and the shipped
benchmarks file (as the service's first champion); for each model, a job of 2 GB x 5 epochs on one V100
(no batch size, no steps): estimated / true runtime, stated uncertainty, explore. Then each model's
first job (20 GB x 100 epochs) completes on one V100 at its true runtime, and a second one (7.5 GB x 30
epochs) is estimated on each GPU type and count: its error and stated uncertainty (docs/predictor.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config.benchmarks import BENCHMARKS_YAML  # noqa: E402
from cpn.engine.feedback import CompletedRun  # noqa: E402
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable  # noqa: E402
from cpn.jobs import JobSpec  # noqa: E402
from cpn.sim.truth import GroundTruth  # noqa: E402
from models.benchmarks import BenchmarkCatalog  # noqa: E402
from models.features import training_rows  # noqa: E402
from models.predictor import fit_predictor  # noqa: E402

MODELS = ("densenet121", "yolov8m", "resnet50", "LM", "CycleGAN", "Transformer", "Recommendation")
AFTER = (("v100", 1), ("v100", 2), ("p100", 1), ("k80", 1))


def main() -> None:
    table = ThroughputTable.load(GAVEL_ISOLATED)
    predictor = fit_predictor(training_rows(table), BenchmarkCatalog.load(BENCHMARKS_YAML), "rf")
    truth = GroundTruth(table)
    print("model           prior/true  +-     explore | after one run on a V100: error (+-stated)")
    for model in MODELS:
        job = JobSpec(job_id="a", model=model, epochs=5, data_size_gb=2.0)
        est = predictor.estimate(job, "v100")
        ratio = est.runtime_s / truth.outcome(job, "v100", 1, 16.0).duration_s
        first = JobSpec(job_id="b", model=model, epochs=100, data_size_gb=20.0)
        measured = truth.outcome(first, "v100", 1, 16.0).duration_s
        run = CompletedRun("b", model, None, "v100", 1, None, measured, 0.0, data_size_gb=20.0, epochs=100)
        learnt = predictor.learn_work([run])
        errors = []
        for gpu, n in AFTER:
            second = JobSpec(job_id="c", model=model, epochs=30, data_size_gb=7.5, num_gpus=n)
            after = learnt.estimate(second, gpu)
            true = truth.outcome(second, gpu, n, 16.0).duration_s
            errors.append(f"{n}x{gpu} {after.runtime_s / true - 1:+.0%} (+-{after.uncertainty:.0%})")
        print(f"{model:15s} {ratio:9.2f}x  {est.uncertainty:5.0%}  {est.explore!s:7s} | {', '.join(errors)}")


if __name__ == "__main__":
    main()
