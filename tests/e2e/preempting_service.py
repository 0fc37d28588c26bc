"""`cpn run`'s scheduling service as a process a test can kill, without the HTTP API.

`python -m tests.e2e.preempting_service CONFIG STORE TIME_SCALE` builds the service as `cpn run` does
(build_service over the config folder's clusters, its `policy.yaml` (the test's turns preemption on) and
`teams.yaml`, oracle estimates, its store's lease, simulated clusters journaled beside the store), starts it
(journal replayed, store reconciled) and runs the live loop until SIGTERM.
"""

from __future__ import annotations

import logging
import signal
import sys

from cli.run import service_teams
from config.settings import load_profile
from cpn.bootstrap import build_service
from cpn.engine.live import LiveLoop
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.sim.estimates import OracleEstimates

TABLE = ThroughputTable.load(GAVEL_ISOLATED)
"""The simulated clusters' truth and the oracle's estimates, as `cpn run` and the flow have them: ResNet-18
trains about 30 steps a second on a V100."""
INTERVAL_S = 0.3


def main(config: str, store: str, time_scale: str) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    profile = load_profile(config)
    service = build_service(
        profile.clusters,
        store,
        profile.policy.settings,
        TABLE,
        estimator=OracleEstimates(TABLE),
        cpu_threshold=profile.policy.cpu_threshold,
        time_scale=float(time_scale),
        purpose="cpn run",
        teams=service_teams(config, profile.clusters),
    )
    loop = LiveLoop(service.scheduler, INTERVAL_S, simulation=service.driver)
    signal.signal(signal.SIGTERM, lambda *_: loop.stop())
    try:
        service.start()
        print("started", flush=True)
        loop.run()
    finally:
        service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
