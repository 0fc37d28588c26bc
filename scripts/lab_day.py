"""A day at the lab, in minutes: what a person would check in a running cpn (issue 27).

Starts `cpn run` (the HTTP intake, the web UI and the scheduling loop that `cpn up` runs, without Prefect
and MLflow, which this check does not need) on a temporary home over the demo's simulated clusters, with
three teams (`nlp` with a hard limit of 4 cards, `vision`, and everyone else) and a token per namespace.
It submits the shipped example manifests and a generated queue spread over the namespaces, adds the
A100 cluster of docs/service.md (a GPU type the shipped benchmarks do not score) and cordons `gz-v100`,
then prints:

- jobs by state, and the waiting reasons of the queued ones;
- idle cards by cause (`cpn_gpus` of /metrics: free, unusable for CPU, pool, cordoned) and which clusters
  are cordoned (`cpn_cluster_cordoned`);
- predicted against actual starts (`cpn_predicted_start_error_seconds`);
- every job id another namespace's token could see in the API and on the pages (must be 0).

    .venv/bin/python scripts/lab_day.py [--jobs 120] [--time-scale 60] [--minutes 1.5] [--legacy-cpu]

Exit status 1 when a token sees another namespace's job. Estimates are the simulator's oracle
(`--estimates oracle`), so no champion is trained first.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from config.settings import load_profile  # noqa: E402
from cpn.auth import create_token  # noqa: E402
from cpn.formats.throughput import ThroughputTable  # noqa: E402
from cpn.sim import generated  # noqa: E402

NAMESPACES = ("default", "nlp", "vision")
TEAMS = {
    "teams": [
        {"name": "nlp", "namespaces": ["nlp"], "quota": {"k80": 4}, "borrowing_limit": 0},
        {"name": "vision", "namespaces": ["vision"]},
    ]
}
A100 = {
    "name": "wh-a100",
    "node_groups": [
        {
            "name": "wh-train",
            "count": 2,
            "gpu_product": "NVIDIA-A100-SXM4-40GB",
            "gpus_per_node": 8,
            "gpu_memory_gb": 40,
            "cpu_cores": 64,
            "usage": "training",
        }
    ],
    "wan_gbps": {"bj-k80": 5, "sh-p100": 5, "gz-v100": 5},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def all_jobs(api: httpx.Client) -> list[dict]:
    jobs, cursor = [], None
    while True:
        page = api.get("/jobs", params={"limit": 1000, **({"cursor": cursor} if cursor else {})}).json()
        jobs += page["jobs"]
        cursor = page["next_cursor"]
        if cursor is None:
            return jobs


def metric(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0])) if "{" in line else {}
            out.append((labels, float(line.rsplit(" ", 1)[1])))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=120, help="generated jobs (default: %(default)s)")
    parser.add_argument(
        "--time-scale", type=float, default=60.0, help="simulated speed (default: %(default)s)"
    )
    parser.add_argument(
        "--minutes", type=float, default=1.5, help="wall minutes to run (default: %(default)s)"
    )
    parser.add_argument(
        "--legacy-cpu",
        action="store_true",
        help="generate 2-8 CPU cores per job, as before issue 27, to compare",
    )
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="cpn-lab-day-"))
    config = home / "config"
    shutil.copytree(REPO / "config" / "demo", config)
    (config / "teams.yaml").write_text(yaml.safe_dump(TEAMS))
    tokens_file = home / "tokens.yaml"
    tokens = {ns: create_token(tokens_file, ns, [ns]) for ns in NAMESPACES}
    admin = create_token(tokens_file, "admin", ["*"])
    env = {**os.environ, "CPN_HOME": str(home)}
    port = free_port()
    log = (home / "cpn-run.log").open("w")
    service = subprocess.Popen(
        [sys.executable, "-m", "cli", "run", "--config", str(config), "--port", str(port), "--estimates",
         "oracle", "--time-scale", str(args.time_scale), "--tokens-file", str(tokens_file)],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    api = httpx.Client(base_url=base, headers={"authorization": f"Bearer {admin}"}, timeout=30)
    try:
        for _ in range(300):
            try:
                if api.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yaml_type = {"content-type": "application/yaml"}
        for manifest in sorted((REPO / "examples" / "manifests").glob("*.yaml")):
            api.post("/jobs", content=manifest.read_text(), headers=yaml_type).raise_for_status()
        if args.legacy_cpu:  # what the generator asked before issue 27: 2-8 cores per job, whatever its GPUs
            generated.cpu_per_card = lambda clusters: None
        profile = load_profile(config)
        manifests = generated.generate_manifests(profile.clusters, ThroughputTable.load(), args.jobs, 27)
        docs = [m for _, m in manifests]
        for i, doc in enumerate(docs):  # the generated jobs, spread over the namespaces
            namespace = NAMESPACES[i % len(NAMESPACES)]
            doc = doc.replace("namespace: default", f"namespace: {namespace}")
            api.post("/jobs", content=doc, headers=yaml_type).raise_for_status()
        time.sleep(args.minutes * 20)
        api.post("/clusters", json=A100).raise_for_status()
        api.post("/clusters/gz-v100/cordon").raise_for_status()
        time.sleep(args.minutes * 40)
        return report(api, base, tokens)
    finally:
        service.send_signal(signal.SIGINT)
        try:
            service.wait(timeout=60)
        except subprocess.TimeoutExpired:
            service.kill()
        log.close()
        print(f"\n(home, config and the service's log kept in {home})")


def report(api: httpx.Client, base: str, tokens: dict[str, str]) -> int:
    jobs = all_jobs(api)
    print(f"jobs by state ({len(jobs)}):", dict(sorted(Counter(j["state"] for j in jobs).items())))
    reasons = Counter(j["waiting"]["code"] for j in jobs if j["state"] == "queued" and j["waiting"])
    print("waiting reasons:", dict(reasons.most_common()))
    for code in ("pending-benchmark", "over-quota"):
        example = next((j for j in jobs if j["waiting"] and j["waiting"]["code"] == code), None)
        if example:
            print(f"  e.g. {example['job_id']}: {code}: {example['waiting']['detail']}")
    text = httpx.get(f"{base}/metrics").text
    cards: Counter = Counter()
    for labels, value in metric(text, "cpn_gpus"):
        cards[labels["status"]] += int(value)
    print("cards by status:", dict(cards))
    cordoned = [labels["cluster"] for labels, value in metric(text, "cpn_cluster_cordoned") if value]
    print("cordoned clusters:", cordoned)
    count = sum(v for _, v in metric(text, "cpn_predicted_start_error_seconds_count"))
    total = sum(v for _, v in metric(text, "cpn_predicted_start_error_seconds_sum"))
    if count:
        print(
            f"predicted vs actual start: {int(count)} started jobs, mean absolute error {total / count:.1f} s"
        )
    leaks = 0
    for namespace, token in tokens.items():
        others = {j["job_id"] for j in jobs if not j["job_id"].startswith(namespace + "/")}
        mine = next((j["job_id"] for j in jobs if j["job_id"].startswith(namespace + "/")), None)
        ui = httpx.Client(base_url=base, cookies={"cpn_token": token}, timeout=30)
        bearer = httpx.Client(base_url=base, headers={"authorization": f"Bearer {token}"}, timeout=30)
        bodies = [bearer.get("/jobs?limit=1000").text, ui.get("/ui/queue").text, ui.get("/ui/clusters").text]
        if mine:
            bodies += [bearer.get(f"/jobs/{mine}").text, ui.get(f"/ui/jobs/{mine}").text]
        seen = {job_id for job_id in others if any(job_id in body for body in bodies)}
        print(f"token of {namespace}: sees {len(seen)} job(s) of other namespaces{': ' if seen else ''}"
              f"{', '.join(sorted(seen)[:5])}")  # fmt: skip
        leaks += len(seen)
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
