"""The benchmark loop's domain: which nodes to measure, the job that measures one, and following it.

A node needs a benchmark when the benchmarks store has no score of its GPU product measured by the store's
method (per product, or, where the node's driver version is labelled, per product and driver among the
store's measured nodes); with `every_node`, when the node itself has no scores. One node per such type is
chosen (`plan_benchmarks`), preferring one with idle cards. `run_benchmarks` submits each chosen node's
benchmark job through the cluster gateway (`benchmark_job`: pinned to the node, one exclusive card, the
lowest priority), only where the node has an idle card now, so it never displaces a job; follows the jobs
to their end by the gateway's events (a gateway of its own: the events are consumed), deletes one that
runs past its timeout, and reads each log through the gateway. Parsing and ingesting the `CPN_BENCH`
lines is the predictor's side (models.benchmark_runs). `FailureLog` keeps the failed attempts, so a
failed type is tried again on a later run, then reported and left alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from config.benchmarking import BenchmarkingSettings
from config.benchmarks import BenchmarksConfig, load_benchmarks
from config.settings import REPO_ROOT
from cpn.adapters.gateway import ClusterGateway, NoLog, SubmitRejected
from cpn.clock import Clock
from cpn.decisions import Placement
from cpn.gpus import canonical_gpu
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec

BENCH_MODEL = "cpn-bench"
"""`JobSpec.model` of a benchmark job: the simulated clusters run it as one (cpn.sim.gateway)."""
BENCH_PRIORITY = -(2**31)
"""A benchmark job's priority: below every user job's."""
BENCH_JOB_YAML = REPO_ROOT / "examples" / "benchmark-job.yaml"
"""The benchmark job's manifest (its script ConfigMap, then the Job), rendered per node."""
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"
"""GPU Feature Discovery's label of the full driver version."""
DRIVER_PARTS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
"""Its older labels, one per part, joined with dots when DRIVER_LABEL is missing."""
LOG_LINES = 200
"""Lines of a finished benchmark job's log read back (its result lines are its last)."""

Outcome = Literal["succeeded", "failed", "timed-out", "refused", "busy"]


def node_driver(node: Node) -> str | None:
    """The node's driver version from its GFD labels; None when they do not say."""
    labels = dict(node.labels)
    if labels.get(DRIVER_LABEL):
        return labels[DRIVER_LABEL]
    parts = [labels.get(k) for k in DRIVER_PARTS]
    return ".".join(p for p in parts if p) if parts[0] else None


def type_key(node: Node) -> str:
    """What one benchmark measures for all nodes alike: the GPU type, with the driver where labelled."""
    driver = node_driver(node)
    return node.gpu_type + (f"@driver-{driver}" if driver else "")


def store_method(store: BenchmarksConfig) -> str:
    """The method every score of the store was measured by (one per file, config.benchmarks says)."""
    return next(iter(store.workloads.values())).method


@dataclass(frozen=True)
class BenchmarkTarget:
    """A node chosen to be benchmarked, and why."""

    node: Node
    type_key: str
    """The GPU type (and driver) it measures for its kind (`type_key`)."""
    idle_gpus: int
    """Its free cards when chosen; 0 = it waits for a later run (a benchmark never displaces a job)."""
    reason: str


@dataclass(frozen=True)
class Reported:
    """A GPU type whose benchmark failed on every try: left alone until its failures are cleared."""

    type_key: str
    failures: int
    error: str


@dataclass(frozen=True)
class BenchmarkPlan:
    """What a run would do: the nodes to benchmark, and the types given up on."""

    targets: tuple[BenchmarkTarget, ...]
    reported: tuple[Reported, ...]

    def lines(self) -> list[str]:
        """The plan for people: one line per node to benchmark and why, one per GPU type given up on."""
        lines = [f"{t.node.key}: {t.reason}" for t in self.targets]
        lines += [
            f"{r.type_key}: not tried again after {r.failures} failed benchmark(s) ({r.error}); remove it "
            "from the failure log to retry"
            for r in self.reported
        ]
        return lines or ["every GPU type has scores: nothing to benchmark"]


