"""Typed settings: clusters, WAN links and scheduling policy, loaded from YAML.

Every model here is strict (unknown keys are errors) so that a typo in a YAML
file fails at load time with the file, the field and the reason, instead of
silently falling back to a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from config.policies import PolicySettingsError, SchedulerPolicy

REPO_ROOT = Path(__file__).resolve().parent.parent
"""Root of the checkout; built-in data and profiles are found relative to it."""

DEMO_DIR = REPO_ROOT / "config" / "demo"
"""The built-in demo profile: three simulated clusters, no real cluster needed."""

DATA_DIR = REPO_ROOT / "data"
"""Measured data shipped with the project (see data/README.md for sources and licences)."""

Usage = Literal["training", "inference", "hybrid"]
"""Node pool a node belongs to, as in the seed's `<domain>/node.usage` label and taint."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaintConfig(_Strict):
    """A Kubernetes node taint, as written in the cluster YAML."""

    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class NodeGroup(_Strict):
    """`count` identical GPU nodes. Labels and taints follow the seed's scheme.

    Each node gets `<label_domain>/node.usage=<usage>`, `nvidia.com/gpu.product`,
    `nvidia.com/gpu.count` and `nvidia.com/gpu.memory` (MiB) labels, and taints on
    `<label_domain>/node.usage` and `nvidia.com/gpu.product` so that only jobs that
    tolerate both land there.
    """

    name: str = Field(description="Node name prefix; nodes are named <name>-0, <name>-1, ...")
    count: int = Field(1, ge=1, description="How many identical nodes the group holds.")
    gpu_product: str = Field(
        description="Value of the nvidia.com/gpu.product label, e.g. Tesla-V100-SXM2-16GB."
    )
    gpus_per_node: int = Field(ge=1, description="GPUs on each node (nvidia.com/gpu.count).")
    gpu_memory_gb: float = Field(gt=0, description="Memory of one GPU in GB (nvidia.com/gpu.memory).")
    cpu_cores: float = Field(gt=0, description="Allocatable CPU cores on each node.")
    usage: Usage = Field("training", description="Node pool: training, inference or hybrid.")
    extra_labels: dict[str, str] = Field(default_factory=dict, description="Labels beyond the scheme.")
    extra_taints: tuple[TaintConfig, ...] = Field((), description="Taints beyond the scheme.")
    hami: bool = Field(
        False,
        description="The nodes run HAMi's device plugin: jobs asking for card slices (nvidia.com/gpumem, "
        "gpumem-percentage, gpucores) may run here (every node of a `hami` cluster does).",
    )
    device_classes: tuple[str, ...] = Field(
        (),
        description="DRA DeviceClasses the nodes' drivers offer (e.g. gpu.nvidia.com, mig.nvidia.com): jobs "
        "whose resource claims ask for a class run only where it is offered.",
    )


class PromQuery(_Strict):
    """One reading the collector takes from Prometheus, and the raw series that dates it."""

    query: str = Field(description="PromQL whose samples give the reading (labels carry node and card).")
    series: str = Field(
        description="Raw series selector whose sample timestamps say whether the reading is fresh; "
        "missing or older than the staleness limit makes the reading unusable."
    )


_NODE_JOIN = "* on (instance) group_left (nodename) node_uname_info"

WINDOW = "{window}"
"""Placeholder in the `gpu_energy` query for the frozen-check window (a PromQL duration)."""

DCGM_COLLECT_INTERVAL_S = 30.0
"""dcgm-exporter's default `--collect-interval` (30000 ms): its values change at most this often."""


