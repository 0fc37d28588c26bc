"""Job intake: Kubernetes manifests carrying cpn's annotations, parsed into JobSpecs.

Accepted documents: the workload kinds of `cpn.workloads` (batch and Volcano Jobs, Kubeflow's PyTorchJob,
TFJob, MPIJob and TrainJob, JobSet, KubeRay's RayJob and RayCluster, a bare Pod: training; Deployments,
LeaderWorkerSets, RayServices and KServe InferenceServices: inference services), in any version their
project serves. A custom resource is checked against its CRD's schema (`cpn.crd_schemas`), as the API
server would. An object with `metadata.generateName` and no name is named at intake (`_generated_name`).

Objects that commonly travel beside a job (`SKIPPED_KINDS`: a Service, a ConfigMap, ...)
are skipped; any other kind is an error, so that a typo (`kind: job`) is not silently dropped.

What cpn needs to know about a job comes from bare-key annotations on the object's own
`metadata.annotations`, as in the original design notes::

    metadata:
      name: train-resnet
      annotations:
        model_name: "resnet50"
        data_size: "20"        # GB
        epoch: "100"

The full list, with what each one means, is in the field descriptions of `Annotations`.
Kubernetes annotation values are strings, so `"20"` and `20` are accepted alike (and stored as
`"20"`). Other keys are another tool's, but for a bare key so close to one of cpn's that it is
probably misspelt (`priorty`: TYPO_SIMILARITY), which is refused. Labels and annotations, of the
object and of its pod templates, are checked by Kubernetes' rules (`_kubernetes_metadata`), so that
what the API server would refuse is refused here.

Jobs are counted whole. A pod's GPUs are the sum of `resources.limits["nvidia.com/gpu"]`
over its containers, its CPU the sum of their `requests.cpu` (else `limits.cpu`); every
GPU-holding pod counts, replicas multiplied out (each kind's counts, `cpn.workloads`: a Volcano
task's `replicas`, a Job's `parallelism`, a JobSet's `replicas` x `parallelism`, ...), and
together they form one gang (`JobSpec.pod_gpus`):
Volcano's TensorFlow example, a ps task and 3 one-GPU workers, needs 3 GPUs. Pods without
GPUs (the ps task) are not placed by cpn. A `gpu_count` annotation may stand in for the GPU
limit of each pod (production pods often leave the limit out); when both are given they must
agree. With neither, each pod of the first template that pins a GPU product (as the seed's examples
do, by toleration) needs one GPU; a job that neither asks for nor pins a GPU is refused
(`CPU_ONLY_REASON`: cpn places GPU jobs). A pod with no CPU declared needs one core.
What was read, and which of these rules counted the GPUs, is said back with each job (`Reading`).

What the manifest already says about where the job may run narrows cpn's choice: a
`nodeSelector` or required node affinity on `<domain>/node.usage` or on any GPU label cpn knows
(cpn.devices: GPU Feature Discovery's, GKE's, EKS's and AKS's accelerator labels, instance types), and
the pod's tolerations of the `nvidia.com/gpu.product` taint (the seed's way to name a card), become
`gpu_products`, `node_pools` and `gpu_memory_min_gb` (cpn.rules.constraint_problem); a GPU label it
cannot read is refused. HAMi slices (`nvidia.com/gpumem`, ...) make the job share a card on HAMi nodes,
DRA claims are counted from their templates (`_dra`), `priorityClassName` gives the priority, and the
objects of the file the pods reference travel with the job (`_with_companions`).

`JobSpec.manifest` keeps each job's document, re-serialised as YAML: the same
content, without the comments and layout of the file it came in.

Input may be hostile: the YAML is read by `cpn.safe_yaml` within `Limits` (size,
documents, depth, aliases, scalar length), every count has an upper bound, booleans
are not numbers, and every message quotes at most a few hundred characters of input.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cpn import devices, workloads
from cpn.crd_schemas import schema_problems
from cpn.inventory import GPU_PRODUCT_LABEL
from cpn.jobs import JobKind, JobSpec, normalise_precision
from cpn.model_names import model_key
from cpn.priority_classes import class_priority
from cpn.rules import POOLS_FOR_KIND, USAGE_TAINT_SUFFIX
from cpn.safe_yaml import DEFAULT_LIMITS, Budget, LimitExceeded, Limits, clip, dump, load_one

SUPPORTED_KINDS: dict[tuple[str, str], JobKind] = {
    (api, w.kind): w.job_kind for w in workloads.WORKLOADS for api in w.api_versions
}
"""(apiVersion, kind) of the objects cpn accepts, and the kind of job each one is (`cpn.workloads`)."""

SKIPPED_KINDS = frozenset(
    {
        "ConfigMap",
        "HorizontalPodAutoscaler",
        "Ingress",
        "Namespace",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "PodDisruptionBudget",
        "PriorityClass",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "Role",
        "RoleBinding",
        "Secret",
        "Service",
        "ServiceAccount",
    }
)
"""Kinds that travel beside a job in one file and are skipped; any other kind is an error."""

GPU_RESOURCE = "nvidia.com/gpu"
"""Extended resource name of NVIDIA GPUs in container resource limits."""

_PRODUCT_KEY = GPU_PRODUCT_LABEL
_USAGE_SUFFIX = USAGE_TAINT_SUFFIX

CPU_ONLY_REASON = (
    f"cpn places GPU jobs; this job asks for no GPU (no pod has a {GPU_RESOURCE} limit or pins a GPU, and "
    "it has no gpu_count annotation): submit it to the cluster directly, or give the pods that need cards "
    f'a resources.limits["{GPU_RESOURCE}"]'
)
"""Why a job none of whose pods asks for a GPU is refused: cpn's placement counts cards (a gang's CPU is
shared out per card), so a job of none has no place in it, and charging it a card it does not use would
keep that card from a GPU job."""

MAX_GPUS = 1024
"""Most GPUs one pod may ask for (the largest nodes hold 8 to 16; this leaves room, not 10^24)."""
MAX_CPU = 100_000
"""Most CPU cores one pod may ask for."""


_SUPPORTED_TEXT = workloads.SUPPORTED_TEXT
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
_DOC_START = re.compile(r"^---(\s|$)")
_WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")
_CPU_QUANTITY = re.compile(r"([0-9]{1,9}(\.[0-9]{0,9})?|\.[0-9]{1,9})(m?)")
_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_K8S_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_K8S_NAME_RULE = "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"

ANNOTATIONS_MAX_BYTES = 256 * 1024
"""Most bytes the annotation keys and values of one object may hold together, as the Kubernetes API server
allows (256 KiB)."""

TYPO_SIMILARITY = 0.85
"""How alike (difflib's ratio, case ignored) an annotation key must be to one of cpn's to be taken for a
misspelling of it. Typos score 0.89 and up (`priorty`/`priority` 0.93, `epochs`/`epoch` 0.91,
`data-size`/`data_size` 0.89); keys people use for their own ends score lower (`dataset`/`data_size` and
`gpu_model`/`gpu_mem` 0.75, `version`/`precision` 0.62) and stay allowed."""


class Annotations(BaseModel):
    """The annotations cpn reads from `metadata.annotations`; other keys are left alone but for probable
    misspellings of these (`_annotations`)."""

    model_config = ConfigDict(
        extra="ignore",
        frozen=True,
        coerce_numbers_to_str=True,
        str_strip_whitespace=True,
        allow_inf_nan=False,
    )

    model_name: str = Field(
        min_length=1,
        max_length=253,
        description='the model\'s name, e.g. "resnet50" (ResNet-50 is the same model), at most 253 '
        "characters with a letter or digit",
    )
    data_size: float | None = Field(
        None, ge=0, le=1e7, description="dataset size in GB, a number from 0 to 10,000,000"
    )
    epoch: int | None = Field(
        None, ge=1, le=1_000_000, description="number of epochs, a whole number from 1 to 1,000,000"
    )
    batch_size: int | None = Field(
        None, ge=1, le=10_000_000, description="batch size, a whole number from 1 to 10,000,000"
    )
    gpu_count: int | None = Field(
        None, ge=1, le=MAX_GPUS, description=f"GPUs per pod, a whole number from 1 to {MAX_GPUS}"
    )
    gpu_mem: float | None = Field(
        None, gt=0, le=10_000, description="GPU memory per GPU in GB, a number > 0 and <= 10,000"
    )
    image_size: float | None = Field(
        None, ge=0, le=10_000, description="container image size in GB, a number from 0 to 10,000"
    )
    total_steps: int | None = Field(
        None, ge=1, le=10**12, description="training steps, a whole number from 1 to 10^12"
    )
    source_cluster: str | None = Field(
        None,
        max_length=63,
        pattern=rf"^{_DNS1123_LABEL}$",
        description="name of the cluster holding the job's image and data now (a DNS-1123 label)",
    )
    priority: int = Field(
        0,
        ge=-(10**9),
        le=10**9,
        description="priority, a whole number from -1,000,000,000 to 1,000,000,000 (higher goes first)",
    )
    gpu_share: float | None = Field(
        None, gt=0, le=1, description="fraction of a card the job accepts to share, 0 < f <= 1"
    )
    checkpoint_interval_s: float | None = Field(
        None,
        gt=0,
        le=10**7,
        description="seconds between the job's checkpoints, a number > 0 (preemption keeps the work up to "
        "the last one)",
    )
    preemptible: Literal["true", "false"] = Field(
        "true", description='"false" marks the job not preemptible (quoted: annotation values are text)'
    )
    precision: str = Field(
        "fp32",
        max_length=32,
        description="training precision: fp32 (also tf32, float32), fp16 (also amp, mixed, half, float16) "
        "or bf16 (also bfloat16)",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans(cls, value: Any) -> Any:
        """YAML reads `yes`, `no`, `on`, `off`, `true` as booleans; none of them is a number or a name."""
        if isinstance(value, bool):
            raise ValueError("a boolean is not accepted here (quote it if you mean the text)")
        return value

    @field_validator("model_name")
    @classmethod
    def _model_name(cls, value: str) -> str:
        """A name that has a model key (cpn.model_names): kept as written, matched by its key."""
        model_key(value)
        return value

    @field_validator("precision")
    @classmethod
    def _precision(cls, value: str) -> str:
        """One spelling per precision, as the throughput table writes it (fp32, fp16, bf16)."""
        try:
            return normalise_precision(value)
        except ValueError:
            raise ValueError("not a known precision") from None


CPN_ANNOTATIONS = frozenset(Annotations.model_fields)
"""The annotation keys cpn reads (the fields of Annotations)."""
_REQUIRED_ANNOTATIONS = frozenset(k for k, f in Annotations.model_fields.items() if f.is_required())
_TRAINING_ANNOTATIONS = ("data_size", "epoch")
"""Required of a training job too (its work, from which its runtime is estimated); a service needs neither."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a submitted file, located as precisely as the parser can."""

    document: int
    """1-based position of the document in the file; 0 for the file as a whole."""
    name: str | None
    """`metadata.name` of the object, when it has one."""
    field: str
    """Dotted path of the offending field, e.g. `metadata.annotations.epoch`; empty for the whole document."""
    reason: str
    """What is wrong and how to fix it."""
    kind: str | None = None
    """`kind` of the object (Job, Deployment), when it has one."""

    def describe(self, source: str) -> str:
        """One line: `jobs.yaml document 2 (Job train-a): metadata.annotations.epoch: <reason>`."""
        where = source if self.document == 0 else f"{source} document {self.document}"
        if self.name:
            where += f" ({self.kind or 'object'} {self.name})"
        what = f"{self.field}: {self.reason}" if self.field else self.reason
        return f"{where}: {what}"


class IntakeError(ValueError):
    """A submission was refused; `problems` lists everything wrong with it, one line each in `str()`."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        super().__init__("\n".join(p.describe(source) for p in self.problems))


MAX_PROBLEMS = 20
"""Problems reported for one submission; the rest are counted, not listed."""


@dataclass(frozen=True)
class Reading:
    """What intake understood of one accepted job, said back to whoever submitted it (the answer of
    `POST /jobs`, `cpn submit`) and shown by `cpn job` and `GET /jobs/{id}`, so that nothing it assumed
    goes unseen. Everything but `gpus_from`, `workload` and `name_from` is the JobSpec's own, in the
    submitter's terms."""

    kind: JobKind
    """training or inference: what its workload kind is (`cpn.workloads`; `workload` below names it)."""
    pods: int
    """GPU-holding pods, started together as one gang."""
    gpus_per_pod: tuple[int, ...]
    """Cards of each of those pods."""
    gpus: int
    """Cards in all."""
    gpus_from: str
    """Where the count came from: the pods' `nvidia.com/gpu` limits, the `gpu_count` annotation, or the
    default of one card per pod of the first template when the manifest gives neither."""
    gpu_products: tuple[str, ...]
    """GPU products the manifest pins the job to (`nvidia.com/gpu.product`); empty: any."""
    node_pools: tuple[str, ...]
    """Pools it may use: those its manifest requires, else its kind's and the hybrid pool."""
    priority: int
    """Higher goes first."""
    gpu_share: float | None
    """Fraction of a card it accepts to share; None: whole cards."""
    gpu_mem_gb: float | None
    """GPU memory per card it declared (`gpu_mem`); None: the predictor estimates it."""
    gpu_memory_min_gb: float | None
    """Least card memory its manifest requires (`nvidia.com/gpu.memory`); None: any."""
    cpu: float
    """CPU cores of its GPU-holding pods in all."""
    notes: tuple[str, ...] = ()
    """What intake did to the job or assumed of its clusters, told when it is accepted: the objects of the
    file carried with it, the ones its clusters must already hold, where its priority came from, other
    schedulers' queue labels removed (`_with_companions`). Not kept: a job shown later has none."""
    workload: str = ""
    """The object that runs it, `<apiVersion> <kind>` (`kubeflow.org/v1 PyTorchJob`); empty: a trace row."""
    name_from: str = ""
    """How its name came: empty when the manifest gives `metadata.name`, else the `generateName` prefix
    and the digest intake completed it with."""

    @classmethod
    def of(cls, spec: JobSpec, said: _Said | None = None) -> Reading:
        """The reading of accepted `spec`; without what intake `said` of it, that is read again from its
        stored manifest by the rules that found it (a job shown after it was accepted)."""
        sizes = spec.pod_gpus or (spec.num_gpus,)
        if said is None:
            said = _stored_said(spec)
        return cls(
            kind=spec.kind,
            pods=len(sizes),
            gpus_per_pod=sizes,
            gpus=spec.num_gpus,
            gpus_from=said.gpus_from,
            gpu_products=spec.gpu_products,
            node_pools=spec.node_pools or tuple(sorted(POOLS_FOR_KIND[spec.kind])),
            priority=spec.priority,
            gpu_share=spec.gpu_share,
            gpu_mem_gb=spec.gpu_mem_gb,
            gpu_memory_min_gb=spec.gpu_memory_min_gb,
            cpu=spec.cpu,
            notes=said.notes,
            workload=said.workload,
            name_from=said.name_from,
        )

    def summary(self) -> str:
        """One line for people, e.g. `2 pods x 1 GPU = 2 GPUs (default: ...); GPU any; pools hybrid,
        inference; priority 0; shares 0.5 of a card; memory per card predicted; 1 CPU`."""
        sizes = self.gpus_per_pod
        alike = len(set(sizes)) == 1
        each = f"x {_count(sizes[0], 'GPU')}" if alike else f"of {' + '.join(map(str, sizes))} GPUs"
        parts = [
            f"{_count(self.pods, 'pod')} {each} = {_count(self.gpus, 'GPU')} ({self.gpus_from})",
            f"GPU {', '.join(self.gpu_products) or 'any'}",
            f"pools {', '.join(self.node_pools)}",
            f"priority {self.priority}",
            "whole cards" if self.gpu_share is None else f"shares {self.gpu_share:g} of a card",
            f"memory per card {'predicted' if self.gpu_mem_gb is None else f'{self.gpu_mem_gb:g} GB'}",
        ]
        if self.gpu_memory_min_gb is not None:
            parts.append(f"cards of at least {self.gpu_memory_min_gb:g} GB")
        if self.name_from:
            parts.append(f"named by {self.name_from}")
        return "; ".join([*parts, _count(self.cpu, "CPU"), *self.notes])


def _count(n: float, unit: str) -> str:
    return f"{n:g} {unit}" if n == 1 else f"{n:g} {unit}s"


def parse_manifests(text: str, source: str = "<stdin>", limits: Limits = DEFAULT_LIMITS) -> list[JobSpec]:
    """Parse a (multi-document) YAML stream into JobSpecs, in document order (`read_manifests`)."""
    return [spec for spec, _ in read_manifests(text, source, limits)]


def read_manifests(
    text: str, source: str = "<stdin>", limits: Limits = DEFAULT_LIMITS
) -> list[tuple[JobSpec, Reading]]:
    """Parse a (multi-document) YAML stream into JobSpecs, each with what was read (its Reading), in
    document order.

    All documents are checked before anything is returned: if any document is
    invalid, or the stream holds no job at all, IntakeError lists the problems
    found (`source` names the file in the messages; at most MAX_PROBLEMS of them)
    and no job is accepted. A stream beyond `limits` is refused as a whole.
    """
    if len(text) > limits.max_bytes or len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise IntakeError(
            source,
            [Problem(0, None, "", f"larger than {limits.max_bytes:,} bytes; split it into several files")],
        )
    pieces = _split_documents(text)
    if len(pieces) > limits.max_documents:
        reason = f"{len(pieces):,} documents; at most {limits.max_documents:,} per submission, split the file"
        raise IntakeError(source, [Problem(0, None, "", reason)])
    budget = Budget(limits)
    problems: list[Problem] = []
    read: list[_Parsed] = []
    first_doc_of: dict[str, int] = {}
    skipped: list[str] = []
    beside: list[dict] = []
    for number, (first_line, chunk) in enumerate(pieces, start=1):
        if len(problems) >= MAX_PROBLEMS:
            break
        try:
            doc = load_one(chunk, budget)
        except yaml.YAMLError as exc:
            problems.append(Problem(number, None, "", _yaml_reason(exc, first_line)))
            if isinstance(exc, LimitExceeded):
                break
            continue
        if doc is None:
            continue
        collector = _Collector(number, doc)
        parsed = _parse_object(doc, collector)
        if parsed is not None and (job_id := parsed.spec.job_id) in first_doc_of:
            collector.add(
                "metadata.name",
                f"job {job_id} is already defined by document {first_doc_of[job_id]}; "
                "give each job its own name",
            )
            parsed = None
        problems.extend(collector.problems)
        if parsed is None:
            if not collector.problems:
                skipped.append(str(doc.get("kind")))
                beside.append(doc)
            continue
        first_doc_of[parsed.spec.job_id] = number
        read.append(parsed)
    if not read and not problems:
        found = f"found only {', '.join(skipped)}" if skipped else "the file is empty"
        problems.append(Problem(0, None, "", f"no job to submit ({found}); cpn accepts {_SUPPORTED_TEXT}"))
    if len(problems) > MAX_PROBLEMS:
        more = len(problems) - MAX_PROBLEMS
        problems = problems[:MAX_PROBLEMS] + [Problem(0, None, "", f"{more} more problem(s) not listed")]
    if problems:
        raise IntakeError(source, problems)
    done = [_with_companions(p, beside, first_doc_of[p.spec.job_id]) for p in read]
    late = [p for d in done for p in d.problems]
    if late:
        raise IntakeError(source, late[:MAX_PROBLEMS])
    return [(d.spec, Reading.of(d.spec, d.said)) for d in done]


class _Said(NamedTuple):
    """What intake tells of how it read a job, beside the JobSpec (`Reading`'s fields of the same names)."""

    gpus_from: str
    name_from: str = ""
    workload: str = ""
    notes: tuple[str, ...] = ()


class _Parsed(NamedTuple):
    """One job read from its document (`_parse_object`), before the rest of its file is looked at."""

    spec: JobSpec
    said: _Said
    doc: dict
    """Its object as accepted (a `generateName` completed to its name)."""


def _stored_said(spec: JobSpec) -> _Said:
    """`_Said` of an accepted job, read again from its stored manifest (its first document)."""
    if not spec.manifest:
        return _Said("num_gpus of the job's trace row (it came without a manifest)")
    (_, first), *_ = _split_documents(spec.manifest)
    doc = load_one(first, Budget(DEFAULT_LIMITS))
    said = _Said("", _name_from(doc), f"{doc['apiVersion']} {doc['kind']}")
    if spec.device_classes:
        return said._replace(gpus_from=DRA_GPUS_FROM)
    col = _Collector(1, doc)  # not reported: the manifest passed intake when it was accepted
    annotations = _annotations(doc["metadata"], col)
    workload = workloads.workload_of(doc)
    assert workload is not None  # it passed intake
    _, gang = _job_gang(doc, workload, annotations.gpu_count if annotations else None, col)
    return said._replace(gpus_from=gang.gpus_from)


def _name_from(doc: dict) -> str:
    """`Reading.name_from` of a workload object as accepted (its name completed, its generateName kept)."""
    meta = doc.get("metadata") or {}
    prefix = meta.get("generateName")
    if (
        not isinstance(prefix, str)
        or not prefix
        or not str(meta.get("name", "")).startswith(prefix[: 63 - GENERATED_SUFFIX])
    ):
        return ""
    return f"generateName {prefix!r} + a digest of the document (the same document gets the same name)"


QUEUE_LABELS = (
    "kueue.x-k8s.io/queue-name",
    "kueue.x-k8s.io/priority-class",
    "volcano.sh/queue-name",
    "scheduling.volcano.sh/queue-name",
    "yunikorn.apache.org/queue",
    "queue",
)
"""Labels and annotations by which other schedulers queue a workload (Kueue's LocalQueue and
WorkloadPriorityClass, Volcano's queue, YuniKorn's queue). cpn has placed the job when it submits it: left
on the object, a cluster running that scheduler would hold it again in a queue that may not exist there."""

COMPANION_KINDS = (
    "ConfigMap",
    "Secret",
    "PersistentVolumeClaim",
    "Service",
    "ResourceClaimTemplate",
    "ResourceClaim",
)
"""Kinds of the objects a job's pods reference that travel with it (`_with_companions`)."""


class _Finished(NamedTuple):
    """A job finished with the rest of its file (`_with_companions`)."""

    spec: JobSpec
    said: _Said
    problems: list[Problem]


def _with_companions(parsed: _Parsed, beside: list[dict], number: int) -> _Finished:
    """The job `parsed` from document `number` (whose object this changes) finished with what the other
    documents of its file say, and what intake says of it with notes of what it did; problems when its DRA
    claims cannot be counted (`_dra`). Every pod template of its kind counts (`cpn.workloads`).

    - Its manifest is followed by the objects of the file its pods need, so that they are submitted with
      it to whichever cluster it is placed on: the ConfigMaps, Secrets and PersistentVolumeClaims its
      pods mount or read (volumes, projected volumes, env, envFrom, imagePullSecrets) and the Services
      that select its pods, of its namespace. One referenced but not in the file is accepted, and the
      note says the cluster must already hold it: Secrets are seldom shipped in job files, and clusters
      often hold shared ConfigMaps and claims; refusing would turn away jobs the cluster runs. A
      reference marked `optional` needs nothing.
    - Its priority comes from its pods' `priorityClassName` (cpn.priority_classes), unless its own
      `priority` annotation says it; the PriorityClass objects of the file define classes.
    - Other schedulers' queue labels (QUEUE_LABELS) and a Volcano Job's `spec.queue` are removed.
    - Its pods' DRA claims are counted from the ResourceClaimTemplates and ResourceClaims of the file,
      which travel with it (`_dra`).
    """
    spec, said, doc = parsed
    doc = _text_annotations(doc)  # as its manifest holds it
    col = _Collector(number, doc)
    notes: list[str] = []
    namespace = spec.job_id.split("/")[0]
    pods = _accepted_pods(doc)
    pod_specs = [p.spec for p in pods]
    pod_labels = [_labels(p.meta) for p in pods]
    changed = _drop_queue_labels(doc, pods, notes)
    priority = _class_priority(doc, pod_specs, beside, notes)
    wanted = {(kind, name): optional for pod in pod_specs for kind, name, optional in _references(pod)}
    mine: list[dict] = []
    for obj in beside:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        kind, name = obj.get("kind"), meta.get("name")
        if kind not in COMPANION_KINDS or meta.get("namespace", "default") != namespace:
            continue
        spec_of = obj.get("spec")
        selector = spec_of.get("selector") if kind == "Service" and isinstance(spec_of, dict) else None
        if (kind, name) in wanted or (
            isinstance(selector, dict)
            and selector
            and any(selector.items() <= lab.items() for lab in pod_labels)
        ):
            mine.append(obj)
            wanted.pop((kind, name), None)
    for (kind, name), optional in sorted(wanted.items()):
        if not optional and kind not in DRA_KINDS:  # a DRA claim's absence is a problem (`_dra`)
            notes.append(f"{kind} {name} is not in the file: the cluster it runs on must already hold it")
    if mine:
        notes.append(
            "carried with it: "
            + ", ".join(f"{o['kind']} {(o.get('metadata') or {}).get('name')}" for o in mine)
        )
    manifest = dump(doc) if changed else spec.manifest
    manifest += "".join("---\n" + dump(obj) for obj in mine)
    spec = replace(spec, manifest=manifest, priority=priority)
    counted = _dra(pods, mine, col, notes)
    if counted is not None:
        sizes, classes = counted
        spec = replace(
            spec, num_gpus=sum(sizes), pod_gpus=sizes if len(sizes) > 1 else (), device_classes=classes
        )
        said = said._replace(gpus_from=DRA_GPUS_FROM)
    return _Finished(spec, said._replace(notes=tuple(notes)), col.problems)


DRA_GPUS_FROM = (
    "DRA resource claims of the pods, counted from their ResourceClaimTemplates and ResourceClaims"
)
"""`Reading.gpus_from` of a job whose DRA claims gave its count."""

DRA_KINDS = ("ResourceClaimTemplate", "ResourceClaim")
"""Kinds of the objects a pod's `resourceClaims` name (resource.k8s.io v1, v1beta1, v1beta2)."""

_PROFILE = re.compile(r"""profile['"]?\]?\s*==\s*['"]([^'"]+)['"]""")
"""A MIG profile in a CEL selector: `device.attributes['gpu.nvidia.com'].profile == '1g.5gb'`."""


@dataclass(frozen=True)
class _Devices:
    """What one DRA device request asks for."""

    device_class: str
    count: int
    profiles: tuple[str, ...]
    """MIG profiles its CEL selectors name (`profile == '1g.5gb'`)."""

    @property
    def mig(self) -> bool:
        return bool(self.profiles) or self.device_class.startswith("mig.")


def _dra(
    pods: list[_Pod], carried: list[dict], col: _Collector, notes: list[str]
) -> tuple[tuple[int, ...], tuple[str, ...]] | None:
    """(cards of each GPU-holding pod, DRA device classes) when the `pods` claim devices by DRA, from the
    claim objects `carried` with it; None when none does. A pod's cards are its GPU limits plus, per claim,
    the devices its requests count (`exactly.count`, `count`; 1 by default); MIG devices (a `mig.` class or
    a `profile` selector) are slices of one card, which cpn holds whole: one card per pod. A claim whose
    object is not in the file, a request with `allocationMode: All` (every matching device of a node: no
    count) and one without a device class are problems."""
    if not any(_claim_refs(p.spec) for p in pods):
        return None
    objects = {(o.get("kind"), (o.get("metadata") or {}).get("name")): o for o in carried}
    sizes: list[int] = []
    classes: set[str] = set()
    any_mig = False
    for pod in pods:
        cards = _pod_gpus(pod.containers, _Collector(0, None)) or 0
        mig = False
        for i, (claim, kind, name) in enumerate(_claim_refs(pod.spec)):
            field = f"{pod.field}.spec.resourceClaims[{i}]"
            obj = objects.get((kind, name))
            if obj is None:
                col.add(
                    field, f"{kind} {name} is not in the file; cpn counts a job's devices from it: add it"
                )
                continue
            for request in _requests(obj):
                found = _devices(request)
                if isinstance(found, str):
                    col.add(field, f"{kind} {name}: {found}")
                    continue
                classes.add(found.device_class)
                mig = mig or found.mig
                cards += 0 if found.mig else found.count
                profiles = f" (MIG {', '.join(found.profiles)})" if found.profiles else ""
                notes.append(f"claim {claim}: {found.count} x {found.device_class}{profiles}")
        cards += 1 if mig else 0
        any_mig = any_mig or mig
        sizes.extend([cards] * pod.replicas if cards else [])
    if not sizes and not col.problems:
        col.add(
            "spec", "its pods' DRA claims ask for no device; give each claim a request with a deviceClassName"
        )
    if any_mig:
        notes.append("MIG slices of a pod are held as one whole card")
    return tuple(sizes), tuple(sorted(classes))


def _requests(obj: dict) -> list[dict]:
    """The device requests of a ResourceClaim (`spec.devices.requests`) or ResourceClaimTemplate
    (`spec.spec.devices.requests`)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if obj.get("kind") == "ResourceClaimTemplate":
        spec = spec.get("spec") if isinstance(spec.get("spec"), dict) else {}
    devices = spec.get("devices") if isinstance(spec.get("devices"), dict) else {}
    requests = devices.get("requests")
    return [r for r in requests if isinstance(r, dict)] if isinstance(requests, list) else []


def _devices(request: dict) -> _Devices | str:
    """What a device request asks for, as resource.k8s.io/v1 and v1beta2 (`exactly`, or the first of
    `firstAvailable`) and v1beta1 (fields on the request) write it; or why cpn cannot count it."""
    body = request.get("exactly") if isinstance(request.get("exactly"), dict) else request
    alternatives = request.get("firstAvailable")
    if isinstance(alternatives, list) and alternatives and isinstance(alternatives[0], dict):
        body = alternatives[0]
    name = request.get("name")
    device_class = body.get("deviceClassName")
    if not isinstance(device_class, str) or not device_class:
        return f"request {name} names no deviceClassName"
    if body.get("allocationMode", "ExactCount") == "All":
        return (
            f"request {name} has allocationMode All, every matching device of a node, which cpn cannot "
            "count; ask for ExactCount with a count"
        )
    count = body.get("count", 1)
    if type(count) is not int or not 1 <= count <= MAX_GPUS:
        return f"request {name}: count {_quote(count)} is not a whole number from 1 to {MAX_GPUS}"
    cels = [s.get("cel") for s in _items(body.get("selectors")) if isinstance(s, dict)]
    expressions = [str(c.get("expression", "")) for c in cels if isinstance(c, dict)]
    profiles = tuple(sorted({p for e in expressions for p in _PROFILE.findall(e)}))
    return _Devices(device_class, count, profiles)


def _accepted_pods(doc: dict) -> list[_Pod]:
    """Every pod template of an accepted workload, where its kind keeps them (`cpn.workloads`: a Kubeflow
    job's replica specs, a JobSet's replicated jobs, a Ray cluster's head and worker groups, ...); what
    is changed in them lands in `doc`."""
    workload = workloads.workload_of(doc)
    assert workload is not None  # it passed intake
    return _pod_templates(doc, workload, _Collector(1, doc))  # not reported: the workload passed intake


def _labels(meta: dict | None) -> dict:
    """The labels of a pod template's metadata; none when it has no mapping of them."""
    found = meta.get("labels") if isinstance(meta, dict) else None
    return found if isinstance(found, dict) else {}


def _references(pod: dict) -> Iterable[tuple[str, str, bool]]:
    """(kind, name, optional) of every ConfigMap, Secret and PersistentVolumeClaim a pod spec references."""
    for volume in _items(pod.get("volumes")):
        if not isinstance(volume, dict):
            continue
        if isinstance(cm := volume.get("configMap"), dict) and cm.get("name"):
            yield "ConfigMap", str(cm["name"]), bool(cm.get("optional"))
        if isinstance(secret := volume.get("secret"), dict) and secret.get("secretName"):
            yield "Secret", str(secret["secretName"]), bool(secret.get("optional"))
        if isinstance(claim := volume.get("persistentVolumeClaim"), dict) and claim.get("claimName"):
            yield "PersistentVolumeClaim", str(claim["claimName"]), False
        projected = volume.get("projected") if isinstance(volume.get("projected"), dict) else {}
        for source in _items(projected.get("sources")):
            for key, kind in (("configMap", "ConfigMap"), ("secret", "Secret")):
                ref = source.get(key) if isinstance(source, dict) else None
                if isinstance(ref, dict) and ref.get("name"):
                    yield kind, str(ref["name"]), bool(ref.get("optional"))
    for _, kind, name in _claim_refs(pod):
        yield kind, name, False
    for secret in _items(pod.get("imagePullSecrets")):
        if isinstance(secret, dict) and secret.get("name"):
            yield "Secret", str(secret["name"]), False
    for container in [*_items(pod.get("initContainers")), *_items(pod.get("containers"))]:
        if not isinstance(container, dict):
            continue
        for source in _items(container.get("envFrom")):
            for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                ref = source.get(key) if isinstance(source, dict) else None
                if isinstance(ref, dict) and ref.get("name"):
                    yield kind, str(ref["name"]), bool(ref.get("optional"))
        for env in _items(container.get("env")):
            source = env.get("valueFrom") if isinstance(env, dict) else None
            for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                ref = source.get(key) if isinstance(source, dict) else None
                if isinstance(ref, dict) and ref.get("name"):
                    yield kind, str(ref["name"]), bool(ref.get("optional"))


def _items(value: Any) -> list:
    """`value` if it is a list, else none: the fields read after intake accepted a workload are not all
    checked by it (a pod's volumes, env, claims), and a malformed one must not break intake."""
    return value if isinstance(value, list) else []


def _drop_queue_labels(doc: dict, pods: list[_Pod], notes: list[str]) -> bool:
    """Remove other schedulers' queue labels and annotations (QUEUE_LABELS) from the workload and its pod
    templates (`pods`, of `doc`), and a Volcano Job's `spec.queue`; note each; whether anything was
    removed."""
    removed: list[str] = []
    for meta in [doc.get("metadata"), *(p.meta for p in pods)]:
        for part in ("labels", "annotations"):
            entries = meta.get(part) if isinstance(meta, dict) else None
            for key in QUEUE_LABELS:
                if isinstance(entries, dict) and key in entries:
                    removed.append(f"{key}={entries.pop(key)}")
    spec = doc.get("spec")
    if doc["apiVersion"].startswith("batch.volcano.sh/") and isinstance(spec, dict) and "queue" in spec:
        removed.append(f"spec.queue={spec.pop('queue')}")
    if removed:
        unique = ", ".join(dict.fromkeys(removed))
        notes.append(f"removed other schedulers' queues ({unique}): cpn places the job itself")
    return bool(removed)


def _class_priority(doc: dict, pod_specs: list[dict], beside: list[dict], notes: list[str]) -> int:
    """The job's priority: its `priority` annotation when it has one, else its pods' highest
    `priorityClassName` (cpn.priority_classes), else the default; the note says which."""
    default = Annotations.model_fields["priority"].default
    annotated = (doc["metadata"].get("annotations") or {}).get("priority")
    names = sorted({p["priorityClassName"] for p in pod_specs if isinstance(p.get("priorityClassName"), str)})
    if not names:
        return default if annotated is None else int(str(annotated))
    if annotated is not None:
        notes.append(f"priority {annotated} from the priority annotation, not priorityClassName {names[0]}")
        return int(str(annotated))
    defined = {
        str(o["metadata"].get("name")): o["value"]
        for o in beside
        if o.get("kind") == "PriorityClass"
        and isinstance(o.get("metadata"), dict)
        and type(o.get("value")) is int
    }
    found = {n: class_priority(n, defined) for n in names}
    known = {n: v for n, v in found.items() if v is not None}
    for name in sorted(set(found) - set(known)):
        notes.append(
            f"priorityClassName {name} is neither a PriorityClass in the file nor a system class: priority "
            f"{default}; the cluster it runs on must define it"
        )
    if not known:
        return default
    name = max(known, key=lambda n: known[n])
    notes.append(f"priority {known[name]} from priorityClassName {name}")
    return known[name]


def _split_documents(text: str) -> list[tuple[int, str]]:
    """Cut a YAML stream at its `---` markers into (first line number, text) pieces that hold content.

    Parsing the pieces one by one lets a syntax error in one document be reported
    without hiding the problems of the others. Comment- and directive-only lines
    stay with the document that follows them.
    """
    pieces: list[tuple[int, str]] = []
    current: list[str] = []
    start, has_content = 1, False
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        marker = _DOC_START.match(line)
        if marker and has_content:
            pieces.append((start, "".join(current)))
            current, start, has_content = [], number, False
        current.append(line)
        body = (line[3:] if marker else line).strip()
        if body and not body.startswith(("#", "%", "...")):
            has_content = True
    if has_content:
        pieces.append((start, "".join(current)))
    return pieces


def _yaml_reason(exc: yaml.YAMLError, first_line: int) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    detail = clip(f"{problem} ({context})" if context else problem, 300)
    if mark is None:
        return f"not valid YAML: {detail}"
    return f"not valid YAML at line {first_line + mark.line}, column {mark.column + 1}: {detail}"


class _Collector:
    """Problems of one document, each stamped with the document's number, name and kind."""

    def __init__(self, number: int, doc: Any) -> None:
        self.number = number
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        kind = doc.get("kind") if isinstance(doc, dict) else None
        self.name = clip(name, 100) if isinstance(name, str) else None
        self.kind = clip(kind, 100) if isinstance(kind, str) else None
        self.problems: list[Problem] = []

    def add(self, field: str, reason: str) -> None:
        problem = Problem(self.number, self.name, field, reason, self.kind)
        if problem not in self.problems:
            self.problems.append(problem)


def _parse_object(doc: Any, col: _Collector) -> _Parsed | None:
    """The JobSpec of one document, what intake says of how it read it (`_Said`) and the object as
    accepted; None when it is not a job (skipped) or has problems (recorded)."""
    if not isinstance(doc, dict):
        col.add("", f"not a Kubernetes object: expected a mapping with apiVersion and kind, got {_type(doc)}")
        return None
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(api, str) or not isinstance(kind, str):
        col.add("", "not a Kubernetes object: apiVersion and kind must both be set")
        return None
    workload = workloads.workload_kind(api, kind)
    if workload is None:
        same = [v for w in workloads.WORKLOADS if w.kind == kind for v in w.api_versions]
        if same:  # a kind cpn knows, in another API group
            col.add(
                "apiVersion",
                f"{_quote(api)} is not an apiVersion of {kind} cpn accepts; use {' or '.join(same)}",
            )
        elif kind not in SKIPPED_KINDS:
            col.add("kind", _unknown_kind(kind))
        return None
    if api not in workload.api_versions:
        col.add(
            "apiVersion",
            f"{_quote(api)} is not a version of {kind} cpn accepts; use {' or '.join(workload.api_versions)}",
        )
        return None

    meta = _mapping(doc.get("metadata"), "metadata", col, required=True)
    if meta is not None and meta.get("name") is None and meta.get("generateName") is not None:
        name = _generated_name(doc, meta["generateName"], col)
        if name is not None:
            doc = {**doc, "metadata": {**meta, "name": name}}
            meta = doc["metadata"]
    job_id = _job_id(meta, col) if meta is not None else None
    annotations = _annotations(meta, col, workload.job_kind) if meta is not None else None
    if meta is not None:
        _kubernetes_metadata(meta, "metadata", col, own=CPN_ANNOTATIONS)
    pods, gang = _job_gang(doc, workload, annotations.gpu_count if annotations else None, col)
    image = _image(pods[0].containers, col, workload.runtime_image) if pods else None
    if not col.problems:
        for field, message in schema_problems(_text_annotations(doc), workload):
            col.add(field, f"{message} ({workload.project} {kind} CRD schema)")
    if col.problems or job_id is None or annotations is None or image is None:
        return None
    a = annotations
    spec = JobSpec(
        job_id=job_id,
        model=a.model_name,
        kind=workload.job_kind,
        batch_size=a.batch_size,
        num_gpus=gang.num_gpus,
        epochs=a.epoch or 1,
        data_size_gb=a.data_size or 0.0,
        total_steps=a.total_steps,
        gpu_mem_gb=a.gpu_mem if a.gpu_mem is not None else gang.gpu_mem_gb,
        cpu=gang.cpu,
        image=image,
        image_size_gb=a.image_size or 0.0,
        priority=a.priority,
        source_cluster=a.source_cluster,
        gpu_share=a.gpu_share if a.gpu_share is not None else gang.gpu_share,
        hami=gang.hami,
        precision=a.precision,
        checkpoint_interval_s=a.checkpoint_interval_s,
        preemptible=a.preemptible == "true",
        gpu_products=gang.gpu_products,
        node_pools=gang.node_pools,
        gpu_memory_min_gb=gang.gpu_memory_min_gb,
        pod_gpus=gang.pod_gpus,
        spread=gang.spread,
        workload=workloads.custom_kind(api, kind),
        manifest=dump(_text_annotations(doc)),
    )
    return _Parsed(spec, _Said(gang.gpus_from, _name_from(doc), f"{api} {kind}"), doc)


KIND_TYPO_SIMILARITY = 0.8
"""How alike (difflib's ratio, case ignored) an unknown kind must be to a known one to be named as what was
probably meant: `job`/`Job` and `Pytorchjob`/`PyTorchJob` are 1.0, `Deploy`/`Deployment` 0.75 is not."""


def _unknown_kind(kind: str) -> str:
    """The refusal of a kind cpn neither accepts nor skips: the kinds it accepts, and the one probably meant
    when one is that close."""
    known = [w.kind for w in workloads.WORKLOADS] + sorted(SKIPPED_KINDS)
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(kind.lower(), by_lower, n=1, cutoff=KIND_TYPO_SIMILARITY)
    hint = f"did you mean {by_lower[close[0]]!r}? " if close and len(kind) <= 64 else ""
    return (
        f"{_quote(kind)} is not a kind cpn accepts; {hint}cpn accepts {_SUPPORTED_TEXT}, and skips "
        f"{', '.join(sorted(SKIPPED_KINDS))} beside them"
    )


GENERATED_SUFFIX = 10
"""Characters of the content digest a `generateName` is completed with."""


def _generated_name(doc: dict, prefix: Any, col: _Collector) -> str | None:
    """The name of an object that gives only `metadata.generateName`: the prefix (cut to leave room, as the
    API server cuts it) and a digest of the whole document. Deterministic, so a retried submission of the
    same document is the same job (the store answers it already exists), and collision-safe: documents
    that differ in anything get different names. Two runs of one manifest need a change in it."""
    if not isinstance(prefix, str) or not prefix:
        col.add(
            "metadata.generateName", f"{_quote(prefix)} is not a name prefix; give a text such as 'train-'"
        )
        return None
    canonical = json.dumps(doc, sort_keys=True, default=str).encode()
    digest = base64.b32encode(hashlib.sha256(canonical).digest()).decode().lower()
    return prefix[: 63 - GENERATED_SUFFIX] + digest[:GENERATED_SUFFIX]


def _text_annotations(doc: dict) -> dict:
    """`doc` with cpn's annotations written as numbers (`epoch: 100`, as the seed writes them) turned into
    the text Kubernetes requires of every annotation value; the rest as it came."""
    meta = doc["metadata"]
    raw = meta.get("annotations") or {}
    numbers = {k: str(v) for k, v in raw.items() if k in CPN_ANNOTATIONS and _is_number(v)}
    return {**doc, "metadata": {**meta, "annotations": {**raw, **numbers}}} if numbers else doc


def _is_number(value: Any) -> bool:
    """An int or float that YAML read, not a boolean (which Python counts as an int)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _quote(value: Any) -> str:
    """`value` for a message: short strings and numbers as written, anything else by its type.

    Never walks a structure, so an alias bomb or a huge scalar cannot blow up a message.
    """
    if isinstance(value, str):
        return repr(clip(value, 100))
    if _is_number(value):
        text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge number"
        return clip(text, 100)
    return repr(value) if isinstance(value, bool) or value is None else _type(value)


def _type(value: Any) -> str:
    names = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }
    return names.get(type(value), f"a {type(value).__name__}")


def _mapping(value: Any, field: str, col: _Collector, *, required: bool = False) -> dict | None:
    """`value` if it is a mapping; otherwise records a problem (a missing optional mapping is just None)."""
    if isinstance(value, dict):
        return value
    if value is None and not required:
        return None
    col.add(field, "missing" if value is None else f"expected a mapping, got {_type(value)}")
    return None


def _job_id(meta: dict, col: _Collector) -> str | None:
    """`<namespace>/<name>`, both checked against Kubernetes' naming rules."""
    name, namespace = meta.get("name"), meta.get("namespace", "default")
    ok = True
    if name is None:
        col.add(
            "metadata.name",
            "missing; give the job a name (or a metadata.generateName prefix cpn completes)",
        )
        ok = False
    elif not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(name):
        col.add(
            "metadata.name",
            f"{_quote(name)} is not a valid DNS-1123 subdomain; use lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit, at most 253 characters",
        )
        ok = False
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS1123_LABEL_RE.fullmatch(namespace):
        col.add(
            "metadata.namespace",
            f"{_quote(namespace)} is not a valid DNS-1123 label; use lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters",
        )
        ok = False
    return f"{namespace}/{name}" if ok else None


def _kubernetes_metadata(meta: dict, field: str, col: _Collector, own: Collection[str] = ()) -> None:
    """Check the `labels` and `annotations` of the metadata at `field` by the API server's rules, so that
    what a cluster would refuse is refused at the door, naming the key.

    Keys are qualified names: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63
    letters, digits, '-', '_' and '.' that starts and ends with a letter or digit (annotation keys case
    ignored, as Kubernetes checks them). Label values are empty or such a name; annotation values any text,
    keys and values of one object at most ANNOTATIONS_MAX_BYTES together. Values are text (null reads as
    empty): a number is refused ("quote it"), but for the annotations in `own` (cpn's), which Annotations
    reads as numbers and which are stored as text (`_text_annotations`).
    """
    for part, what in (("labels", "label"), ("annotations", "annotation")):
        entries = _mapping(meta.get(part), f"{field}.{part}", col) or {}
        size = 0
        for key, value in entries.items():
            if not isinstance(key, str):
                col.add(f"{field}.{part}", f"key {_quote(key)} is {_type(key)}; keys are text: quote it")
                continue
            where = f'{field}.{part}["{clip(key, 100)}"]'
            why = _qualified_name_problem(key if part == "labels" else key.lower())
            if why is not None:
                col.add(where, f"key {_quote(key)} is not a valid {what} key: {why}")
            text = str(value) if key in own and _is_number(value) else value
            if isinstance(text, str):
                size += len((key + text).encode("utf-8", "surrogatepass"))
                why = _label_value_problem(text) if part == "labels" else None
                if why is not None:
                    col.add(where, f"value {_quote(text)} is not a valid label value: {why}")
            elif text is not None and key not in own:
                col.add(where, f"value {_quote(text)} is {_type(text)}; {what} values are text: quote it")
        if part == "annotations" and size > ANNOTATIONS_MAX_BYTES:
            col.add(
                f"{field}.{part}",
                f"keys and values of {size:,} bytes; Kubernetes allows {ANNOTATIONS_MAX_BYTES:,} at most",
            )


def _qualified_name_problem(key: str) -> str | None:
    """Why `key` is not a Kubernetes qualified name (`[prefix/]name`, the form of label and annotation
    keys), or None when it is one."""
    prefix, slash, name = key.rpartition("/")
    if "/" in prefix:
        return "it holds more than one '/'; a key is an optional DNS subdomain prefix and '/', then a name"
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(prefix)):
        return (
            f"the prefix {_quote(prefix)} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and "
            "'.', starting and ending with a letter or digit, at most 253 characters)"
        )
    if not name or len(name) > 63 or not _K8S_NAME.fullmatch(name):
        return f"the name {_quote(name)} must be 1 to 63 {_K8S_NAME_RULE}"
    return None


def _label_value_problem(value: str) -> str | None:
    """Why `value` is not a Kubernetes label value, or None when it is one."""
    if value and (len(value) > 63 or not _K8S_NAME.fullmatch(value)):
        return f"a label value is empty or at most 63 {_K8S_NAME_RULE}"
    return None


def _annotations(meta: dict, col: _Collector, kind: str = "training") -> Annotations | None:
    """Validate `metadata.annotations` of a job of `kind`; each bad or missing key becomes a problem of its
    own (recorded in `col`; the annotations are returned all the same). A training job needs `data_size`
    and `epoch` (a service only `model_name`), and `data_size` above 0 when it gives no `total_steps`: its
    runtime is estimated from data size x epochs."""
    raw = meta.get("annotations")
    if raw is not None and not isinstance(raw, dict):
        col.add("metadata.annotations", f"expected a mapping, got {_type(raw)}")
        return None
    raw = raw or {}
    required = _REQUIRED_ANNOTATIONS | frozenset(_TRAINING_ANNOTATIONS if kind == "training" else ())
    missing = {k for k in required if k not in raw}
    for key in raw:
        if not isinstance(key, str) or key in CPN_ANNOTATIONS or "/" in key:
            continue  # cpn's, or another tool's (a prefixed key), or refused by _kubernetes_metadata
        meant = _probable_typo(key, CPN_ANNOTATIONS)
        if meant is not None and meant not in missing:  # a missing one's own problem names the key found
            col.add(
                f"metadata.annotations.{key}",
                f"not an annotation cpn reads; did you mean {meant}? {_typo_note(key)} Rename it, or give it "
                f"a domain prefix (example.com/{key}) if another tool reads it",
            )
    try:
        annotations = Annotations.model_validate(raw)
    except ValidationError as exc:
        annotations = None
        for err in exc.errors():
            key = str(err["loc"][0])
            field = f"metadata.annotations.{key}"
            if err["type"] == "missing":
                col.add(field, _missing_annotation(key, raw))
            else:
                expected = Annotations.model_fields[key].description
                msg = clip(err["msg"].removeprefix("Value error, "), 200)
                col.add(field, f"{msg} (got {_quote(err['input'])}); expected {expected}")
    if kind != "training":
        return annotations
    for key in _TRAINING_ANNOTATIONS:
        if key not in raw or (annotations is not None and getattr(annotations, key) is None):
            col.add(f"metadata.annotations.{key}", _missing_annotation(key, raw))
    if annotations is not None and annotations.total_steps is None and annotations.data_size == 0:
        col.add(
            "metadata.annotations.data_size",
            "a training job without total_steps needs data_size above 0: its runtime is estimated from the "
            "GB of data it trains on x epoch; give the dataset's size, or total_steps",
        )
    return annotations


def _missing_annotation(key: str, raw: dict) -> str:
    reason = f"missing required annotation; add {key}: <{Annotations.model_fields[key].description}>"
    found = _probable_typo(key, raw)
    return f"{reason} {_typo_note(found)}" if found is not None else reason


def _probable_typo(word: str, candidates: Iterable[Any]) -> str | None:
    """The candidate that `word` most probably misspells, or is misspelt as; None when none is that close.

    One rule both ways (difflib's ratio >= TYPO_SIMILARITY, case ignored): a missing required annotation
    looks for its misspelling among the keys given, a key cpn does not read for the annotation it misspells.
    """
    if len(word) > 64:
        return None
    by_lower = {c.lower(): c for c in candidates if isinstance(c, str) and len(c) <= 64}
    close = difflib.get_close_matches(word.lower(), by_lower, n=1, cutoff=TYPO_SIMILARITY)
    return by_lower[close[0]] if close else None


def _typo_note(found: str) -> str:
    return f"(found {found!r}: a typo?)"


@dataclass(frozen=True)
class _Pod:
    """One pod template of a job: where it is, how many pods it makes, its spec and its containers."""

    field: str
    replicas: int
    spec: dict
    containers: list[tuple[str, dict]]
    meta: dict | None = None
    """The template's metadata (labels, annotations); None when it has none."""


def _pod_templates(doc: dict, workload: workloads.WorkloadKind, col: _Collector) -> list[_Pod]:
    """Each pod template of the job (where `cpn.workloads` says its kind keeps them) with its pod count and
    its containers as (field path, container)."""
    spec = _mapping(doc.get("spec"), "spec", col, required=True)
    if spec is None:
        return []
    slots = workload.slots(doc)
    if not slots:
        col.add(*_no_templates(workload))
        return []
    pods = []
    for slot in slots:
        field = slot.field
        template = _mapping(slot.template, field, col, required=True)
        pod_meta = _mapping(template.get("metadata"), f"{field}.metadata", col) if template else None
        if pod_meta is not None and pod_meta is not doc.get("metadata"):
            _kubernetes_metadata(pod_meta, f"{field}.metadata", col)
        pod_spec = (
            _mapping(template.get("spec"), slot.pod_spec_field, col, required=True) if template else None
        )
        if pod_spec is None:
            continue
        replicas = 1
        for count in slot.counts:
            replicas *= max(_replicas(count.value, count.field, col) - count.less, count.least)
        if replicas > MAX_GPUS:
            col.add(field, f"{replicas:,} pods in all; at most {MAX_GPUS} per job")
            replicas = 1
        found = workloads.containers(pod_spec)
        sfield = slot.pod_spec_field
        if not found:
            col.add(f"{sfield}.containers", _no_containers(workload))
            continue
        checked = [(f"{sfield}.{at}", _mapping(c, f"{sfield}.{at}", col, required=True)) for at, c in found]
        kept = [(f, c) for f, c in checked if c is not None]
        pods.append(_Pod(field, replicas, pod_spec, kept, pod_meta))
    return pods


def _no_containers(workload: workloads.WorkloadKind) -> str:
    if workload.group == "serving.kserve.io":
        return (
            "a KServe component needs containers, or one of "
            f"{', '.join(workloads.KSERVE_MODEL_KEYS)} (v1alpha2's custom and alibi are not in v1beta1)"
        )
    return "a pod needs a non-empty list of containers"


def _no_templates(workload: workloads.WorkloadKind) -> tuple[str, str]:
    """(field, reason) for a manifest of `workload`'s kind whose pod templates are missing or not a list."""
    if workload.group == "batch.volcano.sh":
        return "spec.tasks", "a Volcano job needs a non-empty list of tasks"
    if workload.kind == "RayJob":
        return "spec.rayClusterSpec", (
            "missing; a RayJob holds cards through the cluster it creates. One that runs on an existing "
            "RayCluster (spec.clusterSelector) holds none of its own: submit that RayCluster to cpn instead"
        )
    where = {
        "kubeflow.org": f"spec.{workload.kind[:-3].lower()}ReplicaSpecs",
        "trainer.kubeflow.org": "spec.trainer",
        "jobset.x-k8s.io": "spec.replicatedJobs",
        "ray.io": "spec.rayClusterConfig" if workload.kind == "RayService" else "spec",
    }.get(workload.group, "spec")
    return where, f"a {workload.kind} needs its pod templates here ({workload.project}'s documentation)"


def _replicas(value: Any, field: str, col: _Collector) -> int:
    """A pod count (`replicas`, `parallelism`) as written: a whole number from 0 to MAX_GPUS."""
    if type(value) is not int or not 0 <= value <= MAX_GPUS:
        col.add(field, f"{_quote(value)} is not a whole number of pods from 0 to {MAX_GPUS}")
        return 1
    return value


@dataclass(frozen=True)
class _Gang:
    """What a job holds in all: its GPU-holding pods, their cards and CPU, and where they may run."""

    num_gpus: int
    cpu: float
    pod_gpus: tuple[int, ...]
    gpu_products: tuple[str, ...]
    node_pools: tuple[str, ...]
    gpu_memory_min_gb: float | None
    gpus_from: str
    """Where the GPU count came from (`Reading.gpus_from`)."""
    spread: bool = False
    """Its pods must run on distinct nodes (`_spread`)."""
    hami: bool = False
    """Its pods ask for HAMi slices (`_pod_slice`)."""
    gpu_share: float | None = None
    """The share of a card its HAMi slices take (JobSpec.gpu_share); None: whole cards."""
    gpu_mem_gb: float | None = None
    """Card memory its HAMi slices ask (`nvidia.com/gpumem`), GB."""


def _job_gang(
    doc: dict, workload: workloads.WorkloadKind, per_pod: int | None, col: _Collector
) -> tuple[list[_Pod], _Gang]:
    """The job's pod templates and what they hold in all (`_gang`); `per_pod` is its `gpu_count`."""
    pods = _pod_templates(doc, workload, col)
    slices = [_pod_slice(p.containers, col) for p in pods]
    claimed = [bool(_claim_refs(p.spec)) for p in pods]
    # A pod of HAMi slices without a GPU limit holds one card (HAMi's default-gpu-num); a pod of DRA claims
    # one per claiming pod until its claims are counted from their templates (`_with_companions`).
    limits = [_pod_gpus(p.containers, col) for p in pods]
    gpus = [
        g if g is not None or (s is None and not c) else 1
        for g, s, c in zip(limits, slices, claimed, strict=True)
    ]
    cpus = [_pod_cpu(p.containers, col) for p in pods]
    gang = _gang(pods, gpus, cpus, per_pod, col)
    found = [s for s in slices if s is not None]
    if found:
        memory = [s.memory_gb for s in found if s.memory_gb is not None]
        gang = replace(
            gang, hami=True, gpu_share=max(s.share for s in found), gpu_mem_gb=max(memory) if memory else None
        )
        if any(g is None and s is not None for g, s in zip(limits, slices, strict=True)):
            gang = replace(gang, gpus_from=HAMI_GPUS_FROM)
    return pods, gang


HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"
HAMI_GPUS_FROM = (
    f'resources.limits["{GPU_RESOURCE}"] of the pods\' containers, one card per pod of HAMi slices without '
    "it (HAMi's default-gpu-num)"
)
"""`Reading.gpus_from` of a job some of whose pods ask for HAMi slices without a GPU limit."""
HAMI_SPLIT_COUNT = 10
"""HAMi's default `deviceSplitCount`: at most this many tasks share one card, so one slice takes at least
1/10 of it (Project-HAMi/HAMi, docs/config.md)."""


@dataclass(frozen=True)
class _Slice:
    """The HAMi slice a pod asks of each of its cards."""

    share: float
    """Share of the card: its cores (`gpucores` %), its memory (`gpumem-percentage` %), at least
    1/HAMI_SPLIT_COUNT."""
    memory_gb: float | None
    """`gpumem` (MiB) in GB; None: not given."""


def _pod_slice(containers: list[tuple[str, dict]], col: _Collector) -> _Slice | None:
    """The HAMi slice of a pod, from its containers' `nvidia.com/gpumem` (MiB), `gpumem-percentage` and
    `gpucores` (%) limits (summed over containers); None when none sets one."""
    totals: dict[str, int] = {}
    for field, container in containers:
        limits = _resources(container, field, col, "limits")
        for key, most in ((HAMI_MEMORY, 10**7), (HAMI_MEMORY_PERCENT, 100), (HAMI_CORES, 100)):
            value = limits.get(key)
            if value is None:
                continue
            text = value.strip() if isinstance(value, str) else str(value) if type(value) is int else ""
            if not _WHOLE_NUMBER.fullmatch(text) or not 1 <= int(text) <= most:
                col.add(
                    f'{field}.resources.limits["{key}"]',
                    f"{_quote(value)} is not a whole number from 1 to {most}",
                )
                continue
            totals[key] = totals.get(key, 0) + int(text)
    if not totals:
        return None
    percents = [totals.get(HAMI_CORES, 0), totals.get(HAMI_MEMORY_PERCENT, 0)]
    share = min(1.0, max(p / 100 for p in percents) if any(percents) else 0.0)
    memory = totals.get(HAMI_MEMORY)
    return _Slice(max(share, 1 / HAMI_SPLIT_COUNT), memory / 1024 if memory is not None else None)


def _claim_refs(pod_spec: dict) -> list[tuple[str, str, str]]:
    """(claim name in the pod, kind, object name) of each of a pod's DRA `resourceClaims`: a
    ResourceClaimTemplate (one claim per pod) or a ResourceClaim (shared), as Kubernetes 1.31+ writes them
    (`resourceClaimTemplateName`) and as before (`source.resourceClaimTemplateName`)."""
    out = []
    for claim in _items(pod_spec.get("resourceClaims")):
        if not isinstance(claim, dict):
            continue
        source = claim.get("source") if isinstance(claim.get("source"), dict) else claim
        for key, kind in (
            ("resourceClaimTemplateName", "ResourceClaimTemplate"),
            ("resourceClaimName", "ResourceClaim"),
        ):
            if isinstance(source.get(key), str):
                out.append((str(claim.get("name")), kind, source[key]))
    return out


def _gang(
    pods: list[_Pod], gpus: list[int | None], cpus: list[float], per_pod: int | None, col: _Collector
) -> _Gang:
    """Count the job whole: every GPU-holding pod (replicas multiplied out), as one gang.

    The GPU-holding templates are those with a GPU limit (`per_pod`, the `gpu_count` annotation, must
    then agree with the largest); when none has one, the pods of the first template that pins a GPU
    (`pins_a_gpu`), else of the first, hold `per_pod` cards or one; a job with no limit, no `per_pod` and
    no pin is refused (CPU_ONLY_REASON). Pods without cards (a Volcano `ps` task) are
    not placed by cpn and do not count. The CPU is the holding pods' sum; the constraints are those all
    holding templates agree on (`_constraints`).
    """
    holding = [(p, g, c) for p, g, c in zip(pods, gpus, cpus, strict=True) if g is not None]
    gpus_from = f'resources.limits["{GPU_RESOURCE}"] of the pods\' containers'
    limit = max((g for _, g, _ in holding), default=None)
    if None not in (limit, per_pod) and limit != per_pod:
        col.add(
            "metadata.annotations.gpu_count",
            f'says {per_pod} GPUs but the pod\'s resources.limits["{GPU_RESOURCE}"] add up to {limit}; '
            "make them agree or drop the annotation",
        )
    pinned = [] if holding else [p for p in pods if pins_a_gpu(p.spec)]
    if not holding and pods and (per_pod or pinned):
        first = (pinned or pods)[0]
        holding = [(first, per_pod or 1, cpus[pods.index(first)])]
        gpus_from = (
            f"annotation gpu_count: {per_pod} per pod of {first.field}, no {GPU_RESOURCE} limit"
            if per_pod
            else f"default: 1 GPU per pod of {first.field}, which pins a GPU but has no {GPU_RESOURCE} limit "
            "or gpu_count annotation"
        )
    elif not holding and pods:
        gpus_from = "no GPU asked"
        limited = any(
            GPU_RESOURCE in _resources(c, f, _Collector(0, None), "limits")
            for p in pods
            for f, c in p.containers
        )
        counted = any(p.field == "metadata.annotations.gpu_count" for p in col.problems)
        if not limited and not counted:  # else a GPU count was given, and refused for its value
            col.add("spec", CPU_ONLY_REASON)
    sizes = tuple(g for p, g, _ in holding for _ in range(p.replicas))
    if holding and not sizes:
        col.add(f"{holding[0][0].field}", "no pod holds a GPU: every GPU-holding template has 0 replicas")
    if sum(sizes) > MAX_GPUS:
        col.add("spec", f"its pods hold {sum(sizes):,} GPUs in all; at most {MAX_GPUS} per job")
    products: set[str] | None = None
    pools: set[str] | None = None
    memory: float | None = None
    for pod, _, _ in holding:
        p, u, m = _constraints(pod.spec, col, pod.field + ".spec")
        products = _narrow(products, p, col, pod.field)
        pools = u if pools is None else (pools if u is None else pools & u)
        memory = m if memory is None else (memory if m is None else max(memory, m))
    return _Gang(
        num_gpus=sum(sizes),
        cpu=sum(c * p.replicas for p, _, c in holding) or 1.0,
        pod_gpus=sizes if len(sizes) > 1 else (),
        gpu_products=tuple(sorted(products or ())),
        node_pools=tuple(sorted(pools or ())),
        gpu_memory_min_gb=memory,
        gpus_from=gpus_from,
        spread=len(sizes) > 1 and any(_spread(pod.spec) for pod, _, _ in holding),
    )


HOSTNAME_LABEL = "kubernetes.io/hostname"
"""The node label a pod spread over nodes names as its topology key."""


def pins_a_gpu(pod_spec: dict) -> bool:
    """Whether a pod spec requires GPU nodes by a label or toleration (`_constraints`): the seed's examples
    name their card so (a `nvidia.com/gpu.product` toleration) and leave the GPU limit out. Of a job none of
    whose pods has a GPU limit, the first pod template that pins one holds its cards (`_gang`), and the
    binder gives them to that template (cpn.adapters.kubernetes.binding)."""
    products, _, memory = _constraints(pod_spec, _Collector(0, None), "spec")
    return products is not None or memory is not None


def _spread(pod_spec: dict) -> bool:
    """Whether a pod asks its job's pods onto distinct nodes: a required pod anti-affinity term or a
    `DoNotSchedule` topology spread constraint over `kubernetes.io/hostname`. Kept simple: the term is
    taken to select the job's own pods (its label selector is not read), and any spread constraint to
    mean one pod per node."""
    spreads = pod_spec.get("topologySpreadConstraints")
    if isinstance(spreads, list) and any(
        isinstance(c, dict)
        and c.get("topologyKey") == HOSTNAME_LABEL
        and c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"
        for c in spreads
    ):
        return True
    affinity = pod_spec.get("affinity")
    anti = affinity.get("podAntiAffinity") if isinstance(affinity, dict) else None
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution") if isinstance(anti, dict) else None
    return isinstance(terms, list) and any(
        isinstance(t, dict) and t.get("topologyKey") == HOSTNAME_LABEL for t in terms
    )


def _constraints(
    pod_spec: dict, col: _Collector, field: str
) -> tuple[set[str] | None, set[str] | None, float | None]:
    """(GPU pins, pools, least card memory in GB) a pod requires; None = no constraint.

    Read from `nodeSelector` and the required node affinity (terms are alternatives; a term that does
    not pin a GPU allows any): `<domain>/node.usage` gives the pools, and every GPU label cpn knows
    (cpn.devices: GPU Feature Discovery's, GKE's, EKS's and AKS's accelerator labels, instance types)
    gives GPU pins (`cpn.devices.pin_matches`) or a least memory; a GPU-looking label it cannot read is
    refused at `field`, never ignored. The pod's tolerations of the `nvidia.com/gpu.product` taint, which
    in the seed's scheme is how a job names its card, pin too. Other shapes are left to schema validation.
    """
    products: set[str] | None = None
    pools: set[str] | None = None
    memory: float | None = None
    selector = pod_spec.get("nodeSelector")
    if isinstance(selector, dict):
        for key, value in selector.items():
            if not isinstance(key, str):
                continue
            if key.endswith(_USAGE_SUFFIX):
                pools = {str(value)}
                continue
            pin = _pin(key, "In", [str(value)], col, f'{field}.nodeSelector["{clip(key, 100)}"]')
            if pin is not None:
                products = _narrow(products, pin.products, col, f"{field}.nodeSelector")
                memory = _most(memory, pin.memory_gb)
    affinity = pod_spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, dict)
        else None
    )
    terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
    where = f"{field}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    if isinstance(terms, list) and terms:
        per_term = [_term(t, col, f"{where}[{i}]") for i, t in enumerate(terms) if isinstance(t, dict)]
        if per_term:
            any_p = (
                None if any(p is None for p, _, _ in per_term) else set().union(*(p for p, _, _ in per_term))
            )
            any_u = (
                None if any(u is None for _, u, _ in per_term) else set().union(*(u for _, u, _ in per_term))
            )
            any_m = None if any(m is None for _, _, m in per_term) else min(m for _, _, m in per_term)
            products = _narrow(products, any_p, col, where)
            pools = any_u if pools is None else (pools if any_u is None else pools & any_u)
            memory = _most(memory, any_m)
    tolerated = _tolerated_products(pod_spec.get("tolerations"))
    products = _narrow(products, tolerated, col, f"{field}.tolerations")
    return products, pools, memory


