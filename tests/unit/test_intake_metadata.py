"""Labels and annotations at the door: misspelt cpn annotations, and Kubernetes' rules for keys and values."""

from __future__ import annotations

import time

import pytest
import yaml

from cpn.intake import IntakeError, Problem, parse_manifests

REQUIRED = {"model_name": "ResNet-50", "data_size": "20", "epoch": "10"}


def job(annotations: dict | None = None, labels: dict | None = None, pod_labels: dict | None = None) -> dict:
    """A valid batch/v1 Job with these annotations (default: the required ones) and labels."""
    meta: dict = {"name": "train-a", "annotations": dict(REQUIRED) if annotations is None else annotations}
    if labels is not None:
        meta["labels"] = labels
    container = {"name": "main", "image": "r/t:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    template: dict = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    if pod_labels is not None:
        template["metadata"] = {"labels": pod_labels}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": template}}


def dump(*docs: object) -> str:
    return yaml.dump_all(docs, Dumper=yaml.CSafeDumper, sort_keys=False)


def problems_of(text: str) -> list[Problem]:
    start = time.perf_counter()
    with pytest.raises(IntakeError) as caught:
        parse_manifests(text, "jobs.yaml")
    assert time.perf_counter() - start < 1
    return caught.value.problems


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("priorty", "priority"),
        ("Priority", "priority"),
        ("gpu-count", "gpu_count"),
        ("batchsize", "batch_size"),
        ("precison", "precision"),
        ("sourcecluster", "source_cluster"),
        ("epochs", "epoch"),  # epoch is given too: the extra key is the suspect
    ],
)
def test_an_annotation_close_to_one_of_cpns_is_refused_as_a_typo(key, meant):
    (problem,) = problems_of(dump(job({**REQUIRED, key: "100"})))
    assert problem.field == f"metadata.annotations.{key}"
    assert f"did you mean {meant}? (found {key!r}: a typo?)" in problem.reason
    assert f"example.com/{key}" in problem.reason


@pytest.mark.parametrize(
    "key",
    [
        "version",
        "dataset",
        "gpu_model",
        "owner",
        "example.com/priorty",
        "cpn.example.com/epoch",
        "kubectl.kubernetes.io/last-applied-configuration",
    ],
)
def test_annotations_far_from_cpns_or_with_a_prefix_stay_allowed(key):
    (spec,) = parse_manifests(dump(job({**REQUIRED, key: '{"a": 1}'})))
    assert yaml.safe_load(spec.manifest)["metadata"]["annotations"][key] == '{"a": 1}'


def test_a_misspelt_required_annotation_is_one_problem_naming_both_keys():
    annotations = {"model_name": "x", "data_size": "1", "Epochs": "3"}
    (problem,) = problems_of(dump(job(annotations)))
    assert problem.field == "metadata.annotations.epoch"
    assert problem.reason.startswith("missing required annotation; add epoch:")
    assert problem.reason.endswith("(found 'Epochs': a typo?)")


@pytest.mark.parametrize(
    ("labels", "field", "says"),
    [
        (
            {"built": "2024/02/30 x"},
            'metadata.labels["built"]',
            "value '2024/02/30 x' is not a valid label value",
        ),
        ({"v": "a" * 64}, 'metadata.labels["v"]', "at most 63"),
        ({"v": "-lead"}, 'metadata.labels["v"]', "starting and ending with a letter or digit"),
        ({"Bad Key": "x"}, 'metadata.labels["Bad Key"]', "key 'Bad Key' is not a valid label key: the name"),
        ({"a/b/c": "x"}, 'metadata.labels["a/b/c"]', "more than one '/'"),
        (
            {"Example.com/x": "x"},
            'metadata.labels["Example.com/x"]',
            "prefix 'Example.com' is not a DNS-1123",
        ),
        ({"/x": "x"}, 'metadata.labels["/x"]', "the prefix '' is not"),
        ({"example.com/": "x"}, 'metadata.labels["example.com/"]', "the name '' must be 1 to 63"),
        ({"n" * 64: "x"}, f'metadata.labels["{"n" * 64}"]', "must be 1 to 63"),
        (
            {"version": 1.10},
            'metadata.labels["version"]',
            "value 1.1 is a number; label values are text: quote it",
        ),
        ({"ok": True}, 'metadata.labels["ok"]', "is a boolean; label values are text"),
        ({"tier": {"a": "b"}}, 'metadata.labels["tier"]', "is a mapping"),
        ({1: "x"}, "metadata.labels", "key 1 is a number; keys are text: quote it"),
    ],
)
def test_labels_kubernetes_would_refuse_are_refused_naming_the_field(labels, field, says):
    (problem,) = problems_of(dump(job(labels=labels)))
    assert problem.field == field and says in problem.reason, problem.reason