def _measured(store: BenchmarksConfig) -> tuple[set[str], set[str], set[str]]:
    """(GPU types scored, types with driver measured, node names measured) of the store."""
    products = {canonical_gpu(k) for k in store.gpus}
    with_driver = {f"{canonical_gpu(n.gpu)}@driver-{n.driver}" for n in store.nodes.values() if n.driver}
    return products, with_driver, set(store.nodes)


def plan_benchmarks(
    states: Sequence[NodeState],
    store: BenchmarksConfig,
    settings: BenchmarkingSettings,
    failures: Mapping[str, tuple[int, str]] | None = None,
    source: str = "the benchmarks store",
) -> BenchmarkPlan:
    """The nodes to benchmark on this inventory (see the module doc); `failures`: type key -> (failed
    attempts, last error) from `FailureLog`; a type that failed more than `settings.retries` times is
    reported instead. Deterministic: nodes with the most idle cards first, then by cluster and name."""
    method = store_method(store)
    products, with_driver, nodes_done = _measured(store)
    failures = failures or {}
    groups: dict[str, list[NodeState]] = {}
    for state in states:
        node = state.node
        key = type_key(node)
        done = key in with_driver if node_driver(node) else node.gpu_type in products
        if settings.every_node:
            done = node.name in nodes_done and (not node_driver(node) or key in with_driver)
        if not done:
            groups.setdefault(key, []).append(state)
    targets, reported = [], []
    for key, group in sorted(groups.items()):
        tries, error = failures.get(key, (0, ""))
        if tries > settings.retries:
            reported.append(Reported(key, tries, error))
            continue
        group.sort(key=lambda s: (-s.free_gpus, s.node.cluster, s.node.name))
        chosen = group if settings.every_node else group[:1]
        what = "the node" if settings.every_node else f"GPU type {key}"
        for state in chosen:
            why = f"{what} has no score measured by {method} in {source}"
            if not settings.every_node:
                why += f"; one of its {len(group)} node(s)"
            why += f"; {state.free_gpus} idle card(s)" if state.free_gpus else "; no idle card now: waits"
            if tries:
                why += f"; retry after {tries} failure(s): {error}"
            targets.append(BenchmarkTarget(state.node, key, state.free_gpus, why))
    return BenchmarkPlan(tuple(targets), tuple(reported))


def plan_from_files(
    states: Sequence[NodeState], base: Path | str, settings: BenchmarkingSettings, failures: Path | str
) -> BenchmarkPlan:
    """`plan_benchmarks` over the benchmarks file `base` and the failure log at `failures`."""
    return plan_benchmarks(states, load_benchmarks(base), settings, FailureLog(failures).read(), str(base))


def job_name(node: Node) -> str:
    """The benchmark job's object name for `node` (a DNS label, deterministic: a second submission is the
    same job)."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"bench-{node.cluster}-{node.name}".lower()).strip("-")
    return base[:63].rstrip("-")


def benchmark_job(target: BenchmarkTarget, settings: BenchmarkingSettings) -> JobSpec:
    """The benchmark job of one node: examples/benchmark-job.yaml with its Job first (the workload) and its
    script ConfigMap named after it, one exclusive card, the configured image, seconds and deadline; the
    gateway's binder pins it to the node and tolerates its taints."""
    name = job_name(target.node)
    config_map, job = (d for d in yaml.safe_load_all(BENCH_JOB_YAML.read_text()) if d)
    config_map["metadata"] = {"name": f"{name}-script", "namespace": settings.namespace}
    job["metadata"] = {"name": name, "namespace": settings.namespace, "labels": job["metadata"]["labels"]}
    job["spec"]["activeDeadlineSeconds"] = int(settings.timeout_s)
    pod = job["spec"]["template"]["spec"]
    pod.pop("nodeName")  # the binder pins it to the placement's node
    (container,) = pod["containers"]
    container["image"] = settings.image
    for env in container["env"]:
        if env["name"] == "BENCH_SECONDS":
            env["value"] = str(int(settings.seconds_per_workload))
    pod["volumes"][0]["configMap"]["name"] = config_map["metadata"]["name"]
    workloads = 3  # resnet50, yolov8m, llama3: the script's three
    return JobSpec(
        job_id=f"{settings.namespace}/{name}",
        model=BENCH_MODEL,
        num_gpus=1,
        cpu=float(container["resources"]["requests"]["cpu"]),
        image=settings.image,
        priority=BENCH_PRIORITY,
        gpu_products=(target.node.gpu_product,),
        duration_s=workloads * settings.seconds_per_workload,
        manifest=yaml.safe_dump_all([job, config_map], sort_keys=False),
    )


