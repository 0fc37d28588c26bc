"""Devices read right: GPU pins by any well-known label, HAMi slices, DRA claims, priority classes,
CPU-only jobs, and the objects a job needs carried with it. Manifests are modelled on each project's
documentation (cited beside each)."""

from __future__ import annotations

import pytest
import yaml

from config.settings import ClustersConfig
from cpn.admission import Admitted, Refused, admit
from cpn.decisions import Estimate, Placement, Snapshot
from cpn.devices import PinError, pin_matches, read_pin
from cpn.intake import CPU_ONLY_REASON, IntakeError, Reading, read_manifests
from cpn.inventory import Node, NodeState, nodes_from_config
from cpn.policies import make_policy

ANNOTATIONS = "  annotations: {model_name: gemma-2-27b, data_size: '20', epoch: '1'}\n"

# GKE, "Run GPUs in Standard node pools" (cloud.google.com/kubernetes-engine/docs/how-to/gpus): a workload
# asks for its card with a nodeSelector on cloud.google.com/gke-accelerator and nvidia.com/gpu limits.
GKE_JOB = (
    "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: gemma-finetune\n"
    + ANNOTATIONS
    + """spec:
  template:
    spec:
      nodeSelector:
        cloud.google.com/gke-accelerator: nvidia-tesla-a100
      containers:
      - name: trainer
        image: us-docker.pkg.dev/example/trainer:1
        resources:
          limits:
            nvidia.com/gpu: 2
      restartPolicy: Never
"""
)

A100 = Node("c", "a100-0", "NVIDIA-A100-SXM4-40GB", 8, 40, 96, "training")
P100 = Node("c", "p100-0", "Tesla-P100-PCIE-16GB", 8, 16, 96, "training")


def read_one(text: str):
    ((spec, reading),) = read_manifests(text, "job.yaml")
    return spec, reading


def refused(text: str) -> list:
    with pytest.raises(IntakeError) as caught:
        read_manifests(text, "job.yaml")
    return caught.value.problems


@pytest.mark.parametrize(
    ("key", "value", "pin"),
    [
        ("cloud.google.com/gke-accelerator", "nvidia-tesla-a100", "a100-40gb"),
        ("cloud.google.com/gke-accelerator", "nvidia-h100-80gb", "h100-80gb"),
        ("cloud.google.com/gke-accelerator", "nvidia-l4", "l4"),
        ("node.kubernetes.io/instance-type", "p4d.24xlarge", "a100-40gb"),
        ("node.kubernetes.io/instance-type", "g5.12xlarge", "a10g"),
        ("node.kubernetes.io/instance-type", "a3-highgpu-8g", "h100-80gb"),
        ("node.kubernetes.io/instance-type", "standard_nc24ads_a100_v4", "a100-80gb"),  # case ignored
        ("karpenter.k8s.aws/instance-gpu-name", "t4", "t4"),
        ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3"),
    ],
)
def test_well_known_labels_name_a_gpu(key, value, pin):
    assert read_pin(key, "In", [value]).products == {pin}


def test_labels_that_name_only_the_vendor_or_presence_allow_any_gpu_and_others_are_not_cpns():
    assert read_pin("accelerator", "In", ["nvidia"]).products is None  # AKS
    assert read_pin("nvidia.com/gpu.present", "Exists", []).products is None
    assert read_pin("kubernetes.io/os", "In", ["linux"]) is None
    assert read_pin("nvidia.com/gpu.family", "In", ["hopper"]).products >= {"h100", "h200"}
    assert read_pin("nvidia.com/gpu.memory", "Gt", ["40000"]).memory_gb == pytest.approx(
        40000 / 1024 + 1 / 1024
    )


@pytest.mark.parametrize(
    ("key", "op", "values", "said"),
    [
        (
            "cloud.google.com/gke-accelerator",
            "In",
            ["nvidia-tesla-z900"],
            "'nvidia-tesla-z900' is not a value",
        ),
        ("example.com/gpu-type", "In", ["big"], "'example.com/gpu-type' looks like a GPU label"),
        ("nvidia.com/gpu.count", "In", ["8"], "'nvidia.com/gpu.count' looks like a GPU label"),
        ("cloud.google.com/gke-accelerator", "NotIn", ["nvidia-l4"], "operator 'NotIn'"),
        ("accelerator", "In", ["amd"], "NVIDIA GPUs only"),
    ],
)
def test_a_pin_cpn_cannot_read_is_refused_naming_it(key, op, values, said):
    with pytest.raises(PinError, match=said):
        read_pin(key, op, values)


