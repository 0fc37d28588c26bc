"""Placed jobs rendered as the Kubernetes objects the cluster runs (the ManifestBinder port).

`KubernetesBinder.bind` starts from the user's manifest (`JobSpec.manifest`: the workload first, then the
objects that come with it, such as the Service of a Deployment) or, for a job that came without one (a
trace row), from `cpn.formats.manifests.to_manifest`. It keeps everything the user wrote and adds, on
every GPU-holding pod template, the seed's label scheme (003):

- required node affinity: the job kind's pools (`<domain>/node.usage` In training|hybrid, or
  inference|hybrid), the chosen card (`nvidia.com/gpu.product` In the chosen nodes' products) and the
  placement's nodes (`matchFields metadata.name In ...`), added to each of the user's own node-selector
  terms, whose GPU pins (a GKE accelerator, an instance type, ...: cpn.devices) are dropped, as are
  those of its nodeSelector: cpn honoured them when it chose the nodes, and another cluster's nodes
  would not carry them; a weight-100 preference for the kind's dedicated pool;
- tolerations for the kind's pool taints and for the `nvidia.com/gpu.product` taint of the chosen card,
  with the user's tolerations of other pools or other products dropped (an inference job never carries a
  training toleration);
- `nvidia.com/gpu` requests and limits per pod (none for a job whose DRA claims hold its devices);
  on a HAMi cluster a job sharing a card asks for `nvidia.com/gpumem` (its share of the card's memory,
  MiB) and `nvidia.com/gpucores` (its share, %) unless its manifest asks its own slice;
- a topology spread over nodes when a gang's pods spread over several;
- cpn's labels and annotations (cpn.adapters.kubernetes.labels) on the objects and their pod templates.

Every pod template of the workload's kind gets this (`cpn.workloads`: a Kubeflow job's replica specs, a
JobSet's replicated jobs, a LeaderWorkerSet's leader and worker templates, a Ray cluster's head and worker
groups, a KServe component, a bare Pod). A TrainJob has no pod template: its cards go into
`trainer.resourcesPerNode`, the rest into a `runtimePatches` entry of manager `cpn.<label_domain>` for its
runtime's `node` job.

Volcano Jobs get `schedulerName: volcano` and, unless the user set it, `minAvailable` = all their pods,
so the gang starts together. A job of one pod placed over k nodes (a job wider than any node) runs as k
pods of equal cards: parallelism/completions k (Indexed) for a batch Job, replicas k for a Volcano task,
a Deployment, a Kubeflow replica spec, a JobSet replicated job or a Ray worker group, `numNodes` for a
TrainJob, `minReplicas` for a KServe component; a bare Pod, a Ray head or a LeaderWorkerSet cannot be
spread so, and is refused (BindError).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from cpn.decisions import Placement
from cpn.devices import is_pin_label
from cpn.formats.manifests import to_manifest
from cpn.intake import pins_a_gpu
from cpn.inventory import GPU_PRODUCT_LABEL, Node
from cpn.jobs import JobSpec
from cpn.rules import POOLS_FOR_KIND, is_sharing
from cpn.workloads import TRAINJOB_NODE, containers, workload_of

from .labels import CpnLabels, object_name

GPU_RESOURCE = "nvidia.com/gpu"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_CORES = "nvidia.com/gpucores"
HAMI_POOL_ANNOTATION = "hami.io/resource-pool"
VOLCANO_API = "batch.volcano.sh/v1alpha1"
HOSTNAME_LABEL = "kubernetes.io/hostname"


class BindError(ValueError):
    """The job's manifest cannot run as placed (the message says why)."""


NodeLookup = Callable[[str, str], Node]
"""(cluster, node name) -> the node; KeyError when there is no such node."""


@dataclass
class _Template:
    """One pod template of the workload and how many pods it makes."""

    template: dict[str, Any]
    replicas: int
    set_replicas: Callable[[int], None] | None

    @property
    def pod_spec(self) -> dict[str, Any]:
        return self.template.setdefault("spec", {})

    def containers(self) -> list[dict[str, Any]]:
        return [c for _, c in containers(self.pod_spec) or []]

    def gpus(self) -> int:
        """GPUs one pod of this template holds (the sum of its containers' limits)."""
        total = 0
        for container in self.containers():
            value = ((container.get("resources") or {}).get("limits") or {}).get(GPU_RESOURCE)
            total += int(str(value)) if value is not None else 0
        return total


