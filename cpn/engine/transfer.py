"""How long moving a job's image and data between clusters takes over the WAN."""

from __future__ import annotations

from config.settings import ClustersConfig
from cpn.jobs import JobSpec

BITS_PER_GB = 8.0
"""GB of payload to Gbit of WAN traffic."""


class TransferTimes:
    """Seconds to move a job's image and data from one cluster to another: (image + data) / bandwidth."""

    def __init__(self, clusters: ClustersConfig) -> None:
        self.clusters = clusters
        self.names = tuple(c.name for c in clusters.clusters)

    def seconds(self, job: JobSpec, src: str | None, dst: str) -> float:
        """0 within a cluster or for a job with no location; else payload over the src->dst bandwidth."""
        if src is None or src == dst:
            return 0.0
        payload_gb = job.image_size_gb + job.data_size_gb
        return payload_gb * BITS_PER_GB / self.clusters.bandwidth_gbps(src, dst)

    def row(self, job: JobSpec, src: str | None) -> dict[str, float]:
        """Seconds to every cluster from `src`."""
        return {dst: self.seconds(job, src, dst) for dst in self.names}
