"""The retraining artifact (issue 27, item 7): its MLflow links come first and short, so a narrow table on
the Prefect run page still shows them; the long reasons sit below the table."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, unquote, urlsplit

from models.registry import RunResult
from models.retraining_report import retraining_markdown

RESULTS = [
    RunResult("rf", "a" * 32, "3", 0.123, True, "champion: held-out MAPE 0.123 vs 0.200 of version 2"),
    RunResult("xgb", "b" * 32, None, 0.150, False, "not champion: held-out MAPE 0.150 vs 0.123 of version 3"),
]
RUNS = "http://127.0.0.1:5000/#/experiments/7/runs/"


def test_links_first_a_comparison_of_the_runs_and_the_reasons_below_the_table():
    text = retraining_markdown(RESULTS, "sqlite:///mlflow.db", "http://127.0.0.1:5000/", "7")
    lines = text.splitlines()
    assert lines[0] == "Retraining on sqlite:///mlflow.db: the champion changed."
    compare = lines[1].split("](", 1)[1].rstrip(")")
    query = parse_qs(urlsplit(compare.replace("/#/", "/")).query)
    assert compare.startswith("http://127.0.0.1:5000/#/compare-runs?")
    assert json.loads(unquote(query["runs"][0])) == ["a" * 32, "b" * 32]
    assert json.loads(unquote(query["experiments"][0])) == ["7"]
    rows = [line for line in lines if line.startswith("| [")]
    assert rows == [
        f"| [rf run]({RUNS}{'a' * 32}) | rf | 3 | 12.3% | yes (alias moved) |",
        f"| [xgb run]({RUNS}{'b' * 32}) | xgb | - | 15.0% | no |",
    ]
    assert lines[-2:] == [f"- {r.estimator}: {r.reason}" for r in RESULTS]
    assert text.index("| [rf run]") < text.index("- rf: champion"), "reasons after the table"


def test_without_the_mlflow_uis_address_the_run_ids_stand_in():
    text = retraining_markdown(RESULTS[1:], "sqlite:///mlflow.db")
    assert "Compare" not in text and "](" not in text
    assert f"| {'b' * 32} | xgb | - | 15.0% | no |" in text.splitlines()
    assert text.splitlines()[0].endswith("the champion stayed.")
