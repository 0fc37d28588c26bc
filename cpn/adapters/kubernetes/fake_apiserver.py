"""A small Kubernetes API server over HTTP, for tests and benchmarks of the real `kubernetes` client.

It lives in the package, beside the adapter it stands in for, because `cpn bench gateway` runs the
gateway against it from an installed cpn (where tests/ is not); it needs the standard library and cpn's
own table of workload kinds and CRD schemas.

It serves what cpn uses, as JSON: nodes; pods with their logs; every workload kind cpn accepts
(`cpn.workloads`: batch Jobs, Deployments, bare Pods and the custom resources, Volcano's, Kubeflow's, JobSet,
LeaderWorkerSet, KubeRay's, KServe's), Services and ConfigMaps (create 201, 409 AlreadyExists, 422 for a
custom resource its CRD's schema refuses (`cpn.crd_schemas`), get, delete, list, watch).
Lists carry a resourceVersion; watches stream chunked events after a resourceVersion and honour
`labelSelector` (k=v,...), `timeoutSeconds` and, for pods, `fieldSelector status.phase!=...`.
`compact()` makes older versions expire, so a watch from one gets 410 Gone, as etcd compaction does.
`fail()` scripts error answers (429, 5xx) for matching requests. Every request is recorded
(`requests`) and counted by what an authorizer would call it (`calls`: (API group, resource, verb), a
watch counted once when it opens).

A stand-in controller and scheduler: creating a workload creates its pods (each pod template's count, as
`cpn.workloads` reads it; a TrainJob's with its runtime patches applied), owned by it, each bound to the
first node its `matchFields metadata.name` allows that has the GPUs free, and running; a bare Pod is bound
and run itself. `finish()` ends a workload's pods (succeeded, failed, OOMKilled) and sets the workload's
status as its controller would (`_ended_status`: the job controller's conditions, Volcano's phase,
Kubeflow's, JobSet's, KubeRay's).

kmock (STACK.md) was not used: it ignores label selectors and sets no resourceVersion, both of which
the watch's resume and relist depend on.
"""

from __future__ import annotations

import bisect
import json
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from cpn.crd_schemas import schema_problems
from cpn.workloads import KSERVE_MODEL_KEYS, TRAINJOB_NODE, WorkloadKind, containers, workload_of
from cpn.workloads import WORKLOADS as KNOWN

WORKLOADS = {(w.group, w.plural): w for w in KNOWN if w.group}
"""(API group, plural) of the workload kinds whose pods the stand-in controllers make (not a bare Pod)."""


def _discovery(group: str, version: str) -> dict:
    """The APIResourceList of one group version: the workload kinds cpn accepts there (a fault answering
    404 for `/apis/<group>/` stands for a cluster without that CRD)."""
    kinds = [w for w in KNOWN if w.group == group and version in w.versions]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}",
        "resources": [
            {
                "name": w.plural,
                "kind": w.kind,
                "namespaced": True,
                "verbs": ["create", "get", "list", "watch"],
            }
            for w in kinds
        ],
    }


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def call_of(method: str, path: str) -> tuple[str, str, str]:
    """(API group, resource, verb) of one request, as the API server's authorizer sees it (a non-resource
    URL, such as API discovery's, as ("", its path, verb))."""
    url = urlparse(path)
    parts = [p for p in url.path.split("/") if p]
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if not rest:  # discovery of a group version: a non-resource URL
        return "", url.path, "get"
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    if method == "GET":
        watch = parse_qs(url.query).get("watch") in (["true"], ["1"])
        verb = "get" if len(rest) > 1 else "watch" if watch else "list"
    else:
        verb = {"POST": "create", "DELETE": "delete"}[method]
    return group, resource, verb


@dataclass
class Fault:
    method: str
    path: str
    status: int
    times: int
    retry_after: float | None = None