def test_pins_match_a_model_of_a_memory_or_one_product_in_any_spelling():
    assert pin_matches("a100-40gb", "NVIDIA-A100-SXM4-40GB", 40)
    assert pin_matches("a100-40gb", "NVIDIA-A100-PCIE-40GB", 40)
    assert not pin_matches("a100-40gb", "NVIDIA-A100-SXM4-80GB", 80)
    assert pin_matches("h100-80gb", "NVIDIA-H100-80GB-HBM3", 81559 / 1024)  # usable memory, as labelled
    assert pin_matches("v100-16gb", "Tesla-V100-SXM2-16GB", 16, "v100")
    assert pin_matches("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB", 40)
    assert not pin_matches("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB", 40)
    assert not pin_matches("a100", "Tesla-P100-PCIE-16GB", 16)


def test_a_gke_accelerator_pin_is_read_and_honoured_by_placement():
    spec, reading = read_one(GKE_JOB)
    assert spec.gpu_products == ("a100-40gb",) and reading.gpu_products == ("a100-40gb",)
    nodes = tuple(NodeState(n, free_gpus=8) for n in (P100, A100))
    snapshot = Snapshot(
        now=0.0,
        pending=(spec,),
        nodes=nodes,
        estimates={spec.job_id: {P100.gpu_type: Estimate(50.0), A100.gpu_type: Estimate(100.0)}},
    )
    for policy in ("fifo", "sjf", "greedy"):
        (placed,) = make_policy(policy).decide(snapshot).placements
        assert placed.node == "a100-0"  # the faster-looking P100 is not what the manifest asked for
    states = {("c", n.node.name): n for n in nodes}
    assert isinstance(admit(spec, Placement(spec.job_id, "c", "p100-0", 2), states), Refused)
    assert isinstance(admit(spec, Placement(spec.job_id, "c", "a100-0", 2), states), Admitted)


def test_a_pin_on_an_unknown_gpu_label_or_value_is_refused_naming_the_label():
    (problem,) = refused(GKE_JOB.replace("nvidia-tesla-a100", "nvidia-tesla-z900"))
    assert problem.field == 'spec.template.spec.nodeSelector["cloud.google.com/gke-accelerator"]'
    assert "nvidia-tesla-z900" in problem.reason and "nvidia.com/gpu.product" in problem.reason
    affinity = GKE_JOB.replace(
        "      nodeSelector:\n        cloud.google.com/gke-accelerator: nvidia-tesla-a100\n",
        "      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n"
        "            nodeSelectorTerms:\n            - matchExpressions:\n"
        "              - {key: example.com/gpu-model, operator: In, values: [a100]}\n",
    )
    (problem,) = refused(affinity)
    assert problem.field.endswith("nodeSelectorTerms[0].matchExpressions[0]")
    assert "'example.com/gpu-model' looks like a GPU label" in problem.reason


def test_two_pins_naming_different_cards_are_refused():
    text = GKE_JOB.replace(
        "        cloud.google.com/gke-accelerator: nvidia-tesla-a100\n",
        "        cloud.google.com/gke-accelerator: nvidia-tesla-a100\n"
        "        node.kubernetes.io/instance-type: g6.xlarge\n",
    )
    (problem,) = refused(text)
    assert "different cards" in problem.reason and "a100-40gb" in problem.reason and "l4" in problem.reason


# Volcano's TensorFlow example (volcano-sh/volcano, example/integrations/tensorflow): a ps task without GPU
# beside GPU workers; with no GPU anywhere it is a CPU job, which cpn does not place.
CPU_VOLCANO = """
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: tf-cpu
  annotations: {model_name: mnist, data_size: '1', epoch: '1'}
spec:
  minAvailable: 2
  schedulerName: volcano
  tasks:
  - replicas: 1
    name: ps
    template:
      spec:
        containers:
        - {name: tensorflow, image: volcanosh/dist-mnist-tf-example:0.0.1, resources: {limits: {cpu: "1"}}}
        restartPolicy: Never
  - replicas: 2
    name: worker
    template:
      spec:
        containers:
        - {name: tensorflow, image: volcanosh/dist-mnist-tf-example:0.0.1, resources: {limits: {cpu: "2"}}}
        restartPolicy: Never
"""


