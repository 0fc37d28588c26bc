"""A simulated cluster's dcgm-exporter and node-exporter, over HTTP, so a real Prometheus can scrape it.

The series and label names are the real exporters' (dcgm-exporter's default counters are listed in
data/dcgm/default-counters.csv, and the help texts come from there), so the Prometheus collector
(cpn.adapters.prometheus) reads a simulated cluster exactly as it reads a real one:

- `/metrics`: DCGM_FI_DEV_GPU_UTIL (%), DCGM_FI_DEV_FB_USED and DCGM_FI_DEV_FB_FREE (MiB) and
  DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ since the exporter started, growing with wall time at a power
  between idle and busy as the card is used) for every card, labelled `gpu`, `UUID`, `pci_bus_id`,
  `device`, `modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`;
- `/node/<node>/metrics`: one node-exporter per node: `node_cpu_seconds_total{cpu,mode}` (counters that
  grow with wall time as the node's cores are busy), `node_memory_MemTotal_bytes`,
  `node_memory_MemAvailable_bytes` and `node_uname_info{nodename,...}`.

The state served is what the owner last handed to `update` (taken on the caller's thread, so the HTTP
thread never reads the gateway while it changes), plus load placed with `occupy`: work cpn did not start
(another user's process on a card), which the scheduler must not count as free.
"""

from __future__ import annotations

import csv
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from config.settings import DATA_DIR
from cpn.inventory import Node
from cpn.sim.gateway import SimulatedGateway

DCGM_COUNTERS = DATA_DIR / "dcgm" / "default-counters.csv"
"""dcgm-exporter's default counter list: the names exported here must be in it."""

DCGM_GAUGES = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE")
DCGM_ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
EXPORTED_DCGM = (*DCGM_GAUGES, DCGM_ENERGY)
"""The DCGM fields the simulator publishes."""

IDLE_W, BUSY_W = 50.0, 250.0
"""A card's power idle and fully busy (a V100 PCIe draws about these); the energy counter grows at
`IDLE_W + utilisation * (BUSY_W - IDLE_W)`. Only its growth matters: a powered card's counter grows."""

DRIVER_VERSION = "535.183.01"
"""Value of the DCGM_FI_DRIVER_VERSION label (any driver; the collector does not read it)."""

MIB_PER_GB = 1024.0
"""cpn's GB are GiB (the node labels write `gpu_memory_gb * 1024` MiB); DCGM reports MiB."""

BYTES_PER_GB = 1024.0**3


def dcgm_help(path=DCGM_COUNTERS) -> dict[str, str]:
    """DCGM field -> help text, from the exporter's counter list (comments skipped)."""
    fields = {}
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and not row[0].lstrip().startswith("#") and len(row) >= 3:
                fields[row[0].strip()] = ",".join(row[2:]).strip()
    return fields


@dataclass
class _NodeLoad:
    node: Node
    host_memory_gb: float
    cpu_used: float = 0.0
    cards: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Card -> (utilisation 0..1, GB in use) of cpn's own jobs."""
    foreign: dict[int, tuple[float, float]] = field(default_factory=dict)
    """Card -> (utilisation, GB) of work cpn did not start."""
    foreign_cpu: float = 0.0
    cpu_seconds: list[list[float]] = field(default_factory=list)
    """Per core: [idle, user] seconds so far."""
    energy_mj: list[float] = field(default_factory=list)
    """Per card: millijoules used so far."""

    def card(self, i: int) -> tuple[float, float]:
        util, gb = self.cards.get(i, (0.0, 0.0))
        f_util, f_gb = self.foreign.get(i, (0.0, 0.0))
        return min(1.0, util + f_util), min(self.node.gpu_memory_gb, gb + f_gb)


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


