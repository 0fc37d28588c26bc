"""Cluster rules every placement keeps: policies plan with them, the simulated clusters enforce them.

- Pools and taints, as the seed's label scheme says: a job may use nodes of its own pool or of the
  hybrid pool (`<domain>/node.usage`). It tolerates those pools' usage taints and the
  `<vendor>/<card>.product` taint carrying the product of the node it is placed on (the scheduler adds
  that toleration at submit, for the card it chose), and nothing else: a node with any other NoSchedule
  or NoExecute taint (`<domain>/control-plane`, ...) takes no job. PreferNoSchedule taints only prefer.
- Gangs: a job takes all its cards at once; a gang spread over nodes asks each node for the job's CPU in
  proportion to the cards it takes there.
- Sharing: a one-card job with a `gpu_share` f shares a card with other sharing jobs while their shares
  sum to at most 1 (HAMi/MPS style); `pick_shared_card` says which card. Other jobs hold cards whole,
  and so does a sharing job run to explore a model the predictor has never seen (`EXCLUSIVE_REASON`).
"""

from __future__ import annotations

from collections.abc import Sequence

from cpn.devices import pin_matches
from cpn.inventory import Node, Taint
from cpn.jobs import JobKind, JobSpec, workload_text

POOLS_FOR_KIND: dict[JobKind, frozenset[str]] = {
    "training": frozenset({"training", "hybrid"}),
    "inference": frozenset({"inference", "hybrid"}),
}
"""Node pools (`<domain>/node.usage`) each job kind may use and tolerates, as in the seed's scheme."""

USAGE_TAINT_SUFFIX = "/node.usage"
"""Key suffix of the pool taint (`<company domain>/node.usage`)."""

PRODUCT_TAINT_SUFFIX = ".product"
"""Key suffix of the card taint (`<vendor domain>/<card>.product`, e.g. `nvidia.com/gpu.product`)."""

EXCLUSIVE_REASON = "explore: whole cards for a model the predictor has not seen"
"""Reason of the `assigned` transition of a sharing job placed on whole cards to measure it cleanly."""

SHARE_EPS = 1e-9
"""Slack when adding card shares, so that 0.1 + 0.2 + 0.7 still fits on one card."""

MEMORY_MARGIN_GB = 0.01
"""A job OOM-killed on cards of X GB is held as needing X + this, so that only larger cards take it."""


def untolerated_taint(node: Node, kind: JobKind) -> Taint | None:
    """The first taint of `node` that keeps jobs of `kind` off it, or None."""
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if taint.key.endswith(USAGE_TAINT_SUFFIX) and taint.value in POOLS_FOR_KIND[kind]:
            continue
        if taint.key.endswith(PRODUCT_TAINT_SUFFIX) and taint.value == node.gpu_product:
            continue
        return taint
    return None


def kind_admits(node: Node, kind: JobKind) -> bool:
    """Whether jobs of `kind` may run on `node`: it is in one of their pools and they tolerate its taints
    (`admission_problem` says why not; this is its fast answer, for the policies' hot path)."""
    return node.usage in POOLS_FOR_KIND[kind] and untolerated_taint(node, kind) is None


def admission_problem(node: Node, kind: JobKind) -> str | None:
    """Why jobs of `kind` may not run on `node` (pool or taint), or None if they may (`kind_admits`)."""
    if kind_admits(node, kind):
        return None
    pools = POOLS_FOR_KIND[kind]
    if node.usage not in pools:
        return f"node {node.key} is in the {node.usage} pool; {kind} jobs use {', '.join(sorted(pools))}"
    taint = untolerated_taint(node, kind)
    return (
        f"node {node.key} has taint {taint.key}={taint.value}:{taint.effect}, "
        f"which {kind} jobs do not tolerate"
    )


def job_pins(job: JobSpec) -> tuple[object, ...]:
    """Everything of `job` that `constraint_problem` reads: jobs with equal pins are allowed on the same
    nodes (the policies cache their answers by it)."""
    return (
        job.gpu_products,
        job.node_pools,
        job.gpu_memory_min_gb,
        job.hami,
        job.device_classes,
        job.workload,
    )