def test_a_job_asking_for_no_gpu_is_refused_and_a_gpu_less_ps_task_still_rides_along():
    (problem,) = refused(CPU_VOLCANO)
    assert (problem.field, problem.reason) == ("spec", CPU_ONLY_REASON)
    with_gpus = CPU_VOLCANO.replace('limits: {cpu: "2"}', 'limits: {cpu: "2", nvidia.com/gpu: 1}')
    spec, reading = read_one(
        with_gpus.replace("  schedulerName: volcano\n", "  schedulerName: volcano\n  queue: research\n")
    )
    assert (spec.num_gpus, spec.pod_gpus, spec.cpu) == (2, (1, 1), 4.0)
    assert "queue" not in yaml.safe_load(spec.manifest)["spec"]  # a queue the chosen cluster may not have
    assert "removed other schedulers' queues (spec.queue=research)" in reading.summary()


# HAMi's README (Project-HAMi/HAMi): "nvidia.com/gpu: 1 # requesting 1 vGPUs; nvidia.com/gpumem: 3000 # Each
# vGPU contains 3000m device memory; nvidia.com/gpucores: 30 # Each vGPU uses 30% of the entire GPU".
HAMI_JOB = """
apiVersion: batch/v1
kind: Job
metadata:
  name: hami-slice
  annotations: {model_name: resnet50, data_size: '1', epoch: '1'}
spec:
  template:
    spec:
      containers:
      - name: ubuntu-container
        image: ubuntu:18.04
        command: ["bash", "-c", "sleep 86400"]
        resources:
          limits:
            nvidia.com/gpu: 1
            nvidia.com/gpumem: 3000
            nvidia.com/gpucores: 30
      restartPolicy: Never
"""


def test_hami_slices_are_a_share_of_a_card_placed_only_on_hami_nodes():
    spec, reading = read_one(HAMI_JOB)
    assert (spec.num_gpus, spec.gpu_share, spec.gpu_mem_gb, spec.hami) == (1, 0.3, 3000 / 1024, True)
    assert reading.gpu_share == 0.3
    plain = Node("c", "plain-0", "Tesla-T4", 4, 16, 32, "training")
    hami = Node("c", "hami-0", "Tesla-T4", 4, 16, 32, "training", hami=True)
    states = {("c", n.name): NodeState(n, free_gpus=4) for n in (plain, hami)}
    refusal = admit(spec, Placement(spec.job_id, "c", "plain-0", 1), states)
    assert isinstance(refusal, Refused) and "does not run HAMi" in refusal.reason
    assert isinstance(admit(spec, Placement(spec.job_id, "c", "hami-0", 1), states), Admitted)
    snapshot = Snapshot(
        now=0.0,
        pending=(spec,),
        nodes=tuple(states.values()),
        estimates={spec.job_id: {"t4": Estimate(10.0)}},
    )
    (placed,) = make_policy("fifo").decide(snapshot).placements
    assert placed.node == "hami-0"


def test_a_memory_percentage_alone_is_a_share_and_bad_slices_are_refused():
    spec, _ = read_one(HAMI_JOB.replace("nvidia.com/gpumem: 3000\n", "nvidia.com/gpumem-percentage: 50\n"))
    assert (spec.gpu_share, spec.gpu_mem_gb) == (0.5, None)
    spec, reading = read_one(HAMI_JOB.replace("            nvidia.com/gpu: 1\n", ""))
    assert (spec.num_gpus, spec.gpu_share) == (1, 0.3) and "HAMi's default-gpu-num" in reading.gpus_from
    (problem,) = refused(HAMI_JOB.replace("nvidia.com/gpucores: 30", "nvidia.com/gpucores: 300"))
    assert problem.field.endswith('limits["nvidia.com/gpucores"]') and "1 to 100" in problem.reason


# NVIDIA's DRA driver (NVIDIA/k8s-dra-driver-gpu, demo/specs/quickstart/gpu-test4.yaml style): one pod,
# a ResourceClaimTemplate asking for four MIG devices by profile.
MIG_JOB = """
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata:
  name: mig-devices
spec:
  spec:
    devices:
      requests:
      - name: mig-1g-0
        deviceClassName: mig.nvidia.com
        selectors:
        - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"}
      - name: mig-1g-1
        deviceClassName: mig.nvidia.com
        selectors:
        - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"}
      - name: mig-2g
        deviceClassName: mig.nvidia.com
        selectors:
        - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '2g.10gb'"}
      - name: mig-3g
        deviceClassName: mig.nvidia.com
        selectors:
        - cel: {expression: "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: mig-test
  annotations: {model_name: resnet50, data_size: '1', epoch: '1'}
spec:
  template:
    spec:
      restartPolicy: Never
      resourceClaims:
      - name: mig-devices
        resourceClaimTemplateName: mig-devices
      containers:
      - name: ctr0
        image: ubuntu:22.04
        command: ["bash", "-c", "nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
        resources:
          claims:
          - {name: mig-devices, request: mig-1g-0}
          - {name: mig-devices, request: mig-1g-1}
          - {name: mig-devices, request: mig-2g}
          - {name: mig-devices, request: mig-3g}
"""