class KubernetesBinder:
    """Renders placed jobs as Kubernetes objects by the seed's label scheme (see the module doc)."""

    def __init__(
        self,
        label_domain: str,
        nodes: NodeLookup,
        *,
        hami: bool = False,
        hami_resource_pool: str | None = None,
    ) -> None:
        self.labels = CpnLabels(label_domain)
        self.nodes = nodes
        self.hami = hami
        self.hami_resource_pool = hami_resource_pool

    def bind(self, job: JobSpec, placement: Placement) -> tuple[dict[str, Any], ...]:
        """The objects that run `job` as placed, workload first; BindError if they cannot."""
        if placement.job_id != job.job_id:
            raise BindError(f"placement is for {placement.job_id}, not {job.job_id}")
        text = job.manifest or to_manifest(job, self.labels.label_domain)
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
        if not docs:
            raise BindError(f"job {job.job_id}: its manifest holds no object")
        workload, *companions = (copy.deepcopy(d) for d in docs)
        try:
            chosen = [self.nodes(placement.cluster, name) for name, _ in placement.nodes]
        except KeyError as exc:
            raise BindError(f"job {job.job_id}: {exc.args[0]}") from None
        namespace, name = object_name(job.job_id, job.generation)
        self._stamp(workload, job, placement, namespace, name)
        templates = _templates(workload)
        gpu_templates, reshaped = self._gpu_templates(job, templates, placement)
        for t in templates:
            self._stamp_template(t, job, chosen, placement, gpu=t in gpu_templates)
        if workload.get("apiVersion") == VOLCANO_API:
            spec = workload.setdefault("spec", {})
            spec["schedulerName"] = "volcano"
            pods = sum(t.replicas for t in templates)
            # A job cpn spread into pods starts whole; else the user's minAvailable stands.
            if reshaped or "minAvailable" not in spec:
                spec["minAvailable"] = pods
        if workload.get("kind") == "TrainJob":
            _trainjob_patch(workload, templates[0], self.labels.prefix)
        _quantities_as_strings(workload)
        for obj in companions:
            meta = obj.setdefault("metadata", {})
            meta["namespace"] = namespace
            meta.setdefault("labels", {}).update(self.labels.job_labels(job.job_id))
            meta.setdefault("annotations", {})[self.labels.job_id] = job.job_id
        return (workload, *companions)

    def _stamp(self, obj: dict, job: JobSpec, placement: Placement, namespace: str, name: str) -> None:
        meta = obj.setdefault("metadata", {})
        meta["name"], meta["namespace"] = name, namespace
        meta.setdefault("labels", {}).update(self.labels.job_labels(job.job_id))
        annotations = meta.setdefault("annotations", {})
        annotations[self.labels.job_id] = job.job_id
        annotations[self.labels.cards] = ",".join(f"{n}={c}" for n, c in placement.nodes)

    def _gpu_templates(
        self, job: JobSpec, templates: list[_Template], placement: Placement
    ) -> tuple[list[_Template], bool]:
        """The templates whose pods hold the job's cards, shaped so that they add up to the placement;
        and whether a one-pod job was spread into several pods."""
        if job.device_classes:  # DRA: the claims hold the devices; no nvidia.com/gpu is added beside them
            return [t for t in templates if t.gpus() > 0 or t.pod_spec.get("resourceClaims")], False
        # As intake counted them: the templates with a GPU limit; else the first that pins a GPU (a RayJob's
        # CPU head before its pinned workers), else the first.
        holding = (
            [t for t in templates if t.gpus() > 0]
            or [t for t in templates if pins_a_gpu(t.pod_spec)][:1]
            or templates[:1]
        )
        reshaped = False
        if len(holding) == 1 and holding[0].replicas == 1 and len(placement.nodes) > 1:
            if holding[0].set_replicas is None:
                raise BindError(
                    f"job {job.job_id} is one pod that cannot be several; it needs its cards on one node, "
                    f"but the placement spreads them over {len(placement.nodes)}"
                )
            counts = {c for _, c in placement.nodes}
            if len(counts) != 1:
                raise BindError(
                    f"job {job.job_id} is one pod; spread over nodes it runs as pods of equal cards, "
                    f"but the placement gives {placement.nodes}"
                )
            holding[0].set_replicas(len(placement.nodes))
            holding[0].replicas = len(placement.nodes)
            _set_gpus(holding[0], counts.pop())
            reshaped = True
        elif holding[0].gpus() == 0:
            _set_gpus(holding[0], placement.total_gpus // holding[0].replicas)
        total = sum(t.gpus() * t.replicas for t in holding)
        if total != placement.total_gpus:
            raise BindError(
                f"job {job.job_id}: its pods hold {total} GPUs, the placement gives {placement.total_gpus}"
            )
        smallest = min(t.gpus() for t in holding)
        for node, cards in placement.nodes:
            if cards % smallest and not is_sharing(job):
                raise BindError(
                    f"job {job.job_id}: node {node} gets {cards} cards, not a whole number of pods "
                    f"of {smallest} GPUs"
                )
        return holding, reshaped

    def _stamp_template(
        self, t: _Template, job: JobSpec, chosen: list[Node], placement: Placement, *, gpu: bool
    ) -> None:
        meta = t.template.setdefault("metadata", {})
        meta.setdefault("labels", {}).update(self.labels.job_labels(job.job_id))
        annotations = meta.setdefault("annotations", {})
        annotations[self.labels.job_id] = job.job_id
        if self.hami and self.hami_resource_pool:
            annotations[HAMI_POOL_ANNOTATION] = self.hami_resource_pool
        spec = t.pod_spec
        self._affinity(spec, job, chosen)
        self._tolerations(spec, job, chosen[0])
        if not gpu:
            return
        for container in t.containers():
            resources = container.get("resources") or {}
            limit = (resources.get("limits") or {}).get(GPU_RESOURCE)
            if limit is not None:
                resources.setdefault("requests", {})[GPU_RESOURCE] = limit
        if is_sharing(job):
            annotations[self.labels.gpu_share] = f"{job.gpu_share:g}"
        if len(placement.nodes) > 1 and t.replicas > 1:
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": HOSTNAME_LABEL,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": self.labels.job_labels(job.job_id)},
                }
            ]
        if self.hami and is_sharing(job):
            share = job.gpu_share or 1.0
            container = t.containers()[0]
            resources = container.setdefault("resources", {})
            extra = {
                HAMI_MEMORY: str(int(share * chosen[0].gpu_memory_gb * 1024)),
                HAMI_CORES: str(round(share * 100)),
            }
            limits = resources.setdefault("limits", {})
            for key, value in extra.items():
                limits.setdefault(key, value)  # the slice the user asked for stands

    def annotate_pods(self, workload: dict[str, Any], annotations: dict[str, str]) -> None:
        """Add `annotations` to every pod template of a bound workload (a TrainJob's: its cpn patch's)."""
        if workload.get("kind") == "TrainJob":
            for patch in workload["spec"]["runtimePatches"]:
                if patch["manager"] == self.labels.prefix:
                    (job,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
                    meta = job["template"]["spec"]["template"]["metadata"]
                    meta.setdefault("annotations", {}).update(annotations)
            return
        for t in _templates(workload):
            t.template.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)

    def _affinity(self, spec: dict, job: JobSpec, chosen: list[Node]) -> None:
        """Require the placement's nodes, the kind's pools and the chosen card: the user's GPU pins
        (cpn.devices.is_pin_label: a GKE accelerator, an instance type, ...), which cpn honoured when it
        chose the nodes, are replaced by the chosen nodes' `nvidia.com/gpu.product`, a label every node of
        every cluster carries, so that the object stays schedulable where cpn put it."""
        pools = sorted(POOLS_FOR_KIND[job.kind])
        ours = {"key": self.labels.usage, "operator": "In", "values": pools}
        pin = {"key": "metadata.name", "operator": "In", "values": [n.name for n in chosen]}
        card = {"key": GPU_PRODUCT_LABEL, "operator": "In", "values": sorted({n.gpu_product for n in chosen})}
        selector = spec.get("nodeSelector")
        if isinstance(selector, dict):
            for key in [k for k in selector if is_pin_label(k)]:
                del selector[key]
            if not selector:
                del spec["nodeSelector"]
        node_affinity = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {})
        required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
        terms = required.get("nodeSelectorTerms") or [{}]
        for term in terms:
            exprs = [
                e
                for e in term.get("matchExpressions") or []
                if e.get("key") != self.labels.usage and not is_pin_label(str(e.get("key")))
            ]
            term["matchExpressions"] = [*exprs, ours, card]
            fields = [f for f in term.get("matchFields") or [] if f.get("key") != "metadata.name"]
            term["matchFields"] = [*fields, pin]
        required["nodeSelectorTerms"] = terms
        preferred = node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
        want = {"key": self.labels.usage, "operator": "In", "values": [job.kind]}
        if not any(want in (p.get("preference") or {}).get("matchExpressions", []) for p in preferred):
            preferred.append({"weight": 100, "preference": {"matchExpressions": [want]}})

    def _tolerations(self, spec: dict, job: JobSpec, node: Node) -> None:
        pools = POOLS_FOR_KIND[job.kind]
        kept = [
            t
            for t in spec.get("tolerations") or []
            if not (t.get("key") == self.labels.usage and t.get("value") not in pools)
            and not (t.get("key") == GPU_PRODUCT_LABEL and t.get("value") != node.gpu_product)
        ]
        wanted = [
            *(
                {"key": self.labels.usage, "operator": "Equal", "value": p, "effect": "NoSchedule"}
                for p in sorted(pools)
            ),
            {
                "key": GPU_PRODUCT_LABEL,
                "operator": "Equal",
                "value": node.gpu_product,
                "effect": "NoSchedule",
            },
        ]
        spec["tolerations"] = kept + [w for w in wanted if w not in kept]


