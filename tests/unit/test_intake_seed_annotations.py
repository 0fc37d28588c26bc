"""Which annotations a job needs: a service only `model_name`; a training job `data_size` and `epoch`
too, and data to train on when it gives no `total_steps` (its runtime is estimated from them)."""

from __future__ import annotations

import pytest

from cpn.intake import IntakeError, parse_manifests

SERVICE = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: chat
  annotations: {model_name: llama3}
spec:
  replicas: 1
  selector: {matchLabels: {app: chat}}
  template:
    metadata: {labels: {app: chat}}
    spec:
      containers:
        - {name: main, image: registry.example.com/chat:1, resources: {limits: {nvidia.com/gpu: 1}}}
"""

TRAINING = """
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  annotations: {annotations}
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
        - {{name: main, image: registry.example.com/train:1, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}
"""


def problems(text: str) -> dict[str, str]:
    with pytest.raises(IntakeError) as caught:
        parse_manifests(text, "jobs.yaml")
    return {p.field: p.reason for p in caught.value.problems}


def test_an_inference_service_needs_only_its_model_name():
    (spec,) = parse_manifests(SERVICE, "chat.yaml")
    assert (spec.kind, spec.model, spec.is_service) == ("inference", "llama3", True)
    assert (spec.data_size_gb, spec.epochs, spec.total_steps, spec.batch_size) == (0.0, 1, None, None)


def test_the_seeds_three_annotations_are_enough_for_a_training_job():
    text = TRAINING.format(annotations='{model_name: densenet121, data_size: "20", epoch: "100"}')
    (spec,) = parse_manifests(text, "train.yaml")
    assert (spec.model, spec.data_size_gb, spec.epochs, spec.batch_size, spec.total_steps) == (
        "densenet121",
        20.0,
        100,
        None,
        None,
    )


def test_a_training_job_without_its_work_is_refused_naming_each_annotation():
    found = problems(TRAINING.format(annotations="{model_name: densenet121, epochs: '3'}"))
    assert "missing required annotation; add data_size" in found["metadata.annotations.data_size"]
    assert "(found 'epochs'" in found["metadata.annotations.epoch"]
    empty = problems(TRAINING.format(annotations='{model_name: densenet121, data_size: "0", epoch: "3"}'))
    assert "without total_steps needs data_size above 0" in empty["metadata.annotations.data_size"]
    steps = TRAINING.format(annotations='{model_name: x, data_size: "0", epoch: "3", total_steps: "500"}')
    assert parse_manifests(steps, "steps.yaml")[0].total_steps == 500, "steps given: no data needed"