class SimExporter:
    """dcgm-exporter and node-exporter series of some simulated nodes, served over HTTP."""

    def __init__(
        self,
        nodes: Sequence[Node],
        host_memory_gb: Mapping[str, float] | None = None,
        clock: Callable[[], float] = time.time,
        timestamps: bool = False,
    ) -> None:
        """`nodes` to export (usually one cluster's); `host_memory_gb` node name -> GB (default 64).

        `timestamps`: stamp every sample with its time, as cAdvisor and a federated Prometheus do
        (dcgm-exporter and node-exporter do not; Prometheus then stamps samples with the scrape time).
        """
        help_texts = dcgm_help()
        unknown = [name for name in EXPORTED_DCGM if name not in help_texts]
        if unknown:
            raise ValueError(f"{DCGM_COUNTERS} does not list {unknown}; dcgm-exporter would not export them")
        self._help = help_texts
        memory = host_memory_gb or {}
        self._loads = {n.name: _NodeLoad(n, memory.get(n.name, 64.0)) for n in nodes}
        for load in self._loads.values():
            load.cpu_seconds = [[0.0, 0.0] for _ in range(math.ceil(load.node.cpu_cores))]
            load.energy_mj = [0.0] * load.node.gpu_count
        self._clock = clock
        self.timestamps = timestamps
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._frozen_at: float | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- state --------------------------------------------------------------------------------------

    def update(self, gateway: SimulatedGateway) -> None:
        """Take the gateway's load now: CPU in use and busy cards of the exported nodes."""
        states = {s.node.name: s for s in gateway.inventory() if s.node.name in self._loads}
        cards = gateway.card_use()
        with self._lock:
            self._tick()
            for name, load in self._loads.items():
                state = states.get(name)
                load.cpu_used = state.cpu_used if state is not None else 0.0
                load.cards = dict(cards.get((load.node.cluster, name), {}))

    def occupy(self, node: str, card: int, memory_gb: float, utilization: float = 1.0) -> None:
        """Put load cpn does not know about on a card (0 GB clears it)."""
        with self._lock:
            load = self._load(node)
            if not 0 <= card < load.node.gpu_count:
                raise ValueError(f"node {node} has cards 0..{load.node.gpu_count - 1}, not {card}")
            if memory_gb <= 0:
                load.foreign.pop(card, None)
            else:
                load.foreign[card] = (utilization, memory_gb)

    def occupy_cpu(self, node: str, cores: float) -> None:
        """Keep `cores` of a node busy with work cpn does not know about."""
        with self._lock:
            self._tick()
            self._load(node).foreign_cpu = cores

    def freeze(self) -> None:
        """Keep serving the samples of now: a hung exporter that serves old values.

        With `timestamps` they keep their time, so Prometheus sees them age (stale); without, every scrape
        stamps them afresh and only the unchanging values tell.
        """
        with self._lock:
            self._tick()
            self._frozen_at = self._clock()

    def _load(self, node: str) -> _NodeLoad:
        if node not in self._loads:
            raise KeyError(f"node {node!r} is not exported here; exported: {sorted(self._loads)}")
        return self._loads[node]

    def _tick(self) -> None:
        """Grow the CPU and energy counters by the wall time since the last tick at the load of that time."""
        now = time.monotonic()
        dt, self._last = now - self._last, now
        if self._frozen_at is not None:
            return
        for load in self._loads.values():
            busy = load.cpu_used + load.foreign_cpu
            for i, seconds in enumerate(load.cpu_seconds):
                frac = min(1.0, max(0.0, busy - i))
                seconds[0] += dt * (1 - frac)
                seconds[1] += dt * frac
            for i in range(load.node.gpu_count):
                util, _ = load.card(i)
                load.energy_mj[i] += dt * (IDLE_W + util * (BUSY_W - IDLE_W)) * 1000

    # -- series -------------------------------------------------------------------------------------

    def _stamp(self) -> float | None:
        if self._frozen_at is not None or not self.timestamps:
            return self._frozen_at if self.timestamps else None
        return self._clock()

    def _dcgm(self) -> Iterator[Metric]:
        ts = self._stamp()
        families = {
            name: GaugeMetricFamily(name, self._help[name], labels=_DCGM_LABELS) for name in DCGM_GAUGES
        }
        # Untyped, under its own name: prometheus_client would write a counter as `<name>_total`.
        energy = Metric(DCGM_ENERGY, self._help[DCGM_ENERGY], "unknown")
        for load in self._loads.values():
            node = load.node
            for i in range(node.gpu_count):
                util, gb = load.card(i)
                labels = [
                    str(i),
                    "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node.key}/{i}")),
                    f"00000000:{0x10 + i:02X}:00.0",
                    f"nvidia{i}",
                    node.gpu_product,
                    node.name,
                    DRIVER_VERSION,
                ]
                used_mib = round(gb * MIB_PER_GB)
                total_mib = round(node.gpu_memory_gb * MIB_PER_GB)
                families["DCGM_FI_DEV_GPU_UTIL"].add_metric(labels, round(util * 100), timestamp=ts)
                families["DCGM_FI_DEV_FB_USED"].add_metric(labels, used_mib, timestamp=ts)
                families["DCGM_FI_DEV_FB_FREE"].add_metric(labels, total_mib - used_mib, timestamp=ts)
                energy.add_sample(
                    DCGM_ENERGY, dict(zip(_DCGM_LABELS, labels, strict=True)), load.energy_mj[i], ts
                )
        yield from families.values()
        yield energy

    def _node(self, load: _NodeLoad) -> Iterator[Metric]:
        ts = self._stamp()
        cpu = CounterMetricFamily(
            "node_cpu_seconds", "Seconds the CPUs spent in each mode.", labels=["cpu", "mode"]
        )
        for i, (idle, user) in enumerate(load.cpu_seconds):
            cpu.add_metric([str(i), "idle"], idle, timestamp=ts)
            cpu.add_metric([str(i), "user"], user, timestamp=ts)
        total = load.host_memory_gb * BYTES_PER_GB
        yield cpu
        for name, value in (("MemTotal_bytes", total), ("MemAvailable_bytes", total)):
            family = GaugeMetricFamily(f"node_memory_{name}", f"Memory information field {name}.")
            family.add_metric([], value, timestamp=ts)
            yield family
        uname = GaugeMetricFamily(
            "node_uname_info",
            "Labeled system information as provided by the uname system call.",
            labels=["sysname", "release", "version", "machine", "nodename", "domainname"],
        )
        uname.add_metric(
            ["Linux", "6.1.0-sim", "#1 SMP", "x86_64", load.node.name, "(none)"], 1, timestamp=ts
        )
        yield uname

    def render(self, path: str) -> bytes | None:
        """The exposition text of `path` (`/metrics` or `/node/<node>/metrics`), None for any other."""
        with self._lock:
            self._tick()
            if path == "/metrics":
                return generate_latest(_Families(list(self._dcgm())))
            parts = path.strip("/").split("/")
            if len(parts) == 3 and parts[0] == "node" and parts[2] == "metrics" and parts[1] in self._loads:
                return generate_latest(_Families(list(self._node(self._loads[parts[1]]))))
        return None

    # -- HTTP ---------------------------------------------------------------------------------------

    def _app(self, environ, start_response):
        body = self.render(environ.get("PATH_INFO", ""))
        if body is None:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return [body]

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on `host:port` (0 = a free port) in a background thread; returns `host:port`."""
        if self._server is not None:
            raise RuntimeError("the exporter is already serving")
        self._server = make_server(host, port, self._app, server_class=_Server, handler_class=_Quiet)
        self._thread = threading.Thread(target=self._server.serve_forever, name="sim-exporter", daemon=True)
        self._thread.start()
        return f"{host}:{self._server.server_port}"

    def stop(self) -> None:
        """Stop serving (a scrape then fails, as when an exporter pod dies)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def scrape_configs(self, address: str) -> list[dict]:
        """Prometheus `scrape_configs` for this exporter at `address`: one DCGM target, one per node.

        Each node-exporter target is its own instance (named after the node), as on a real cluster
        where every node runs one node-exporter.
        """
        return [
            {"job_name": "dcgm-exporter", "static_configs": [{"targets": [address]}]},
            {
                "job_name": "node-exporter",
                "static_configs": [
                    {
                        "targets": [address],
                        "labels": {"__metrics_path__": f"/node/{name}/metrics", "instance": name},
                    }
                    for name in self._loads
                ],
            },
        ]


_DCGM_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"]


@dataclass(frozen=True)
class _Families:
    """What generate_latest reads: something with `collect()`."""

    metrics: list[Metric]

    def collect(self) -> list[Metric]:
        return self.metrics
