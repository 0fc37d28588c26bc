"""Calls to one cluster's API server through the official client, with retries, on plain dicts.

Every call goes through `Api.call`: 429 (too many requests), 5xx and network timeouts or resets are
retried with exponential backoff (the server's `Retry-After` when it sends one); any other error
status is raised at once as `ApiError`, carrying the API server's own message. Responses are read raw
(`_preload_content=False`) and returned as the JSON the server sent, so that cpn works on the same
dicts `kubectl get -o json` shows.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from cpn.workloads import CUSTOM_KINDS, WORKLOADS, WorkloadKind, split_api_version

log = logging.getLogger(__name__)

RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})
"""Statuses worth another try: throttling and server-side trouble."""


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one API call."""

    attempts: int = 5
    """Tries in all, the first included."""
    base_s: float = 0.5
    """First backoff; doubled after every failed try."""
    max_s: float = 8.0
    """Longest backoff (and the most of a server's Retry-After that is honoured)."""
    timeout_s: float = 30.0
    """Per-request timeout (connect and read)."""


class ApiError(RuntimeError):
    """An API call failed for good: a status that is not worth retrying, or retries used up."""

    def __init__(self, status: int, message: str, transient: bool = False) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.transient = transient
        """True when the cluster was unavailable (retries used up), not refusing."""


def server_message(exc: ApiException) -> str:
    """The `message` of the API server's Status body, else its reason phrase."""
    try:
        body = json.loads(exc.body or "")
        return str(body.get("message") or exc.reason)
    except (ValueError, AttributeError):
        return str(exc.reason or exc.body or "no message")


NETWORK_ERRORS = (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)


