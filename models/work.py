"""Jobs that give no steps: runtime from the work the seed's annotations state, data size x epochs.

The seed writes a training job as `model_name`, `data_size` (GB) and `epoch`. Its steps are
`epochs x ceil(data_size_gb x samples_per_gb / batch_size)` (`derived_steps`) when the job gives a batch size
and the benchmarks file gives its model's samples per GB; otherwise the predictor (models.predictor)
estimates the job by its *work*, `gb_epochs = data_size_gb x epochs`, at a cost in seconds per GB-epoch on
each GPU type and count:

- **typical batch**: a model the predictor measured, with samples_per_gb known, is taken to run at its
  typical batch (`typical_batch`: the measured batch size nearest the geometric mean of its measured ones);
  the spread widens by how much its samples/s move across its measured batches (`batch_spread`).
- **prior**: any other model (never measured, or its samples per GB unknown) costs the geometric mean of
  the *reference models'* seconds per GB-epoch on that GPU type and count (measured models whose
  samples_per_gb the benchmarks file gives, each at its typical batch), with a spread of at least
  PRIOR_SPREAD, and is flagged `explore`: its first run goes on whole cards, alone, and teaches the rest.
- **learnt**: once runs of the model without steps completed (cpn.engine.feedback.CompletedRun), either
  estimate above is scaled by what those runs measured (`WorkRatios`: the geometric mean of measured /
  estimated, i.e. the model's own seconds per GB-epoch, carried to other GPU types and counts by the
  estimate's own ratios between them), and is no longer `explore`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from models.features import PredictorInputError

PRIOR_SPREAD = math.log(3.0)
"""Least log spread of the prior of a model cpn cannot turn into steps: a factor 3 either way. Datasets
differ in bytes per sample by orders of magnitude (CIFAR-10 images are 3 KB, ImageNet's 110 KB) and
models in compute per sample by as much, so the reference models' agreement says little about a model
never measured; the interval is wide by design and the first run narrows it."""

ONE_RUN_SPREAD = math.log(1.25)
"""Log spread of a model's cost learnt from one completed run on the GPU type and count asked about: one
run gives the model's seconds per GB-epoch, not how much its jobs vary around it (batch size, input size,
data loading); a second run replaces this by the runs' own spread."""


def gb_epochs(job_id: str, data_size_gb: object, epochs: object) -> float:
    """The job's work in GB-epochs; PredictorInputError naming the annotation that cannot give it."""
    why = []
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        why.append(f"`epoch` a positive whole number (got {epochs!r})")
    size = data_size_gb
    if isinstance(size, bool) or not isinstance(size, int | float) or not (0 < size < math.inf):
        why.append(f"`data_size` a positive number of GB (got {size!r})")
    if why:
        raise PredictorInputError(
            f"job {job_id}: no total_steps, and no work to estimate it by: need {'; '.join(why)}"
        )
    return float(size) * epochs


def derived_steps(
    epochs: int, data_size_gb: float, samples_per_gb: float | None, batch_size: int | None
) -> int | None:
    """`epochs x ceil(data_size_gb x samples_per_gb / batch_size)`, or None when samples per GB or the batch
    size is unknown (steps/s in throughput tables count every worker's steps, so an epoch is samples /
    per-GPU batch steps whatever the GPU count). Call after `gb_epochs` has checked the two figures."""
    if samples_per_gb is None or not batch_size:
        return None
    return epochs * math.ceil(data_size_gb * samples_per_gb / batch_size)


def typical_batch(log_batches: np.ndarray) -> int:
    """The measured batch size nearest (in log) the geometric mean of the measured ones (the larger on a
    tie): what a job of the model that states no batch size is taken to run at."""
    target = float(np.mean(log_batches))
    best = min(log_batches, key=lambda x: (round(abs(x - target), 9), -x))
    return round(math.exp(best))


def batch_spread(log_batches: np.ndarray, refs: np.ndarray) -> float:
    """Standard deviation of log samples/s over a model's measured batch sizes (`refs` are its log steps/s
    references, GPU speed and count divided out): how wrong its typical batch may be about a job's speed."""
    return float(np.std(refs + log_batches)) if len(refs) > 1 else 0.0


@dataclass(frozen=True)
class WorkObservation:
    """One completed run without steps: measured / estimated runtime, in log, on a GPU type and count."""

    workload: str
    """models.features.workload_key of the run's model and precision."""
    gpu: str
    """The GPU type's catalog key."""
    num_gpus: int
    log_ratio: float


@dataclass(frozen=True)
class Correction:
    """What a model's completed runs say of one more of its jobs on a GPU type and count."""

    log_ratio: float
    """Mean log (measured / estimated) of the runs chosen (see WorkRatios.correction)."""
    kind: str
    """models.features.EXTRAPOLATION_KINDS: `seen` (runs on that type and count), `count` (that type only)
    or `gpu` (other types only): the predictor adds that kind's calibrated spread floor."""
    spread: float | None
    """Standard deviation of the chosen runs' log ratios; None with one run (nothing to tell it from)."""
    runs: int


class WorkRatios:
    """Per model: how far its completed runs without steps were from their work estimates."""

    def __init__(self, observations: Sequence[WorkObservation] = ()) -> None:
        by: dict[str, list[WorkObservation]] = defaultdict(list)
        for o in observations:
            if not math.isfinite(o.log_ratio):
                raise PredictorInputError(f"{o.workload}: a completed run's runtime ratio is {o.log_ratio}")
            by[o.workload].append(o)
        self._by = dict(by)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by.values())

    def correction(self, workload: str, gpu: str, num_gpus: int) -> Correction | None:
        """The model's runs on `gpu` x `num_gpus` if any, else on `gpu`, else all of them; None if none."""
        runs = self._by.get(workload)
        if not runs:
            return None
        for kind, chosen in (
            ("seen", [o for o in runs if o.gpu == gpu and o.num_gpus == num_gpus]),
            ("count", [o for o in runs if o.gpu == gpu]),
            ("gpu", runs),
        ):
            if chosen:
                ratios = np.array([o.log_ratio for o in chosen])
                spread = float(np.std(ratios, ddof=1)) if len(ratios) > 1 else None
                return Correction(float(ratios.mean()), kind, spread, len(ratios))
        return None
