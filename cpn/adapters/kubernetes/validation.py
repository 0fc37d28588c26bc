"""Manifests checked before anything reaches a cluster.

Built-in kinds are validated with `kubernetes-validate` against the schemas of the cluster's Kubernetes
version (strict: unknown fields are errors); custom resources (a Volcano Job, Kubeflow's jobs, a JobSet,
...) with `jsonschema` against the `openAPIV3Schema` of their CRD shipped in `data/schemas/`
(`cpn.crd_schemas`), as intake checked them before they were bound.
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from cpn.crd_schemas import schema_problems
from cpn.workloads import workload_of


class InvalidManifest(ValueError):
    """An object does not match its schema; the message names the object, the field and the reason."""


def _where(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace', 'default')}/{meta.get('name')}"


def validate_object(obj: dict[str, Any], kubernetes_version: str) -> None:
    """Raise InvalidManifest unless `obj` is valid for Kubernetes `kubernetes_version` (e.g. "1.30").

    A custom resource is checked against its CRD's schema; any other kind against the built-in schemas of
    that Kubernetes version.
    """
    workload = workload_of(obj)
    if workload is not None and workload.crds:
        problems = schema_problems(obj, workload, most=1)
        if problems:
            ((field, message),) = problems
            schema = f"{workload.project} {workload.kind} CRD schema"
            raise InvalidManifest(f"{_where(obj)}: {field or '(top level)'}: {message} ({schema})")
        return
    try:
        kubernetes_validate.validate(obj, f"{kubernetes_version}.0", strict=True)
    except kubernetes_validate.ValidationError as exc:
        field = ".".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise InvalidManifest(
            f"{_where(obj)}: {field}: {exc.message} (Kubernetes {kubernetes_version} schema)"
        ) from None
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise InvalidManifest(f"{_where(obj)}: no Kubernetes {kubernetes_version} schema: {exc}") from None
