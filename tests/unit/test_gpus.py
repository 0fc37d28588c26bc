"""GPU types as the cluster names them: spelling normalised, variants distinct, aliases merge on purpose."""

from __future__ import annotations

import pytest

from cpn.formats.throughput import ThroughputTable
from cpn.gpus import GPU_ALIASES, canonical_gpu
from cpn.inventory import Node


@pytest.mark.parametrize(
    ("spelling", "key"),
    [
        ("Tesla-V100-SXM2-16GB", "v100"),  # node label (nvidia.com/gpu.product)
        ("Tesla V100-SXM2-16GB", "v100"),  # dcgm-exporter's modelName
        ("v100", "v100"),  # throughput table
        ("V100", "v100"),  # devices.csv
        ("Tesla-K80", "k80"),
        ("Tesla-P100-PCIE-16GB", "p100"),
        ("NVIDIA-H20", "h20"),  # the seed's example
        ("NVIDIA-GeForce-RTX-2080-Ti", "rtx2080ti"),
        ("GeForce RTX 2080 Ti", "rtx2080ti"),
        ("RTX2080Ti", "rtx2080ti"),  # devices.csv
        ("NVIDIA-A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100 SXM4 80GB", "a100-sxm4-80gb"),
        ("nvidia_a100_sxm4_80gb", "a100-sxm4-80gb"),
        ("NVIDIA-H100-80GB-HBM3", "h100-80gb-hbm3"),
        ("NVIDIA-RTX-6000-Ada-Generation", "rtx6000-ada-generation"),
        ("Quadro-RTX-8000", "rtx8000"),
    ],
)
def test_every_spelling_of_a_card_names_the_same_key(spelling, key):
    assert canonical_gpu(spelling) == key
    assert canonical_gpu(key) == key


@pytest.mark.parametrize(
    "variants",
    [
        ("NVIDIA-A100-PCIE-40GB", "NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-SXM4-40GB"),
        ("NVIDIA-H100-PCIe", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-NVL"),
        ("Tesla-V100-SXM2-16GB", "Tesla-V100-PCIE-16GB", "Tesla-V100-SXM2-32GB"),
        ("Tesla-P100-PCIE-16GB", "Tesla-P100-SXM2-16GB"),
        ("Quadro-RTX-6000", "NVIDIA-RTX-6000-Ada-Generation", "NVIDIA-RTX-A6000"),
    ],
)
def test_variants_that_differ_in_form_factor_or_memory_stay_distinct(variants):
    assert len({canonical_gpu(v) for v in variants}) == len(variants)


def test_an_alias_merges_variants_on_purpose():
    aliases = {"NVIDIA-A100-SXM4-80GB": "a100-80gb-pcie"}
    assert canonical_gpu("NVIDIA-A100-SXM4-80GB", aliases) == canonical_gpu("NVIDIA-A100-80GB-PCIe")
    assert canonical_gpu("NVIDIA-A100-PCIE-40GB", aliases) == "a100-pcie-40gb"  # only what it names
    # An alias may name its target in any spelling of the label.
    assert canonical_gpu("Tesla V100-PCIE-16GB", {"Tesla-V100-PCIE-16GB": "Tesla-V100-SXM2-16GB"}) == "v100"


def test_a_node_label_and_the_throughput_table_name_the_same_card():
    node = Node("c", "n", "Tesla-V100-SXM2-16GB", 8, 16, 32, "training")
    table = ThroughputTable.load()
    assert node.gpu_type in table.gpu_types()
    assert table.steps_per_sec("ResNet-18", 32, node.gpu_product, 1) == table.steps_per_sec(
        "ResNet-18", 32, "v100", 1
    )


def test_every_built_in_alias_is_already_canonical_and_maps_to_itself():
    for spelled, key in GPU_ALIASES.items():
        assert canonical_gpu(spelled) == key
        assert canonical_gpu(key) == key


def test_config_aliases_extend_and_override_the_table_whatever_the_separators():
    aliases = {"NVIDIA A100 SXM4 80GB": "a100", "Tesla-V100-SXM2-16GB": "v100-sxm2"}
    assert canonical_gpu("NVIDIA-A100-SXM4-80GB", aliases) == "a100"
    assert canonical_gpu("nvidia_a100_sxm4_80gb", aliases) == "a100"
    assert canonical_gpu("NVIDIA-A100-SXM4-40GB", aliases) == "a100-sxm4-40gb"
    assert canonical_gpu("Tesla V100-SXM2-16GB", aliases) == "v100-sxm2"


def test_an_empty_product_name_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        canonical_gpu("  ")


def test_config_aliases_reach_the_nodes_gpu_type():
    from config.settings import ClustersConfig
    from cpn.inventory import nodes_from_config

    group = {
        "name": "g",
        "gpu_product": "NVIDIA-A100-SXM4-80GB",
        "gpus_per_node": 8,
        "gpu_memory_gb": 80,
        "cpu_cores": 64,
    }
    plain = ClustersConfig.model_validate({"clusters": [{"name": "c", "node_groups": [group]}]})
    aliased = ClustersConfig.model_validate(
        {
            "clusters": [{"name": "c", "node_groups": [group]}],
            "gpu_aliases": {"NVIDIA-A100-SXM4-80GB": "a100"},
        }
    )
    assert nodes_from_config(plain)[0].gpu_type == "a100-sxm4-80gb"
    assert nodes_from_config(aliased)[0].gpu_type == "a100"