def is_benchmark(job: JobSpec) -> bool:
    """Whether `job` is a benchmark job (`benchmark_job`)."""
    return job.model == BENCH_MODEL


@dataclass(frozen=True)
class BenchmarkRun:
    """How one node's benchmark went: its log when it ended, else why it did not run or end."""

    target: BenchmarkTarget
    job_id: str
    outcome: Outcome
    started: float | None
    ended: float | None
    log: str = ""
    detail: str = ""


def run_benchmarks(
    gateway: ClusterGateway,
    targets: Sequence[BenchmarkTarget],
    settings: BenchmarkingSettings,
    clock: Clock,
    wait: Callable[[float], None],
) -> list[BenchmarkRun]:
    """Submit each target's benchmark job where its node has an idle card, follow them to their end (their
    events, `wait(seconds)` between looks) and read their logs; one run per target, in order.

    A target with no idle card is `busy`; a refused submission `refused`; a job still running
    `settings.timeout_s` after submission is deleted, `timed-out`; a failed job `failed` with its log.
    """
    runs: dict[str, BenchmarkRun] = {}
    following: dict[str, tuple[BenchmarkTarget, float]] = {}
    for target in targets:
        job = benchmark_job(target, settings)
        if target.idle_gpus < 1:
            runs[job.job_id] = BenchmarkRun(target, job.job_id, "busy", None, None, detail="no idle card")
            continue
        try:
            gateway.submit(job, Placement(job.job_id, target.node.cluster, target.node.name, 1))
        except SubmitRejected as exc:
            runs[job.job_id] = BenchmarkRun(target, job.job_id, "refused", None, None, detail=str(exc))
            continue
        following[job.job_id] = (target, clock.now())
    while following:
        for event in gateway.poll_events():
            if event.job_id not in following or event.kind == "running":
                continue
            target, start = following.pop(event.job_id)
            try:
                log = gateway.logs(event.job_id, LOG_LINES)
            except NoLog as exc:
                log = event.log_tail
                detail = str(exc)
            else:
                detail = event.reason
            outcome: Outcome = "succeeded" if event.kind == "succeeded" else "failed"
            runs[event.job_id] = BenchmarkRun(target, event.job_id, outcome, start, event.time, log, detail)
        now = clock.now()
        for job_id, (target, start) in list(following.items()):
            if now - start >= settings.timeout_s:
                gateway.delete(job_id)
                del following[job_id]
                detail = f"still running after {settings.timeout_s:g} s: deleted"
                runs[job_id] = BenchmarkRun(target, job_id, "timed-out", start, now, detail=detail)
        if following:
            wait(settings.poll_s)
    order = [benchmark_job(t, settings).job_id for t in targets]
    return [runs[j] for j in order]


class FailureLog:
    """Failed benchmark attempts per type key, in a JSON file: a failed type is tried again on a later run,
    then reported (plan_benchmarks); a success clears its record."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def read(self) -> dict[str, tuple[int, str]]:
        """type key -> (failed attempts, last error); empty when there is no file yet."""
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
            return {str(k): (int(v["failures"]), str(v["error"])) for k, v in data.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{self.path}: not a benchmark failure log: {exc}") from None

    def record(self, runs: Sequence[BenchmarkRun]) -> dict[str, tuple[int, str]]:
        """Count the failed and timed-out runs, clear the types that succeeded; returns the new state."""
        state = self.read()
        for run in runs:
            key = run.target.type_key
            if run.outcome == "succeeded":
                state.pop(key, None)
            elif run.outcome in ("failed", "timed-out"):
                state[key] = (state.get(key, (0, ""))[0] + 1, f"{run.outcome}: {run.detail}".strip(": "))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {k: {"failures": n, "error": e} for k, (n, e) in sorted(state.items())}
        self.path.write_text(json.dumps(data, indent=1) + "\n")
        return state
