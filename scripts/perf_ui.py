"""Answer time of each web UI page with 10,000 jobs in the store (target: 300 ms each).

Run: `.venv/bin/python scripts/perf_ui.py [--jobs N]`; prints the median of 5 requests per page.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fastapi.testclient import TestClient  # noqa: E402

from cpn.api import create_app  # noqa: E402
from cpn.auth import ApiSecurity  # noqa: E402
from cpn.decisions import Waiting  # noqa: E402
from cpn.jobs import JobSpec  # noqa: E402
from cpn.store import JobStore  # noqa: E402
from cpn.ui.pages import mount_ui  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, JobStore(Path(tmp) / "jobs.db") as store:
        specs = [
            JobSpec(f"team-{i % 10}/job-{i:05d}", "ResNet-50", num_gpus=1 + i % 4) for i in range(args.jobs)
        ]
        store.submit(specs)
        now = time.time()
        store.set_waiting(
            [Waiting(s.job_id, "memory" if i % 7 else "gang", "", now + i) for i, s in enumerate(specs)]
        )
        security = ApiSecurity.no_auth(allowed_hosts={"testserver"})
        client = TestClient(mount_ui(create_app(store, security=security), store, security))
        last = specs[-1].job_id
        for name, url in [
            ("queue", "/ui/queue"),
            ("queue filtered (state, namespace)", "/ui/queue?state=queued&namespace=team-3"),
            ("queue filtered (rare reason)", "/ui/queue?reason=gang"),
            ("queue filtered (no match)", "/ui/queue?reason=refused"),
            ("job", f"/ui/jobs/{last}"),
            ("clusters", "/ui/clusters"),
        ]:
            times = []
            for _ in range(5):
                started = time.perf_counter()
                assert client.get(url).status_code == 200, url
                times.append(time.perf_counter() - started)
            print(f"{name:40s} {statistics.median(times) * 1000:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
