"""Property-based fuzzing of the intake (Hypothesis, derandomized, fixed budget).

Mutated manifests, structured (a field set to an odd value) and textual (YAML
punctuation, anchors, tags, separators dropped in at random places), go to
`parse_manifests` and through the real HTTP app. Whatever comes in:

- never a 5xx, never an exception other than IntakeError;
- never a response over 64 KB;
- nothing stored on any error;
- every stored job round-trips: its stored manifest parses back to the same spec.
"""

from __future__ import annotations

import copy

import yaml
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpn.api import create_app
from cpn.auth import ApiSecurity
from cpn.intake import IntakeError, parse_manifests
from cpn.safe_yaml import Budget, _load_through_nodes, dump, load_one
from cpn.store import JobStore

MAX_RESPONSE = 64 * 1024
BASE = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "fuzz",
        "namespace": "team-a",
        "annotations": {"model_name": "ResNet-50", "data_size": "20", "epoch": "10", "gpu_count": "2"},
    },
    "spec": {
        "parallelism": 1,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example.com/train:1",
                        "resources": {"requests": {"cpu": "4"}, "limits": {"nvidia.com/gpu": 2}},
                        "env": [{"name": "A", "value": "b"}],
                    }
                ],
            }
        },
    },
}
PATHS = [
    ("apiVersion",),
    ("kind",),
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("metadata", "annotations"),
    *(("metadata", "annotations", k) for k in ("model_name", "data_size", "epoch", "gpu_count", "priority")),
    *(("metadata", "annotations", k) for k in ("gpu_share", "gpu_mem", "source_cluster", "batch_size")),
    ("spec",),
    ("spec", "parallelism"),
    ("spec", "template", "spec", "containers"),
    ("spec", "template", "spec", "containers", 0, "image"),
    ("spec", "template", "spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"),
    ("spec", "template", "spec", "containers", 0, "resources", "requests", "cpu"),
    ("spec", "template", "spec", "containers", 0, "env"),
]
TOKENS = ["[", "]", "{", "}", "&a ", "*a", "!!timestamp ", "!!binary ", "<<: *a\n", "\n", "---\n", ": ", "- "]
TOKENS += ["'", '"', "\t", "#", "%YAML 1.1\n", "\x00", "\ufeff", "yes", "1e400", "9" * 50, "2024-02-30", "~"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(
        ["0", "-1", "1.5", "500m", "yes", "on", "null", "nl-job\n", "A_B", "a" * 300, "2024-02-30"]
    ),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def manifests(draw) -> str:
    """One or two documents: the base Job with some fields replaced, then some text dropped in."""
    docs = []
    for i in range(draw(st.integers(1, 2))):
        doc = copy.deepcopy(BASE)
        doc["metadata"]["name"] = f"fuzz-{i}"
        for path in draw(st.lists(st.sampled_from(PATHS), max_size=3)):
            _set(doc, path, draw(values))
        docs.append(doc)
    text = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True)
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 3]))):  # half the streams stay well-formed YAML
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(TOKENS)) + text[at:]
    return text


def _set(doc: dict, path: tuple, value: object) -> None:
    node = doc
    for key in path[:-1]:
        if isinstance(node, dict) and isinstance(node.get(key), dict | list):
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return  # an earlier mutation replaced the way there
    if isinstance(node, dict):
        node[path[-1]] = value


FUZZ = dict(derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
"""Reproducible fixed budgets: the same examples on every run."""


@settings(max_examples=100, **FUZZ)
@given(manifests())
def test_parse_manifests_refuses_or_accepts_never_crashes(text):
    try:
        specs = parse_manifests(text, "fuzz.yaml")
    except IntakeError as exc:
        assert len(str(exc)) < MAX_RESPONSE
        return
    for spec in specs:
        (again,) = [s for s in parse_manifests(spec.manifest) if s.job_id == spec.job_id]
        assert again == spec


_store = JobStore(":memory:")
_client = TestClient(
    create_app(_store, security=ApiSecurity.no_auth(allowed_hosts={"testserver"})),
    raise_server_exceptions=False,
)


@settings(max_examples=50, **FUZZ)
@given(manifests(), st.sampled_from(["application/yaml", "application/json", "text/yaml"]))
def test_http_intake_never_5xx_never_large_stores_all_or_nothing(text, content_type):
    before = {r.job_id for r in _store.jobs()}
    if content_type == "application/json":
        response = _client.post("/jobs", json={"manifest": text})
    else:
        response = _client.post(
            "/jobs", content=text.encode("utf-8", "surrogatepass"), headers={"content-type": content_type}
        )
    assert response.status_code < 500, response.text[:500]
    assert len(response.content) <= MAX_RESPONSE
    after = {r.job_id for r in _store.jobs()}
    if response.status_code >= 400:
        assert after == before
        return
    for job in response.json()["jobs"]:
        stored = _store.get(job["job_id"]).spec
        (again,) = [s for s in parse_manifests(stored.manifest) if s.job_id == stored.job_id]
        assert again == stored
    assert after - before == {j["job_id"] for j in response.json()["jobs"] if j["status"] == "created"}


@settings(max_examples=150, **FUZZ)
@given(values)
def test_manifest_dump_is_yaml_dump(value):
    assert dump(value) == yaml.dump(value, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True)


@settings(max_examples=150, **FUZZ)
@given(manifests())
def test_values_built_from_events_equal_pyyaml_constructed_ones(text):
    chunk = text.split("\n---\n")[0]

    def load(how):
        try:
            return ("ok", dump(how(chunk, Budget())))
        except yaml.YAMLError as exc:
            return ("error", type(exc).__name__)

    direct, through_nodes = load(load_one), load(_load_through_nodes)
    if direct[0] == through_nodes[0] == "ok":
        assert direct == through_nodes
    elif through_nodes[0] == "ok":  # the direct path also finds keys equal as values (1 and 0x1)
        assert direct[1] == "ConstructorError"
    else:  # both refuse, maybe at different points of the document
        assert direct[0] == "error"
