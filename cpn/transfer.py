"""How long moving a job's image and data between clusters takes over the WAN."""

from __future__ import annotations

from collections.abc import Collection

from config.settings import ClustersConfig
from cpn.jobs import JobSpec

BITS_PER_GB = 8.0
"""GB of payload to Gbit of WAN traffic."""


PRIOR_GB = 1.0
"""Weight of the configured bandwidth in the learned estimate: as if this many GB had moved at it."""

MIN_LEARN_BYTES = 8 * 1024**2
"""Transfers smaller than this teach nothing: their time is latency, not bandwidth."""


class TransferTimes:
    """Seconds to move a job's image and data from one cluster to another: (image + data) / bandwidth.

    The bandwidth between two clusters starts at the configured figure and learns from measured
    transfers (`observe`): the estimate is all Gbit moved over all seconds taken, the configured figure
    counting as `prior_gb` GB moved at that speed, so a few measurements move it and many dominate.
    """

    def __init__(self, clusters: ClustersConfig, prior_gb: float = PRIOR_GB) -> None:
        self.clusters = clusters
        self.names = tuple(c.name for c in clusters.clusters)
        self.prior_gb = prior_gb
        self._measured: dict[tuple[str, str], tuple[float, float]] = {}
        """(src, dst) -> (Gbit moved, seconds taken) by measured transfers."""

    def reconfigure(self, clusters: ClustersConfig) -> None:
        """Work over `clusters` from now (the cluster set changed while cpn runs); measured transfers kept."""
        self.clusters = clusters
        self.names = tuple(c.name for c in clusters.clusters)

    def bandwidth_gbps(self, src: str, dst: str) -> float:
        """The src->dst bandwidth estimate: configured prior and measured transfers together."""
        prior = self.clusters.bandwidth_gbps(src, dst)
        if src == dst or (src, dst) not in self._measured:
            return prior
        gbit, seconds = self._measured[(src, dst)]
        prior_gbit = self.prior_gb * BITS_PER_GB
        return (prior_gbit + gbit) / (prior_gbit / prior + seconds)

    def learned(self) -> dict[tuple[str, str], float]:
        """(src, dst) -> bandwidth estimate (Gbit/s) of every pair some measured transfer taught: what the
        web UI's clusters page shows."""
        return {pair: self.bandwidth_gbps(*pair) for pair in sorted(self._measured)}

    def observe(self, src: str, dst: str, nbytes: int, seconds: float) -> None:
        """Learn from a measured transfer of `nbytes` in `seconds` from `src` to `dst`."""
        if src == dst or nbytes < MIN_LEARN_BYTES or seconds <= 0:
            return
        gbit, total_s = self._measured.get((src, dst), (0.0, 0.0))
        self._measured[(src, dst)] = (gbit + nbytes * 8 / 1e9, total_s + seconds)

    def seconds(self, job: JobSpec, src: str | None, dst: str) -> float:
        """0 within a cluster or for a job with no location; else payload over the src->dst bandwidth."""
        if src is None or src == dst:
            return 0.0
        payload_gb = job.image_size_gb + job.data_size_gb
        return payload_gb * BITS_PER_GB / self.bandwidth_gbps(src, dst)

    def nearest(self, job: JobSpec, holders: Collection[str], dst: str) -> tuple[str | None, float]:
        """The cluster among `holders` (those holding the job's image and data) to copy from to `dst`
        soonest, and the seconds it takes: (`dst`, 0) when `dst` holds them already, (None, 0) when no
        cluster does (a job with no location)."""
        if not holders or dst in holders:
            return (dst if holders else None), 0.0
        return min(((src, self.seconds(job, src, dst)) for src in sorted(holders)), key=lambda ss: ss[1])

    def row(self, job: JobSpec, *holders: str | None) -> dict[str, float]:
        """Seconds to every cluster from the nearest of `holders` (None entries ignored): 0 to a cluster
        that holds the payload already."""
        held = {h for h in holders if h is not None}
        return {dst: self.nearest(job, held, dst)[1] for dst in self.names}
