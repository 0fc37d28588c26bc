"""Job intake: Kubernetes manifests carrying cpn's annotations, parsed into JobSpecs.

Accepted documents (anything else, such as the Service next to a Deployment, is skipped):

- `batch/v1` `Job` and `batch.volcano.sh/v1alpha1` `Job`: training jobs;
- `apps/v1` `Deployment`: an inference service.

What cpn needs to know about a job comes from bare-key annotations on the object's own
`metadata.annotations`, as in the original design notes::

    metadata:
      name: train-resnet
      annotations:
        model_name: "resnet50"
        data_size: "20"        # GB
        epoch: "100"

The full list, with what each one means, is in the field descriptions of `Annotations`.
Kubernetes annotation values are strings, so `"20"` and `20` are accepted alike.

Resources are read per pod, because cpn places a job on the cards of one node:
the GPU count is the sum of `resources.limits["nvidia.com/gpu"]` over the pod's
containers, CPU the sum of their `requests.cpu` (else `limits.cpu`). Replicas are not
multiplied in. A Volcano job with several tasks counts its largest pod template. A
`gpu_count` annotation may stand in for the GPU limit (production pods often leave
the limit out); when both are given they must agree. With neither, the job needs
one GPU; with no CPU declared, one core.

`JobSpec.manifest` keeps each job's document, re-serialised as YAML: the same
content, without the comments and layout of the file it came in.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cpn.jobs import JobKind, JobSpec

SUPPORTED_KINDS: dict[tuple[str, str], JobKind] = {
    ("batch/v1", "Job"): "training",
    ("batch.volcano.sh/v1alpha1", "Job"): "training",
    ("apps/v1", "Deployment"): "inference",
}
"""(apiVersion, kind) of the objects cpn accepts, and the kind of job each one is."""

GPU_RESOURCE = "nvidia.com/gpu"
"""Extended resource name of NVIDIA GPUs in container resource limits."""

_SUPPORTED_TEXT = ", ".join(f"{api} {kind}" for api, kind in SUPPORTED_KINDS)
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")
_DNS1123_LABEL_RE = re.compile(rf"^{_DNS1123_LABEL}$")
_DOC_START = re.compile(r"^---(\s|$)")
_WHOLE_NUMBER = re.compile(r"^[0-9]+$")
_CPU_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(m?)$")
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class Annotations(BaseModel):
    """The annotations cpn reads from `metadata.annotations`; other keys are ignored."""

    model_config = ConfigDict(
        extra="ignore",
        frozen=True,
        coerce_numbers_to_str=True,
        str_strip_whitespace=True,
        allow_inf_nan=False,
    )

    model_name: str = Field(min_length=1, description='the model\'s name, e.g. "resnet50"')
    data_size: float = Field(ge=0, description="dataset size in GB, a number >= 0")
    epoch: int = Field(ge=1, description="number of epochs, a whole number >= 1")
    batch_size: int | None = Field(None, ge=1, description="batch size, a whole number >= 1")
    gpu_count: int | None = Field(None, ge=1, description="GPUs per pod, a whole number >= 1")
    gpu_mem: float | None = Field(None, gt=0, description="GPU memory per GPU in GB, a number > 0")
    image_size: float | None = Field(None, ge=0, description="container image size in GB, a number >= 0")
    total_steps: int | None = Field(None, ge=1, description="training steps, a whole number >= 1")
    source_cluster: str | None = Field(
        None,
        pattern=rf"^{_DNS1123_LABEL}$",
        description="name of the cluster holding the job's image and data now (a DNS-1123 label)",
    )
    priority: int = Field(0, description="priority, a whole number (higher goes first)")
    gpu_share: float | None = Field(
        None, gt=0, le=1, description="fraction of a card the job accepts to share, 0 < f <= 1"
    )


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


def parse_manifests(text: str, source: str = "<stdin>") -> list[JobSpec]:
    """Parse a (multi-document) YAML stream into JobSpecs, in document order.

    All documents are checked before anything is returned: if any document is
    invalid, or the stream holds no job at all, IntakeError lists every problem
    found (`source` names the file in the messages) and no job is accepted.
    """
    problems: list[Problem] = []
    specs: list[JobSpec] = []
    first_doc_of: dict[str, int] = {}
    skipped: list[str] = []
    for number, (first_line, chunk) in enumerate(_split_documents(text), start=1):
        try:
            doc = yaml.load(chunk, Loader=_SafeLoader)
        except yaml.YAMLError as exc:
            problems.append(Problem(number, None, "", _yaml_reason(exc, first_line)))
            continue
        if doc is None:
            continue
        collector = _Collector(number, doc)
        spec = _parse_object(doc, collector)
        if spec is not None and spec.job_id in first_doc_of:
            collector.add(
                "metadata.name",
                f"job {spec.job_id} is already defined by document {first_doc_of[spec.job_id]}; "
                "give each job its own name",
            )
            spec = None
        problems.extend(collector.problems)
        if spec is None:
            if not collector.problems:
                skipped.append(str(doc.get("kind")))
            continue
        first_doc_of[spec.job_id] = number
        specs.append(spec)
    if not specs and not problems:
        found = f"found only {', '.join(skipped)}" if skipped else "the file is empty"
        problems.append(Problem(0, None, "", f"no job to submit ({found}); cpn accepts {_SUPPORTED_TEXT}"))
    if problems:
        raise IntakeError(source, problems)
    return specs


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
    detail = f"{problem} ({context})" if context else problem
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
        self.name = name if isinstance(name, str) else None
        self.kind = kind if isinstance(kind, str) else None
        self.problems: list[Problem] = []

    def add(self, field: str, reason: str) -> None:
        problem = Problem(self.number, self.name, field, reason, self.kind)
        if problem not in self.problems:
            self.problems.append(problem)


def _parse_object(doc: Any, col: _Collector) -> JobSpec | None:
    """The JobSpec of one document; None when it is not a job (skipped) or has problems (recorded)."""
    if not isinstance(doc, dict):
        col.add("", f"not a Kubernetes object: expected a mapping with apiVersion and kind, got {_type(doc)}")
        return None
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(api, str) or not isinstance(kind, str):
        col.add("", "not a Kubernetes object: apiVersion and kind must both be set")
        return None
    job_kind = SUPPORTED_KINDS.get((api, kind))
    if job_kind is None:
        if kind in {k for _, k in SUPPORTED_KINDS}:
            col.add("apiVersion", f"{kind} {api} is not supported; cpn accepts {_SUPPORTED_TEXT}")
        return None

    meta = _mapping(doc.get("metadata"), "metadata", col, required=True)
    job_id = _job_id(meta, col) if meta is not None else None
    annotations = _annotations(meta, col) if meta is not None else None
    pods = _pod_templates(doc, api, col)
    pod_gpus = [g for g in (_pod_gpus(containers, col) for containers in pods) if g is not None]
    pod_cpus = [_pod_cpu(containers, col) for containers in pods]
    image = _image(pods[0], col) if pods else None
    limit_gpus = max(pod_gpus) if pod_gpus else None
    if annotations is not None and None not in (annotations.gpu_count, limit_gpus):
        if annotations.gpu_count != limit_gpus:
            col.add(
                "metadata.annotations.gpu_count",
                f'says {annotations.gpu_count} GPUs but the pod\'s resources.limits["{GPU_RESOURCE}"] '
                f"add up to {limit_gpus}; make them agree or drop the annotation",
            )
    if col.problems or job_id is None or annotations is None or image is None:
        return None
    a = annotations
    return JobSpec(
        job_id=job_id,
        model=a.model_name,
        kind=job_kind,
        batch_size=a.batch_size,
        num_gpus=a.gpu_count or limit_gpus or 1,
        epochs=a.epoch,
        data_size_gb=a.data_size,
        total_steps=a.total_steps,
        gpu_mem_gb=a.gpu_mem,
        cpu=max(pod_cpus, default=1.0),
        image=image,
        image_size_gb=a.image_size or 0.0,
        priority=a.priority,
        source_cluster=a.source_cluster,
        gpu_share=a.gpu_share,
        manifest=yaml.dump(doc, Dumper=_SafeDumper, sort_keys=False, allow_unicode=True),
    )


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
            "missing; cpn needs a fixed name to make the job id (generateName is not supported)",
        )
        ok = False
    elif not isinstance(name, str) or len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        col.add(
            "metadata.name",
            f"{name!r} is not a valid DNS-1123 subdomain; use lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit, at most 253 characters",
        )
        ok = False
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS1123_LABEL_RE.match(namespace):
        col.add(
            "metadata.namespace",
            f"{namespace!r} is not a valid DNS-1123 label; use lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters",
        )
        ok = False
    return f"{namespace}/{name}" if ok else None


def _annotations(meta: dict, col: _Collector) -> Annotations | None:
    """Validate `metadata.annotations`; each bad or missing key becomes a problem of its own."""
    raw = meta.get("annotations")
    if raw is not None and not isinstance(raw, dict):
        col.add("metadata.annotations", f"expected a mapping, got {_type(raw)}")
        return None
    raw = raw or {}
    try:
        return Annotations.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors():
            key = str(err["loc"][0])
            field = f"metadata.annotations.{key}"
            if err["type"] == "missing":
                col.add(field, _missing_annotation(key, raw))
            else:
                expected = Annotations.model_fields[key].description
                col.add(field, f"{err['msg']} (got {err['input']!r}); expected {expected}")
        return None


def _missing_annotation(key: str, raw: dict) -> str:
    reason = f"missing required annotation; add {key}: <{Annotations.model_fields[key].description}>"
    close = difflib.get_close_matches(key, [str(k) for k in raw], n=1)
    return f"{reason} (found {close[0]!r}: a typo?)" if close else reason


def _pod_templates(doc: dict, api: str, col: _Collector) -> list[list[tuple[str, dict]]]:
    """The containers, as (field path, container), of each pod template of the job."""
    spec = _mapping(doc.get("spec"), "spec", col, required=True)
    if spec is None:
        return []
    if api.startswith("batch.volcano.sh/"):
        tasks = spec.get("tasks")
        if not isinstance(tasks, list) or not tasks:
            col.add("spec.tasks", "a Volcano job needs a non-empty list of tasks")
            return []
        templates = [
            (f"spec.tasks[{i}].template", task.get("template") if isinstance(task, dict) else task)
            for i, task in enumerate(tasks)
        ]
    else:
        templates = [("spec.template", spec.get("template"))]
    pods = []
    for field, template in templates:
        template = _mapping(template, field, col, required=True)
        pod_spec = _mapping(template.get("spec"), f"{field}.spec", col, required=True) if template else None
        if pod_spec is None:
            continue
        containers = pod_spec.get("containers")
        cfield = f"{field}.spec.containers"
        if not isinstance(containers, list) or not containers:
            col.add(cfield, "a pod needs a non-empty list of containers")
            continue
        checked = [
            (f"{cfield}[{i}]", _mapping(c, f"{cfield}[{i}]", col, required=True))
            for i, c in enumerate(containers)
        ]
        pods.append([(f, c) for f, c in checked if c is not None])
    return pods


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
        text = str(value).strip()
        if isinstance(value, bool) or not _WHOLE_NUMBER.match(text) or int(text) < 1:
            col.add(
                f'{field}.resources.limits["{GPU_RESOURCE}"]',
                f"{value!r} is not a whole number of GPUs >= 1; cpn schedules GPU jobs only",
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
                    f'{value!r} is not a CPU quantity; write cores ("2", "0.5") or millicores ("500m")',
                )
            else:
                total, declared = total + cores, True
            break
    return total if declared else 1.0


def _cpu_cores(value: Any) -> float | None:
    """Kubernetes CPU quantity ("2", "0.5", "500m", 2) in cores; None when it is not one."""
    if isinstance(value, bool):
        return None
    match = _CPU_QUANTITY.match(str(value).strip())
    if match is None:
        return None
    number = float(match.group(1))
    return number / 1000 if match.group(3) else number


def _image(containers: list[tuple[str, dict]], col: _Collector) -> str | None:
    """Image of the first container of a pod template."""
    if not containers:
        return None
    field, container = containers[0]
    image = container.get("image")
    if not isinstance(image, str) or not image.strip():
        col.add(f"{field}.image", "missing; every container needs an image")
        return None
    return image.strip()
