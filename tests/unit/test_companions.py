"""When an object already on a cluster is the one a job would create (cpn.companions)."""

from __future__ import annotations

from cpn.companions import conflict, content_difference

CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"lr": "0.1"}}


def test_labels_and_what_the_server_adds_are_no_difference():
    theirs = {**CONFIG, "metadata": {"name": "cfg", "labels": {"job": "a"}, "resourceVersion": "7"}}
    assert content_difference({**CONFIG, "metadata": {"labels": {"job": "b"}}}, theirs) is None
    service = {"kind": "Service", "spec": {"selector": {"app": "s"}, "ports": [{"port": 80}]}}
    stored = {
        "kind": "Service",
        "spec": {
            "selector": {"app": "s"},
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
            "clusterIP": "10.0.0.7",
        },
        "status": {"loadBalancer": {}},
    }
    assert content_difference(service, stored) is None


def test_the_first_field_that_differs_is_named():
    assert content_difference({**CONFIG, "data": {"lr": "0.2"}}, CONFIG) == "data.lr"
    assert content_difference({**CONFIG, "data": {"lr": "0.1", "wd": "0"}}, CONFIG) == "data.wd"
    assert content_difference({**CONFIG, "binaryData": {"w": "AA=="}}, CONFIG) == "binaryData"
    ports = {"spec": {"ports": [{"port": 80}, {"port": 81}]}}
    assert content_difference(ports, {"spec": {"ports": [{"port": 80}]}}) == "spec.ports"


def test_a_secrets_string_data_is_compared_as_the_data_the_server_stores():
    sent = {"kind": "Secret", "stringData": {"token": "abc"}}
    assert content_difference(sent, {"kind": "Secret", "data": {"token": "YWJj"}}) is None
    assert content_difference(sent, {"kind": "Secret", "data": {"token": "eHl6"}}) == "data.token"


def test_the_refusal_names_the_object_the_field_and_what_to_do():
    obj = {**CONFIG, "metadata": {"name": "cfg", "namespace": "team"}}
    assert conflict(obj, "east", "data.lr", "it came with job team/a") == (
        "ConfigMap team/cfg already exists on cluster east with other content (data.lr differs; it came "
        "with job team/a); give one of them another name, or make them the same"
    )
