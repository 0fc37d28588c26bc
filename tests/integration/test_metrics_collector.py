"""A slow Prometheus delays the background collector, never the round: the round gets the last reading."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from config.settings import ClustersConfig
from cpn.adapters.prometheus import collected_in_background

pytestmark = pytest.mark.integration


def test_a_slow_prometheus_never_delays_a_sample_which_carries_the_readings_age():
    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            time.sleep(1.0)
            body = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    group = {"name": "g", "gpu_product": "v100", "gpus_per_node": 1, "gpu_memory_gb": 16, "cpu_cores": 8}
    config = ClustersConfig.model_validate(
        {
            "clusters": [
                {
                    "name": "a",
                    "node_groups": [group],
                    "prometheus_url": f"http://127.0.0.1:{httpd.server_address[1]}",
                    "metrics": {"scrape_interval_s": 1, "timeout_s": 5},
                }
            ]
        }
    )
    metrics = collected_in_background(config.clusters)
    try:
        t0 = time.monotonic()
        first = metrics.sample()["a"]
        assert time.monotonic() - t0 < 0.2
        assert (first.health, first.detail) == ("unknown", "no reading yet")
        deadline = time.monotonic() + 30
        while (reading := metrics.sample()["a"]).detail == "no reading yet":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert reading.health == "degraded"  # answered, every series missing
        time.sleep(0.5)  # the collector is inside its next slow read
        t1 = time.monotonic()
        later = metrics.sample()["a"]
        assert time.monotonic() - t1 < 0.2
        assert later.time == reading.time or later.time > reading.time
        assert later.age_s >= 0.5 - (later.time - reading.time)
    finally:
        metrics.close()
        httpd.shutdown()
