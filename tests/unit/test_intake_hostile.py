"""Hostile and careless input to the intake parser: each case of issue 14 is refused quickly and briefly."""

from __future__ import annotations

import time

import pytest
import yaml

from cpn.intake import MAX_PROBLEMS, IntakeError, parse_manifests
from cpn.safe_yaml import Limits

REQUIRED = {"model_name": "ResNet-50", "data_size": "20", "epoch": "10"}


def job(name: str = "train-a", annotations: dict | None = None, gpus: object = 1, kind: str = "Job") -> dict:
    container: dict = {"name": "main", "image": "registry.example.com/train:1"}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "apiVersion": "batch/v1",
        "kind": kind,
        "metadata": {"name": name, "annotations": dict(REQUIRED) if annotations is None else annotations},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


def dump(*docs: object) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)


def refused(text: str, limits: Limits | None = None) -> IntakeError:
    """The IntakeError for `text`, checking it came within 5 s and its message is short."""
    start = time.perf_counter()
    with pytest.raises(IntakeError) as caught:
        parse_manifests(text, "hostile.yaml", *([limits] if limits else []))
    assert time.perf_counter() - start < 5
    assert len(str(caught.value)) < 16_000
    return caught.value


ALIAS_BOMB = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested more than 64 levels"),
        ("- " * 5_000 + "x\n", "nested more than 64 levels"),
        (ALIAS_BOMB, "YAML nodes"),
        ("x: &a [*a]\n", "recursive"),
        ("x: " + "y" * 70_000 + "\n", "70,000 characters"),
    ],
    ids=["flow-nesting", "block-nesting", "alias-bomb", "recursive-alias", "long-scalar"],
)
def test_structures_that_exhaust_the_parser_are_refused(text, says):
    (problem,) = refused(text).problems
    assert says in problem.reason


def test_an_alias_within_the_limits_is_never_written_out_in_messages():
    small_bomb = "\n".join(ALIAS_BOMB.splitlines()[:4])  # d: 9^4 = 6,561 nodes, under the node limit
    doc = job(name="PLACEHOLDER", annotations={**REQUIRED, "model_name": "PLACEHOLDER"}, gpus="PLACEHOLDER")
    text = dump(doc).replace("PLACEHOLDER", "*d")
    text = small_bomb.replace("\n", "\n  ").replace("a: &a", "bomb:\n  a: &a", 1) + "\n" + text
    error = refused(text)
    fields = {p.field: p.reason for p in error.problems}
    assert set(fields) == {
        "metadata.name",
        "metadata.annotations.model_name",
        'spec.template.spec.containers[0].resources.limits["nvidia.com/gpu"]',
    }
    assert all("a list" in reason and len(reason) < 300 for reason in fields.values())


def test_a_modest_alias_stays_legal_and_is_counted():
    text = "x: &shared {a: 1}\n" + dump(job()).replace("spec:\n", "spec:\n  extra: *shared\n", 1)
    (spec,) = parse_manifests(text)
    assert spec.job_id == "default/train-a"


@pytest.mark.parametrize(
    ("value", "says"),
    [("2024-02-30", None), ("!!timestamp not-a-date", None), ("1" * 5_000, "4300 digits")],
    ids=["invalid-date", "timestamp-tag", "huge-integer"],
)
def test_scalars_python_cannot_construct_are_problems_not_crashes(value, says):
    text = dump(job()).replace("restartPolicy: Never", f"restartPolicy: Never\n      built: {value}")
    if says is None:  # dates stay the strings they were written as, as Kubernetes reads them
        (spec,) = parse_manifests(text)
        assert value.split()[-1] in spec.manifest
    else:
        (problem,) = refused(text).problems
        assert says in problem.reason and "line 13" in problem.reason


def test_a_name_with_a_trailing_newline_is_refused():
    (problem,) = refused(dump(job("nl-job\n"))).problems
    assert problem.field == "metadata.name"
    doc = job()
    doc["metadata"]["namespace"] = "team\n"
    (problem,) = refused(dump(doc)).problems
    assert problem.field == "metadata.namespace"


@pytest.mark.parametrize("key", ["epoch", "data_size", "gpu_count", "priority", "model_name"])
def test_booleans_are_not_numbers_or_names(key):
    annotations = {**REQUIRED, key: "PLACEHOLDER"}
    text = dump(job(annotations=annotations)).replace("PLACEHOLDER", "yes")
    (problem,) = refused(text).problems
    assert problem.field == f"metadata.annotations.{key}" and "boolean" in problem.reason


@pytest.mark.parametrize(
    ("annotation", "value"),
    [("gpu_count", "1000000000000000000000000"), ("epoch", "10000001"), ("priority", "99999999999")],
)
def test_counts_have_upper_bounds(annotation, value):
    (problem,) = refused(dump(job(annotations={**REQUIRED, annotation: value}))).problems
    assert problem.field == f"metadata.annotations.{annotation}"


@pytest.mark.parametrize("gpus", [10**24, "1000000000000000000000000", 1025])
def test_gpu_limits_have_an_upper_bound(gpus):
    (problem,) = refused(dump(job(gpus=gpus))).problems
    assert problem.field.endswith('limits["nvidia.com/gpu"]') and "1 to 1024" in problem.reason


def test_huge_cpu_is_refused():
    doc = job()
    doc["spec"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1e30"},
        "limits": {"nvidia.com/gpu": 1},
    }
    (problem,) = refused(dump(doc)).problems
    assert problem.field.endswith("requests.cpu")


def test_an_unknown_kind_is_an_error_and_the_rest_is_not_accepted():
    error = refused(dump(job("good"), job("typo", kind="job")))
    (problem,) = error.problems
    assert (problem.document, problem.field) == (2, "kind") and "'job'" in problem.reason


def test_objects_beside_a_job_are_still_skipped():
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}}
    assert [s.job_id for s in parse_manifests(dump(service, job()))] == ["default/train-a"]


def test_duplicate_keys_are_errors():
    text = dump(job()).replace("    epoch: '10'\n", "    epoch: '10'\n    epoch: '20'\n")
    (problem,) = refused(text).problems
    assert "'epoch' twice" in problem.reason


def test_a_stream_over_the_size_limit_is_refused_before_parsing():
    (problem,) = refused(dump(job()), Limits(max_bytes=100)).problems
    assert problem.document == 0 and "larger than 100 bytes" in problem.reason


def test_too_many_documents():
    (problem,) = refused(dump(*(job(f"j{i}") for i in range(4))), Limits(max_documents=3)).problems
    assert "4 documents; at most 3" in problem.reason


def test_many_bad_documents_give_a_bounded_list_of_problems():
    docs = [job(f"j{i}", annotations={}) for i in range(200)]
    error = refused(dump(*docs))
    assert len(error.problems) <= MAX_PROBLEMS + 1
    assert "more problem(s) not listed" in error.problems[-1].reason


def test_a_long_bad_value_is_quoted_briefly():
    (problem,) = refused(dump(job("x" * 60_000))).problems
    assert len(problem.reason) < 500 and "more characters" in problem.reason
