"""The cluster-gateway port for one real Kubernetes cluster.

`KubernetesGateway` keeps the live inventory (cpn.adapters.kubernetes.inventory) from its watches, renders
placed jobs with `KubernetesBinder`, validates every object before it is sent
(cpn.adapters.kubernetes.validation) and creates them through the API (never `kubectl apply`). Names are
deterministic, so a second submission of a job meets 409 AlreadyExists and is recognised by its job-id
annotation as the same job. 429, 5xx and timeouts are retried with backoff; another 4xx refuses the job
with the API server's message.

Everything comes by watch, not polling: one watch per collection (nodes and every pod, for the
inventory; cpn's objects of every workload kind that ends by its status, `WATCHED`: batch and Volcano Jobs,
Kubeflow jobs, TrainJobs, JobSets, RayJobs and RayClusters; a kind whose CRD the cluster lacks is not
watched), resumed from its resourceVersion and relisted on 410 Gone
(cpn.adapters.kubernetes.watch). Which kinds a CRD defines the cluster serves is read once, by API
discovery, when the gateway starts (`served_kinds`): every node carries it (Node.workloads), so the
policies and the admission rule keep a job whose CRD is missing off the cluster. A submission costs O(1)
calls: it is admitted on the watched state of
the placement's nodes (and the cards claimed by jobs whose pods have not shown yet), and creates the
job's objects (those that come with the workload first; one already there with the same content, a
ConfigMap two jobs of one file share, is shared, and one with other content refuses the job, naming it:
cpn.companions); the cluster is never listed per job. Each object is indexed by its job, so a change
re-derives only that job's status (cpn.adapters.kubernetes.status); `poll_events` hands out the transitions,
each once: `running`, then `succeeded` or `failed` with the reason (OOMKilled, Evicted, ...). At a job's
end the tail of its pod's log is read (the failed pod's, else the first; `log_tail`), bounded by lines
and bytes, and a failed end carries it on its event (`JobEvent.log_tail`, kept in the job store with
the transition); where a `gpu_memory` source is given, the measured peak GPU memory goes on the event.

Every workload kind is created as its own object: built-in kinds through their typed APIs (a bare Pod
through CoreV1Api), custom resources through CustomObjectsApi in the version their manifest names.

`delete` removes a job's objects through the API (its workload, whose pods go with it, and the Services
and ConfigMaps submitted with it) and reports its end at once, reason `deleted`: `succeeded` for a
service (a Deployment, LeaderWorkerSet, RayService or InferenceService runs until deleted), `failed` for
the training kinds.

On start-up (`held_jobs`, the first `submit` or `poll_events`) the gateway lists what the cluster runs for
cpn (by cpn's labels) and reports every job found afresh; the caller's store skips what it already has,
and a job found on the cluster is never submitted twice. What it remembers of a job (the phase reported,
whether its end was handed out) lives as long as the job's objects are on the cluster, so a long-running
service holds records of what the cluster holds, not of every job it ever ran.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from config.settings import Cluster
from cpn.adapters.gateway import DELETED_REASON, JobEvent, NoLog, SubmitRejected
from cpn.admission import Admitted, Refused, admit
from cpn.clock import Clock, WallClock
from cpn.companions import conflict, content_difference
from cpn.decisions import Placement
from cpn.intake import SUPPORTED_KINDS
from cpn.inventory import Node, NodeState
from cpn.jobs import JobSpec
from cpn.rules import is_sharing
from cpn.workloads import WORKLOADS, WorkloadKind, pod_count, workload_of

from .api import KINDS, Api, ApiError, RetryPolicy, collection, served_kinds
from .binding import BindError, KubernetesBinder
from .inventory import Claim, LiveInventory
from .labels import CpnLabels, job_key, object_name
from .status import JobStatus, job_status
from .validation import InvalidManifest, validate_object
from .watch import CollectionWatch

log = logging.getLogger(__name__)

GpuMemorySource = Callable[[str, tuple[tuple[str, str], ...], float, float], float | None]
"""(job id, its pods as (namespace, name), start, end) -> peak GPU memory per card in GB over the run,
None = unknown (cpn.adapters.prometheus.PeakGpuMemory)."""

NO_MEMORY_SERIES = (
    "peak GPU memory not measured (no GPU memory series for its pods, or Prometheus did not answer): "
    "runtime only"
)
"""The reason on a succeeded end whose GPU memory source found nothing: the job feeds the runtime model,
not the memory model."""

_ORDER = {"submitted": 0, "running": 1, "succeeded": 2, "failed": 2}

LOG_TAILS_KEPT = 256
"""`log_tail` answers for the jobs that ended last, this many: a failed job's tail travels on its event
to the job store, and a long-running service must not keep every job's log."""