class Api:
    """One cluster's API server: typed client groups and the retrying `call`."""

    def __init__(
        self,
        api_client: client.ApiClient,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.retry = retry
        self.sleep = sleep
        self.retries = 0
        """Tries that failed and were retried, since this object was made (for tests and logs)."""

    def call(self, fn: Callable[..., Any], *args: Any, raw: bool = False, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` with retries; the response's JSON (its text when `raw`)."""
        policy = self.retry
        delay = policy.base_s
        for attempt in range(1, policy.attempts + 1):
            try:
                resp = fn(*args, _preload_content=False, _request_timeout=policy.timeout_s, **kwargs)
                data = resp.data.decode("utf-8")
                return data if raw else json.loads(data or "{}")
            except ApiException as exc:
                if exc.status not in RETRIED_STATUS:
                    raise ApiError(exc.status or 0, server_message(exc)) from None
                if attempt == policy.attempts:
                    raise ApiError(exc.status, server_message(exc), transient=True) from None
                wait = _retry_after(exc) or delay
            except NETWORK_ERRORS as exc:
                if attempt == policy.attempts:
                    raise ApiError(0, f"API server unreachable: {exc}", transient=True) from None
                wait = delay
            self.retries += 1
            self.sleep(min(wait, policy.max_s))
            delay *= 2
        raise AssertionError("unreachable")


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Kind:
    """How to create, read and delete one kind of object cpn submits."""

    create: Callable[[Api, str, dict], Callable[[], Any]]
    read: Callable[[Api, str, str], Callable[[], Any]]
    delete: Callable[..., Callable[[], Any]]
    """(api, namespace, name, grace_s=None): the call deleting it, its pods given `grace_s` seconds."""
    list: Callable[[Api, str, str], Callable[[], Any]]
    """(api, namespace, label selector): the call listing those of the namespace the selector matches."""


def _grace(grace_s: float | None) -> dict[str, int]:
    """The delete call's grace period argument, when one is asked for."""
    return {} if grace_s is None else {"grace_period_seconds": round(grace_s)}


def _typed(group: str, noun: str) -> Kind:
    def method(api: Api, verb: str) -> Callable[..., Any]:
        return getattr(getattr(api, group), f"{verb}_namespaced_{noun}")

    return Kind(
        create=lambda api, ns, body: lambda: api.call(method(api, "create"), ns, body),
        read=lambda api, ns, name: lambda: api.call(method(api, "read"), name, ns),
        delete=lambda api, ns, name, grace_s=None: (
            lambda: api.call(
                method(api, "delete"), name, ns, propagation_policy="Background", **_grace(grace_s)
            )
        ),
        list=lambda api, ns, selector: lambda: api.call(method(api, "list"), ns, label_selector=selector),
    )


def _custom(group: str, version: str, plural: str) -> Kind:
    """A custom resource, through CustomObjectsApi."""
    return Kind(
        create=lambda api, ns, body: (
            lambda: api.call(api.custom.create_namespaced_custom_object, group, version, ns, plural, body)
        ),
        read=lambda api, ns, name: (
            lambda: api.call(api.custom.get_namespaced_custom_object, group, version, ns, plural, name)
        ),
        delete=lambda api, ns, name, grace_s=None: (
            lambda: api.call(
                api.custom.delete_namespaced_custom_object,
                group,
                version,
                ns,
                plural,
                name,
                propagation_policy="Background",
                **_grace(grace_s),
            )
        ),
        list=lambda api, ns, selector: (
            lambda: api.call(
                api.custom.list_namespaced_custom_object, group, version, ns, plural, label_selector=selector
            )
        ),
    )


_TYPED = {
    ("batch", "Job"): ("batch", "job"),
    ("apps", "Deployment"): ("apps", "deployment"),
    ("", "Pod"): ("core", "pod"),
}


def _kind_of(workload: WorkloadKind, version: str) -> Kind:
    typed = _TYPED.get((workload.group, workload.kind))
    return _typed(*typed) if typed else _custom(workload.group, version, workload.plural)


KINDS: dict[tuple[str, str], Kind] = {
    **{
        (workload.api_version(version), workload.kind): _kind_of(workload, version)
        for workload in WORKLOADS
        for version in workload.versions
    },
    ("v1", "Service"): _typed("core", "service"),
    ("v1", "ConfigMap"): _typed("core", "config_map"),
    ("v1", "Secret"): _typed("core", "secret"),
    ("v1", "PersistentVolumeClaim"): _typed("core", "persistent_volume_claim"),
}
"""(apiVersion, kind) of every object cpn submits: the workloads intake accepts (`cpn.workloads`), in every
version, and what comes with them."""


def served_kinds(api: Api) -> tuple[str, ...] | None:
    """The workload kinds a CRD defines that the cluster serves (cpn.workloads.custom_kind keys), by API
    discovery: one GET of `/apis/<group>/<version>` per group version cpn accepts, a 404 meaning none of
    its kinds is installed. None (not known: every kind is offered the cluster, and a create of a missing
    one is refused with the API server's 404) when discovery is refused otherwise or stays unavailable,
    logged: a cluster whose discovery is forbidden still runs jobs."""
    wanted: dict[tuple[str, str], list[str]] = {}
    for key in CUSTOM_KINDS:
        api_version, _, kind = key.rpartition("/")
        wanted.setdefault(split_api_version(api_version), []).append(kind)
    served = []
    for (group, version), kinds in wanted.items():
        try:
            resources = api.call(api.custom.get_api_resources, group, version).get("resources") or []
        except ApiError as exc:
            if exc.status == 404:
                continue
            log.warning(
                "API discovery of %s/%s failed (%s): the kinds the cluster serves are not known",
                group,
                version,
                exc,
            )
            return None
        found = {r.get("kind") for r in resources if "/" not in str(r.get("name", ""))}
        served += [f"{group}/{version}/{kind}" for kind in kinds if kind in found]
    return tuple(sorted(served))


def collection(workload: WorkloadKind) -> str:
    """The name of a workload kind's collection in a gateway's view: its plural, qualified by its group."""
    return f"{workload.plural}.{workload.group}" if workload.group else workload.plural
