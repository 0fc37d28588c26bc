"""A real cluster's measurement goes back: a finished job's peak GPU memory per card, read from a real
Prometheus scraping dcgm-exporter's framebuffer series by pod, lands on its completion record and in the
memory model's next fit; a job whose series are missing says so and feeds the runtime only.

The live service as `cpn run` builds it (the real `kubernetes` client against the fake API server), a real
Prometheus, and an exporter serving literal dcgm-exporter text with the pod labels it attaches.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from cpn.adapters.kubernetes.gateway import NO_MEMORY_SERIES
from cpn.adapters.prometheus import peak_memory_query
from cpn.bootstrap import build_service
from cpn.engine.feedback import completed_runs
from cpn.formats.throughput import ThroughputTable
from cpn.intake import parse_manifests
from cpn.jobs import JobState
from models.memory import MemoryModel
from models.retrain import memory_sample
from tests.integration.servers import prometheus
from tests.kubernetes.conftest import lab_config, wait_for
from tests.kubernetes.test_log_tail import MANIFEST

pytestmark = [
    pytest.mark.integration,
    pytest.mark.kubernetes,
    pytest.mark.prometheus,
    pytest.mark.timeout(120),
]


class DcgmText:
    """An exporter serving what it is given as dcgm-exporter's text, one FB_USED line per (pod, MiB)."""

    def __init__(self) -> None:
        self.cards: dict[tuple[str, str], int] = {}
        """(namespace, pod) -> MiB in use on card 0 of gpu-a."""
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                lines = ["# TYPE DCGM_FI_DEV_FB_USED gauge"] + [
                    f'DCGM_FI_DEV_FB_USED{{gpu="{i}",Hostname="gpu-a",namespace="{ns}",pod="{pod}",'
                    f'container="train"}} {mib}'
                    for i, ((ns, pod), mib) in enumerate(sorted(owner.cards.items()))
                ]
                body = ("\n".join(lines) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_port}"


def test_peak_memory_query_selects_the_pods_by_namespace_and_escaped_name():
    query = peak_memory_query("DCGM_FI_DEV_FB_USED", [("a", "x.1-a"), ("b", "y"), ("a", "z")], 90)
    assert query == (
        'max(max_over_time(DCGM_FI_DEV_FB_USED{namespace="a",pod=~"x\\\\.1-a|z"}[90000ms]) or '
        'max_over_time(DCGM_FI_DEV_FB_USED{namespace="b",pod=~"y"}[90000ms]))'
    )


def test_a_finished_jobs_measured_peak_reaches_its_completion_and_the_memory_model(server, tmp_path):
    exporter = DcgmText()
    scrape = [{"job_name": "dcgm-exporter", "static_configs": [{"targets": [exporter.address]}]}]
    with prometheus(tmp_path, scrape) as url:
        config = lab_config(server, tmp_path, prometheus_url=url, metrics={"scrape_interval_s": 1})
        service = build_service(config, tmp_path / "jobs.db", "fifo", ThroughputTable.load(), time_scale=1)
        service.start()
        try:
            jobs = [
                *parse_manifests(MANIFEST),  # team/train: ResNet-50, batch 64, 1 card
                *parse_manifests(MANIFEST.replace("name: train\n  namespace", "name: bare\n  namespace")),
            ]
            service.store.submit(jobs)
            assert service.scheduler.round().placed == 2
            wait_for(
                lambda: (
                    service.scheduler.round()
                    and all(service.store.get(j.job_id).state == JobState.RUNNING for j in jobs)
                )
            )
            (pod,) = server.pods_of("team", "train")
            key = ("team", pod["metadata"]["name"])
            # Its memory grows to a 20 GiB peak; another pod's larger use on another card does not count.
            exporter.cards.update({key: 10240, ("other", "big-0"): 70000})
            time.sleep(2.5)
            exporter.cards[key] = 20480
            series = f'DCGM_FI_DEV_FB_USED{{pod="{key[1]}"}}'

            def scraped(mib: int) -> bool:
                got = requests.get(f"{url}/api/v1/query", params={"query": series}, timeout=5).json()
                return any(float(r["value"][1]) == mib for r in got["data"]["result"])

            wait_for(lambda: scraped(20480), timeout=10)
            exporter.cards[key] = 4096  # winding down; the pod's series goes with the pod
            wait_for(lambda: scraped(4096), timeout=10)
            del exporter.cards[key]
            for name in ("train", "bare"):
                server.finish("team", name)
            wait_for(
                lambda: (
                    service.scheduler.round()
                    and all(service.store.get(j.job_id).state == JobState.SUCCEEDED for j in jobs)
                ),
                timeout=15,
            )
            ends = {j.job_id: service.store.history(j.job_id)[-1] for j in jobs}
            nodes = [s.node for s in service.gateway.inventory()]
            runs = {r.job_id: r for r in completed_runs(service.store, nodes)}
        finally:
            service.close()
    assert ends["team/train"].gpu_mem_gb == 20.0 and ends["team/train"].reason == ""
    assert ends["team/bare"].gpu_mem_gb is None and ends["team/bare"].reason == NO_MEMORY_SERIES
    # Both feed the runtime model; only the measured one feeds the memory model.
    assert set(runs) == {"team/train", "team/bare"} and runs["team/train"].gpu_mem_gb == 20.0
    samples = [s for s in map(memory_sample, runs.values()) if s is not None]
    assert [(s.model, s.batch_size, s.gpu_mem_gb) for s in samples] == [("ResNet-50", 64, 20.0)]
    estimate = MemoryModel(samples).estimate("ResNet-50", 64, 1)
    assert (estimate.gpu_mem_gb, estimate.source) == (20.0, "measured")
