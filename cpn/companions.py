"""The objects submitted with a workload (its ConfigMaps, Secrets, PersistentVolumeClaims, Services), and
when one already on the cluster is the same object.

Two jobs of one file may reference one ConfigMap: each job's manifest carries it, and the second create
meets the first's object. That is success when the object there holds what this job would create (it
runs on the same content), and a refusal naming the object when it holds something else (the job would
run on another file's data). Both cluster gateways ask `content_difference` of the object they would
create and the one they find, so they agree on which is which.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

IGNORED = frozenset({"apiVersion", "kind", "metadata", "status"})
"""Top-level fields that are not the object's content: its identity, its labels and annotations (which
name the job that created it) and what the cluster reports."""


def content_difference(sent: Mapping[str, Any], existing: Mapping[str, Any]) -> str | None:
    """The first field (dotted path) whose value `existing` does not hold as `sent` sets it, or None when it
    holds all of it. What the API server adds (a Service's clusterIP, a port's default protocol) is not a
    difference; a Secret's `stringData` is compared as the base64 `data` the server stores it as."""
    return _difference(_content(sent), _content(existing), "")


def _content(obj: Mapping[str, Any]) -> dict[str, Any]:
    content = {k: v for k, v in obj.items() if k not in IGNORED}
    strings = content.pop("stringData", None)
    if isinstance(strings, Mapping):
        encoded = {k: base64.b64encode(str(v).encode()).decode() for k, v in strings.items()}
        content["data"] = {**(content.get("data") or {}), **encoded}
    return content


def _difference(sent: Any, existing: Any, path: str) -> str | None:
    if isinstance(sent, Mapping):
        if not isinstance(existing, Mapping):
            return path or "(the object)"
        for key, value in sent.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in existing:
                if value in (None, {}, []):  # the server drops empty fields
                    continue
                return where
            found = _difference(value, existing[key], where)
            if found is not None:
                return found
        return None
    if isinstance(sent, list):
        if not isinstance(existing, list) or len(existing) != len(sent):
            return path
        for i, (a, b) in enumerate(zip(sent, existing, strict=True)):
            found = _difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if sent == existing else path


def conflict(obj: Mapping[str, Any], cluster: str, differs: str, origin: str) -> str:
    """The refusal of a job whose companion `obj` meets one of the same name with other content on
    `cluster`: which object, which field differs, where the other came from (`origin`), what to do."""
    meta = obj.get("metadata") or {}
    return (
        f"{obj.get('kind')} {meta.get('namespace')}/{meta.get('name')} already exists on cluster {cluster} "
        f"with other content ({differs} differs; {origin}); give one of them another name, or make them "
        "the same"
    )