class PromQueries(_Strict):
    """The PromQL of every reading, per cluster; the defaults read dcgm-exporter and node-exporter.

    GPU readings are labelled with `Hostname` and `gpu` (dcgm-exporter's own labels); node readings with
    `nodename` (joined from node-exporter's `node_uname_info`). CPU use is `irate` (the last two samples,
    so a change shows after one scrape) rather than `rate`, whose average over the window lags.
    """

    gpu_utilization: PromQuery = PromQuery(query="DCGM_FI_DEV_GPU_UTIL", series="DCGM_FI_DEV_GPU_UTIL")
    gpu_memory_used: PromQuery = PromQuery(query="DCGM_FI_DEV_FB_USED", series="DCGM_FI_DEV_FB_USED")
    gpu_memory_free: PromQuery = PromQuery(query="DCGM_FI_DEV_FB_FREE", series="DCGM_FI_DEV_FB_FREE")
    cpu_used_cores: PromQuery = PromQuery(
        query=f'sum by (nodename) (irate(node_cpu_seconds_total{{mode!="idle"}}[1m]) {_NODE_JOIN})',
        series="node_cpu_seconds_total",
    )
    memory_used_bytes: PromQuery = PromQuery(
        query=f"(node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes) {_NODE_JOIN}",
        series="node_memory_MemAvailable_bytes",
    )
    gpu_energy: PromQuery | None = Field(
        PromQuery(
            query="increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[{window}])",
            series="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        ),
        description="Per card, how much a counter that grows on every powered GPU grew over the last "
        "`{window}` (filled in with `frozen_after_s`): DCGM's energy since boot. A card whose counter did "
        "not grow is frozen (an exporter serving the same values, fresh timestamps and all) and is "
        "scheduled on inventory alone. Null turns the check off (GPUs before Volta report no energy).",
    )

    @model_validator(mode="after")
    def _window_in_energy_query(self) -> PromQueries:
        if self.gpu_energy is not None and WINDOW not in self.gpu_energy.query:
            raise ValueError(
                f"metrics.queries.gpu_energy.query must contain {WINDOW} where the window goes, e.g. "
                f"increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[{WINDOW}]); set gpu_energy to null to "
                "turn the frozen-exporter check off"
            )
        return self


class MetricsSettings(_Strict):
    """How one cluster's Prometheus is read."""

    scrape_interval_s: float = Field(
        15, gt=0, description="The Prometheus scrape interval of the exporters (its `scrape_interval`)."
    )
    stale_after_s: float | None = Field(
        None,
        gt=0,
        description="A series whose newest sample is older than this is stale; none = 3 scrape intervals.",
    )
    timeout_s: float = Field(
        5, gt=0, description="Seconds to wait for Prometheus before calling it unreachable."
    )
    frozen_after_s: float | None = Field(
        None,
        gt=0,
        description="A card whose energy counter (queries.gpu_energy) did not grow over this window is "
        "frozen; none = 4 scrape intervals, at least 2 of dcgm-exporter's default 30 s collect intervals. "
        "Must span at least 2 scrape intervals and, with dcgm-exporter, 2 of its `--collect-interval`s.",
    )
    queries: PromQueries = PromQueries()

    @model_validator(mode="after")
    def _frozen_window_spans_two_scrapes(self) -> MetricsSettings:
        if self.frozen_after_s is not None and self.frozen_after_s < 2 * self.scrape_interval_s:
            raise ValueError(
                f"metrics.frozen_after_s ({self.frozen_after_s:g}) must be at least 2 scrape intervals "
                f"({2 * self.scrape_interval_s:g} s): a window with one sample cannot show growth"
            )
        return self

    @property
    def staleness_s(self) -> float:
        """The age beyond which a sample is stale."""
        return self.stale_after_s if self.stale_after_s is not None else 3 * self.scrape_interval_s

    @property
    def frozen_window_s(self) -> float:
        """The window over which a powered card's energy counter must grow."""
        if self.frozen_after_s is not None:
            return self.frozen_after_s
        return max(4 * self.scrape_interval_s, 2 * DCGM_COLLECT_INTERVAL_S)


class Cluster(_Strict):
    """One Kubernetes cluster and where to reach its services."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", description="DNS-1123 cluster name.")
    location: str = Field("", description="Where it is, for people (city, site).")
    kube_context: str | None = Field(
        None, description="kubeconfig context of the real cluster; none = simulated."
    )
    kubeconfig: str | None = Field(
        None,
        description="kubeconfig file holding `kube_context` (`~` expanded); none = $KUBECONFIG or "
        "~/.kube/config. Point it at the cluster's API server address (the seed's 'change the target IP').",
    )
    hami: bool = Field(
        False,
        description="The cluster runs the HAMi scheduler: jobs that share a card ask for `nvidia.com/gpumem` "
        "and `nvidia.com/gpucores`, and pods carry `hami.io/resource-pool` when `hami_resource_pool` is set.",
    )
    hami_resource_pool: str | None = Field(
        None, description="HAMi resource pool every pod of this cluster names (the seed's State Grid: poc)."
    )
    kubernetes_version: str = Field(
        "1.30",
        pattern=r"^1\.[0-9]+$",
        description="Kubernetes minor version whose schemas every manifest is validated against before "
        "it is submitted (kubernetes-validate), e.g. 1.30.",
    )
    log_tail_lines: int = Field(
        50, ge=0, description="Lines of a failed job's pod log kept with its end in the job store (0: none)."
    )
    log_tail_bytes: int = Field(
        8192, ge=0, description="At most this many bytes of those lines are kept (the last, whole lines)."
    )
    prometheus_url: str | None = Field(None, description="Prometheus base URL with DCGM metrics.")
    registry: str | None = Field(None, description="OCI registry host:port images are copied to.")
    registry_insecure: bool = Field(
        False, description="Talk plain HTTP / unverified TLS to `registry` (loopback test registries)."
    )
    metrics: MetricsSettings = Field(MetricsSettings(), description="How `prometheus_url` is read.")
    workloads: tuple[Annotated[str, Field(pattern=r"^[a-z0-9.-]+/[a-z0-9]+/[A-Za-z]+$")], ...] | None = Field(
        None,
        description="Workload kinds a CRD defines that a simulated cluster serves, as `<apiVersion>/<kind>` "
        "(kubeflow.org/v1/PyTorchJob, batch.volcano.sh/v1alpha1/Job); none = every kind cpn accepts. Jobs of "
        "another such kind are kept off it. A real cluster's are read from its API discovery.",
    )
    node_groups: tuple[NodeGroup, ...] = Field(
        (),
        description="The cluster's GPU nodes, for a simulated cluster (one without kube_context); a real "
        "cluster's nodes are read from its API server.",
    )

    @model_validator(mode="after")
    def _nodes_of_simulated_clusters(self) -> Cluster:
        if not self.kube_context and not self.node_groups:
            raise ValueError(
                "node_groups: a simulated cluster (no kube_context) needs at least one node group"
            )
        if self.kube_context and self.workloads is not None:
            raise ValueError(
                "workloads: a real cluster's served kinds are read from its API discovery; leave workloads "
                "out, or drop kube_context to simulate the cluster"
            )
        return self


class ClustersConfig(_Strict):
    """All clusters cpn schedules onto, and the WAN between them."""

    label_domain: str = Field(
        "maip.mxsf.io", description="Company domain prefix of the node.usage label and taint."
    )
    clusters: tuple[Cluster, ...] = Field(min_length=1)
    gpu_aliases: dict[str, str] = Field(
        default_factory=dict,
        description="GPU product label -> GPU type, extending cpn.gpus.GPU_ALIASES: merges variants on "
        "purpose (e.g. to treat the PCIe card as the SXM4 one: {NVIDIA-A100-80GB-PCIe: a100-sxm4-80gb}); "
        "variants not named here stay distinct.",
    )
    wan_gbps: dict[str, dict[str, Annotated[float, Field(gt=0)]]] = Field(
        default_factory=dict,
        description="WAN bandwidth in Gbit/s from cluster to cluster; symmetric if only one "
        "direction is given. Every pair of distinct clusters must be covered.",
    )

    @model_validator(mode="after")
    def _check_names_and_links(self) -> ClustersConfig:
        names = [c.name for c in self.clusters]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"cluster names must be unique; repeated: {', '.join(dupes)}")
        known = set(names)
        for src, row in self.wan_gbps.items():
            for dst in (src, *row):
                if dst not in known:
                    raise ValueError(f"wan_gbps names unknown cluster {dst!r}; known: {sorted(known)}")
        missing = [
            f"{a}->{b}"
            for a in names
            for b in names
            if a != b and b not in self.wan_gbps.get(a, {}) and a not in self.wan_gbps.get(b, {})
        ]
        if missing:
            raise ValueError(f"wan_gbps has no bandwidth for {', '.join(missing)}")
        return self

    def bandwidth_gbps(self, src: str, dst: str) -> float:
        """WAN bandwidth between two clusters (inf within one cluster)."""
        if src == dst:
            return float("inf")
        if dst in self.wan_gbps.get(src, {}):
            return self.wan_gbps[src][dst]
        return self.wan_gbps[dst][src]

    def cluster(self, name: str) -> Cluster:
        """The cluster called `name`; KeyError naming the known ones otherwise."""
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(f"unknown cluster {name!r}; known: {[c.name for c in self.clusters]}")


class LoopSettings(_Strict):
    """How the live service (`cpn run`) paces its scheduling rounds, and how often it retrains on its own."""

    interval_s: float = Field(
        10,
        gt=0,
        description="Seconds between rounds when nothing happens; a job arriving or a cluster "
        "event due wakes the loop sooner.",
    )
    retrain_every_completions: int = Field(
        50,
        ge=0,
        description="With champion estimates (the default), retrain the predictor after every this many "
        "jobs completed since the service started or last retrained, in the background (rounds go on), "
        "so the service learns without Prefect; the champion rule decides whether the new model serves. "
        "Like the retrain deployment's threshold; 0: never (retraining left to that deployment).",
    )


class DemoSettings(_Strict):
    """The built-in end-to-end demo on simulated clusters."""

    jobs: int = Field(100, ge=1, description="How many jobs the generated queue holds.")
    seed: int = Field(0, description="Seed of the queue generator and the simulator.")
    arrival_window_s: float = Field(
        0, ge=0, description="Jobs arrive uniformly over this many seconds (0 = all at once)."
    )
    held_out_model: str = Field(
        "least-frequent",
        min_length=1,
        description="With predictor estimates: the model left out of the starting predictor's training "
        "data, so that its jobs are estimated `explore` and the demo retrains on their measured runs; a "
        "model of the queue, or `least-frequent` (the queue's least frequent model).",
    )
    stage_rounds_every_s: float = Field(
        3600,
        ge=0,
        description="A scheduling round runs as the schedule-round flow's stage tasks (collect, "
        "snapshot-and-estimates, optimise, assign, migrate, submit, ...) at most once per this many "
        "simulated seconds; the replay's rounds in between run the same stages in one call, since a "
        "Prefect task run per stage of each of hundreds of rounds costs minutes. 0: every round.",
    )


class ConfigError(ValueError):
    """A config file is invalid; the message names the file, the field and the reason."""


M = TypeVar("M", bound=BaseModel)


def load_model(path: Path | str, model: type[M]) -> M:
    """Load one YAML file into `model`, or raise ConfigError naming file, field and reason."""
    path = Path(path)
    raw = _read_yaml(path)
    try:
        return model.model_validate(raw if raw is not None else {})
    except ValidationError as exc:
        raise ConfigError(f"{path}: {format_validation_error(exc)}") from None


def _read_yaml(path: Path) -> object:
    """The YAML document of `path` (None when empty), or ConfigError naming the file and what is wrong."""
    try:
        return yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem: `field.path: reason`."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        lines.append(f"{loc}: {err['msg']}")
    return "; ".join(lines)


def load_policy(path: Path | str) -> SchedulerPolicy:
    """A `policy.yaml` (config.policies.SchedulerPolicy: the policy's name and every setting it takes, and
    `cpu_threshold`), or ConfigError naming the file, the field and the reason."""
    path = Path(path)
    raw = _read_yaml(path)
    try:
        return SchedulerPolicy.of(raw)
    except PolicySettingsError as exc:
        raise ConfigError(f"{path}: {exc}") from None


class Profile(_Strict):
    """Everything one run needs, from one config folder (clusters.yaml, policy.yaml, demo.yaml)."""

    clusters: ClustersConfig
    policy: SchedulerPolicy = SchedulerPolicy()
    demo: DemoSettings = DemoSettings()
    loop: LoopSettings = LoopSettings()


def load_profile(folder: Path | str = DEMO_DIR) -> Profile:
    """Load a config folder; `policy.yaml`, `demo.yaml` and `loop.yaml` are optional."""
    folder = Path(folder)
    clusters = load_model(folder / "clusters.yaml", ClustersConfig)
    policy = load_policy(folder / "policy.yaml") if (folder / "policy.yaml").exists() else None
    demo = load_model(folder / "demo.yaml", DemoSettings) if (folder / "demo.yaml").exists() else None
    loop = load_model(folder / "loop.yaml", LoopSettings) if (folder / "loop.yaml").exists() else None
    return Profile(
        clusters=clusters,
        policy=policy or SchedulerPolicy(),
        demo=demo or DemoSettings(),
        loop=loop or LoopSettings(),
    )
