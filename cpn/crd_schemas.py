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
    empty when it passes or `workload` has no CRD. `obj` must be in one of `workload`'s versions.

    Checked as the API server checks it: after its project's admission webhook has filled in what it
    defaults (`WorkloadKind.admission_defaults`), the schema's own `default`s are applied and nulls of
    fields that are not nullable dropped (`_defaulted`); `obj` itself is left as it is."""
    if not workload.crds:
        return []
    version = str(obj.get("apiVersion", "")).rpartition("/")[2]
    validator = _validator(workload.crds, version)
    seen = obj
    if workload.admission_defaults is not None:  # it writes: into a copy
        seen = json.loads(json.dumps(obj, default=str))
        workload.admission_defaults(seen)
    seen = _defaulted(seen, validator.schema)  # new mappings and lists, `obj` untouched
    errors = sorted(validator.iter_errors(seen), key=lambda e: [str(p) for p in e.absolute_path])
    return [(_dotted(e.absolute_path), _clip(e.message)) for e in errors[:most]]


def _defaulted(value: Any, schema: Any) -> Any:
    """`value` as a structural schema's API server sees it: nulls of fields that are not `nullable` dropped,
    missing fields that have a `default` given it (in objects that are present), recursively."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else {})
            if item is None and not sub.get("nullable"):
                continue
            out[key] = _defaulted(item, sub)
        for key, sub in props.items():
            if key not in out and isinstance(sub, dict) and "default" in sub:
                out[key] = _defaulted(json.loads(json.dumps(sub["default"])), sub)
        return out
    if isinstance(value, list):
        return [_defaulted(item, schema.get("items")) for item in value]
    return value


def _dotted(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _clip(text: str, most: int = 300) -> str:
    return text if len(text) <= most else text[: most - 3] + "..."
