"""The workload kinds cpn accepts, in one table: what each one is, where its pods are, how it is submitted
and how its status says it ended.

Intake (`cpn.intake`) counts a job's GPUs over the pod templates found here, the Kubernetes binder
(`cpn.adapters.kubernetes.binding`) places every one of them, the gateway creates and watches the object by
the (group, version, plural) given here, and `cpn.adapters.kubernetes.status` reads its end by the kind's
`ended` rule. A kind is found by its API group and kind; any version it serves is accepted (`versions`:
for the custom resources, the versions their CRD serves, `data/schemas/`), an unknown one is refused naming
them.

Pod counts (`Slot.counts`, multiplied out): a batch Job's `parallelism`, a Deployment's `replicas`, a Volcano
task's `replicas`, a Kubeflow replica spec's `replicas`, a TrainJob's `trainer.numNodes`, a JobSet replicated
job's `replicas` x its Job's `parallelism`, a LeaderWorkerSet's `replicas` groups of one leader and `size - 1`
workers, a Ray worker group's `replicas` (else `minReplicas`, else 0) x `numOfHosts` beside its one head, a
KServe component's `minReplicas` (at least one pod: a service scaled to zero still needs a card to serve).
Counts left unset take the kind's default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from cpn.jobs import JobKind

Phase = Literal["submitted", "running", "succeeded", "failed"]
Ended = tuple[Phase | None, float | None, str]
"""(phase, end time, reason) a workload's status says; (None, None, "") while it has not ended."""


@dataclass(frozen=True)
class Count:
    """One number a pod count is the product of, as the manifest writes it (or the kind's default)."""

    field: str
    """Where it is written, e.g. `spec.pytorchReplicaSpecs.Worker.replicas`."""
    value: Any
    less: int = 0
    """Subtracted from it (a LeaderWorkerSet group's workers are `size - 1`)."""
    least: int = 0
    """The smallest count it stands for (a KServe service scaled to zero serves from one pod)."""


@dataclass(frozen=True)
class Slot:
    """One pod template of a workload: where it is, the template, and how many pods it makes."""

    field: str
    """Dotted path of the template in the object, for messages."""
    template: Any
    """A PodTemplateSpec-shaped mapping (`metadata`, `spec`) as found, or a view of one whose `spec` is the
    object's own mapping (a bare Pod, a KServe predictor), so that what is written into it lands in the
    object; whatever the manifest holds there when it is not a mapping."""
    counts: tuple[Count, ...] = ()
    """Its pod count is their product (1 when empty)."""
    set_replicas: Callable[[int], None] | None = field(default=None, compare=False)
    """Make it `n` pods (the binder spreading a one-pod job over nodes); None when the kind cannot."""
    spec_field: str = ""
    """Dotted path of its pod spec, when not `<field>.spec` (a KServe component is its own pod spec)."""

    @property
    def pod_spec_field(self) -> str:
        return self.spec_field or f"{self.field}.spec"

    @property
    def pods(self) -> int:
        """Its pod count, of a manifest intake accepted (its counts are whole numbers)."""
        total = 1
        for count in self.counts:
            total *= max(int(count.value) - count.less, count.least)
        return total


@dataclass(frozen=True)
class WorkloadKind:
    """How cpn reads, submits and follows one kind of workload."""

    group: str
    """API group; "" for the core group (a Pod)."""
    kind: str
    versions: tuple[str, ...]
    """Versions accepted, the first the one cpn documents."""
    job_kind: JobKind
    plural: str
    project: str
    """Who defines it, for messages and docs."""
    slots: Callable[[dict], list[Slot]] = field(compare=False)
    ended: Callable[[Mapping[str, Any]], Ended] = field(compare=False)
    crds: tuple[str, ...] = ()
    """Its CustomResourceDefinitions' files in `data/schemas/` (`cpn.crd_schemas`; more than one when two
    projects define it: the Training Operator's MPIJob v1 and the MPI Operator's v2beta1); none: a built-in
    kind."""
    runtime_image: bool = False
    """Its containers may leave out `image` (a runtime the cluster holds supplies it)."""
    admission_defaults: Callable[[dict], None] | None = field(default=None, compare=False)
    """What its project's admission webhook fills in before the API server checks the schema, done to a
    copy of the object before cpn checks it (`cpn.crd_schemas.schema_problems`)."""

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(self.api_version(v) for v in self.versions)

    @property
    def service(self) -> bool:
        """Whether it serves until removed (its deletion ends it well)."""
        return self.job_kind == "inference"


