"""The labels and annotations that tie Kubernetes objects to cpn's jobs, under one cpn prefix.

Every object cpn submits, and every pod template in it, carries:

- label `cpn.<label_domain>/managed: "true"`: what the watch and the start-up reconciliation select;
- label `cpn.<label_domain>/job: <key>`: a label-safe digest of the job id (label values cannot hold `/`
  and stop at 63 characters);
- annotation `cpn.<label_domain>/job-id: <namespace>/<name>`: the job id itself;
- annotations `cpn.<label_domain>/cards` (`node=cards,...`, the placement) and, for a job sharing a card,
  `cpn.<label_domain>/gpu-share` and `cpn.<label_domain>/card` (the card index cpn chose).

Object names are deterministic: the job id's name in the job id's namespace, so a second submission of
the same job (a retry after a crash, a restart) meets a 409 AlreadyExists on the same object and is
recognised by its job-id annotation, never run twice. A run after the job was preempted n times (its
`JobSpec.generation`, from its history) is named `<name>-g<n+1>`: it never meets an object of the stopped
run, which may still be terminating.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class CpnLabels:
    """Label and annotation keys under `cpn.<label_domain>/`."""

    label_domain: str

    @property
    def prefix(self) -> str:
        """`cpn.<label_domain>`."""
        return f"cpn.{self.label_domain}"

    @property
    def managed(self) -> str:
        return f"{self.prefix}/managed"

    @property
    def job(self) -> str:
        return f"{self.prefix}/job"

    @property
    def job_id(self) -> str:
        return f"{self.prefix}/job-id"

    @property
    def cards(self) -> str:
        return f"{self.prefix}/cards"

    @property
    def gpu_share(self) -> str:
        return f"{self.prefix}/gpu-share"

    @property
    def card(self) -> str:
        return f"{self.prefix}/card"

    @property
    def usage(self) -> str:
        """The seed's pool label and taint key, `<label_domain>/node.usage`."""
        return f"{self.label_domain}/node.usage"

    @property
    def control_plane(self) -> str:
        """The seed's control-plane taint key, `<label_domain>/control-plane`."""
        return f"{self.label_domain}/control-plane"

    @property
    def selector(self) -> str:
        """Label selector of everything cpn submitted."""
        return f"{self.managed}=true"

    def job_labels(self, job_id: str) -> dict[str, str]:
        """The labels of every object and pod of `job_id`."""
        return {self.managed: "true", self.job: job_key(job_id)}


def job_key(job_id: str) -> str:
    """A label-safe, stable digest of a job id (40 hex characters)."""
    return hashlib.sha256(job_id.encode()).hexdigest()[:40]


def object_name(job_id: str, generation: int = 0) -> tuple[str, str]:
    """(namespace, name) of the object that runs `job_id` after `generation` preemptions: the id's own
    parts, namespace `default` if none, the name suffixed `-g<generation + 1>` after a preemption."""
    namespace, _, name = job_id.rpartition("/")
    return namespace or "default", f"{name}-g{generation + 1}" if generation else name
