"""Trace loaders on literal and shipped files, the queue generator, and manifests."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import jsonschema
import pytest
import yaml

from config.settings import DATA_DIR, ClustersConfig
from cpn.formats.gavel_trace import load_gavel_trace
from cpn.formats.manifests import to_manifest
from cpn.formats.throughput import ThroughputTable
from cpn.formats.trace_csv import TraceFormatError, load_trace_csv
from cpn.jobs import JobSpec
from cpn.sim.generated import GPU_COUNT_WEIGHTS, RUNTIME_RANGE_S, generate_queue
from cpn.sim.memory import gpu_memory_gb

HEADER = "job_id,arrival_s,model,batch_size,num_gpus,total_steps"

CLUSTERS = ClustersConfig.model_validate(
    {
        "clusters": [
            {
                "name": "old",
                "node_groups": [
                    {
                        "name": "k",
                        "gpu_product": "Tesla-K80",
                        "gpus_per_node": 8,
                        "gpu_memory_gb": 12,
                        "cpu_cores": 32,
                    }
                ],
            },
            {
                "name": "new",
                "node_groups": [
                    {
                        "name": "v",
                        "gpu_product": "Tesla-V100-SXM2-16GB",
                        "gpus_per_node": 8,
                        "gpu_memory_gb": 16,
                        "cpu_cores": 32,
                    }
                ],
            },
        ],
        "wan_gbps": {"old": {"new": 10}},
    }
)


@pytest.fixture(scope="module")
def table() -> ThroughputTable:
    return ThroughputTable.load()


def write(tmp_path, text: str, name: str = "t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_trace_csv_required_and_optional_columns(tmp_path):
    path = write(
        tmp_path,
        f"{HEADER},kind,gpu_mem_gb,cpu,source_cluster,image,image_size_gb,data_size_gb,priority\n"
        "a,0,ResNet-50,64,2,1000,training,7.5,4,bj,img:1,3.5,20,2\n"
        "b,12.5,A3C,,1,500,inference,,,,,,,\n",
    )
    a, b = load_trace_csv(path)
    assert a == JobSpec(
        job_id="a",
        model="ResNet-50",
        batch_size=64,
        num_gpus=2,
        total_steps=1000,
        arrival_s=0.0,
        gpu_mem_gb=7.5,
        cpu=4.0,
        source_cluster="bj",
        image="img:1",
        image_size_gb=3.5,
        data_size_gb=20.0,
        priority=2,
    )
    assert b == JobSpec(
        job_id="b", model="A3C", kind="inference", batch_size=None, total_steps=500, arrival_s=12.5
    )


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (f"{HEADER}\na,0,M,8,1,10\nb,0,M,8,zero,10\n", ":3: column num_gpus:"),
        (f"{HEADER}\na,-1,M,8,1,10\n", ":2: column arrival_s: must be a finite number >= 0"),
        (f"{HEADER}\na,0,,8,1,10\n", ":2: column model: empty"),
        (f"{HEADER}\na,0,M,8,1,\n", ":2: column total_steps:"),
        (f"{HEADER},kind\na,0,M,8,1,10,batch\n", ":2: column kind: must be training or inference"),
        (f"{HEADER}\na,0,M,8,1,10\na,1,M,8,1,10\n", ":3: column job_id: repeats 'a'"),
        (f"{HEADER}\na,0,M,8,1,10,extra\n", ":2: more cells than the 6 columns"),
        ("job_id,arrival_s,model\n", ":1: missing column(s) batch_size, num_gpus, total_steps"),
        (f"{HEADER},gpu_mem\n", ":1: unknown column(s) gpu_mem; allowed:"),
    ],
)
def test_trace_csv_errors_name_file_line_and_column(tmp_path, text, where):
    path = write(tmp_path, text)
    with pytest.raises(TraceFormatError) as err:
        load_trace_csv(path)
    assert str(err.value).startswith(f"{path}{where}")


def test_missing_trace_file_is_a_format_error(tmp_path):
    with pytest.raises(TraceFormatError, match="file not found"):
        load_trace_csv(tmp_path / "nope.csv")
    with pytest.raises(TraceFormatError, match="file not found"):
        load_gavel_trace(tmp_path / "nope.trace")


def test_shipped_peer_trace_loads_with_the_documented_gpu_mix():
    jobs = load_trace_csv(DATA_DIR / "gavel" / "peer" / "static500_multigpu_seed0.csv")
    assert len(jobs) == 500
    assert Counter(j.num_gpus for j in jobs) == {1: 326, 2: 60, 4: 84, 8: 30}
    assert all(j.arrival_s == 0 for j in jobs)


MSR_LINE = "ResNet-50 (batch size 128)\tpython3 main.py -b 128\t--num_minibatches\t1\t47442\t10.000000\t4\n"
PHYSICAL_LINE = "A3C\tpython3 main.py\trl\t--max-steps\t0\t3000\t2\t1\t-1.000000\t7\n"


def test_gavel_simulation_trace_layout(tmp_path):
    (j,) = load_gavel_trace(write(tmp_path, MSR_LINE, "abc.trace"))
    assert j == JobSpec(
        job_id="abc-00000", model="ResNet-50", batch_size=128, num_gpus=4, total_steps=47442, arrival_s=10.0
    )


def test_gavel_physical_cluster_trace_layout(tmp_path):
    (j,) = load_gavel_trace(write(tmp_path, "\n" + PHYSICAL_LINE, "phys.trace"))
    assert j == JobSpec(
        job_id="phys-00000", model="A3C", batch_size=None, num_gpus=2, total_steps=3000, arrival_s=7
    )


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("A3C\tcmd\t-n\t1\t100\t0\n", ":1: 6 tab-separated columns; expected 7"),
        (MSR_LINE + MSR_LINE.replace("\t4\n", "\tfour\n"), ":2: column num_gpus:"),
        (MSR_LINE.replace("47442", "-5"), ":1: column total_steps: must be >= 1"),
        (
            PHYSICAL_LINE.replace("\t1\t-1.000000", "\t2\t-1.000000"),
            ":1: column priority_weight/slo: 2/-1.000000",
        ),
    ],
)
def test_gavel_trace_errors_name_file_line_and_column(tmp_path, text, where):
    path = write(tmp_path, text, "bad.trace")
    with pytest.raises(TraceFormatError) as err:
        load_gavel_trace(path)
    assert str(err.value).startswith(f"{path}{where}")


def test_shipped_gavel_traces_load_with_their_job_counts():
    msr = load_gavel_trace(DATA_DIR / "gavel" / "traces" / "msr" / "seed=0" / "0e4a51.trace")
    assert len(msr) == 1181
    assert Counter(j.num_gpus for j in msr) == {4: 451, 1: 436, 2: 226, 8: 68}
    assert sum(j.batch_size is None for j in msr) == 95
    assert {j.model for j in msr if j.batch_size is None} == {"A3C", "CycleGAN"}
    assert len({j.job_id for j in msr}) == len(msr)
    physical = load_gavel_trace(DATA_DIR / "gavel" / "traces" / "physical_cluster" / "small_test.trace")
    assert len(physical) == 20
    assert Counter(j.num_gpus for j in physical) == {1: 17, 2: 3}


def test_generated_queue_is_deterministic_per_seed(table):
    first = generate_queue(60, 7, table, CLUSTERS, arrival_window_s=3600)
    assert first == generate_queue(60, 7, table, CLUSTERS, arrival_window_s=3600)
    assert first != generate_queue(60, 8, table, CLUSTERS, arrival_window_s=3600)


def test_generated_jobs_are_measured_configurations_with_sensible_figures(table):
    jobs = generate_queue(300, 0, table, CLUSTERS, arrival_window_s=3600)
    assert len(jobs) == len({j.job_id for j in jobs}) == 300
    assert [j.arrival_s for j in jobs] == sorted(j.arrival_s for j in jobs)
    assert all(0 <= j.arrival_s <= 3600 for j in jobs)
    for j in jobs:
        sps = table.steps_per_sec(j.model, j.batch_size, "v100", j.num_gpus)
        assert sps, j
        assert RUNTIME_RANGE_S[0] * 0.99 <= j.total_steps / sps <= RUNTIME_RANGE_S[1] * 1.01
        assert j.num_gpus in GPU_COUNT_WEIGHTS
        assert j.gpu_mem_gb >= gpu_memory_gb(j.model, j.batch_size, j.num_gpus)
        # CPU per GPU within what a card's share of a 32-core, 8-card node gives under the 0.7 threshold
        assert 0.1 <= j.cpu <= j.num_gpus * 32 / 8 * 0.7
        assert j.source_cluster in {"old", "new"}
        assert j.image and j.image_size_gb > 0 and j.data_size_gb > 0
    counts = Counter(j.num_gpus for j in jobs)
    assert counts[1] > counts[2] and counts[1] > counts[4] and counts[1] > counts[8]


def test_generated_queue_has_jobs_too_big_for_a_k80_that_fit_a_v100(table):
    jobs = generate_queue(200, 0, table, CLUSTERS)
    big = [j for j in jobs if j.gpu_mem_gb > 12]
    assert 10 <= len(big) <= 60
    assert all(j.gpu_mem_gb <= 16 for j in big)
    assert all(j.arrival_s == 0 for j in jobs)


def test_one_card_size_means_no_oversize_jobs(table):
    only_v100 = CLUSTERS.model_copy(update={"clusters": CLUSTERS.clusters[1:], "wan_gbps": {}})
    assert all(j.gpu_mem_gb <= 16 for j in generate_queue(100, 0, table, only_v100))
    with pytest.raises(ValueError, match="reference GPU 'h100'"):
        generate_queue(1, 0, table, CLUSTERS, reference_gpu="h100")


@pytest.fixture(scope="module")
def volcano_job_schema() -> dict:
    text = (DATA_DIR / "schemas" / "volcano-batch.volcano.sh_jobs.yaml").read_text()
    crd = yaml.load(text, Loader=yaml.CSafeLoader)  # libyaml: the same document, 5x faster
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


def test_manifest_is_a_valid_volcano_job_with_the_seed_annotations(table, volcano_job_schema):
    (job,) = generate_queue(1, 3, table, CLUSTERS)
    doc = yaml.safe_load(to_manifest(job, "maip.mxsf.io"))
    jsonschema.validate(doc, volcano_job_schema)
    assert (doc["apiVersion"], doc["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert (doc["metadata"]["namespace"], doc["metadata"]["name"]) == ("default", job.job_id.split("/")[1])
    notes = doc["metadata"]["annotations"]
    assert all(isinstance(v, str) for v in notes.values())
    assert notes["model_name"] == job.model
    assert int(notes["gpu_count"]) == job.num_gpus
    assert int(notes["total_steps"]) == job.total_steps
    assert int(notes["epoch"]) == job.epochs
    assert float(notes["data_size"]) == job.data_size_gb
    assert float(notes["gpu_mem"]) == job.gpu_mem_gb
    assert float(notes["image_size"]) == job.image_size_gb
    assert notes["source_cluster"] == job.source_cluster
    pod = doc["spec"]["tasks"][0]["template"]["spec"]
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"][0]["matchExpressions"][0] == {
        "key": "maip.mxsf.io/node.usage",
        "operator": "In",
        "values": ["training", "hybrid"],
    }
    assert [t["value"] for t in pod["tolerations"]] == ["training", "hybrid"]
    (container,) = pod["containers"]
    assert container["image"] == job.image
    assert container["resources"]["limits"]["nvidia.com/gpu"] == job.num_gpus
    assert float(container["resources"]["requests"]["cpu"]) == job.cpu


def test_manifest_of_an_inference_job_without_optional_figures(volcano_job_schema):
    job = JobSpec(job_id="Serve_Job.1", model="A3C", kind="inference", image="srv:1")
    doc = yaml.safe_load(to_manifest(job, "example.com"))
    jsonschema.validate(doc, volcano_job_schema)
    assert (doc["metadata"]["namespace"], doc["metadata"]["name"]) == ("default", "serve-job-1")
    assert not {"batch_size", "gpu_mem", "total_steps", "source_cluster"} & set(
        doc["metadata"]["annotations"]
    )
    pod = doc["spec"]["tasks"][0]["template"]["spec"]
    assert [t["value"] for t in pod["tolerations"]] == ["inference", "hybrid"]
    preferred = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert preferred["preference"]["matchExpressions"][0]["values"] == ["inference"]


def test_manifest_keeps_a_namespace_from_the_job_id_and_needs_an_image():
    job = JobSpec(job_id="team-a/train-7", model="LM", batch_size=20, image="lm:1")
    doc = yaml.safe_load(to_manifest(job, "example.com"))
    assert (doc["metadata"]["namespace"], doc["metadata"]["name"]) == ("team-a", "train-7")
    with pytest.raises(ValueError, match="has no image"):
        to_manifest(replace(job, image=""), "example.com")