def _term(term: dict, col: _Collector, field: str) -> tuple[set[str] | None, set[str] | None, float | None]:
    products: set[str] | None = None
    pools: set[str] | None = None
    memory: float | None = None
    for i, expr in enumerate(term.get("matchExpressions") or []):
        if not isinstance(expr, dict) or not isinstance(expr.get("values", []), list):
            continue
        key, op, values = expr.get("key"), expr.get("operator"), [str(v) for v in expr.get("values") or []]
        if not isinstance(key, str) or not isinstance(op, str):
            continue
        if key.endswith(_USAGE_SUFFIX):
            if op == "In":
                pools = set(values) if pools is None else pools & set(values)
            continue
        pin = _pin(key, op, values, col, f"{field}.matchExpressions[{i}]")
        if pin is not None:
            products = _narrow(products, pin.products, col, f"{field}.matchExpressions")
            memory = _most(memory, pin.memory_gb)
    return products, pools, memory


def _pin(key: str, op: str, values: list[str], col: _Collector, field: str) -> devices.Pin | None:
    """The GPU pin of one required label expression (cpn.devices.read_pin); a problem at `field` when it is
    a GPU label cpn cannot read."""
    try:
        return devices.read_pin(key, op, values)
    except devices.PinError as exc:
        col.add(field, clip(str(exc), 600))
        return None


