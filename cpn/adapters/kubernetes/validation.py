"""Manifests checked before anything reaches a cluster.

Built-in kinds are validated with `kubernetes-validate` against the schemas of the cluster's Kubernetes
version (strict: unknown fields are errors); Volcano Jobs with `jsonschema` against the
`openAPIV3Schema` of the Volcano Job CRD shipped in `data/schemas/` (Apache-2.0, Volcano).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from config.settings import DATA_DIR

VOLCANO_CRD = DATA_DIR / "schemas" / "volcano-batch.volcano.sh_jobs.yaml"
"""The Volcano Job CustomResourceDefinition (batch.volcano.sh/v1alpha1 Job)."""

VOLCANO_API = "batch.volcano.sh/v1alpha1"


class InvalidManifest(ValueError):
    """An object does not match its schema; the message names the object, the field and the reason."""


@cache
def _volcano_validator(path: Path = VOLCANO_CRD) -> jsonschema.protocols.Validator:
    crd = yaml.safe_load(path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == VOLCANO_API.split("/")[1]]
    schema = version["schema"]["openAPIV3Schema"]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def _where(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')} {meta.get('namespace', 'default')}/{meta.get('name')}"


def validate_object(obj: dict[str, Any], kubernetes_version: str) -> None:
    """Raise InvalidManifest unless `obj` is valid for Kubernetes `kubernetes_version` (e.g. "1.30").

    A Volcano Job is checked against the Volcano CRD's schema (plus the metadata rules every object
    keeps); any other kind against the built-in schemas of that Kubernetes version.
    """
    if obj.get("apiVersion") == VOLCANO_API and obj.get("kind") == "Job":
        errors = sorted(_volcano_validator().iter_errors(obj), key=lambda e: list(e.absolute_path))
        if errors:
            first = errors[0]
            field = ".".join(str(p) for p in first.absolute_path) or "(top level)"
            raise InvalidManifest(f"{_where(obj)}: {field}: {first.message} (Volcano Job CRD schema)")
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
