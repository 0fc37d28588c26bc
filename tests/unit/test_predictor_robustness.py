"""Predictor inputs from outside the repository: GPU types and tables it has never seen, spelled as
users spell them, incomplete benchmarks files, malformed rows, and data too small for some splits.

Every case either works or fails with a message naming the file, the line or field, and the fix;
nothing crashes with a traceback and nothing malformed becomes a zero.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from cli.predictor import register, register_bench
from config.benchmarks import BenchmarksConfig, load_benchmarks
from config.settings import REPO_ROOT, ConfigError
from cpn.formats.throughput import ThroughputFormatError, ThroughputTable
from cpn.gpus import canonical_gpu
from cpn.jobs import JobSpec
from models.benchmarks import BenchmarkCatalog, BenchmarkError
from models.estimators import make_estimator
from models.evaluation import bench, format_report
from models.features import PredictorInputError, query_of, training_rows
from models.predictor import fit_predictor
from models.registry import holdout_split

# GPU types cpn's data has never seen, as a user's table spells them -> (key, speed, spec or None).
GPUS = {
    "Tesla T4": ("t4", 1.0, None),  # devices.csv has a T4 row
    "NVIDIA A2": ("a2", 1.6, None),  # no spec anywhere
    "NVIDIA GeForce RTX 4090": ("rtx4090", 3.3, (24, 1008, 82.6)),
    "NVIDIA-A100-SXM4-80GB": ("a100-sxm4-80gb", 4.0, (80, 2039, 19.5)),
    "NVIDIA H100 80GB HBM3": ("h100-80gb-hbm3", 7.0, (80, 3350, 67.0)),
}
MODELS = {"ResNet-50": (4.0, (32, 64)), "BERT-base": (6.0, (16, 32)), "PPO": (20.0, (None,))}
HEADER = "model,batch_size,gpu_product,num_gpus,steps_per_sec"


def law(model: str, batch: int | None, speed: float, n: int) -> float:
    ref, _ = MODELS[model]
    return ref * (32 / batch if batch else 1.0) * speed * n**0.9


def table_lines(gpus: dict = GPUS, counts: tuple[int, ...] = (1, 2, 4)) -> list[str]:
    return [
        f"{m},{'' if b is None else b},{spelled},{n},{law(m, b, speed, n):.6g}"
        for m, (_, batches) in MODELS.items()
        for b in batches
        for spelled, (_, speed, _) in gpus.items()
        for n in counts
    ]


def write_table(path: Path, lines: list[str] | None = None, header: str = HEADER) -> Path:
    path.write_text("\n".join([header, *(table_lines() if lines is None else lines)]) + "\n")
    return path


def bench_dict(gpus: dict = GPUS) -> dict:
    entries = {}
    for key, speed, spec in gpus.values():
        entry: dict = {"scores": {"resnet50": 250 * speed, "yolov8m": 40 * speed, "llama3": 1800 * speed}}
        if spec:
            entry["spec"] = dict(zip(("memory_gb", "mem_bw_gbps", "fp32_tflops"), spec, strict=True))
            entry["spec"]["source"] = "datasheet"
        entries[key] = entry
    return {
        "workloads": {w: {"unit": "u/s", "method": "test"} for w in ("resnet50", "yolov8m", "llama3")},
        "gpus": entries,
    }


def write_bench(path: Path, data: dict | None = None) -> Path:
    path.write_text(yaml.safe_dump(data or bench_dict()))
    return path


def catalog_of(data: dict | None = None) -> BenchmarkCatalog:
    return BenchmarkCatalog(BenchmarksConfig.model_validate(data or bench_dict()))


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="cpn")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    register_bench(sub.add_parser("bench").add_subparsers(dest="what"))
    args = parser.parse_args(argv)
    return args.func(args)


# GPU product names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "key"),
    [
        ("NVIDIA GeForce RTX 4090", "rtx4090"),  # was rtx-4090, which no benchmarks key can match
        ("RTX-4090", "rtx4090"),
        ("rtx4090", "rtx4090"),
        ("NVIDIA A100 (80GB)", "a100-80gb"),  # punctuation separates words; memory stays
        ("AMD Instinct MI250X", "mi250x"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
    ],
)
def test_gpu_names_join_their_words_so_every_spelling_meets(spelling, key):
    assert canonical_gpu(spelling) == key


def test_a_gpu_name_without_a_model_number_is_an_error():
    with pytest.raises(ValueError, match="names no product"):
        canonical_gpu("---")


# Throughput tables -----------------------------------------------------------------------------


def _rows(path: Path) -> list[tuple]:
    return [
        (r.model, r.batch_size, r.gpu_type, r.num_gpus, r.steps_per_sec) for r in ThroughputTable.load(path)
    ]


@pytest.mark.parametrize(
    "write",
    [
        lambda p, t: p.write_bytes(("\ufeff" + t.replace("\n", "\r\n")).encode()),  # Excel: BOM + CRLF
        lambda p, t: p.write_text(t.replace(",", ";")),  # European spreadsheet export
        lambda p, t: p.write_text(t.replace(",", "\t")),
        lambda p, t: p.write_text(  # padded values, header in other case with spaces
            "Model, Batch Size, GPU_Product, Num GPUs, Steps_Per_Sec\n"
            + "\n".join(", ".join(f" {c} " for c in line.split(",")) for line in t.splitlines()[1:])
        ),
        lambda p, t: p.write_text(  # pandas writes a column with blanks as floats: 32.0, 1.0
            "\n".join(
                [t.splitlines()[0]]
                + [
                    ",".join(f"{c}.0" if i in (1, 3) and c else c for i, c in enumerate(line.split(",")))
                    for line in t.splitlines()[1:]
                ]
            )
        ),
        lambda p, t: p.write_text(t.replace("\n", ",,\n")),  # trailing empty columns
    ],
)
def test_spreadsheet_spellings_of_a_table_read_the_same_rows(tmp_path, write):
    plain = write_table(tmp_path / "plain.csv")
    write(tmp_path / "t.csv", plain.read_text())
    assert _rows(tmp_path / "t.csv") == _rows(plain)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("ResNet-50,32,Tesla T4,1,nan", "column steps_per_sec: must be a finite number"),  # was kept
        ("ResNet-50,32,Tesla T4,1,inf", "column steps_per_sec: must be a finite number"),
        ("ResNet-50,32,Tesla T4,1,-2", "column steps_per_sec: must be a finite number >= 0"),
        ("ResNet-50,32,Tesla T4,1,", "column steps_per_sec: empty; write 0"),
        ('ResNet-50,32,Tesla T4,1,"1,5"', "use '.' as the decimal point"),
        ("ResNet-50,12.5,Tesla T4,1,3", "column batch_size: must be a positive whole number"),
        ("ResNet-50,0,Tesla T4,1,3", "column batch_size: must be a positive whole number"),
        ("ResNet-50,32,Tesla T4,0,3", "column num_gpus: must be a positive whole number"),
        ("ResNet-50,32,Tesla T4,,3", "column num_gpus: empty"),
        ("ResNet-50,32,,1,3", "column gpu_product: empty"),
        ("---,32,Tesla T4,1,3", "column model: needs letters or digits"),
        ("ResNet-50,32,Tesla T4", "3 fields, the header has 5"),
        ("GPT-2, small,32,Tesla T4,1,3", "6 fields, the header has 5"),
    ],
)
def test_a_malformed_row_is_refused_naming_file_line_and_column(tmp_path, row, message):
    path = write_table(tmp_path / "t.csv", ["ResNet-50,32,Tesla T4,2,7.5", row])
    with pytest.raises(ThroughputFormatError, match=message) as err:
        ThroughputTable.load(path)
    assert f"{path}:3:" in str(err.value)


def test_an_unknown_placement_is_refused_not_read_as_consolidated(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("model,batch_size,gpu_type,num_gpus,placement,steps_per_sec\nA3C,,k80,1,spread,3\n")
    with pytest.raises(ThroughputFormatError, match=r"t\.csv:2: column placement"):
        ThroughputTable.load(path)
    path.write_text(
        "model,batch_size,gpu_type,num_gpus,placement,steps_per_sec\nA3C,,k80,2,Unconsolidated,3\n"
    )
    assert not ThroughputTable.load(path).rows[0].consolidated


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty file; need a header line"),
        (
            HEADER.replace("steps_per_sec", "throughput").encode() + b"\n",
            r"missing column\(s\) steps_per_sec \(found",
        ),
        (HEADER.replace("gpu_product", "gpu").encode() + b"\n", r"missing column\(s\) gpu_product \(found"),
        (HEADER.replace("num_gpus", "num_gpu").encode() + b"\n", "is 'num_gpu' the num_gpus column"),
        (f"{HEADER}\nR\xe9sNet,32,k80,1,3\n".encode("latin-1"), "not UTF-8 text"),
    ],
)
def test_an_unreadable_table_says_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "t.csv"
    path.write_bytes(content)
    with pytest.raises(ThroughputFormatError, match=message):
        ThroughputTable.load(path)
    with pytest.raises(ThroughputFormatError, match="cannot read"):
        ThroughputTable.load(tmp_path)  # a folder


def test_rows_remember_where_they_were_read(tmp_path):
    path = write_table(tmp_path / "t.csv", ["ResNet-50,32,Tesla T4,2,7.5", "", "PPO,,NVIDIA A2,1,30"])
    assert [r.source for r in ThroughputTable.load(path)] == [f"{path}:2", f"{path}:4"]


# Benchmarks files ------------------------------------------------------------------------------


def test_a_gpu_without_specs_is_served_with_missing_spec_features(tmp_path):
    cat = catalog_of()
    assert cat.find("NVIDIA A2").key == "a2" and math.isnan(cat.find("a2").fp32_tflops)
    assert cat.find("Tesla T4").mem_bw_gbps == 320  # devices.csv fills what the file leaves out
    assert set(cat.missing_specs) == {"a2"}
    assert "gpus.a2: no spec figure memory_gb, mem_bw_gbps, fp32_tflops" in cat.spec_warning()


def test_a_partial_spec_takes_the_rest_from_devices_csv_else_leaves_it_missing():
    data = bench_dict()
    data["gpus"]["t4"]["spec"] = {"memory_gb": 15, "source": "nvidia-smi"}
    data["gpus"]["a2"]["spec"] = {"fp32_tflops": 4.5, "source": "datasheet"}
    cat = catalog_of(data)
    t4, a2 = cat.find("t4"), cat.find("a2")
    assert (t4.memory_gb, t4.mem_bw_gbps, t4.fp32_tflops) == (15, 320, 8.1)
    assert a2.fp32_tflops == 4.5 and math.isnan(a2.memory_gb)
    assert cat.missing_specs["a2"] == ("memory_gb", "mem_bw_gbps")


@pytest.mark.parametrize("name", ["rf", "xgb"])
def test_forests_train_and_predict_a_new_gpu_whose_specs_are_unknown(name):
    rows = training_rows(ThroughputTable(_synthetic_rows()))
    params = {"rf": {"n_estimators": 30}, "xgb": {"n_estimators": 50, "members": 2}}[name]
    est = make_estimator(name, catalog_of(), **params).fit([r for r in rows if r.gpu_type != "a2"])
    held = [r for r in rows if r.gpu_type == "a2"]
    pred = est.predict([query_of(r) for r in held])
    actual = np.array([r.steps_per_sec for r in held])
    assert np.isfinite(pred.log_steps_per_sec).all() and np.isfinite(pred.log_spread).all()
    assert np.mean(np.abs(pred.steps_per_sec - actual) / actual) < 0.1


def _synthetic_rows():
    from cpn.formats.throughput import ThroughputRow

    return [
        ThroughputRow(m, b, key, n, law(m, b, speed, n))
        for m, (_, batches) in MODELS.items()
        for b in batches
        for key, speed, _ in GPUS.values()
        for n in (1, 2, 4)
    ]


def test_a_gpu_key_may_be_any_spelling_of_the_label_but_only_one(tmp_path):
    data = bench_dict()
    data["gpus"]["NVIDIA-A100-SXM4-80GB"] = data["gpus"].pop("a100-sxm4-80gb")
    assert "a100-sxm4-80gb" in BenchmarkCatalog.load(write_bench(tmp_path / "b.yaml", data)).gpu_types()
    data["gpus"]["A100 <80GB>"] = data["gpus"]["NVIDIA-A100-SXM4-80GB"]
    with pytest.raises(
        ConfigError, match=r"b\.yaml: gpus: .*GPU key 'A100 <80GB>' is not a GPU product name"
    ):
        load_benchmarks(write_bench(tmp_path / "b.yaml", data))
    data["gpus"]["rtx-4090"] = data["gpus"].pop("A100 <80GB>")
    with pytest.raises(
        BenchmarkError, match=r"b\.yaml: gpus\.rtx4090 and gpus\.rtx-4090 name one GPU product"
    ):
        BenchmarkCatalog.load(write_bench(tmp_path / "b.yaml", data))


def test_an_unreadable_benchmarks_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_benchmarks(tmp_path)


# Evaluation on data that cannot support every split ------------------------------------------


def test_splits_the_data_cannot_support_are_skipped_with_the_reason(tmp_path):
    one_gpu = training_rows(
        ThroughputTable.load(
            write_table(
                tmp_path / "a.csv", table_lines({"NVIDIA H100 80GB HBM3": ("h100-80gb-hbm3", 7.0, None)})
            )
        )
    )
    report = bench(one_gpu, catalog_of(), ["baseline"])
    assert report["skipped_reasons"] == {
        "leave_gpu_out": "needs >= 2 GPU types, the data has 1 (h100-80gb-hbm3)"
    }
    assert "leave_gpu_out    (skipped: needs >= 2 GPU types" in format_report(report)

    three = training_rows(ThroughputTable.load(write_table(tmp_path / "b.csv", table_lines()[:3])))
    report = bench(three, catalog_of(), ["baseline"])
    assert report["splits"] == {} and report["train_s"]["baseline"] >= 0
    assert report["skipped_reasons"]["random"] == "needs >= 5 distinct configurations, the data has 3"
    assert report["skipped_reasons"]["leave_model_out"].startswith("needs >= 2 models, the data has 1")


def test_an_external_row_the_model_cannot_take_is_named_by_file_and_line(tmp_path):
    rows = training_rows(ThroughputTable.load(write_table(tmp_path / "a.csv")))
    test = write_table(tmp_path / "test.csv", ["ResNet-50,32,NVIDIA A2,1,5", "PPO,64,NVIDIA A2,1,20"])
    with pytest.raises(PredictorInputError, match=rf"{test}:3: model 'ppo' runs at a fixed batch"):
        bench(rows, catalog_of(), ["baseline"], test_rows=training_rows(ThroughputTable.load(test)))


def test_holdout_never_takes_a_model_measured_in_one_configuration_only():
    from cpn.formats.throughput import ThroughputRow

    rows = _synthetic_rows()
    once = ThroughputRow("NewNet", 16, rows[0].gpu_type, 1, 3.0)  # e.g. one completed job's run
    for seed in range(25):  # one seed in five would hold it out by chance without the rule
        train, held = holdout_split([*rows, once, once], seed=seed)
        assert train.count(once) == 2 and once not in held
        assert 0.15 < len(held) / (len(rows) + 2) < 0.25


def test_holdout_says_how_many_configurations_training_needs():
    rows = _synthetic_rows()[:2]
    with pytest.raises(PredictorInputError, match="2 distinct configurations .* needs at least 3"):
        holdout_split(rows)


# The command line --------------------------------------------------------------------------


def test_cpn_bench_predictor_on_gpu_types_and_spellings_the_repo_never_saw(tmp_path, capsys):
    """Six GPU types (one without specs) spelled as node labels do, a --test GPU type absent from --data."""
    data = write_table(tmp_path / "t.csv", [ln for ln in table_lines() if "H100" not in ln])
    test = write_table(tmp_path / "t2.csv", [ln for ln in table_lines() if "H100" in ln])
    out = tmp_path / "r.json"
    argv = ["bench", "predictor", "--data", str(data), "--test", str(test), "--benchmarks"]
    assert (
        _cli([*argv, str(write_bench(tmp_path / "b.yaml")), "--estimators", "baseline", "--json", str(out)])
        == 0
    )
    captured = capsys.readouterr()
    assert "warning:" in captured.err and "gpus.a2: no spec" in captured.err
    report = json.loads(out.read_text())
    assert set(report["splits"]["leave_gpu_out"]["baseline"]["per_gpu"]) == {
        "t4",
        "a2",
        "rtx4090",
        "a100-sxm4-80gb",
    }
    assert report["splits"]["external"]["baseline"]["mape"] < 0.01


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            [ln.rsplit(",", 1)[0] + ",0" for ln in table_lines()],
            "no usable rows (75 data rows: 75 with steps_",
        ),
        ([], "no usable rows (0 data rows"),
        (
            [*table_lines(), "PPO,,AMD Instinct MI250,1,3"],
            "unknown GPU type 'mi250' (1 row, first at {data}:77). "
            "{bench} scores only a100-sxm4-80gb, a2, h100-80gb-hbm3",
        ),
    ],
)
def test_cpn_bench_predictor_refuses_unusable_tables_naming_file_and_line(tmp_path, capsys, lines, message):
    data, b = write_table(tmp_path / "t.csv", lines), write_bench(tmp_path / "b.yaml")
    argv = ["bench", "predictor", "--data", str(data), "--benchmarks", str(b), "--estimators", "baseline"]
    assert _cli(argv) == 2
    err = capsys.readouterr().err
    assert message.format(data=data, bench=b) in err and "Traceback" not in err


def test_cpn_bench_predictor_checks_outputs_and_paths_before_working(tmp_path, capsys):
    data, b = write_table(tmp_path / "t.csv"), write_bench(tmp_path / "b.yaml")
    base = ["bench", "predictor", "--benchmarks", str(b), "--estimators", "baseline"]
    assert _cli([*base, "--data", str(data), "--json", str(tmp_path)]) == 2
    assert "--json" in capsys.readouterr().err
    assert _cli([*base, "--data", str(tmp_path)]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert _cli([*base, "--data", str(data), "--estimators", "rf,forest"]) == 2
    assert "unknown 'forest'; known: rf, xgb, baseline" in capsys.readouterr().err


def test_cpn_predictor_ingest_makes_folders_and_refuses_binary_logs(tmp_path, capsys):
    line = (
        'CPN_BENCH {{"workload": "{w}", "score": 800, "unit": "u/s", "method": "m", '
        '"gpu_product": "NVIDIA GeForce RTX 5090", "node": "n1"}}'
    )
    log = tmp_path / "n1.log"
    log.write_text("\n".join(line.format(w=w) for w in ("resnet50", "llama3")))
    out = tmp_path / "new" / "dir" / "b.yaml"
    assert _cli(["predictor", "ingest", str(log), "--out", str(out)]) == 0
    assert set(load_benchmarks(out).gpus) == {"NVIDIA GeForce RTX 5090"}  # as the job reported it
    assert "gpus.rtx5090: no spec" in capsys.readouterr().err  # a warning: the file is usable as it is
    (tmp_path / "bin.log").write_bytes(b"\xff\xfe\x00")
    assert _cli(["predictor", "ingest", str(tmp_path / "bin.log"), "--out", str(out)]) == 2
    assert "bin.log: not a text log" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("epochs", "size", "message"),
    [(-1, 10.0, "`epoch` a positive whole number"), (2, math.inf, "`data_size` a positive number of GB")],
)
def test_steps_from_epochs_refuse_values_that_give_negative_or_infinite_runtimes(epochs, size, message):
    data = bench_dict() | {"samples_per_gb": {"ResNet-50": 1000}}
    predictor = fit_predictor(_synthetic_rows(), catalog_of(data), "baseline", calibrate=False)
    job = JobSpec(job_id="j", model="ResNet-50", batch_size=32, epochs=epochs, data_size_gb=size)
    with pytest.raises(PredictorInputError, match=message):
        predictor.estimate(job, "t4")


def test_the_shipped_synthetic_example_is_usable_as_documented():
    """examples/predictor: every GPU type of the table is in its benchmarks file."""
    folder = REPO_ROOT / "examples" / "predictor"
    table = ThroughputTable.load(folder / "synthetic.csv")
    catalog = BenchmarkCatalog.load(folder / "synthetic-benchmarks.yaml")
    assert len(table.gpu_types()) == 6 and set(table.gpu_types()) == set(catalog.gpu_types())