def _narrow(
    have: set[str] | None, pins: Collection[str] | None, col: _Collector, field: str
) -> set[str] | None:
    """GPU pins that must all hold, as one set: the pins both allow; refused when they share none (two
    labels naming different cards: no card could satisfy the pod)."""
    if pins is None:
        return have
    if have is None:
        return set(pins)
    both = have & set(pins)
    if not both:
        col.add(
            field,
            f"its GPU pins name different cards ({', '.join(sorted(have))}; {', '.join(sorted(pins))}); "
            "keep the one that says which card the job needs",
        )
        return have
    return both


def _most(memory: float | None, more: float | None) -> float | None:
    """The larger of two least memories, None meaning no least."""
    return memory if more is None else more if memory is None else max(memory, more)


def _tolerated_products(tolerations: Any) -> set[str] | None:
    """The GPU products a pod's tolerations admit; None when they do not narrow it (none, or `Exists`)."""
    if not isinstance(tolerations, list):
        return None
    named: set[str] = set()
    for t in tolerations:
        if not isinstance(t, dict):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, "", _PRODUCT_KEY):
            return None
        if t.get("key") == _PRODUCT_KEY and t.get("value") is not None:
            named.add(str(t["value"]))
    return named or None


def _resources(container: dict, field: str, col: _Collector, which: str) -> dict:
    resources = _mapping(container.get("resources"), f"{field}.resources", col) or {}
    return _mapping(resources.get(which), f"{field}.resources.{which}", col) or {}