def test_pod_template_labels_are_checked_too():
    (problem,) = problems_of(dump(job(pod_labels={"app": "x y"})))
    assert problem.field == 'spec.template.metadata.labels["app"]'


def test_labels_kubernetes_accepts_pass():
    labels = {
        "app.kubernetes.io/name": "resnet",
        "Team_A.v2": "a_b.c-D9",
        "empty": "",
        "unset": None,
        "x": "v" * 63,
        f"{'p' * 253}/{'n' * 63}": "ok",
    }
    (spec,) = parse_manifests(dump(job(labels=labels, pod_labels={"app": "resnet"})))
    assert yaml.safe_load(spec.manifest)["metadata"]["labels"] == labels


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("bad key", "x", "key 'bad key' is not a valid annotation key"),
        ("example.com/revision", 3, "value 3 is a number; annotation values are text: quote it"),
        ("example.com/enabled", False, "is a boolean"),
    ],
)
def test_annotations_kubernetes_would_refuse_are_refused(key, value, says):
    (problem,) = problems_of(dump(job({**REQUIRED, key: value})))
    assert problem.field == f'metadata.annotations["{key}"]' and says in problem.reason


def test_annotation_keys_are_checked_with_case_ignored_as_kubernetes_does():
    (spec,) = parse_manifests(dump(job({**REQUIRED, "Example.COM/Build-ID": "7"})))
    assert spec.job_id == "default/train-a"


def test_annotations_over_256_kib_in_all_are_refused():
    big = {f"example.com/part-{i}": "x" * 60_000 for i in range(5)}
    (problem,) = problems_of(dump(job({**REQUIRED, **big})))
    assert problem.field == "metadata.annotations"
    assert "keys and values of 300," in problem.reason and "262,144 at most" in problem.reason


def test_cpns_annotations_written_as_numbers_are_stored_as_text():
    text = "\n".join(
        [
            "apiVersion: batch/v1",
            "kind: Job",
            "metadata:",
            "  name: seed-style",
            "  annotations: {model_name: densenet121, data_size: 20, epoch: 100, gpu_mem: 7.5, note: keep}",
            "spec: {template: {spec: {containers: [{name: main, image: 'r/t:1',",
            "  resources: {limits: {nvidia.com/gpu: 1}}}]}}}",
        ]
    )
    (spec,) = parse_manifests(text)
    assert (spec.data_size_gb, spec.epochs, spec.gpu_mem_gb) == (20.0, 100, 7.5)
    stored = yaml.safe_load(spec.manifest)["metadata"]["annotations"]
    assert stored == {
        "model_name": "densenet121",
        "data_size": "20",
        "epoch": "100",
        "gpu_mem": "7.5",
        "note": "keep",
    }
    assert parse_manifests(spec.manifest) == [spec]


def test_hostile_keys_are_refused_quickly_and_quoted_briefly():
    labels = {"k" * 60_000: "v", "/".join("a" * 30_000): "v"}
    problems = problems_of(dump(job({**REQUIRED, "priorty" * 9_000: "1"}, labels=labels)))
    assert len(problems) == 3
    assert all(len(p.field) < 200 and len(p.reason) < 500 for p in problems)
