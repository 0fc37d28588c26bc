"""The Kubernetes adapter: one real cluster behind the ClusterGateway and ManifestBinder ports.

The only package that imports `kubernetes` and `kubernetes_validate`.
`gateway_for(cluster, label_domain, gpu_aliases)` builds the gateway of one configured cluster from its
kubeconfig context; see docs/kubernetes.md.
"""

from cpn.adapters.kubernetes.api import ApiError, RetryPolicy
from cpn.adapters.kubernetes.binding import BindError, KubernetesBinder
from cpn.adapters.kubernetes.gateway import (
    ApiRefusal,
    KubernetesGateway,
    api_client_at,
    api_client_for,
    gateway_for,
)
from cpn.adapters.kubernetes.validation import InvalidManifest, validate_object

__all__ = [
    "ApiError",
    "ApiRefusal",
    "BindError",
    "InvalidManifest",
    "KubernetesBinder",
    "KubernetesGateway",
    "RetryPolicy",
    "api_client_at",
    "api_client_for",
    "gateway_for",
    "validate_object",
]
