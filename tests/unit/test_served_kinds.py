"""Which workload kinds a CRD defines a job needs and a simulated cluster serves (JobSpec.workload,
Cluster.workloads -> Node.workloads): read by intake, declared by the config, none declared = all."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from config.settings import ClustersConfig
from cpn.intake import parse_manifests
from cpn.inventory import nodes_from_config
from cpn.rules import serves
from cpn.workloads import CUSTOM_KINDS

KINDS = Path(__file__).parent.parent / "data" / "kinds"
GROUP = {"name": "g", "gpu_product": "Tesla-T4", "gpus_per_node": 1, "gpu_memory_gb": 16, "cpu_cores": 8}


def config(**east) -> ClustersConfig:
    return ClustersConfig.model_validate(
        {
            "clusters": [
                {"name": "east", "node_groups": [GROUP], **east},
                {"name": "west", "node_groups": [GROUP]},
            ],
            "wan_gbps": {"east": {"west": 10}},
        }
    )


def test_intake_names_the_crd_kind_of_a_job_and_none_for_a_built_in_kind():
    (pytorch,) = parse_manifests((KINDS / "pytorchjob.yaml").read_text())
    (pod,) = parse_manifests((KINDS / "pod.yaml").read_text())
    assert (pytorch.workload, pod.workload) == ("kubeflow.org/v1/PyTorchJob", "")
    assert pytorch.workload in CUSTOM_KINDS


def test_a_simulated_cluster_serves_what_it_declares_and_all_when_it_declares_nothing():
    (pytorch,) = parse_manifests((KINDS / "pytorchjob.yaml").read_text())
    nodes = {n.cluster: n for n in nodes_from_config(config(workloads=["batch.volcano.sh/v1alpha1/Job"]))}
    assert nodes["east"].workloads == ("batch.volcano.sh/v1alpha1/Job",) and nodes["west"].workloads is None
    assert (serves(nodes["east"], pytorch), serves(nodes["west"], pytorch)) == (False, True)


def test_a_declared_kind_not_spelled_api_version_slash_kind_is_refused_naming_the_field():
    with pytest.raises(ValidationError, match=r"clusters\.0\.workloads\.0"):
        config(workloads=["PyTorchJob"])


def test_a_real_cluster_may_not_declare_its_kinds():
    with pytest.raises(
        ValidationError, match="workloads: a real cluster's served kinds are read from its API"
    ):
        config(kube_context="prod", workloads=["kubeflow.org/v1/PyTorchJob"])