def _quantities_as_strings(value: Any) -> None:
    """Write every resource quantity as a string ("1", not 1), the form the API's typed models take."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("resources", "resourcesPerNode") and isinstance(item, dict):
                for part in ("limits", "requests"):
                    if isinstance(item.get(part), dict):
                        item[part] = {k: v if isinstance(v, str) else f"{v:g}" for k, v in item[part].items()}
            else:
                _quantities_as_strings(item)
    elif isinstance(value, list):
        for item in value:
            _quantities_as_strings(item)


def _set_gpus(t: _Template, gpus: int) -> None:
    """Give each pod of `t` `gpus` cards: on its first container, requests and limits alike."""
    found = t.containers()
    if not found:
        raise BindError("a pod template has no containers")
    for i, container in enumerate(found):
        resources = container.setdefault("resources", {})
        for which in ("limits", "requests"):
            part = resources.setdefault(which, {}) if i == 0 else resources.get(which) or {}
            part.pop(GPU_RESOURCE, None)
            if i == 0:
                part[GPU_RESOURCE] = gpus


def _templates(obj: dict[str, Any]) -> list[_Template]:
    """Every pod template of the workload (`cpn.workloads`), with its pod count."""
    workload = workload_of(obj)
    if workload is None:
        raise BindError(f"cpn does not run {obj.get('kind')} {obj.get('apiVersion')}")
    if workload.kind == "TrainJob":  # its pods' cards are the trainer's resourcesPerNode: write them there
        obj.setdefault("spec", {}).setdefault("trainer", {}).setdefault("resourcesPerNode", {})
    return [_Template(s.template, s.pods, s.set_replicas) for s in workload.slots(obj)]


def _trainjob_patch(obj: dict[str, Any], t: _Template, manager: str) -> None:
    """Carry what was stamped on a TrainJob's trainer pods (labels, annotations, affinity, tolerations) into
    its `runtimePatches`, under `manager`: a TrainJob has no pod template of its own, its runtime's
    `node` job makes the pods, and a patch entry is how its pods are changed (Kubeflow Trainer)."""
    meta = t.template.get("metadata") or {}
    pod_spec = {k: t.pod_spec[k] for k in ("affinity", "tolerations", "nodeSelector") if k in t.pod_spec}
    pod_template = {
        "metadata": {k: meta[k] for k in ("labels", "annotations") if meta.get(k)},
        "spec": pod_spec,
    }
    job = {"name": TRAINJOB_NODE, "template": {"spec": {"template": pod_template}}}
    patch = {"manager": manager, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}}}
    spec = obj.setdefault("spec", {})
    spec["runtimePatches"] = [p for p in spec.get("runtimePatches") or [] if p.get("manager") != manager]
    spec["runtimePatches"].append(patch)
