"""Custom resources checked against their CRD's `openAPIV3Schema`, as an API server would check them.

The CRDs are the projects' own files, shipped in `data/schemas/` with their licences (data/README.md says
from which commit), re-encoded as gzipped JSON by `scripts/vendor_crd.py` (the same objects; JSON reads some
30 times faster than YAML, and a CRD can be 2 MB). A CRD is read once per process, when a manifest of its kind
first comes. Intake (`cpn.intake`) refuses an object its schema refuses, naming the field; the Kubernetes
adapter checks what it is about to create again, after binding (`cpn.adapters.kubernetes.validation`), and
the fake API server checks what it receives.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from typing import Any

import jsonschema
import yaml

from config.settings import DATA_DIR
from cpn.workloads import WorkloadKind

SCHEMAS_DIR = DATA_DIR / "schemas"

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def _crd(name: str) -> dict:
    data = (SCHEMAS_DIR / name).read_bytes()
    if name.endswith(".json.gz"):
        return json.loads(gzip.decompress(data))
    return yaml.load(data, Loader=_Loader)


def served_versions(workload: WorkloadKind) -> tuple[str, ...]:
    """The versions `workload`'s shipped CRDs serve (none for a built-in kind)."""
    return tuple(
        v["name"] for name in workload.crds for v in _crd(name)["spec"]["versions"] if v.get("served", True)
    )


@cache
def _validator(names: tuple[str, ...], version: str) -> jsonschema.protocols.Validator:
    (served,) = [v for name in names for v in _crd(name)["spec"]["versions"] if v["name"] == version]
    schema = served["schema"]["openAPIV3Schema"]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def schema_problems(obj: dict[str, Any], workload: WorkloadKind, most: int = 5) -> list[tuple[str, str]]:
    """(dotted field, message) for each place `obj` breaks its CRD's schema, first by field, at most `most`;
    empty when it passes or `workload` has no CRD. `obj` must be in one of `workload`'s versions."""
    if not workload.crds:
        return []
    version = str(obj.get("apiVersion", "")).rpartition("/")[2]
    validator = _validator(workload.crds, version)
    errors = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.absolute_path])
    return [(_dotted(e.absolute_path), _clip(e.message)) for e in errors[:most]]


def _dotted(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _clip(text: str, most: int = 300) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."