def test_a_mig_dra_claim_is_read_carried_and_placed_only_where_the_class_is_offered():
    spec, reading = read_one(MIG_JOB)
    assert (spec.num_gpus, spec.device_classes) == (1, ("mig.nvidia.com",))
    assert reading.gpus_from.startswith("DRA resource claims")
    assert any("MIG 1g.5gb" in n for n in reading.notes) and any("MIG 3g.20gb" in n for n in reading.notes)
    docs = list(yaml.safe_load_all(spec.manifest))
    assert [d["kind"] for d in docs] == ["Job", "ResourceClaimTemplate"]  # the template travels with it
    limits = docs[0]["spec"]["template"]["spec"]["containers"][0]["resources"].get("limits") or {}
    assert "nvidia.com/gpu" not in limits
    plain = Node("c", "plain-0", "NVIDIA-A100-SXM4-40GB", 8, 40, 96, "training")
    dra = Node(
        "c", "dra-0", "NVIDIA-A100-SXM4-40GB", 8, 40, 96, "training", device_classes=("mig.nvidia.com",)
    )
    states = {("c", n.name): NodeState(n, free_gpus=8) for n in (plain, dra)}
    refusal = admit(spec, Placement(spec.job_id, "c", "plain-0", 1), states)
    assert isinstance(refusal, Refused) and "mig.nvidia.com" in refusal.reason
    assert isinstance(admit(spec, Placement(spec.job_id, "c", "dra-0", 1), states), Admitted)


# resource.k8s.io/v1 (Kubernetes 1.34) writes a request's device class and count under `exactly`.
WHOLE_GPU_TEMPLATE = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: mig-devices}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
"""


def test_whole_gpu_dra_claims_count_their_devices_and_uncountable_ones_are_refused():
    text = MIG_JOB.split("---")[1]
    template = WHOLE_GPU_TEMPLATE + "---\n"
    spec, _ = read_one(template + text)
    assert (spec.num_gpus, spec.device_classes) == (2, ("gpu.nvidia.com",))
    (problem,) = refused(template.replace("count: 2", "allocationMode: All") + text)
    assert "allocationMode All" in problem.reason and problem.field.endswith("resourceClaims[0]")
    empty = template.replace(
        "      - name: gpus\n        exactly: {deviceClassName: gpu.nvidia.com, count: 2}\n", ""
    )
    (problem,) = refused(empty.replace("requests:", "requests: []") + text)
    assert "ask for no device" in problem.reason
    (problem,) = refused(text)  # the template is not in the file
    assert "ResourceClaimTemplate mig-devices is not in the file" in problem.reason


PRIORITY_JOB = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high-priority}
value: 1000000
globalDefault: false
description: "This priority class should be used for XYZ service pods only."
---
apiVersion: batch/v1
kind: Job
metadata:
  name: urgent
  annotations: {model_name: resnet50, data_size: '1', epoch: '1'}
spec:
  template:
    spec:
      priorityClassName: high-priority
      containers:
      - {name: main, image: r/t:1, resources: {limits: {nvidia.com/gpu: 1}}}
      restartPolicy: Never
"""  # the PriorityClass of kubernetes.io/docs/concepts/scheduling-eviction/pod-priority-preemption


def test_priority_class_name_gives_the_priority():
    spec, reading = read_one(PRIORITY_JOB)
    assert (
        spec.priority == 1_000_000
        and "priority 1000000 from priorityClassName high-priority" in reading.notes
    )
    spec, _ = read_one(
        PRIORITY_JOB.replace("high-priority\n      containers", "system-cluster-critical\n      containers")
    )
    assert spec.priority == 10**9  # the system classes outrank every user class: cpn's highest
    spec, reading = read_one(PRIORITY_JOB.split("---")[1].replace("high-priority", "team-gold"))
    assert spec.priority == 0 and "the cluster it runs on must define it" in reading.summary()
    spec, _ = read_one(PRIORITY_JOB.replace("epoch: '1'}", "epoch: '1', priority: '7'}"))
    assert spec.priority == 7  # cpn's own annotation says it