class FakeApiServer:
    """Start with `start()`, stop with `stop()`; `url` is its base URL."""

    def __init__(self, check_schemas: bool = True) -> None:
        self.check_schemas = check_schemas
        """Refuse (422) a custom resource its CRD's schema refuses; off where only the client is measured
        (`cpn bench gateway`: checking costs the shared process a few ms per object)."""
        self.objects: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}
        self.events: list[tuple[int, tuple[str, str], str, dict]] = []
        self.rv = 0
        self.compacted = 0
        self._lock = threading.RLock()
        self.cond = threading.Condition(self._lock)
        self._waiters: dict[tuple[str, str], threading.Condition] = {}
        """Per collection, what its open watches wait on: an event wakes only the watches of its collection
        (with a dozen collections watched, waking every watch on every event costs the process more than
        the client it serves)."""
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str]] = []
        """(method, path) of every request, oldest first."""
        self.calls: Counter[tuple[str, str, str]] = Counter()
        """(API group, resource, verb) -> requests so far (`call_of`)."""
        self.listed = 0
        """Objects returned by lists so far (what a client read that it did not watch)."""
        self._gpus: dict[str, float] = {}
        """node -> GPUs requested by its pods that have not ended (the stand-in scheduler's view)."""
        self.logs: dict[tuple[str, str], str] = {}
        self.auto_start = True
        self._stopped = False
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.cond:
            self._stopped = True
            self._wake(None)
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- state -------------------------------------------------------------------------------------

    def put(self, res: tuple[str, str], obj: dict, kind: str = "ADDED") -> dict:
        """Store `obj` as a new version and record the watch event."""
        with self.cond:
            self.rv += 1
            meta = obj.setdefault("metadata", {})
            meta["resourceVersion"] = str(self.rv)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_iso())
            store = self.objects.setdefault(res, {})
            key = (meta.get("namespace", ""), meta["name"])
            if res == ("", "pods"):
                self._count_gpus(store.get(key), -1)
                self._count_gpus(obj, 1)
            store[key] = obj
            self.events.append((self.rv, res, kind, json.loads(json.dumps(obj))))
            self._wake(res)
            return obj

    def remove(self, res: tuple[str, str], ns: str, name: str) -> dict | None:
        with self.cond:
            obj = self.objects.get(res, {}).pop((ns, name), None)
            if obj is not None:
                if res == ("", "pods"):
                    self._count_gpus(obj, -1)
                self.rv += 1
                obj["metadata"]["resourceVersion"] = str(self.rv)
                self.events.append((self.rv, res, "DELETED", obj))
                self._wake(res)
            return obj

    def _waiter(self, res: tuple[str, str]) -> threading.Condition:
        with self.cond:
            return self._waiters.setdefault(res, threading.Condition(self._lock))

    def _wake(self, res: tuple[str, str] | None) -> None:
        """Wake the watches of collection `res` (None: every watch), under the lock."""
        self.cond.notify_all()
        for key, waiter in self._waiters.items():
            if res is None or key == res:
                waiter.notify_all()

    def get(self, res: tuple[str, str], ns: str, name: str) -> dict | None:
        return self.objects.get(res, {}).get((ns, name))

    def add_node(self, name: str, labels: dict[str, str], gpus: int, cpu: str = "32", **spec: Any) -> None:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "spec": spec,
            "status": {
                "allocatable": {"cpu": cpu, "memory": "128Gi", "nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        self.put(("", "nodes"), node)

    def compact(self, expire_open_watches: bool = True) -> None:
        """Versions up to now expire: watches from them (and, by default, open ones) get 410 Gone."""
        with self.cond:
            self.compacted = self.rv
            if expire_open_watches:
                self.rv += 1
                self.events.append((self.rv, ("*", "*"), "EXPIRE", {}))
            self._wake(None)

    def fail(
        self, method: str, path: str, status: int, times: int = 1, retry_after: float | None = None
    ) -> None:
        """The next `times` requests of `method` whose path contains `path` get `status`."""
        self.faults.append(Fault(method, path, status, times, retry_after))

    # -- the stand-in controllers -------------------------------------------------------------------

    def _count_gpus(self, pod: dict | None, sign: int) -> None:
        if pod is None or not (node := pod.get("spec", {}).get("nodeName")):
            return
        if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            return
        for c in pod["spec"].get("containers", []):
            gpus = float((c.get("resources", {}).get("limits") or {}).get("nvidia.com/gpu", 0))
            self._gpus[node] = self._gpus.get(node, 0.0) + sign * gpus

    def _gpus_used(self, node: str) -> float:
        return self._gpus.get(node, 0.0)

    def _schedule(self, pod_spec: dict) -> str | None:
        terms = (
            pod_spec.get("affinity", {})
            .get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", [])
        )
        allowed = [
            v
            for t in terms[:1]
            for f in t.get("matchFields", [])
            if f["key"] == "metadata.name"
            for v in f["values"]
        ]
        nodes = self.objects.get(("", "nodes"), {})
        want = sum(
            float((c.get("resources", {}).get("limits") or {}).get("nvidia.com/gpu", 0))
            for c in pod_spec.get("containers", [])
        )
        candidates = allowed or [n for _, n in nodes]
        for spread in pod_spec.get("topologySpreadConstraints", []):
            # maxSkew over hostnames, as kube-scheduler's PodTopologySpread (DoNotSchedule) keeps it.
            selector = spread["labelSelector"]["matchLabels"]
            count = {
                n: sum(
                    1
                    for p in self.objects.get(("", "pods"), {}).values()
                    if p["spec"].get("nodeName") == n
                    and all(p["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
                )
                for n in candidates
            }
            least = min(count.values(), default=0)
            candidates = [n for n in candidates if count[n] + 1 - least <= spread["maxSkew"]]
        for name in candidates:
            node = nodes.get(("", name))
            if node is None:
                continue
            if float(node["status"]["allocatable"]["nvidia.com/gpu"]) - self._gpus_used(name) >= want:
                return name
        return None

    def _make_pods(self, res: tuple[str, str], obj: dict) -> None:
        """The pods of a new workload, as its controller would make them: each template's pod count
        (`cpn.workloads`), named `<workload>-<task>-<i>` for a Volcano task, `<workload>-<i>` for a kind of
        one template, `<workload>-t<k>-<i>` for the k-th template of others; owned by the workload."""
        meta = obj["metadata"]
        slots = WORKLOADS[res].slots(obj)
        for k, slot in enumerate(slots):
            if res == ("batch.volcano.sh", "jobs"):
                prefix = f"{meta['name']}-{obj['spec']['tasks'][k]['name']}"
            else:
                prefix = meta["name"] if len(slots) == 1 else f"{meta['name']}-t{k}"
            owner = {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "name": meta["name"],
                "uid": meta["uid"],
            }
            template = _patched(obj, slot.template)
            for i in range(slot.pods):
                tmeta = template.get("metadata", {})
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"{prefix}-{i}",
                        "namespace": meta["namespace"],
                        "labels": dict(tmeta.get("labels", {})),
                        "annotations": dict(tmeta.get("annotations", {})),
                        "ownerReferences": [owner],
                    },
                    "spec": {
                        **json.loads(json.dumps(template["spec"])),
                        "containers": _containers(slot),
                    },
                }
                self.put(("", "pods"), self._started(pod))

    def _started(self, pod: dict) -> dict:
        """`pod` bound to a node with room for it and running (Pending when none has room)."""
        node = self._schedule(pod["spec"])
        if node:
            pod["spec"]["nodeName"] = node
        running = node is not None and self.auto_start
        pod["status"] = {"phase": "Running", "startTime": now_iso()} if running else {"phase": "Pending"}
        if running:
            pod["status"]["containerStatuses"] = [
                {"name": c["name"], "state": {"running": {"startedAt": now_iso()}}}
                for c in pod["spec"]["containers"]
            ]
        return pod

    def pods_of(self, ns: str, name: str) -> list[dict]:
        """The pods of workload `name` (those it owns), or the bare pod of that name."""
        return [
            p
            for (pns, pname), p in sorted(self.objects.get(("", "pods"), {}).items())
            if pns == ns
            and (
                any(o["name"] == name for o in p["metadata"].get("ownerReferences", []))
                or (pname == name and not p["metadata"].get("ownerReferences"))
            )
        ]

    def finish(self, ns: str, name: str, outcome: str = "succeeded", reason: str = "", log: str = "") -> None:
        """End a workload (or a bare pod): its pods end, then its status says so as its kind's controller
        writes it (`_ended_status`; a pod's reason OOMKilled, Evicted). A service's status is left alone."""
        with self.cond:
            for pod in self.pods_of(ns, name):
                pod = json.loads(json.dumps(pod))
                failed = outcome == "failed"
                pod["status"]["phase"] = "Failed" if failed else "Succeeded"
                if reason == "Evicted":
                    pod["status"].update(reason="Evicted", message="The node was low on memory.")
                term = {
                    "exitCode": 137 if reason == "OOMKilled" else int(failed),
                    "reason": reason if reason == "OOMKilled" else ("Error" if failed else "Completed"),
                    "startedAt": pod["status"].get("startTime", now_iso()),
                    "finishedAt": now_iso(),
                }
                pod["status"]["containerStatuses"] = [
                    {"name": c["name"], "state": {"terminated": term}} for c in pod["spec"]["containers"]
                ]
                self.logs[(ns, pod["metadata"]["name"])] = log
                self.put(("", "pods"), pod, "MODIFIED")
            for res, workload in WORKLOADS.items():
                obj = self.get(res, ns, name)
                if obj is None or workload.service:
                    continue
                obj = json.loads(json.dumps(obj))
                obj["status"] = _ended_status(workload, outcome == "failed")
                self.put(res, obj, "MODIFIED")

    def finish_all(self) -> None:
        """Every job still running ends well (a bare pod too); services are removed with their pods."""
        for res, workload in WORKLOADS.items():
            for (ns, name), obj in list(self.objects.get(res, {}).items()):
                if workload.service:
                    self.remove(res, ns, name)
                    for pod in self.pods_of(ns, name):
                        self.remove(("", "pods"), ns, pod["metadata"]["name"])
                elif not obj.get("status"):
                    self.finish(ns, name)
        for (ns, name), pod in list(self.objects.get(("", "pods"), {}).items()):
            if not pod["metadata"].get("ownerReferences") and pod["status"].get("phase") == "Running":
                self.finish(ns, name)


def _containers(slot: Any) -> list[dict]:
    """A pod's containers from its template (a KServe component's model container named as KServe names
    it)."""
    found = containers(slot.template["spec"]) or []
    return [{"name": "kserve-container", **c} if at in KSERVE_MODEL_KEYS else c for at, c in found]


def _patched(obj: dict, template: dict) -> dict:
    """A TrainJob's trainer pod template with its `runtimePatches` for the runtime's node job applied, as
    Kubeflow Trainer applies them; any other template as it is."""
    if obj.get("kind") != "TrainJob":
        return template
    out = json.loads(json.dumps(template))
    for patch in obj["spec"].get("runtimePatches") or []:
        jobs = (
            patch.get("trainingRuntimeSpec", {}).get("template", {}).get("spec", {}).get("replicatedJobs", [])
        )
        for job in jobs:
            if job.get("name") == TRAINJOB_NODE:
                pod = job.get("template", {}).get("spec", {}).get("template", {})
                for key in ("labels", "annotations"):
                    out.setdefault("metadata", {}).setdefault(key, {}).update(
                        pod.get("metadata", {}).get(key, {})
                    )
                out["spec"].update(pod.get("spec", {}))
    return out


def _invalid(body: dict) -> str:
    """Why a custom resource's CRD schema refuses `body` ('' when it passes or is no custom resource)."""
    workload = workload_of(body)
    if workload is None:
        return ""
    problems = schema_problems(body, workload, most=1)
    return "; ".join(f"{field}: {message}" for field, message in problems)


def _ended_status(workload: WorkloadKind, failed: bool) -> dict:
    """The status a workload's controller writes when its pods have ended, well or not (its kind's own
    form: what `WorkloadKind.ended` reads)."""
    now = now_iso()
    why = {"reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}
    if workload.group == "batch.volcano.sh":
        return {"state": {"phase": "Failed" if failed else "Completed", "lastTransitionTime": now}}
    if workload.kind == "RayJob":
        return {
            "jobDeploymentStatus": "Failed" if failed else "Complete",
            "jobStatus": "FAILED" if failed else "SUCCEEDED",
            "endTime": now,
            **({"reason": "AppFailed", "message": "the Ray job's entrypoint failed"} if failed else {}),
        }
    if workload.kind == "RayCluster":
        # A RayCluster has no end of its own: its pods ending well leave it "ready" (until deleted).
        return {"state": "failed", "reason": "the Ray head failed"} if failed else {"state": "ready"}
    done = {
        "batch": "Complete",
        "kubeflow.org": "Succeeded",
        "trainer.kubeflow.org": "Complete",
        "jobset.x-k8s.io": "Completed",
    }[workload.group]
    cond = {"type": "Failed" if failed else done, "status": "True", "lastTransitionTime": now}
    return {"conditions": [{**cond, **(why if failed else {})}], "completionTime": now}


def _expired(message: str) -> dict:
    """The watch event an API server sends when the resourceVersion asked for is gone (410 Expired)."""
    return {
        "type": "ERROR",
        "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": message},
    }


def _matches(obj: dict, labels: str | None, fields: str | None) -> bool:
    have = obj.get("metadata", {}).get("labels") or {}
    for part in filter(None, (labels or "").split(",")):
        key, _, value = part.partition("=")
        if have.get(key) != value:
            return False
    for part in filter(None, (fields or "").split(",")):
        key, _, value = part.partition("!=")
        if key == "status.phase" and obj.get("status", {}).get("phase") == value:
            return False
    return True


def _handler(server: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            # Headers and body go out as separate writes: without this, Nagle's algorithm holds the body
            # until the client's delayed ACK, some 40 ms per request.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _status(self, code: int, reason: str, message: str) -> None:
            self._send(
                code,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "code": code,
                    "reason": reason,
                    "message": message,
                },
            )

        def _route(self) -> tuple[tuple[str, str], str | None, str | None, str | None, dict[str, str]]:
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            parts = [p for p in url.path.split("/") if p]
            if parts[0] == "api":
                group, rest = "", parts[2:]
            else:
                group, rest = parts[1], parts[3:]
            ns = None
            if rest and rest[0] == "namespaces" and len(rest) > 2:
                ns, rest = rest[1], rest[2:]
            plural = rest[0]
            name = rest[1] if len(rest) > 1 else None
            sub = rest[2] if len(rest) > 2 else None
            return (group, plural), ns, name, sub, query

        def _fault(self) -> bool:
            server.requests.append((self.command, self.path))
            server.calls[call_of(self.command, self.path)] += 1
            for fault in server.faults:
                if fault.times > 0 and fault.method == self.command and fault.path in self.path:
                    fault.times -= 1
                    headers = {} if fault.retry_after is None else {"Retry-After": f"{fault.retry_after:g}"}
                    self._send(
                        fault.status, {"kind": "Status", "code": fault.status, "message": "scripted"}, headers
                    )
                    return True
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self._fault():
                return
            parts = [p for p in urlparse(self.path).path.split("/") if p]
            if len(parts) == 3 and parts[0] == "apis":
                self._send(200, _discovery(parts[1], parts[2]))
                return
            res, ns, name, sub, q = self._route()
            if sub == "log":
                text = server.logs.get((ns, name), "")
                lines = text.splitlines()[-int(q.get("tailLines", 10**9)) :]
                self._send(200, "\n".join(lines))
                return
            if name is not None:
                obj = server.get(res, ns or "", name)
                if obj is None:
                    self._status(404, "NotFound", f'{res[1]} "{name}" not found')
                else:
                    self._send(200, obj)
                return
            if q.get("watch") in ("true", "1"):
                self._watch(res, ns, q)
                return
            with server.cond:
                items = [
                    o
                    for (ons, _), o in sorted(server.objects.get(res, {}).items())
                    if (ns is None or ons == ns)
                    and _matches(o, q.get("labelSelector"), q.get("fieldSelector"))
                ]
                rv = server.rv
                server.listed += len(items)
            self._send(
                200,
                {
                    "kind": "List",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(rv)},
                    "items": items,
                },
            )

        def _watch(self, res: tuple[str, str], ns: str | None, q: dict[str, str]) -> None:
            since = int(q.get("resourceVersion") or server.rv)
            waiter = server._waiter(res)
            deadline = time.monotonic() + float(q.get("timeoutSeconds", 30))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(payload: dict | None) -> None:
                data = b"" if payload is None else (json.dumps(payload) + "\n").encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            try:
                if since < server.compacted:
                    chunk(_expired(f"too old resource version: {since}"))
                    return
                while True:
                    with server.cond:
                        # Events are appended in resourceVersion order: find the first one after `since`.
                        batch = server.events[bisect.bisect_right(server.events, since, key=lambda e: e[0]) :]
                        if not batch:
                            left = deadline - time.monotonic()
                            if left <= 0 or server._stopped:
                                return
                            waiter.wait(min(left, 0.5))
                            continue
                    for rv, eres, kind, obj in batch:
                        since = rv
                        if kind == "EXPIRE":
                            chunk(_expired("too old resource version"))
                            return
                        if eres != res or (ns is not None and obj["metadata"].get("namespace") != ns):
                            continue
                        if _matches(obj, q.get("labelSelector"), None):
                            chunk({"type": kind, "object": obj})
            except (BrokenPipeError, ConnectionResetError):
                return
            finally:
                try:
                    chunk(None)
                except OSError:
                    pass

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self._fault():
                return
            res, ns, _, _, _ = self._route()
            name = body["metadata"]["name"]
            body["metadata"]["namespace"] = ns
            invalid = _invalid(body) if server.check_schemas else ""
            if invalid:
                self._status(422, "Invalid", f'{body.get("kind")} "{name}" is invalid: {invalid}')
                return
            with server.cond:
                if server.get(res, ns, name) is not None:
                    self._status(409, "AlreadyExists", f'{res[1]} "{name}" already exists')
                    return
                if res == ("", "pods"):
                    body = server._started(body)
                obj = server.put(res, body)
                if res in WORKLOADS:
                    server._make_pods(res, obj)
            self._send(201, obj)

        def do_DELETE(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", 0))
            self.rfile.read(length)
            if self._fault():
                return
            res, ns, name, _, _ = self._route()
            obj = server.remove(res, ns or "", name)
            if obj is None:
                self._status(404, "NotFound", f'{res[1]} "{name}" not found')
                return
            for pod in server.pods_of(ns, name) if res in WORKLOADS else []:
                server.remove(("", "pods"), ns, pod["metadata"]["name"])
            self._send(200, {"kind": "Status", "status": "Success"})

    return Handler
