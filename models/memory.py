"""GPU memory per card: learnt from throughput tables (what fits which card) and measured peaks.

Three kinds of evidence, per workload (model, and precision unless fp32, as models.features keys it):

- **Card evidence** from any throughput table plus the cards' memory (`card_evidence`): a row that ran
  (steps/s > 0) says memory(model, batch) <= its card's memory; a row measured not to run (0 steps/s)
  says more than it. Memory is taken per card and pooled over GPU counts (a data-parallel gang adds
  little per card; the table's per-GPU batch is what fills the card).
- **Largest batch that fits.** Some tables (Lambda's) run each card at the largest batch that fits it,
  so the batch a card ran at is also a *level*: memory(batch) is close to that card's memory, and a
  larger batch the same workload ran elsewhere would not fit it. Which tables do that is decided per
  workload, with no constant of any table (`largest_fitting`): the workload was measured on cards of at
  least two memory sizes, and the largest batch it ran per card grows with the card's memory (a rank
  correlation, so that one card run a little below its best does not hide the pattern). A table that
  measures the same batch sizes on every card (Gavel's) fails the test and gives bounds only;
  `MemoryModel(largest_fits=True/False)` overrides the test. Such a workload gets a law memory = fixed +
  per_sample x batch (`MemoryLaw`, `fit_law`): the highest line (relative to each card's memory) that
  stays below every card's memory at the batches it ran and above a card's memory at any larger batch
  measured elsewhere or measured not to run, by a linear programme with penalised slack where the table
  contradicts itself.
- **Measured peaks** (`MemorySample`) from completed runs (DCGM framebuffer used) take precedence for
  their workload (model and the job's precision): over the samples measured at the query's GPU count when
  there are any, else over all; a batch size seen before: the largest peak at it; two or more: a
  least-squares line over batch size, never below the smallest peak; one: that peak moved along the
  table's per-sample slope when the table gives a law (kept between the peak and the peak scaled in
  proportion to the batch), else scaled up in proportion for a larger batch (an upper bound) and kept
  for a smaller one.

Every answer says where it came from (`MemoryEstimate.source`): `measured` (peaks), `fitted` (the law of
a largest-fitting table: an estimate, about as good as the step between the batch sizes the table tried)
or `bound` (only "it ran on a card of N GB": at most N, scaled in proportion beyond the batches that
ran; or "it did not run on N GB": just over N; a gang's bounds come from gangs, see CardEvidence). A
model with no evidence gets None, and the job's declared `gpu_mem_gb` is all the scheduler has. None of
it depends on the GPU type asked about: memory is a property of the model, batch and framework, so a card
the model never ran on gets the same figure.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.optimize import linprog
from scipy.stats import kendalltau

from cpn.formats.throughput import ThroughputRow
from cpn.jobs import normalise_precision
from cpn.rules import MEMORY_MARGIN_GB
from models.features import PredictorInputError, workload_key

if TYPE_CHECKING:
    from models.benchmarks import BenchmarkCatalog

MEMORY_SOURCES = ("measured", "fitted", "bound")
"""Where a memory figure comes from (MemoryEstimate.source; see the module docstring)."""

LARGEST_FIT_TAU = 0.5
"""Rank correlation between card memory and the largest batch run per card from which a workload's rows
count as largest-that-fits: 0.5 = three of four pairs of cards agree; a table that measures the same
batch sizes on every card has no correlation at all. Generic, not fitted to any table."""

SLACK_PENALTY = 100.0
"""Cost of violating a bound by the card's whole memory, against 1 for a level that far below its card:
bounds win, but a table that contradicts itself (a batch that ran on a card and, elsewhere, was measured
not to fit it) still gets a law."""


@dataclass(frozen=True)
class MemorySample:
    """Peak GPU memory per card measured for one run of `model` at `batch_size`."""

    model: str
    batch_size: int | None
    gpu_mem_gb: float
    num_gpus: int | None = None
    """Cards of the run; None = unknown (the sample then counts for every GPU count)."""
    precision: str = "fp32"
    """The run's training precision (`JobSpec.precision`): its peak teaches that precision's workload."""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "precision", normalise_precision(self.precision))
        except ValueError as exc:
            raise PredictorInputError(f"{self.model}: {exc}") from None
        if not (
            isinstance(self.gpu_mem_gb, int | float)
            and math.isfinite(self.gpu_mem_gb)
            and self.gpu_mem_gb > 0
        ):
            raise PredictorInputError(
                f"{self.model}: gpu_mem_gb must be a positive number, got {self.gpu_mem_gb!r}"
            )


@dataclass(frozen=True)
class CardEvidence:
    """One throughput-table row read for memory: `model` at `batch_size` ran (or was measured not to run,
    `ran=False`) on a `gpu_type` card of `card_gb` GB."""

    model: str
    batch_size: int | None
    gpu_type: str
    card_gb: float
    ran: bool
    precision: str = "fp32"
    num_gpus: int = 1
    """Cards of the run: a gang keeps gradient buckets and communication buffers per card that a one-card
    run does not, so a one-card run bounds only one-card memory, and a gang measured not to run says
    nothing about one card."""


@dataclass(frozen=True)
class MemoryLaw:
    """GPU memory per card of a workload: `fixed_gb` (weights, optimiser state, workspace) plus
    `per_sample_gb` (activations) times the per-GPU batch size."""

    fixed_gb: float
    per_sample_gb: float

    def at(self, batch_size: int) -> float:
        """GB per card at `batch_size`."""
        return self.fixed_gb + self.per_sample_gb * batch_size


@dataclass(frozen=True)
class MemoryEstimate:
    """A memory figure and where it came from (one of MEMORY_SOURCES)."""

    gpu_mem_gb: float
    source: str


def card_evidence(rows: Sequence[ThroughputRow], catalog: BenchmarkCatalog) -> list[CardEvidence]:
    """The rows as memory evidence, on cards whose memory the catalog knows (others say nothing)."""
    out = []
    for r in rows:
        profile = catalog.find(r.gpu_type)
        if profile is None or not (math.isfinite(profile.memory_gb) and profile.memory_gb > 0):
            continue
        out.append(
            CardEvidence(
                r.model,
                r.batch_size,
                profile.key,
                profile.memory_gb,
                r.steps_per_sec > 0,
                r.precision,
                r.num_gpus,
            )
        )
    return out


def _largest_per_card(evidence: Sequence[CardEvidence]) -> dict[str, tuple[float, int]]:
    """GPU type -> (card GB, largest batch that ran on it), over sized batches."""
    out: dict[str, tuple[float, int]] = {}
    for e in evidence:
        if e.ran and e.batch_size is not None:
            best = out.get(e.gpu_type)
            out[e.gpu_type] = (e.card_gb, max(e.batch_size, best[1] if best else 0))
    return out


def largest_fitting(evidence: Sequence[CardEvidence]) -> bool:
    """True if one workload's rows look like "the largest batch that fits each card": cards of two or
    more memory sizes, the largest batch per card rank-correlated with the card's memory (Kendall's tau-b
    >= LARGEST_FIT_TAU) and larger on the biggest cards than on the smallest."""
    largest = list(_largest_per_card(evidence).values())
    memory = np.array([m for m, _ in largest])
    batch = np.array([b for _, b in largest])
    if len(set(memory)) < 2 or len(set(batch)) < 2:
        return False
    if batch[memory == memory.max()].max() <= batch[memory == memory.min()].min():
        return False
    return bool(kendalltau(memory, batch).statistic >= LARGEST_FIT_TAU)


def fit_law(evidence: Sequence[CardEvidence]) -> MemoryLaw | None:
    """The law of a largest-fitting workload (module docstring); None with fewer than two distinct
    (batch, card) levels, where fixed and per-sample memory cannot be told apart.

    Linear programme over fixed >= 0 and per-sample >= 0: maximise the sum over levels of
    law(batch) / card memory subject to law(b) <= card at every batch that ran on a card and
    law(b) >= card at the smallest larger batch the workload ran elsewhere (and at batches measured not
    to run), each bound softened by a slack costing SLACK_PENALTY per card-memory of violation.
    """
    largest = _largest_per_card(evidence)
    levels = sorted(set(largest.values()), key=lambda x: (x[1], x[0]))
    if len({b for _, b in levels}) < 2:
        return None
    ran_batches = sorted({e.batch_size for e in evidence if e.ran and e.batch_size is not None})
    upper: dict[int, float] = {}
    for e in evidence:
        if e.ran and e.batch_size is not None:
            upper[e.batch_size] = min(upper.get(e.batch_size, math.inf), e.card_gb)
    lower: dict[float, int] = {}
    for card_gb, batch in levels:
        bigger = [b for b in ran_batches if b > batch]
        if bigger:
            lower[card_gb] = min(lower.get(card_gb, bigger[0]), bigger[0])
    for e in evidence:
        if not e.ran and e.batch_size is not None:
            lower[e.card_gb] = min(lower.get(e.card_gb, e.batch_size), e.batch_size)
    scale = float(max(ran_batches))
    bounds = [(b, m, 1.0) for b, m in upper.items()] + [(b, m, -1.0) for m, b in lower.items()]
    n = len(bounds)
    # Variables: fixed, per-sample x scale, one slack per bound (in units of the bound's card memory).
    c = np.concatenate(
        [
            [-sum(1 / m for m, _ in levels), -sum(b / scale / m for m, b in levels)],
            np.full(n, SLACK_PENALTY),
        ]
    )
    a_ub = np.zeros((n, 2 + n))
    b_ub = np.zeros(n)
    for i, (batch, card_gb, sign) in enumerate(bounds):
        a_ub[i, :2] = sign, sign * batch / scale
        a_ub[i, 2 + i] = -card_gb
        b_ub[i] = sign * card_gb
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=[(0, None)] * (2 + n), method="highs")
    if not res.success:
        return None
    law = MemoryLaw(max(0.0, float(res.x[0])), max(0.0, float(res.x[1])) / scale)
    return law if law.at(1) > 0 else None


class MemoryModel:
    """Predicts GPU memory per card by model, batch size and precision (module docstring)."""

    def __init__(
        self,
        samples: Sequence[MemorySample] = (),
        evidence: Sequence[CardEvidence] = (),
        largest_fits: bool | None = None,
    ) -> None:
        """`samples`: measured peaks; `evidence`: card evidence from tables (`card_evidence`);
        `largest_fits`: whether the tables' rows are the largest batch that fits each card (None: decided
        per workload by `largest_fitting`)."""
        peaks: dict[str, dict[int | None, float]] = defaultdict(dict)
        by_count: dict[tuple[str, int], dict[int | None, float]] = defaultdict(dict)
        for s in samples:
            key = workload_key(s.model, s.precision)
            tables = [peaks[key]] + ([by_count[(key, s.num_gpus)]] if s.num_gpus is not None else [])
            for by_batch in tables:
                by_batch[s.batch_size] = max(by_batch.get(s.batch_size, 0.0), float(s.gpu_mem_gb))
        self._peaks = dict(peaks)
        self._by_count = dict(by_count)
        grouped: dict[str, list[CardEvidence]] = defaultdict(list)
        for e in evidence:
            grouped[workload_key(e.model, e.precision)].append(e)
        self._bounds: dict[str, list[tuple[int | None, bool, bool, float]]] = {}
        """Workload -> (batch, on a gang, ran, card GB): the smallest card each ran on, the largest card
        each was measured not to run on."""
        self._laws: dict[str, MemoryLaw] = {}
        for key, rows in grouped.items():
            cards: dict[tuple[int | None, bool, bool], float] = {}
            for e in rows:
                k = (e.batch_size, e.num_gpus > 1, e.ran)
                cards[k] = (
                    min(cards.get(k, math.inf), e.card_gb) if e.ran else max(cards.get(k, 0), e.card_gb)
                )
            self._bounds[key] = [(*k, card) for k, card in cards.items()]
            if largest_fits if largest_fits is not None else largest_fitting(rows):
                law = fit_law(rows)
                if law is not None:
                    self._laws[key] = law
        self._levels = {key: _largest_per_card(grouped[key]) for key in self._laws}
        """Workload with a law -> GPU type -> (card GB, largest batch it ran there): on a card the table
        measured, its own rows decide whether a batch fits (`estimate`)."""

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Models pickled before GPU counts were recorded pool every sample; before tables were read,
        # there are no table laws or bounds.
        state.setdefault("_by_count", {})
        state.setdefault("_bounds", {})
        state.setdefault("_laws", {})
        state.setdefault("_levels", {})
        self.__dict__.update(state)

    def models(self) -> list[str]:
        """Workload keys (models.features.workload_key) with at least one measured peak."""
        return sorted(self._peaks)

    def law(self, model: str, precision: str = "fp32") -> MemoryLaw | None:
        """The fixed + per-sample law learnt from a largest-fitting table, if the workload has one."""
        return self._laws.get(workload_key(model, precision))

    def predict(
        self,
        model: str,
        batch_size: int | None,
        num_gpus: int | None = None,
        precision: str = "fp32",
        gpu_type: str | None = None,
    ) -> float | None:
        """GPU memory per card in GB on `num_gpus` cards (None = any count), or None without evidence;
        `estimate` says where the figure comes from."""
        est = self.estimate(model, batch_size, num_gpus, precision, gpu_type)
        return None if est is None else est.gpu_mem_gb

    def estimate(
        self,
        model: str,
        batch_size: int | None,
        num_gpus: int | None = None,
        precision: str = "fp32",
        gpu_type: str | None = None,
    ) -> MemoryEstimate | None:
        """GPU memory per card and its source (MEMORY_SOURCES): measured peaks of the workload first, then the
        table's law, then the table's bound; None without evidence.

        The law is blind to the card, but cards of one memory size do not hold the same (ECC reserves
        some, contexts differ: Lambda's A10 ran smaller largest batches than the RTX 3090's 24 GB). So on
        a card the table measured the workload on (`gpu_type`, a canonical GPU key), its own largest batch
        decides: up to it the figure is at most the card's memory, beyond it just over it. A card never
        measured gets the law alone."""
        workload = workload_key(model, precision)
        law = self._laws.get(workload)
        measured = self._from_peaks(workload, batch_size, num_gpus, law)
        if measured is not None:
            return MemoryEstimate(measured, "measured")
        if law is not None and batch_size is not None:
            figure = law.at(batch_size)
            if (level := self._levels.get(workload, {}).get(gpu_type or "")) is not None:
                card_gb, largest = level
                if batch_size <= largest:
                    figure = min(figure, card_gb)
                else:
                    figure = max(figure, card_gb + MEMORY_MARGIN_GB)
            return MemoryEstimate(figure, "fitted")
        bound = self._bound(workload, batch_size, num_gpus)
        return None if bound is None else MemoryEstimate(bound, "bound")

    def for_job(
        self,
        model: str,
        batch_size: int | None,
        num_gpus: int | None,
        declared_gb: float | None,
        precision: str = "fp32",
        gpu_type: str | None = None,
    ) -> float | None:
        """The figure to give the scheduler for a job declaring `declared_gb` (None: nothing) on `gpu_type`:
        a measured or fitted figure; a bound only to a job that declares nothing, since policies take the
        larger of declared and estimated and would turn "at most N GB" into a need of N GB."""
        est = self.estimate(model, batch_size, num_gpus, precision, gpu_type)
        if est is None or (est.source == "bound" and declared_gb is not None):
            return None
        return est.gpu_mem_gb

    def _bound(self, workload: str, batch_size: int | None, num_gpus: int | None) -> float | None:
        """At most the smallest card the batch (or a smaller one, scaled up in proportion: memory grows
        no faster than the batch when the fixed part is >= 0) ran on with as many cards or more; where
        the batch (or a smaller one) was measured not to run on a card at least as large as that, just
        over that card (MEMORY_MARGIN_GB, as for a job OOM-killed there). None if neither is known."""
        gang = num_gpus is not None and num_gpus > 1
        upper, lower = [], []
        for batch, on_gang, ran, card_gb in self._bounds.get(workload, ()):
            if (batch is None) != (batch_size is None):
                continue
            if ran and on_gang >= gang:
                upper.append(card_gb * (max(1.0, batch_size / batch) if batch else 1.0))
            elif not ran and on_gang <= gang and (batch is None or batch_size >= batch):
                lower.append(card_gb)
        at_most = min(upper, default=None)
        over = max(lower, default=None)
        if over is not None and (at_most is None or at_most <= over):
            return over + MEMORY_MARGIN_GB
        return at_most

    def _from_peaks(
        self, key: str, batch_size: int | None, num_gpus: int | None, law: MemoryLaw | None
    ) -> float | None:
        by_batch = self._by_count.get((key, num_gpus)) or self._peaks.get(key)
        if not by_batch:
            return None
        if batch_size in by_batch:
            return by_batch[batch_size]
        sized = {b: m for b, m in by_batch.items() if b is not None}
        if batch_size is None or not sized:
            return max(by_batch.values())
        if len(sized) == 1:
            ((b0, m0),) = sized.items()
            if law is not None:
                # Between the peak and the peak scaled in proportion (memory grows no faster than the batch).
                ends = sorted((m0, m0 * batch_size / b0))
                return float(np.clip(m0 + law.per_sample_gb * (batch_size - b0), *ends))
            return m0 * max(1.0, batch_size / b0)
        slope, intercept = np.polyfit(list(sized), list(sized.values()), 1)
        return max(float(intercept + slope * batch_size), min(sized.values()))


def leave_gpu_out(
    rows: Sequence[ThroughputRow], catalog: BenchmarkCatalog, largest_fits: bool | None = None
) -> dict[str, Any] | None:
    """How well memory carries to a card never seen: each GPU type held out in turn, a MemoryModel fit
    on the other cards' rows, asked about every largest-fitting workload (judged on all rows) the
    held-out card ran.

    Per (workload, held-out card) pair, with b its largest batch on that card and M its memory:
    `fits` = predicted memory at b <= M; `next_over` = predicted memory at the smallest larger batch the
    workload ran on other cards > M (pairs that have one); `rel_error` = |predicted at b - M| / M;
    `next_contradicted`: of the next larger batches predicted to fit (an OOM the estimate would allow),
    how many ran on another card of at most M GB, so that the table itself says they fit such a card
    (the held-out card holds less than its size says: ECC, a larger context; no figure that depends on
    model, batch and card memory alone can get them right).
    Returns {"pairs", "fits", "next_pairs", "next_over", "next_contradicted", "median_rel_error",
    "sources"} (shares as fractions; sources: how many answers came from each MEMORY_SOURCES), or None
    when no workload is largest-fitting on two or more GPU types.
    """
    evidence = card_evidence(rows, catalog)
    grouped: dict[str, list[CardEvidence]] = defaultdict(list)
    for e in evidence:
        grouped[workload_key(e.model, e.precision)].append(e)
    chosen = {
        k
        for k, ev in grouped.items()
        if (largest_fits if largest_fits is not None else largest_fitting(ev))
        and len(_largest_per_card(ev)) >= 2
    }
    if not chosen:
        return None
    fits, over, errors = [], [], []
    contradicted = 0
    sources: dict[str, int] = dict.fromkeys(MEMORY_SOURCES, 0)
    for gpu in sorted({e.gpu_type for k in chosen for e in grouped[k]}):
        model = MemoryModel(evidence=[e for e in evidence if e.gpu_type != gpu], largest_fits=largest_fits)
        for key in sorted(chosen):
            held = _largest_per_card(grouped[key]).get(gpu)
            if held is None:
                continue
            card_gb, batch = held
            name, precision = grouped[key][0].model, grouped[key][0].precision
            est = model.estimate(name, batch, precision=precision)
            if est is None:
                fits.append(False)
                errors.append(1.0)
                continue
            sources[est.source] += 1
            fits.append(est.gpu_mem_gb <= card_gb * (1 + 1e-9))
            errors.append(abs(est.gpu_mem_gb - card_gb) / card_gb)
            larger = sorted(
                {
                    e.batch_size
                    for e in grouped[key]
                    if e.ran and e.gpu_type != gpu and (e.batch_size or 0) > batch
                }
            )
            if larger:
                over.append((model.predict(name, larger[0], precision=precision) or 0.0) > card_gb)
                contradicted += not over[-1] and any(
                    e.ran and e.gpu_type != gpu and e.batch_size == larger[0] and e.card_gb <= card_gb
                    for e in grouped[key]
                )
    return {
        "pairs": len(fits),
        "fits": float(np.mean(fits)),
        "next_pairs": len(over),
        "next_over": float(np.mean(over)) if over else None,
        "next_contradicted": contradicted,
        "median_rel_error": float(np.median(errors)),
        "sources": sources,
    }