# Kubernetes' "Configure a Pod to Use a ConfigMap" (kubernetes.io/docs/tasks/configure-pod-container/
# configure-pod-configmap): a ConfigMap mounted as a volume and read through envFrom.
CONFIGMAP_JOB = """
apiVersion: v1
kind: ConfigMap
metadata: {name: special-config, namespace: team}
data: {SPECIAL_LEVEL: very, SPECIAL_TYPE: charm}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: team
  labels: {kueue.x-k8s.io/queue-name: user-queue}
  annotations: {model_name: resnet50, data_size: '1', epoch: '1'}
spec:
  template:
    spec:
      containers:
      - name: test-container
        image: registry.k8s.io/busybox
        envFrom:
        - configMapRef: {name: special-config}
        - secretRef: {name: hf-token}
        resources: {limits: {nvidia.com/gpu: 1}}
      volumes:
      - name: config-volume
        configMap: {name: special-config}
      - name: data
        persistentVolumeClaim: {claimName: imagenet}
      restartPolicy: Never
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: imagenet, namespace: team}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 100Gi}}
"""


def test_what_the_pods_reference_travels_with_the_job_and_other_queues_are_dropped():
    spec, reading = read_one(CONFIGMAP_JOB)
    docs = list(yaml.safe_load_all(spec.manifest))
    assert [(d["kind"], d["metadata"]["name"]) for d in docs] == [
        ("Job", "train"),
        ("ConfigMap", "special-config"),
        ("PersistentVolumeClaim", "imagenet"),
    ]
    assert "kueue.x-k8s.io/queue-name" not in (docs[0]["metadata"].get("labels") or {})
    summary = reading.summary()
    assert "removed other schedulers' queues (kueue.x-k8s.io/queue-name=user-queue)" in summary
    assert "Secret hf-token is not in the file: the cluster it runs on must already hold it" in summary


def test_a_stored_dra_job_reads_back_as_it_was_read_at_the_door():
    spec, reading = read_one(MIG_JOB)
    again = Reading.of(spec)
    assert (again.gpus, again.gpus_from) == (reading.gpus, reading.gpus_from)


def test_a_job_waiting_for_a_hami_node_says_so():
    spec, _ = read_one(HAMI_JOB)
    plain = Node("c", "plain-0", "Tesla-T4", 4, 16, 32, "training")
    snapshot = Snapshot(
        now=0.0,
        pending=(spec,),
        nodes=(NodeState(plain, free_gpus=4),),
        estimates={spec.job_id: {"t4": Estimate(10.0)}},
    )
    (rejection,) = make_policy("fifo").decide(snapshot).rejections
    assert "does not run HAMi" in rejection.reason


def test_simulated_nodes_carry_hami_and_device_classes_from_their_config():
    config = ClustersConfig.model_validate(
        {
            "clusters": [
                {
                    "name": "east",
                    "hami": True,
                    "node_groups": [
                        {
                            "name": "t",
                            "gpu_product": "Tesla-T4",
                            "gpus_per_node": 4,
                            "gpu_memory_gb": 16,
                            "cpu_cores": 32,
                        }
                    ],
                },
                {
                    "name": "west",
                    "node_groups": [
                        {
                            "name": "a",
                            "gpu_product": "NVIDIA-A100-SXM4-40GB",
                            "gpus_per_node": 8,
                            "gpu_memory_gb": 40,
                            "cpu_cores": 96,
                            "device_classes": ["mig.nvidia.com"],
                        },
                        {
                            "name": "h",
                            "gpu_product": "Tesla-T4",
                            "gpus_per_node": 4,
                            "gpu_memory_gb": 16,
                            "cpu_cores": 32,
                            "hami": True,
                        },
                    ],
                },
            ],
            "wan_gbps": {"east": {"west": 10}},
        }
    )
    nodes = {n.name: n for n in nodes_from_config(config)}
    assert (nodes["t-0"].hami, nodes["a-0"].hami, nodes["h-0"].hami) == (True, False, True)
    assert (nodes["a-0"].device_classes, nodes["t-0"].device_classes) == (("mig.nvidia.com",), ())


def test_malformed_references_and_companions_are_read_around_not_crashed_on():
    text = CONFIGMAP_JOB.replace(
        "      volumes:\n", "      resourceClaims: claims\n      imagePullSecrets: 5\n      volumes:\n"
    ).replace(
        "  resources: {requests: {storage: 100Gi}}",
        "  resources: {requests: {storage: 100Gi}}\n---\n"
        "apiVersion: v1\nkind: Service\nmetadata: {name: odd, namespace: team}\nspec: [1, 2]\n---\n"
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {}\nvalue: 5\n",
    )
    spec, _ = read_one(text)
    assert [d["kind"] for d in yaml.safe_load_all(spec.manifest)] == [
        "Job",
        "ConfigMap",
        "PersistentVolumeClaim",
    ]