class ApiRefusal(SubmitRejected):
    """The API server refused a submission (`transient` False: a 4xx other than 409 and 429, its message
    says why, and trying again will not help) or stayed unavailable through the retries (`transient`)."""

    def __init__(self, cluster: str, error: ApiError) -> None:
        super().__init__(f"cluster {cluster}: {error}")
        self.status = error.status
        self.transient = error.transient


class KubernetesGateway:
    """One Kubernetes cluster behind the ClusterGateway port (see the module doc)."""

    def __init__(
        self,
        cluster: str,
        api_client: client.ApiClient,
        *,
        label_domain: str,
        gpu_aliases: Mapping[str, str] | None = None,
        hami: bool = False,
        hami_resource_pool: str | None = None,
        kubernetes_version: str = "1.30",
        retry: RetryPolicy | None = None,
        watch_timeout_s: int = 60,
        log_lines: int = 50,
        log_bytes: int = 8192,
        clock: Clock | None = None,
        gpu_memory: GpuMemorySource | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.api = Api(api_client, retry or RetryPolicy(), **({"sleep": sleep} if sleep else {}))
        self.labels = CpnLabels(label_domain)
        self.gpu_aliases = dict(gpu_aliases or {})
        self.kubernetes_version = kubernetes_version
        self.binder = KubernetesBinder(
            label_domain, self._node, hami=hami, hami_resource_pool=hami_resource_pool
        )
        self.log_lines = log_lines
        """Lines of a finished job's pod log kept (0: the log is not read)."""
        self.log_bytes = log_bytes
        """At most this many bytes of them (the last whole lines)."""
        self.clock = clock or WallClock()
        self.gpu_memory = gpu_memory
        self._lock = threading.RLock()
        self._start_lock = threading.Lock()
        self._finished = threading.Condition(self._lock)
        self._finishing = 0
        """Ends being read (pods, log) whose events are not out yet; `sync` waits for them."""
        self._cache: dict[str, dict[tuple[str, str], dict]] = defaultdict(dict)
        """collection (pods, jobs, vcjobs) -> (namespace, name) -> object."""
        self._by_job: dict[str, dict[str, set[tuple[str, str]]]] = {}
        """job_id -> collection -> keys of its objects in the cache."""
        self._live = LiveInventory(cluster, self.labels, self.gpu_aliases)
        self._claims: dict[str, tuple[Claim, int]] = {}
        """job_id -> cards it holds before its pods show, and how many pods it will have."""
        self._seen: dict[str, str] = {}
        """job_id -> the last phase reported, while the job has objects or a claim here."""
        self._events: list[JobEvent] = []
        self._logs: OrderedDict[str, str] = OrderedDict()
        """job_id -> its log tail, for the LOG_TAILS_KEPT jobs that ended last."""
        self._started = False
        self._ended: set[str] = set()
        """Jobs whose end poll_events has handed out, while they have objects here."""
        cpn = self.labels.selector
        self._watches = [
            CollectionWatch(name, self.api, fn, selector, self._on_list, self._on_event, watch_timeout_s)
            for name, fn, selector in (
                ("nodes", self.api.core.list_node, None),
                ("pods", self.api.core.list_pod_for_all_namespaces, None),
                *((collection(w), self._lister(w), cpn) for w in WATCHED),
            )
        ]

    def _lister(self, workload: WorkloadKind) -> Callable[..., Any]:
        """The call listing (and, with watch=True, watching) `workload`'s objects in every namespace: in the
        first of its versions the cluster serves (a 404 tries the next, and the one found is kept)."""
        if (workload.group, workload.kind) == ("batch", "Job"):
            return self.api.batch.list_job_for_all_namespaces
        versions = list(workload.versions)

        def call(**kwargs: Any) -> Any:
            while True:
                try:
                    return self.api.custom.list_cluster_custom_object(
                        workload.group, versions[0], workload.plural, **kwargs
                    )
                except ApiException as exc:
                    if exc.status != 404 or len(versions) == 1:
                        raise
                    versions.pop(0)

        return call

    # -- inventory -------------------------------------------------------------------------------------

    def inventory(self) -> tuple[NodeState, ...]:
        """Every GPU node (control-plane left out) with what its pods and pending claims leave free.

        From the watches once the gateway has started; before that (`cpn plan`, a first round), from one
        list of the nodes and one of the pods, opening no watch.
        """
        with self._lock:
            if self._started:
                return self._live.states(c for c, _ in self._claims.values())
        once = LiveInventory(self.cluster, self.labels, self.gpu_aliases)
        once.workloads = served_kinds(self.api)
        once.replace_nodes(self.api.call(self.api.core.list_node)["items"])
        once.replace_pods(
            {_key(p): p for p in self.api.call(self.api.core.list_pod_for_all_namespaces)["items"]}
        )
        with self._lock:
            return once.states(c for c, _ in self._claims.values())

    def _node(self, cluster: str, name: str) -> Node:
        with self._lock:
            node = self._live.node(name) if cluster == self.cluster else None
        if node is None:
            raise KeyError(f"no GPU node {cluster}/{name}")
        return node

    # -- submission ------------------------------------------------------------------------------------

    def submit(self, job: JobSpec, placement: Placement) -> None:
        """Create the job's objects as placed, named for its generation (`object_name`); a job already on
        the cluster is left as it is.

        Raises SubmitRejected, creating nothing, when the admission rule refuses the placement on what
        the cluster has now (`cpn.admission.admit`, with its reason), the manifest cannot be
        bound or fails validation, or the API server refuses it (its message); and, after the retries,
        when the API server stays unavailable (a second try later is safe: names are deterministic).
        """
        if placement.job_id != job.job_id:
            raise SubmitRejected(f"placement is for {placement.job_id}, not {job.job_id}")
        if placement.cluster != self.cluster:
            raise SubmitRejected(f"this gateway runs cluster {self.cluster}, not {placement.cluster}")
        try:
            self.start()
        except ApiError as exc:
            raise ApiRefusal(self.cluster, exc) from None
        with self._lock:
            # A later generation is created even if the view still holds the stopped run's objects (their
            # DELETED events may lag); a second try of it meets 409 on its own name.
            if job.job_id in self._claims:
                return
            in_view = job.generation == 0 and job.job_id in self._by_job
        # The view may still hold the pods of a submission rolled back a moment ago: the API says whether
        # the job's workload is really there (a call only on this path).
        if in_view and self._workloads_of(job.job_id):
            return
        with self._lock:
            claims = [c for c, _ in self._claims.values()]
            states = {
                (self.cluster, name): state
                for name, _ in placement.nodes
                if (state := self._live.state(name, claims)) is not None
            }
        admitted = admit(job, placement, states)
        if isinstance(admitted, Refused):
            raise SubmitRejected(admitted.reason)
        claim = _claim(job, admitted, states)
        try:
            objects = self.binder.bind(job, placement)
            for obj in objects:
                validate_object(obj, self.kubernetes_version)
        except (BindError, InvalidManifest) as exc:
            raise SubmitRejected(str(exc)) from None
        if claim.share is not None:
            self.binder.annotate_pods(objects[0], {self.labels.card: str(claim.share[0])})
        pods = pod_count(objects[0])
        with self._lock:
            self._claims[job.job_id] = (claim, pods)
        created: list[dict] = []
        try:
            # What comes with the workload first: its pods find their ConfigMaps there, and one that
            # another job brought with other content refuses the job before its workload exists.
            for obj in (*objects[1:], objects[0]):
                if self._create(obj, job.job_id):
                    created.append(obj)
        except (ApiError, SubmitRejected) as exc:
            self._delete(created)
            with self._lock:
                self._claims.pop(job.job_id, None)
                self._forget(job.job_id)
            if isinstance(exc, ApiError):
                raise ApiRefusal(self.cluster, exc) from None
            raise SubmitRejected(f"cluster {self.cluster}: {exc}") from None

    def _create(self, obj: dict, job_id: str) -> bool:
        """Create `obj` for the job; False when it was there already and is another job's (a companion
        both share, left to its owner: a rollback of this job does not remove it). An object there already
        is the job's own (its earlier try), or a companion with the same content (cpn.companions); any
        other is refused, naming it."""
        kind = KINDS.get((obj["apiVersion"], obj["kind"]))
        if kind is None:
            raise SubmitRejected(f"cpn does not submit {obj['kind']} {obj['apiVersion']}")
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        try:
            kind.create(self.api, ns, obj)()
            return True
        except ApiError as exc:
            if exc.status != 409:
                raise
            existing = kind.read(self.api, ns, name)()
        owner = ((existing.get("metadata") or {}).get("annotations") or {}).get(self.labels.job_id)
        if owner == job_id:
            log.info(
                "%s %s/%s already exists for %s: the same job, not created again",
                obj["kind"],
                ns,
                name,
                job_id,
            )
            return True
        if workload_of(obj) is None:
            differs = content_difference(obj, existing)
            origin = f"it came with job {owner}" if owner else "cpn did not create it"
            if differs is None:
                log.info(
                    "%s %s/%s already exists with the same content (%s): shared",
                    obj["kind"],
                    ns,
                    name,
                    origin,
                )
                return False
            raise SubmitRejected(conflict(obj, self.cluster, differs, origin))
        raise SubmitRejected(
            f"{obj['kind']} {ns}/{name} already exists and is not cpn's job {job_id} "
            f"(its {self.labels.job_id} is {owner!r}); rename the job or remove the object"
        )

    def _delete(self, objects: list[dict]) -> None:
        for obj in objects:
            meta = obj["metadata"]
            try:
                KINDS[(obj["apiVersion"], obj["kind"])].delete(self.api, meta["namespace"], meta["name"])()
            except ApiError as exc:
                log.warning(
                    "could not remove %s %s/%s: %s", obj["kind"], meta["namespace"], meta["name"], exc
                )

    def delete(self, job_id: str, grace_s: float | None = None) -> None:
        """Delete the job's objects, of every name generation, found by cpn's job label (see the module
        doc), and report its end at once; a job with no workload here is left alone. ApiError when the
        API server refuses or stays unavailable."""
        namespace, _ = object_name(job_id)
        found = self._objects_of(job_id)
        if not found or found[0][0] not in SUPPORTED_KINDS:
            return
        service = SUPPORTED_KINDS[found[0][0]] == "inference"
        for key, obj_name in found:
            try:
                KINDS[key].delete(self.api, namespace, obj_name, grace_s)()
            except ApiError as exc:
                if exc.status != 404:
                    raise
        with self._lock:
            self._claims.pop(job_id, None)
            self._forget(job_id)
            self._ended.discard(job_id)
            if _ORDER[self._seen.pop(job_id, "submitted")] < _ORDER["succeeded"]:
                phase = "succeeded" if service else "failed"
                self._events.append(JobEvent(job_id, phase, self.clock.now(), DELETED_REASON))

    def _objects_of(self, job_id: str) -> list[tuple[tuple[str, str], str]]:
        """(kind key, name) of the job's objects on the cluster, of every name generation, workloads first
        (KINDS' order), found by cpn's job label; ApiError when the API server refuses."""
        namespace, _ = object_name(job_id)
        selector = f"{self.labels.job}={job_key(job_id)}"
        found: dict[tuple[str, str, str], tuple[tuple[str, str], str]] = {}
        for key in KINDS:  # every version: a cluster serves a kind in some of them (MPIJob v1 or v2beta1)
            try:
                items = KINDS[key].list(self.api, namespace, selector)()["items"]
            except ApiError as exc:
                if exc.status != 404:  # 404: the cluster does not serve the kind in that version
                    raise
                continue
            for o in items:
                if _job_id_of(o, self.labels) != job_id:
                    continue
                if key == ("v1", "Pod") and o["metadata"].get("ownerReferences"):
                    continue  # a workload's pod, which goes with it
                group = key[0].rpartition("/")[0]
                found.setdefault((group, key[1], o["metadata"]["name"]), (key, o["metadata"]["name"]))
        return list(found.values())

    def _workloads_of(self, job_id: str) -> bool:
        """Whether the cluster holds a workload of the job (ApiRefusal when the API server refuses)."""
        try:
            return any(key in SUPPORTED_KINDS for key, _ in self._objects_of(job_id))
        except ApiError as exc:
            raise ApiRefusal(self.cluster, exc) from None

    def _forget(self, job_id: str) -> None:
        """Take the job's objects out of the view now, under the lock (their cards count free; the
        watch's DELETED events follow)."""
        for coll, keys in list(self._by_job.get(job_id, {}).items()):
            for key in list(keys):
                self._put(coll, self._cache[coll][key], deleted=True)

    # -- events ----------------------------------------------------------------------------------------

    def start(self) -> None:
        """List cpn's objects on the cluster (and the nodes and pods of the inventory) and start the
        watches from there (once; later calls do nothing; ApiError when a list fails, and a later call
        tries again). Every job found is reported afresh by `poll_events` (a restarted cpn gets the end of a
        job that finished while it was down; the scheduler skips what its store already has)."""
        with self._start_lock:
            if self._started:
                return
            served = served_kinds(self.api)
            with self._lock:
                self._live.workloads = served
            for w in self._watches:
                w.relist()
            for w in self._watches:
                w.start()
            with self._lock:
                self._started = True

    def held_jobs(self) -> frozenset[str]:
        """Ids of the cpn jobs the cluster holds (its objects carry cpn's labels), less those whose end
        `poll_events` has handed out; starts the watches first. For start-up reconciliation: a job
        found here was submitted, and is never submitted twice."""
        self.start()
        with self._lock:
            return frozenset(self._by_job.keys() | self._claims.keys()) - self._ended

    def close(self) -> None:
        """Stop the watches."""
        for w in self._watches:
            w.stop(wait=False)
        for w in self._watches:
            w.stop()

    def sync(self) -> None:
        """Relist every collection now and report what changed, as after a 410 Gone.

        The watches keep the view current on their own; this is for a caller that must know the
        cluster's state at a given moment (tests, a restart of the live loop).
        """
        for w in self._watches:
            if not w.missing:
                w.relist()
        with self._finished:  # an end a watch thread is reading out now is reported too
            self._finished.wait_for(lambda: self._finishing == 0, timeout=self.api.retry.timeout_s)

    @property
    def relists(self) -> int:
        """Lists done by the watches (first lists and relists after 410 Gone)."""
        return sum(w.lists for w in self._watches)

    def poll_events(self) -> list[JobEvent]:
        """Events since the last call, oldest first (the watches start at the first call)."""
        self.start()
        with self._lock:
            events, self._events = self._events, []
            self._ended.update(e.job_id for e in events if e.kind != "running" and e.job_id in self._by_job)
        return sorted(events, key=lambda e: e.time)

    def log_tail(self, job_id: str) -> str:
        """The last lines of the log of the job's pod (the failed one, if any), read when it ended, bounded
        by `log_lines` and `log_bytes`; '' for a job not among the LOG_TAILS_KEPT that ended last."""
        with self._lock:
            return self._logs.get(job_id, "")

    def logs(self, job_id: str, tail_lines: int) -> str:
        """The last `tail_lines` lines of the log of the job's pod (its failed one, else the first by name),
        read from the API server now; NoLog when the cluster holds no pod of the job or cannot give its
        log."""
        with self._lock:
            pods = self._objects(job_id, "pods")
        if not pods:
            raise NoLog(f"cluster {self.cluster} holds no pod of {job_id}")
        pod = next((p for p in pods if p.get("status", {}).get("phase") == "Failed"), pods[0])
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        try:
            text = self.api.call(
                self.api.core.read_namespaced_pod_log, name, ns, tail_lines=tail_lines, raw=True
            )
        except ApiError as exc:
            raise NoLog(f"pod {ns}/{name} (cluster {self.cluster}): log not readable: {exc}") from None
        return text.rstrip("\n")

    def _on_list(self, collection: str, items: list[dict]) -> None:
        with self._lock:
            if collection == "nodes":
                self._live.replace_nodes(items)
                return
            cache = self._cache[collection]
            changed = {j for o in cache.values() if (j := _job_id_of(o, self.labels))}
            for key in list(cache):
                self._index(collection, key, None)
            for obj in items:
                self._index(collection, _key(obj), obj)
                if job_id := _job_id_of(obj, self.labels):
                    changed.add(job_id)
            if collection == "pods":
                self._live.replace_pods(cache)
        self._derive(changed)

    def _on_event(self, collection: str, kind: str, obj: dict) -> None:
        with self._lock:
            if collection == "nodes":
                if kind == "DELETED":
                    self._live.remove_node(_key(obj)[1])
                else:
                    self._live.set_node(obj)
                return
            if not self._put(collection, obj, deleted=kind == "DELETED"):
                return
        if job_id := _job_id_of(obj, self.labels):
            self._derive({job_id})

    def _put(self, collection: str, obj: dict, deleted: bool = False) -> bool:
        """Cache one object's newer version (or its deletion); False when `obj` is older than the cache's."""
        key = _key(obj)
        old = self._cache[collection].get(key)
        if not deleted and old is not None and _older(obj, old):
            return False
        self._index(collection, key, None if deleted else obj)
        if collection == "pods":
            self._live.set_pod(key, None if deleted else obj)
        return True

    def _index(self, collection: str, key: tuple[str, str], obj: dict | None) -> None:
        """Put `obj` in the cache under `key` (None: take the key out), and in its job's index."""
        cache = self._cache[collection]
        old = cache.pop(key, None)
        if old is not None and (job_id := _job_id_of(old, self.labels)):
            keys = self._by_job.get(job_id, {})
            keys.get(collection, set()).discard(key)
            if not any(keys.values()):
                self._by_job.pop(job_id, None)
        if obj is None:
            return
        cache[key] = obj
        if job_id := _job_id_of(obj, self.labels):
            self._by_job.setdefault(job_id, {}).setdefault(collection, set()).add(key)

    def _objects(self, job_id: str, collection: str) -> list[dict]:
        keys = self._by_job.get(job_id, {}).get(collection, ())
        return [self._cache[collection][k] for k in sorted(keys)]

    def _workload(self, job_id: str) -> tuple[dict | None, WorkloadKind | None]:
        """The job's workload object in the view and its kind: a watched one (`WATCHED`), else its bare
        Pod (a pod no controller owns); (None, None) when neither is seen (a service's is not watched)."""
        with self._lock:
            for w in WATCHED:
                for obj in self._objects(job_id, collection(w)):
                    return obj, w
            for pod in self._objects(job_id, "pods"):
                if not (pod.get("metadata") or {}).get("ownerReferences"):
                    return pod, BARE_POD
        return None, None

    def _status(self, job_id: str) -> JobStatus:
        workload, kind = self._workload(job_id)
        return job_status(workload, self._objects(job_id, "pods"), kind)

    def _derive(self, job_ids: set[str]) -> None:
        """Re-derive each job's status and report what moved it forward."""
        for job_id in sorted(job_ids):
            with self._lock:
                if job_id not in self._by_job:
                    # Its objects are gone: nothing more can be reported, and nothing is kept.
                    self._seen.pop(job_id, None)
                    self._ended.discard(job_id)
                    continue
                status = self._status(job_id)
                seen = self._seen.get(job_id, "submitted")
                pods_seen = [
                    p for p in self._objects(job_id, "pods") if (p.get("spec") or {}).get("nodeName")
                ]
                claim = self._claims.get(job_id)
                if claim is not None and (
                    len(pods_seen) >= claim[1] or status.phase in ("succeeded", "failed")
                ):
                    del self._claims[job_id]
                if _ORDER[status.phase] <= _ORDER[seen]:
                    continue
                self._seen[job_id] = status.phase
                self._finishing += status.phase in ("succeeded", "failed")
                now = self.clock.now()
                if seen == "submitted" and status.phase != "submitted" and status.start is not None:
                    self._events.append(JobEvent(job_id, "running", status.start))
                elif status.phase == "running":
                    self._events.append(JobEvent(job_id, "running", now))
            if status.phase in ("succeeded", "failed"):
                self._finish(job_id, status, now, unstarted=seen == "submitted" and status.start is None)

    def _finish(self, job_id: str, status: JobStatus, now: float, unstarted: bool = False) -> None:
        """Report the job's end, with its reason, log tail and measured memory; `unstarted`: no status said
        it ran before it ended (it started and ended between two watch events), so its `running` is reported
        first, at its start as the pods read now say, else at its end."""
        # The pods' own watch may lag the workload's: read them fresh for the reason and the log.
        try:
            pods = self.api.call(
                self.api.core.list_pod_for_all_namespaces,
                label_selector=f"{self.labels.job}={job_key(job_id)}",
            )["items"]
            with self._lock:
                for pod in pods:  # the inventory sees the cards free as soon as the end is reported
                    self._put("pods", pod)
            workload, kind = self._workload(job_id)
            status = job_status(workload, pods, kind) if workload is not None else status
        except ApiError as exc:
            log.warning("pods of %s not readable at its end: %s", job_id, exc)
        end = status.end if status.end is not None else now
        text = ""
        if status.failed_pod is not None and self.log_lines > 0:
            ns, name = status.failed_pod
            try:
                text = self.api.call(
                    self.api.core.read_namespaced_pod_log, name, ns, tail_lines=self.log_lines, raw=True
                )
            except ApiError as exc:
                text = f"(log of pod {ns}/{name} not readable: {exc})"
            text = tail(text, self.log_lines, self.log_bytes)
        mem, reason = None, status.reason
        if self.gpu_memory is not None and status.phase == "succeeded" and status.start is not None:
            mem = self.gpu_memory(job_id, status.pods, status.start, end)
            reason = reason or ("" if mem is not None else NO_MEMORY_SERIES)
        with self._lock:
            if text:
                self._logs[job_id] = text
                self._logs.move_to_end(job_id)
                while len(self._logs) > LOG_TAILS_KEPT:
                    self._logs.popitem(last=False)
            log_tail = text if status.phase == "failed" else ""
            if unstarted:
                started = end if status.start is None else status.start
                self._events.append(JobEvent(job_id, "running", started))
            self._events.append(
                JobEvent(job_id, status.phase, end, reason, mem, log_tail)  # type: ignore[arg-type]
            )
            self._finishing -= 1
            self._finished.notify_all()


WATCHED = tuple(w for w in WORKLOADS if not w.service and w.group)
"""The workload kinds the gateway watches, one collection each: those that end by their status (a bare Pod
is seen among the pods; a service's pods say all there is to know of it)."""

BARE_POD = next(w for w in WORKLOADS if (w.group, w.kind) == ("", "Pod"))


def tail(text: str, lines: int, max_bytes: int) -> str:
    """The last `lines` lines of `text` that fit in `max_bytes` of UTF-8 (whole lines; a last line longer
    than that keeps its end), without a trailing newline."""
    if lines <= 0 or max_bytes <= 0:
        return ""
    kept: list[str] = []
    size = 0
    for line in reversed(text.rstrip("\n").splitlines()[-lines:]):
        size += len(line.encode()) + bool(kept)
        if size > max_bytes:
            if not kept:
                kept.append(line.encode()[-max_bytes:].decode(errors="ignore"))
            break
        kept.append(line)
    return "\n".join(reversed(kept))


def _key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace", ""), meta.get("name", "")


def _job_id_of(obj: Mapping[str, Any], labels: CpnLabels) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(labels.job_id)


def _older(new: dict, old: dict) -> bool:
    """Whether `new` is an older version of the object than `old` (numeric resourceVersions only)."""
    a = (new.get("metadata") or {}).get("resourceVersion", "")
    b = (old.get("metadata") or {}).get("resourceVersion", "")
    return a.isdigit() and b.isdigit() and int(a) < int(b)


def _claim(job: JobSpec, admitted: Admitted, states: Mapping[tuple[str, str], NodeState]) -> Claim:
    """The admission rule's answer as this gateway's claim: cards and CPU per node until the pods show,
    and for a sharing job its card (the one the rule picked, else the lowest index no sharing job holds:
    HAMi picks the physical card, cpn's `card` annotation only accounts for it)."""
    held = tuple((node.name, cards, cpu) for node, cards, cpu in admitted.nodes)
    if not is_sharing(job):
        return Claim(job.job_id, held)
    card = admitted.card
    if card is None:
        node = admitted.nodes[0][0]
        state = states[(node.cluster, node.name)]
        used = {c.index for c in state.shared}
        card = min(i for i in range(state.node.gpu_count) if i not in used)
    return Claim(job.job_id, held, (card, job.gpu_share or 1.0))


def api_client_at(url: str) -> client.ApiClient:
    """An ApiClient for the API server at `url`, with no credentials (the fake API server)."""
    return client.ApiClient(client.Configuration(host=url))


def api_client_for(kubeconfig: str | Path | None, context: str | None) -> client.ApiClient:
    """An ApiClient for `context` of the kubeconfig file (None = $KUBECONFIG or ~/.kube/config)."""
    path = None if kubeconfig is None else str(Path(kubeconfig).expanduser())
    return config.new_client_from_config(config_file=path, context=context)


def gateway_for(
    cluster: Cluster, label_domain: str, gpu_aliases: Mapping[str, str] | None = None, **options: Any
) -> KubernetesGateway:
    """The gateway of one configured cluster, reached through its kubeconfig file and context.

    `label_domain` and `gpu_aliases` are the cluster config's (ClustersConfig); kubeconfig, context,
    HAMi, the Kubernetes version and the log tail's bounds come from `cluster`. `options` go to
    KubernetesGateway (clock, gpu_memory, retry, watch_timeout_s, log_lines, log_bytes) or give an
    `api_client` to use instead of the kubeconfig. Nothing is contacted until the gateway is used.
    """
    options.setdefault("log_lines", cluster.log_tail_lines)
    options.setdefault("log_bytes", cluster.log_tail_bytes)
    api_client = options.pop("api_client", None)
    if api_client is None:
        if cluster.kube_context is None:
            raise ValueError(
                f"cluster {cluster.name} names no kube_context; set kube_context (and kubeconfig) in the "
                "cluster YAML to reach a real cluster"
            )
        api_client = api_client_for(cluster.kubeconfig, cluster.kube_context)
    return KubernetesGateway(
        cluster.name,
        api_client,
        label_domain=label_domain,
        gpu_aliases=gpu_aliases,
        hami=cluster.hami,
        hami_resource_pool=cluster.hami_resource_pool,
        kubernetes_version=cluster.kubernetes_version,
        **options,
    )
