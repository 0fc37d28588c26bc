"""The manifest-binding port: from a job and its placement, the objects the cluster will run.

`bind` starts from the user's manifest (`JobSpec.manifest`) and adds what the placement decided:
node pins, pool affinity and tolerations, GPU requests and limits, cpn's labels tying the objects to
the job id, and the image reference migration resolved. The Kubernetes gateway submits exactly these
objects; `cpn plan` writes them for people to read.
"""

from __future__ import annotations

from typing import Any, Protocol

from cpn.decisions import Placement
from cpn.jobs import JobSpec


class ManifestBinder(Protocol):
    """Renders placed jobs as Kubernetes objects."""

    def bind(self, job: JobSpec, placement: Placement) -> tuple[dict[str, Any], ...]:
        """The objects (plain dicts, as `kubectl get -o yaml` shows them) that run `job` as placed."""
        ...