def _pod_gpus(containers: list[tuple[str, dict]], col: _Collector) -> int | None:
    """Sum of the containers' GPU limits; None when no container sets one."""
    counts = []
    for field, container in containers:
        value = _resources(container, field, col, "limits").get(GPU_RESOURCE)
        if value is None:
            continue
        text = value.strip() if isinstance(value, str) else str(value) if type(value) is int else ""
        if not _WHOLE_NUMBER.fullmatch(text) or not 1 <= int(text) <= MAX_GPUS:
            col.add(
                f'{field}.resources.limits["{GPU_RESOURCE}"]',
                f"{_quote(value)} is not a whole number of GPUs from 1 to {MAX_GPUS}; "
                "cpn schedules GPU jobs only",
            )
            continue
        counts.append(int(text))
    return sum(counts) if counts else None


def _pod_cpu(containers: list[tuple[str, dict]], col: _Collector) -> float:
    """Sum of the containers' CPU requests (limits where no request is set); 1 core when none declares any."""
    total, declared = 0.0, False
    for field, container in containers:
        for which in ("requests", "limits"):
            value = _resources(container, field, col, which).get("cpu")
            if value is None:
                continue
            cores = _cpu_cores(value)
            if cores is None:
                col.add(
                    f"{field}.resources.{which}.cpu",
                    f"{_quote(value)} is not a CPU quantity up to {MAX_CPU:,} cores; "
                    'write cores ("2", "0.5") or millicores ("500m")',
                )
            else:
                total, declared = total + cores, True
            break
    return total if declared else 1.0


def _cpu_cores(value: Any) -> float | None:
    """Kubernetes CPU quantity ("2", "0.5", "500m", 2) in cores; None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    match = _CPU_QUANTITY.fullmatch(value.strip() if isinstance(value, str) else repr(value))
    if match is None:
        return None
    number = float(match.group(1))
    cores = number / 1000 if match.group(3) else number
    return cores if cores <= MAX_CPU else None


def _image(containers: list[tuple[str, dict]], col: _Collector, runtime_image: bool = False) -> str | None:
    """Image of the first container of a pod template; "" for a kind whose runtime supplies it when the
    container names none (`WorkloadKind.runtime_image`: nothing to copy with the job)."""
    if not containers:
        return None
    field, container = containers[0]
    image = container.get("image")
    if image is None and runtime_image:
        return ""
    if not isinstance(image, str) or not image.strip():
        col.add(f"{field}.image", "missing; every container needs an image")
        return None
    if len(image) > 1024:
        col.add(f"{field}.image", "longer than 1,024 characters; no image reference is")
        return None
    return image.strip()