def timestamp(text: str | None) -> float | None:
    """RFC 3339 time as Unix seconds; None when absent."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# -- where the pods are --------------------------------------------------------------------------------


def _get(mapping: Any, key: str, default: Any = None) -> Any:
    return mapping.get(key, default) if isinstance(mapping, dict) else default


def _setter(owner: Any, *keys: str) -> Callable[[int], None] | None:
    if not isinstance(owner, dict):
        return None

    def set_count(n: int) -> None:
        for key in keys:
            owner[key] = n

    return set_count


def _single(key: str, default: int = 1) -> Callable[[dict], list[Slot]]:
    """`spec.template`, `spec.<key>` pods (a Deployment's replicas)."""

    def slots(doc: dict) -> list[Slot]:
        spec = _get(doc, "spec", {})
        count = Count(f"spec.{key}", _get(spec, key, default))
        return [Slot("spec.template", _get(spec, "template"), (count,), _setter(spec, key))]

    return slots


def _batch_job(doc: dict) -> list[Slot]:
    spec = _get(doc, "spec", {})

    def set_job(n: int) -> None:
        spec["parallelism"] = spec["completions"] = n
        spec["completionMode"] = "Indexed"

    count = Count("spec.parallelism", _get(spec, "parallelism", 1))
    return [
        Slot("spec.template", _get(spec, "template"), (count,), set_job if isinstance(spec, dict) else None)
    ]


def _volcano(doc: dict) -> list[Slot]:
    tasks = _get(_get(doc, "spec", {}), "tasks")
    if not isinstance(tasks, list):
        return []
    return [
        Slot(
            f"spec.tasks[{i}].template",
            _get(task, "template", task),
            (Count(f"spec.tasks[{i}].replicas", _get(task, "replicas", 1)),),
            _setter(task, "replicas"),
        )
        for i, task in enumerate(tasks)
    ]


def _replica_specs(key: str) -> Callable[[dict], list[Slot]]:
    """Kubeflow's `spec.<key>`: replica type -> {replicas, template}."""

    def slots(doc: dict) -> list[Slot]:
        specs = _get(_get(doc, "spec", {}), key)
        if not isinstance(specs, dict):
            return []
        return [
            Slot(
                f"spec.{key}.{kind}.template",
                _get(replica, "template", replica),
                (Count(f"spec.{key}.{kind}.replicas", _get(replica, "replicas", 1)),),
                _setter(replica, "replicas"),
            )
            for kind, replica in specs.items()
        ]

    return slots


TRAINJOB_NODE = "node"
"""The replicated job of a TrainJob's runtime that runs its trainer (Kubeflow Trainer's name)."""


def _trainjob(doc: dict) -> list[Slot]:
    """One pod per node, `trainer.resourcesPerNode` each: a view whose container is the trainer's."""
    trainer = _get(_get(doc, "spec", {}), "trainer", {})
    if not isinstance(trainer, dict):
        return []
    resources = trainer.get("resourcesPerNode")
    container = {"name": TRAINJOB_NODE, "resources": resources if isinstance(resources, dict) else {}}
    if "image" in trainer:
        container["image"] = trainer["image"]
    template = {"metadata": {}, "spec": {"containers": [container]}}
    count = Count("spec.trainer.numNodes", trainer.get("numNodes", 1))
    return [Slot("spec.trainer", template, (count,), _setter(trainer, "numNodes"), "spec.trainer")]


def _jobset(doc: dict) -> list[Slot]:
    jobs = _get(_get(doc, "spec", {}), "replicatedJobs")
    if not isinstance(jobs, list):
        return []
    out = []
    for i, rj in enumerate(jobs):
        job_spec = _get(_get(rj, "template", {}), "spec", {})
        where = f"spec.replicatedJobs[{i}]"
        counts = (
            Count(f"{where}.replicas", _get(rj, "replicas", 1)),
            Count(f"{where}.template.spec.parallelism", _get(job_spec, "parallelism", 1)),
        )
        out.append(
            Slot(
                f"{where}.template.spec.template", _get(job_spec, "template"), counts, _setter(rj, "replicas")
            )
        )
    return out


def _lws(doc: dict) -> list[Slot]:
    spec = _get(doc, "spec", {})
    lwt = _get(spec, "leaderWorkerTemplate", {})
    groups = Count("spec.replicas", _get(spec, "replicas", 1))
    size = _get(lwt, "size", 1)
    where = "spec.leaderWorkerTemplate"
    if _get(lwt, "leaderTemplate") is None:
        return [
            Slot(
                f"{where}.workerTemplate", _get(lwt, "workerTemplate"), (groups, Count(f"{where}.size", size))
            )
        ]
    return [
        Slot(f"{where}.leaderTemplate", _get(lwt, "leaderTemplate"), (groups,)),
        Slot(
            f"{where}.workerTemplate",
            _get(lwt, "workerTemplate"),
            (groups, Count(f"{where}.size", size, less=1)),
        ),
    ]


def _ray(key: str | None) -> Callable[[dict], list[Slot]]:
    """A Ray cluster spec at `spec.<key>` (`spec` itself when None): one head, and each worker group's
    `replicas` (else `minReplicas`, else 0) x `numOfHosts` workers."""

    def slots(doc: dict) -> list[Slot]:
        spec = _get(doc, "spec", {})
        where = "spec" if key is None else f"spec.{key}"
        cluster = spec if key is None else _get(spec, key)
        if not isinstance(cluster, dict):
            return []
        head = _get(cluster, "headGroupSpec", {})
        out = [Slot(f"{where}.headGroupSpec.template", _get(head, "template"))]
        groups = _get(cluster, "workerGroupSpecs", [])
        for i, group in enumerate(groups if isinstance(groups, list) else []):
            at = f"{where}.workerGroupSpecs[{i}]"
            replicas = (
                Count(f"{at}.replicas", group["replicas"])
                if isinstance(group, dict) and "replicas" in group
                else Count(f"{at}.minReplicas", _get(group, "minReplicas", 0))
            )
            hosts = Count(f"{at}.numOfHosts", _get(group, "numOfHosts", 1))
            setter = _setter(group, "replicas", "minReplicas", "maxReplicas")
            out.append(Slot(f"{at}.template", _get(group, "template"), (replicas, hosts), setter))
        return out

    return slots


KSERVE_COMPONENTS = ("predictor", "transformer", "explainer")
KSERVE_MODEL_KEYS = (
    "model",
    "art",
    "pytorch",
    "tensorflow",
    "triton",
    "onnx",
    "sklearn",
    "xgboost",
    "lightgbm",
    "huggingface",
    "paddle",
    "pmml",
)
"""Keys of a KServe component (v1beta1) that hold its one container, whose image a serving runtime may
supply: a predictor's model or framework, an explainer's `art`. (v1alpha2's `custom` and `alibi` are not
in v1beta1's schema: the API server drops them.)"""


def _isvc(doc: dict) -> list[Slot]:
    """Each component of an InferenceService: the component is itself a pod spec (nodeSelector, affinity,
    tolerations, containers), its model container under `model` (or a framework's key)."""
    spec = _get(doc, "spec", {})
    meta = _get(doc, "metadata", {})
    out = []
    for name in KSERVE_COMPONENTS:
        component = _get(spec, name)
        if component is None and name != "predictor":
            continue
        count = Count(f"spec.{name}.minReplicas", _get(component, "minReplicas", 1), least=1)
        template = {"metadata": meta, "spec": component} if isinstance(component, dict) else component
        out.append(
            Slot(f"spec.{name}", template, (count,), _setter(component, "minReplicas"), f"spec.{name}")
        )
    return out


def _pod(doc: dict) -> list[Slot]:
    return [
        Slot("spec", {"metadata": _get(doc, "metadata", {}), "spec": _get(doc, "spec")}, spec_field="spec")
    ]


def containers(pod_spec: Any) -> list[tuple[str, Any]] | None:
    """(field under the pod spec, container) of each container of a pod spec: its `containers`, else (a
    KServe component) its model container; None when it has no list of them."""
    if not isinstance(pod_spec, dict):
        return None
    if "containers" in pod_spec:
        found = pod_spec["containers"]
        return [(f"containers[{i}]", c) for i, c in enumerate(found)] if isinstance(found, list) else None
    key = next((k for k in KSERVE_MODEL_KEYS if k in pod_spec), None)
    return None if key is None else [(key, pod_spec[key])]


def _jobset_defaults(doc: dict) -> None:
    """JobSet's webhook names unnamed failure-policy rules `failurePolicyRule<i>` (the CRD needs a name)."""
    rules = _get(_get(_get(doc, "spec", {}), "failurePolicy", {}), "rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if isinstance(rule, dict) and not rule.get("name"):
            rule["name"] = f"failurePolicyRule{i}"


# -- how it ends ---------------------------------------------------------------------------------------


def _never(_: Mapping[str, Any]) -> Ended:
    """A service: it serves until removed."""
    return None, None, ""


def _conditions(done: Mapping[str, Phase]) -> Callable[[Mapping[str, Any]], Ended]:
    """Ended by the first true condition whose type is in `done` (type -> phase)."""

    def ended(workload: Mapping[str, Any]) -> Ended:
        status = workload.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("status") != "True" or cond.get("type") not in done:
                continue
            phase = done[cond["type"]]
            if phase == "succeeded":
                return phase, timestamp(status.get("completionTime") or cond.get("lastTransitionTime")), ""
            reason = ": ".join(x for x in (cond.get("reason"), cond.get("message")) if x) or cond["type"]
            return phase, timestamp(cond.get("lastTransitionTime")), reason
        return None, None, ""

    return ended


VOLCANO_DONE: dict[str, Phase] = {
    "Completed": "succeeded",
    "Failed": "failed",
    "Aborted": "failed",
    "Terminated": "failed",
}


def _volcano_ended(workload: Mapping[str, Any]) -> Ended:
    state = (workload.get("status") or {}).get("state") or {}
    phase = VOLCANO_DONE.get(state.get("phase", ""))
    if phase is None:
        return None, None, ""
    reason = ": ".join(x for x in (state.get("reason"), state.get("message")) if x) or state["phase"]
    return phase, timestamp(state.get("lastTransitionTime")), reason if phase == "failed" else ""


RAYJOB_DONE = ("Complete", "Failed")
"""KubeRay's `jobDeploymentStatus` values of a RayJob that has ended; its `jobStatus` SUCCEEDED says well."""


def _rayjob_ended(workload: Mapping[str, Any]) -> Ended:
    status = workload.get("status") or {}
    if status.get("jobDeploymentStatus") not in RAYJOB_DONE:
        return None, None, ""
    end = timestamp(status.get("endTime"))
    if status.get("jobStatus") == "SUCCEEDED":
        return "succeeded", end, ""
    why = [status.get("reason"), status.get("message")]
    reason = ": ".join(x for x in why if x) or f"jobStatus {status.get('jobStatus') or 'unknown'}"
    return "failed", end, reason


def _raycluster_ended(workload: Mapping[str, Any]) -> Ended:
    """A RayCluster runs until removed, unless KubeRay marks it failed."""
    status = workload.get("status") or {}
    if status.get("state") != "failed":
        return None, None, ""
    return (
        "failed",
        timestamp(status.get("stateTransitionTimes", {}).get("failed")),
        status.get("reason") or "failed",
    )


def _pod_ended(workload: Mapping[str, Any]) -> Ended:
    status = workload.get("status") or {}
    phase = {"Succeeded": "succeeded", "Failed": "failed"}.get(status.get("phase", ""))
    if phase is None:
        return None, None, ""
    ends = [
        timestamp((cs.get("state") or {}).get("terminated", {}).get("finishedAt"))
        for cs in status.get("containerStatuses") or []
    ]
    known = [t for t in ends if t is not None]
    reason = ": ".join(x for x in (status.get("reason"), status.get("message")) if x) or "Failed"
    return phase, max(known) if known else None, reason if phase == "failed" else ""  # type: ignore[return-value]


_KUBEFLOW_ENDS = _conditions({"Succeeded": "succeeded", "Failed": "failed"})

WORKLOADS: tuple[WorkloadKind, ...] = (
    WorkloadKind(
        "batch",
        "Job",
        ("v1",),
        "training",
        "jobs",
        "Kubernetes",
        _batch_job,
        _conditions({"Complete": "succeeded", "Failed": "failed"}),
    ),
    WorkloadKind(
        "batch.volcano.sh",
        "Job",
        ("v1alpha1",),
        "training",
        "jobs",
        "Volcano",
        _volcano,
        _volcano_ended,
        ("volcano-batch.volcano.sh_jobs.yaml",),
    ),
    WorkloadKind(
        "apps", "Deployment", ("v1",), "inference", "deployments", "Kubernetes", _single("replicas"), _never
    ),
    WorkloadKind("", "Pod", ("v1",), "training", "pods", "Kubernetes", _pod, _pod_ended),
    WorkloadKind(
        "kubeflow.org",
        "PyTorchJob",
        ("v1",),
        "training",
        "pytorchjobs",
        "Kubeflow Training Operator",
        _replica_specs("pytorchReplicaSpecs"),
        _KUBEFLOW_ENDS,
        ("kubeflow.org_pytorchjobs.json.gz",),
    ),
    WorkloadKind(
        "kubeflow.org",
        "TFJob",
        ("v1",),
        "training",
        "tfjobs",
        "Kubeflow Training Operator",
        _replica_specs("tfReplicaSpecs"),
        _KUBEFLOW_ENDS,
        ("kubeflow.org_tfjobs.json.gz",),
    ),
    WorkloadKind(
        "kubeflow.org",
        "MPIJob",
        ("v1", "v2beta1"),
        "training",
        "mpijobs",
        "Kubeflow Training Operator or MPI Operator",
        _replica_specs("mpiReplicaSpecs"),
        _KUBEFLOW_ENDS,
        ("kubeflow.org_mpijobs.json.gz", "kubeflow.org_mpijobs.v2beta1.json.gz"),
    ),
    WorkloadKind(
        "trainer.kubeflow.org",
        "TrainJob",
        ("v1alpha1",),
        "training",
        "trainjobs",
        "Kubeflow Trainer",
        _trainjob,
        _conditions({"Complete": "succeeded", "Failed": "failed"}),
        ("trainer.kubeflow.org_trainjobs.json.gz",),
        runtime_image=True,
    ),
    WorkloadKind(
        "jobset.x-k8s.io",
        "JobSet",
        ("v1alpha2",),
        "training",
        "jobsets",
        "JobSet",
        _jobset,
        _conditions({"Completed": "succeeded", "Failed": "failed"}),
        ("jobset.x-k8s.io_jobsets.json.gz",),
        admission_defaults=_jobset_defaults,
    ),
    WorkloadKind(
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        ("v1",),
        "inference",
        "leaderworkersets",
        "LeaderWorkerSet",
        _lws,
        _never,
        ("leaderworkerset.x-k8s.io_leaderworkersets.json.gz",),
    ),
    WorkloadKind(
        "ray.io",
        "RayJob",
        ("v1", "v1alpha1"),
        "training",
        "rayjobs",
        "KubeRay",
        _ray("rayClusterSpec"),
        _rayjob_ended,
        ("ray.io_rayjobs.json.gz",),
    ),
    WorkloadKind(
        "ray.io",
        "RayCluster",
        ("v1", "v1alpha1"),
        "training",
        "rayclusters",
        "KubeRay",
        _ray(None),
        _raycluster_ended,
        ("ray.io_rayclusters.json.gz",),
    ),
    WorkloadKind(
        "ray.io",
        "RayService",
        ("v1", "v1alpha1"),
        "inference",
        "rayservices",
        "KubeRay",
        _ray("rayClusterConfig"),
        _never,
        ("ray.io_rayservices.json.gz",),
    ),
    WorkloadKind(
        "serving.kserve.io",
        "InferenceService",
        ("v1beta1",),
        "inference",
        "inferenceservices",
        "KServe",
        _isvc,
        _never,
        ("serving.kserve.io_inferenceservices.json.gz",),
        runtime_image=True,
    ),
)
"""Every kind cpn accepts, in the order messages list them."""

_BY_GROUP_KIND = {(w.group, w.kind): w for w in WORKLOADS}


def pod_count(doc: dict) -> int:
    """Pods of an accepted workload object, all its templates together."""
    known = workload_of(doc)
    return 0 if known is None else sum(slot.pods for slot in known.slots(doc))


def split_api_version(api_version: str) -> tuple[str, str]:
    """(group, version) of an apiVersion: `kubeflow.org/v1` -> (kubeflow.org, v1), `v1` -> ("", v1)."""
    group, _, version = api_version.rpartition("/")
    return group, version


def workload_kind(api_version: str, kind: str) -> WorkloadKind | None:
    """The kind cpn knows by the group of `api_version` and `kind` (whatever the version); None if none."""
    return _BY_GROUP_KIND.get((split_api_version(api_version)[0], kind))


def workload_of(obj: Mapping[str, Any]) -> WorkloadKind | None:
    """The accepted workload kind of an object in one of its accepted versions; None for anything else."""
    api, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api, str) or not isinstance(kind, str):
        return None
    known = workload_kind(api, kind)
    return known if known is not None and api in known.api_versions else None


def custom_kind(api_version: str, kind: str) -> str:
    """`<apiVersion>/<kind>` (`kubeflow.org/v1/PyTorchJob`) of a workload a CRD defines, the key by which a
    job (JobSpec.workload) and a cluster (Node.workloads) name what must be installed for it; "" for a
    built-in kind (a batch Job, a Deployment, a Pod), which every cluster serves."""
    known = workload_kind(api_version, kind)
    return f"{api_version}/{kind}" if known is not None and known.crds else ""


CUSTOM_KINDS = tuple(f"{w.api_version(v)}/{w.kind}" for w in WORKLOADS if w.crds for v in w.versions)
"""Every `custom_kind` key cpn accepts: what a cluster that declares nothing serves."""


SUPPORTED_TEXT = ", ".join(f"{w.kind} ({' or '.join(w.api_versions)})" for w in WORKLOADS)
"""The accepted kinds, for messages."""
