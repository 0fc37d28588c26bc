"""Parsing Kubernetes manifests into JobSpecs: each supported kind, and every way a document can be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cpn.intake import IntakeError, Problem, parse_manifests

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "manifests"
BAD = REPO / "tests" / "data" / "bad_manifests"

REQUIRED = {"model_name": "ResNet-50", "data_size": "20", "epoch": "10"}


def batch_job(name: str = "train-a", annotations: dict | None = None, **container: object) -> dict:
    """A minimal valid batch/v1 Job of one GPU; `container` keys are merged into its one container."""
    if "resources" not in container and "gpu_count" not in (annotations or {}):
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": dict(REQUIRED) if annotations is None else annotations},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.example.com/train:1", **container}],
                }
            }
        },
    }


def dump(*docs: object) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def problems_of(text: str, source: str = "jobs.yaml") -> list[Problem]:
    with pytest.raises(IntakeError) as caught:
        parse_manifests(text, source)
    return caught.value.problems


def test_batch_job_example_reads_annotations_and_pod_resources():
    (spec,) = parse_manifests((EXAMPLES / "training-job.yaml").read_text(), "training-job.yaml")
    assert spec.job_id == "team-vision/resnet50-bs64"
    assert spec.kind == "training"
    assert (spec.model, spec.epochs, spec.batch_size, spec.total_steps) == ("ResNet-50", 90, 64, 45000)
    assert (spec.data_size_gb, spec.image_size_gb) == (20.0, 6.5)
    assert spec.num_gpus == 2  # from resources.limits["nvidia.com/gpu"]
    assert spec.cpu == 4.0
    assert spec.image == "registry.example.com/train/resnet:1.4"
    assert spec.source_cluster == "bj-k80"
    assert spec.gpu_mem_gb is None and spec.gpu_share is None and spec.priority == 0


def test_volcano_job_example_takes_gpus_from_the_annotation():
    (spec,) = parse_manifests((EXAMPLES / "volcano-job.yaml").read_text())
    assert spec.job_id == "default/transformer-wmt"
    assert spec.kind == "training"
    assert (spec.num_gpus, spec.gpu_mem_gb, spec.priority, spec.cpu) == (4, 14.0, 10, 8.0)


def test_deployment_is_inference_and_its_service_goes_with_it():
    (spec,) = parse_manifests((EXAMPLES / "inference-deployment.yaml").read_text())
    assert spec.job_id == "default/inference-service"
    assert spec.kind == "inference"
    assert (spec.num_gpus, spec.pod_gpus) == (2, (1, 1))  # two replicas, one card each
    assert spec.cpu == 1.0  # requests.cpu "500m" (wins over limits.cpu "1") per replica
    assert spec.gpu_share == 0.5
    assert [d["kind"] for d in yaml.safe_load_all(spec.manifest)] == ["Deployment", "Service"]


def test_multi_document_file_keeps_document_order():
    specs = parse_manifests((EXAMPLES / "queue.yaml").read_text())
    assert [s.job_id for s in specs] == [
        "default/lm-small",
        "default/recommendation-bs2048",
        "default/cyclegan",
    ]
    assert [s.cpu for s in specs] == [1.0, 2.0, 1.0]


def test_manifest_keeps_the_whole_document():
    doc = batch_job(resources={"limits": {"nvidia.com/gpu": 1}})
    (spec,) = parse_manifests(dump(doc))
    assert yaml.safe_load(spec.manifest) == doc


def test_annotation_numbers_may_be_strings_or_numbers():
    as_strings = parse_manifests(
        dump(batch_job(annotations={**REQUIRED, "gpu_count": "2", "gpu_mem": "7.5"}))
    )
    as_numbers = parse_manifests(
        dump(
            batch_job(
                annotations={
                    "model_name": "ResNet-50",
                    "data_size": 20,
                    "epoch": 10,
                    "gpu_count": 2,
                    "gpu_mem": 7.5,
                }
            )
        )
    )
    assert as_strings == as_numbers
    assert (as_strings[0].num_gpus, as_strings[0].data_size_gb) == (2, 20.0)


def test_defaults_without_gpu_or_cpu_declared():
    (spec,) = parse_manifests(dump(batch_job()))
    assert (spec.num_gpus, spec.cpu, spec.priority) == (1, 1.0, 0)


def test_gpu_limits_are_summed_over_the_pods_containers():
    doc = batch_job()
    containers = doc["spec"]["template"]["spec"]["containers"]
    containers[0]["resources"] = {"limits": {"nvidia.com/gpu": "1", "cpu": "1"}}
    containers.append(
        {"name": "side", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": 2, "cpu": "250m"}}}
    )
    (spec,) = parse_manifests(dump(doc))
    assert (spec.num_gpus, spec.cpu, spec.image) == (3, 1.25, "registry.example.com/train:1")


def test_volcano_job_counts_all_its_tasks_as_one_gang():
    doc = yaml.safe_load((EXAMPLES / "volcano-job.yaml").read_text())
    del doc["metadata"]["annotations"]["gpu_count"]
    task = doc["spec"]["tasks"][0]
    task["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 1
    big = yaml.safe_load(yaml.safe_dump(task))
    big["name"] = "big"
    big["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = 3
    doc["spec"]["tasks"].append(big)
    (spec,) = parse_manifests(dump(doc))
    assert (spec.num_gpus, spec.pod_gpus) == (4, (1, 3))


@pytest.mark.parametrize(
    ("quantity", "cores"), [("500m", 0.5), ("2", 2.0), (3, 3.0), ("1.5", 1.5), (0.25, 0.25)]
)
def test_cpu_quantities(quantity, cores):
    (spec,) = parse_manifests(
        dump(batch_job(resources={"requests": {"cpu": quantity}, "limits": {"nvidia.com/gpu": 1}}))
    )
    assert spec.cpu == cores


def test_missing_annotation_names_the_field_and_the_typo():
    text = (BAD / "missing-epoch.yaml").read_text()
    problems = problems_of(text)
    by_field = {p.field: p for p in problems}
    assert set(by_field) == {"metadata.name", "metadata.annotations.epoch"}
    assert "missing required annotation" in by_field["metadata.annotations.epoch"].reason
    assert "'epochs'" in by_field["metadata.annotations.epoch"].reason
    assert all(p.document == 1 and p.name == "Train_A" and p.kind == "Job" for p in problems)


def test_error_message_lists_one_problem_per_line():
    annotations = {"model_name": "x", "data_size": "1"}
    with pytest.raises(IntakeError) as caught:
        parse_manifests(dump(batch_job("ok"), batch_job("train-a", annotations)), "jobs.yaml")
    lines = str(caught.value).splitlines()
    assert lines == [
        "jobs.yaml document 2 (Job train-a): metadata.annotations.epoch: missing required annotation; "
        "add epoch: <number of epochs, a whole number from 1 to 1,000,000>"
    ]
    assert isinstance(caught.value, ValueError)


def test_annotations_absent_altogether():
    doc = batch_job()
    del doc["metadata"]["annotations"]
    fields = {p.field for p in problems_of(dump(doc))}
    assert fields == {f"metadata.annotations.{k}" for k in REQUIRED}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("epoch", "twenty"),
        ("epoch", "0"),
        ("epoch", "1.5"),
        ("data_size", "20GB"),
        ("data_size", "-1"),
        ("gpu_count", "0"),
        ("gpu_share", "1.5"),
        ("gpu_mem", "0"),
        ("priority", "high"),
        ("source_cluster", "Not A Cluster"),
        ("data_size", ".inf"),
    ],
)
def test_invalid_annotation_values(key, value):
    (problem,) = problems_of(dump(batch_job(annotations={**REQUIRED, key: value})))
    assert problem.field == f"metadata.annotations.{key}"
    assert repr(value) in problem.reason and "expected" in problem.reason


def test_conflicting_gpu_annotation_and_limit():
    doc = batch_job(annotations={**REQUIRED, "gpu_count": "4"}, resources={"limits": {"nvidia.com/gpu": 2}})
    (problem,) = problems_of(dump(doc))
    assert problem.field == "metadata.annotations.gpu_count"
    assert "4" in problem.reason and "2" in problem.reason


def test_agreeing_gpu_annotation_and_limit():
    doc = batch_job(annotations={**REQUIRED, "gpu_count": "2"}, resources={"limits": {"nvidia.com/gpu": "2"}})
    assert parse_manifests(dump(doc))[0].num_gpus == 2


@pytest.mark.parametrize("limit", ["two", 0, True, "1.5"])
def test_invalid_gpu_limit(limit):
    (problem,) = problems_of(dump(batch_job(resources={"limits": {"nvidia.com/gpu": limit}})))
    assert problem.field == 'spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]'


def test_invalid_cpu_quantity():
    (problem,) = problems_of(
        dump(batch_job(resources={"requests": {"cpu": "two"}, "limits": {"nvidia.com/gpu": 1}}))
    )
    assert problem.field == "spec.template.spec.containers[0].resources.requests.cpu"


@pytest.mark.parametrize("name", ["Train_A", "-lead", "trail-", "a" * 254, "white space"])
def test_name_must_be_a_dns_subdomain(name):
    (problem,) = problems_of(dump(batch_job(name)))
    assert problem.field == "metadata.name" and "DNS-1123" in problem.reason


def test_dotted_name_and_namespace_make_the_job_id():
    doc = batch_job("resnet.v2")
    doc["metadata"]["namespace"] = "team-a"
    assert parse_manifests(dump(doc))[0].job_id == "team-a/resnet.v2"


def test_bad_namespace_and_missing_name():
    doc = batch_job()
    doc["metadata"]["namespace"] = "Team_A"
    del doc["metadata"]["name"]
    assert {p.field for p in problems_of(dump(doc))} == {"metadata.name", "metadata.namespace"}


def test_malformed_yaml_names_document_and_file_line_and_other_documents_are_still_checked():
    good = dump(batch_job("ok"))
    broken = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: [unclosed\n"
    bad_epoch = dump(batch_job("late", {**REQUIRED, "epoch": "x"}))
    text = good + "---\n" + broken + "---\n" + bad_epoch
    problems = problems_of(text)
    assert [(p.document, p.field) for p in problems] == [(2, ""), (3, "metadata.annotations.epoch")]
    broken_first_line = good.count("\n") + 2
    assert "not valid YAML at line" in problems[0].reason
    line = int(problems[0].reason.split("line ")[1].split(",")[0])
    assert broken_first_line + 3 <= line <= broken_first_line + 4  # the flow sequence never closes


def test_one_bad_document_rejects_the_whole_file():
    problems = problems_of((BAD / "one-bad-document.yaml").read_text())
    assert [(p.document, p.name, p.field) for p in problems] == [
        (2, "train-a", "metadata.annotations.epoch"),
        (3, "train-b", "metadata.annotations.gpu_count"),
    ]


def test_duplicate_job_in_one_file():
    (problem,) = problems_of(dump(batch_job("same"), batch_job("same")))
    assert (problem.document, problem.field) == (2, "metadata.name")
    assert "document 1" in problem.reason


def test_file_without_jobs_is_an_error():
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}}
    (problem,) = problems_of(dump(service))
    assert problem.document == 0 and "no job" in problem.reason and "Service" in problem.reason
    (empty,) = problems_of("# nothing here\n")
    assert "empty" in empty.reason


def test_unsupported_api_version_of_a_job_is_an_error_not_a_skip():
    doc = batch_job()
    doc["apiVersion"] = "batch/v1beta1"
    (problem,) = problems_of(dump(doc))
    assert problem.field == "apiVersion" and "not a version of Job" in problem.reason
    assert problem.reason.endswith("use batch/v1")


@pytest.mark.parametrize(
    ("text", "reason"),
    [("- a\n- b\n", "got a list"), ("metadata: {name: x}\n", "apiVersion and kind")],
)
def test_documents_that_are_not_kubernetes_objects(text, reason):
    (problem,) = problems_of(text)
    assert problem.document == 1 and reason in problem.reason


def test_structural_problems_are_located():
    no_image = batch_job()
    del no_image["spec"]["template"]["spec"]["containers"][0]["image"]
    no_containers = batch_job("b")
    no_containers["spec"]["template"]["spec"]["containers"] = []
    volcano = yaml.safe_load((EXAMPLES / "volcano-job.yaml").read_text())
    volcano["spec"]["tasks"] = []
    problems = problems_of(dump(no_image, no_containers, volcano))
    assert [(p.document, p.field) for p in problems] == [
        (1, "spec.template.spec.containers[0].image"),
        (2, "spec.template.spec.containers"),
        (3, "spec.tasks"),
    ]


def test_leading_comments_and_separator_do_not_count_as_a_document():
    text = "# queue\n---\n" + dump(batch_job("a")) + "---\n# trailing comment\n"
    assert [s.job_id for s in parse_manifests(text)] == ["default/a"]
    bad = "# queue\n---\n" + dump(batch_job("b", {}))
    assert {p.document for p in problems_of(bad)} == {1}


def test_problem_without_document_or_name():
    assert Problem(0, None, "", "no job to submit").describe("f.yaml") == "f.yaml: no job to submit"
    assert Problem(2, None, "", "not valid YAML").describe("f.yaml") == "f.yaml document 2: not valid YAML"