def constraint_problem(node: Node, job: JobSpec) -> str | None:
    """Why `job`'s own constraints keep it off `node`, or None: the GPU products, pools and least card
    memory its manifest requires (JobSpec.gpu_products, node_pools, gpu_memory_min_gb), HAMi slices on a
    node without HAMi (JobSpec.hami), DRA device classes the node does not offer (device_classes), a
    workload kind whose CRD the node's cluster does not serve (JobSpec.workload, Node.workloads)."""
    if not serves(node, job):
        return (
            f"cluster {node.cluster} does not serve {workload_text(job.workload)}: its CRD is not installed "
            f"there; install it there, or job {job.job_id} runs on a cluster that has it"
        )
    if job.gpu_products and not gpu_pinned(node, job):
        return (
            f"node {node.key} has {node.gpu_product}; job {job.job_id} runs only on "
            f"{', '.join(job.gpu_products)}"
        )
    if job.node_pools and node.usage not in job.node_pools:
        pools = ", ".join(job.node_pools)
        return f"node {node.key} is in the {node.usage} pool; job {job.job_id} asks for {pools}"
    if job.hami and not node.hami:
        return (
            f"node {node.key} does not run HAMi; job {job.job_id} asks for HAMi card slices "
            "(nvidia.com/gpumem, gpumem-percentage or gpucores)"
        )
    missing = sorted(set(job.device_classes) - set(node.device_classes))
    if missing:
        return f"node {node.key} offers no DRA device class {', '.join(missing)}; job {job.job_id} claims it"
    if job.gpu_memory_min_gb is not None and node.gpu_memory_gb < job.gpu_memory_min_gb:
        return (
            f"node {node.key} has {node.gpu_memory_gb:g} GB cards; job {job.job_id} asks for at least "
            f"{job.gpu_memory_min_gb:g} GB"
        )
    return None


def serves(node: Node, job: JobSpec) -> bool:
    """Whether `node`'s cluster serves the job's workload kind: a built-in kind, or a CRD it has (or a
    cluster whose kinds are not known)."""
    return not job.workload or node.workloads is None or job.workload in node.workloads


def gpu_pinned(node: Node, job: JobSpec) -> bool:
    """Whether `node`'s card is one of those the job's GPU pins allow (cpn.devices.pin_matches: a product in
    any spelling, or a model of a memory, however the manifest's label named it); True when it pins none."""
    return not job.gpu_products or any(
        pin_matches(pin, node.gpu_product, node.gpu_memory_gb, node.gpu_type) for pin in job.gpu_products
    )


def job_admission_problem(node: Node, job: JobSpec) -> str | None:
    """Why `job` may not run on `node` at all: its kind's pools and taints, then its own constraints."""
    return admission_problem(node, job.kind) or constraint_problem(node, job)


def is_sharing(job: JobSpec) -> bool:
    """Whether `job` shares a card: one card and a gpu_share (a wider job with a share holds whole cards)."""
    return job.gpu_share is not None and job.num_gpus == 1


def gang_cpu(job: JobSpec, cards: int) -> float:
    """CPU cores the job asks of a node where it takes `cards` of its cards."""
    return job.cpu * cards / job.num_gpus


def pick_shared_card(cards: Sequence[tuple[float, float]], share: float, declared_gb: float) -> int | None:
    """Position in `cards` ((free share, free GB) each) of the card a sharing job joins, or None.

    Bin packing, as a HAMi-style device plugin would: among cards with room for the share and the
    job's declared memory, the one with the least free share, then the most free memory, then the first.
    """
    best, best_key = None, None
    for pos, (free_share, free_gb) in enumerate(cards):
        if share <= free_share + SHARE_EPS and declared_gb <= free_gb:
            key = (free_share, -free_gb)
            if best_key is None or key < best_key:
                best, best_key = pos, key
    return best
