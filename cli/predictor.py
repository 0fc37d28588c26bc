"""`cpn predictor train|predict|ingest` and `cpn bench predictor` (see docs/predictor.md).

The predictor lives in `models/` (scikit-learn, XGBoost, MLflow); it is imported only
when one of these commands runs, so `cpn --help` stays fast and the domain core does
not load MLflow.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

from config.benchmarks import BENCHMARKS_YAML
from config.runtime import hide_password
from config.settings import ConfigError
from config.tracking import DEFAULT_TRACKING_URI, EXPERIMENT, REGISTERED_MODEL
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputFormatError, ThroughputTable


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `predictor` command with its `train`, `predict` and `ingest` actions."""
    p = sub.add_parser(
        "predictor",
        help="train, query and feed the runtime/memory predictor",
        description="Train the predictor into MLflow, ask the champion for estimates, or ingest "
        "benchmark job logs into a benchmarks file.",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    train = actions.add_parser(
        "train",
        help="train RF and XGBoost, log both to MLflow, register, move the champion alias if better",
        description="Each estimator becomes one MLflow run (parameters, split metrics, plots, model) and "
        "a registered version; the champion alias moves only if the new version beats it on the same "
        "held-out configurations.",
    )
    _data_args(train)
    _mlflow_args(train)
    train.add_argument("--experiment", default=EXPERIMENT, help="MLflow experiment (default: %(default)s)")
    train.add_argument(
        "--estimators", default="rf,xgb", help="comma-separated: rf, xgb, baseline (default: %(default)s)"
    )
    train.add_argument("--seed", type=int, default=0, help="seed of folds, hold-out and models (default: 0)")
    train.add_argument(
        "--store",
        help="job store whose completed jobs to train on too (default: this cpn home's, if it exists); "
        "the runs record the latest completion, so retraining counts only later ones as new",
    )
    train.add_argument(
        "--config-dir", help="cluster config naming the store's nodes' GPU types (default: the demo's)"
    )
    train.set_defaults(func=run_train)

    predict = actions.add_parser(
        "predict",
        help="estimate a job's runtime on each GPU type with the champion model",
        description="Loads models:/NAME@champion and prints one estimate per GPU type as JSON.",
    )
    predict.add_argument("--model", required=True, help="model name, e.g. ResNet-50")
    predict.add_argument("--batch-size", type=int, help="per-GPU batch size (omit for fixed-batch models)")
    predict.add_argument("--gpus", type=int, default=1, help="GPU count (default: 1)")
    predict.add_argument(
        "--gpu-type", action="append", help="GPU type (repeatable; default: every known type)"
    )
    predict.add_argument("--total-steps", type=int, help="training steps")
    predict.add_argument("--epochs", type=int, default=1, help="epochs, with --data-size-gb (default: 1)")
    predict.add_argument("--data-size-gb", type=float, default=0.0, help="dataset size in GB")
    _mlflow_args(predict)
    predict.set_defaults(func=run_predict)

    ingest = actions.add_parser(
        "ingest",
        help="turn benchmark job logs into a benchmarks YAML (per-node and per-product scores)",
        description="Reads CPN_BENCH lines from logs of examples/benchmark-job.yaml and writes a "
        "benchmarks file; with --benchmarks, folds them into that file's scores.",
    )
    ingest.add_argument("logs", nargs="+", help="log files of benchmark jobs")
    ingest.add_argument("--benchmarks", help="benchmarks YAML to extend (default: start a new one)")
    ingest.add_argument("--out", required=True, help="benchmarks YAML to write")
    ingest.set_defaults(func=run_ingest)


def register_bench(bench_sub: argparse._SubParsersAction) -> None:
    """Add `bench predictor` to the `cpn bench` command's sub-parsers."""
    p = bench_sub.add_parser(
        "predictor",
        help="evaluate RF, XGBoost and the analytical baseline on three splits",
        description="Cross-validates every estimator on random held-out configurations, "
        "leave-one-GPU-type-out and leave-one-model-out (and on --test as split `external`), "
        "prints MAPE, median APE, R^2 of log steps/s and MAPE per GPU type, training time and "
        "the time to predict 1,000 (job, GPU type) pairs, and the issue's targets.",
    )
    _data_args(p)
    p.add_argument("--test", help="second throughput CSV: train on all of --data, score on it as `external`")
    p.add_argument("--json", dest="json_out", help="also write the report as JSON to this file")
    p.add_argument(
        "--estimators", default="rf,xgb,baseline", help="comma-separated estimators (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the folds and models (default: 0)")
    p.set_defaults(func=run_bench)


def _data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data",
        help="throughput CSV (model,batch_size,gpu_product,num_gpus,steps_per_sec); "
        "default: Gavel's measured table",
    )
    p.add_argument(
        "--benchmarks", help="benchmarks YAML with the GPU types (default: config/benchmarks.yaml)"
    )


def _mlflow_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tracking-uri", default=DEFAULT_TRACKING_URI, help="MLflow tracking URI (default: %(default)s)"
    )
    p.add_argument(
        "--model-name", default=REGISTERED_MODEL, help="registered model name (default: %(default)s)"
    )


def _load_inputs(args: argparse.Namespace, command: str):
    """(training rows, catalog, data path): the table checked against the catalog, warnings on stderr."""
    from models.benchmarks import BenchmarkCatalog

    catalog = BenchmarkCatalog.load(args.benchmarks or BENCHMARKS_YAML)
    if (warning := catalog.spec_warning()) is not None:
        print(f"cpn {command}: warning: {warning}", file=sys.stderr)
    data = args.data or str(GAVEL_ISOLATED)
    return _usable_rows(data, catalog, "--data"), catalog, data


def _usable_rows(path: str, catalog, option: str) -> list:
    """Rows of the table at `path` the predictor learns from or is scored on, checked against `catalog`.

    PredictorInputError (naming the file, the first line of each problem and the fix) when no row is
    usable or a GPU type is not in the benchmarks file.
    """
    from models.features import PredictorInputError, training_rows

    table = ThroughputTable.load(path)
    rows = training_rows(table)
    zero = sum(r.steps_per_sec == 0 for r in table)
    spread = sum(not r.consolidated for r in table)
    if not rows:
        raise PredictorInputError(
            f"{option} {path}: no usable rows ({len(table.rows)} data rows: {zero} with steps_per_sec 0, "
            f"{spread} unconsolidated); the predictor needs rows with steps_per_sec > 0 measured on one node"
        )
    if len(rows) < len(table.rows):
        print(
            f"note: {option} {path}: using {len(rows)} of {len(table.rows)} rows; left out: {zero} with "
            f"steps_per_sec 0 (measured not to run), {spread} unconsolidated (cpn places a job on one node)",
            file=sys.stderr,
        )
    unknown: dict[str, list] = {}
    for r in rows:
        if catalog.find(r.gpu_type) is None:
            unknown.setdefault(r.gpu_type, []).append(r)
    if unknown:
        listed = "; ".join(
            f"unknown GPU type {gpu!r} ({len(rs)} row{'s' * (len(rs) != 1)}, first at {rs[0].source or path})"
            for gpu, rs in unknown.items()
        )
        raise PredictorInputError(
            f"{option} {path}: {listed}. {catalog.source} scores only {', '.join(catalog.gpu_types())}; "
            f"add each missing type under `gpus:` with scores for {', '.join(catalog.workloads)} (and "
            "`spec:` if known), or remove its rows"
        )
    return rows


def _fail(command: str, exc: Exception) -> int:
    print(f"cpn {command}: {exc}", file=sys.stderr)
    return 2


def _input_errors() -> tuple[type[Exception], ...]:
    """Errors that mean 'your input is unusable' (exit 2 with the message), not a bug."""
    from models.benchmarks import BenchmarkError
    from models.features import PredictorInputError

    return ConfigError, ThroughputFormatError, BenchmarkError, PredictorInputError


def _check_estimators(names: list[str]) -> None:
    from models.estimators import ESTIMATORS
    from models.features import PredictorInputError

    unknown = [n for n in names if n not in ESTIMATORS]
    if unknown:
        raise PredictorInputError(
            f"--estimators: unknown {', '.join(map(repr, unknown))}; known: {', '.join(ESTIMATORS)}"
        )


def _check_writable(path: str, option: str) -> None:
    """Refuse an output path that cannot be written before any work is done."""
    target = Path(path)
    if target.is_dir():
        raise ConfigError(f"{option} {path}: is a folder; give a file name")
    parent = next((p for p in target.absolute().parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise ConfigError(f"{option} {path}: {parent} is a file, not a folder")


def _write(path: str, text: str, command: str, option: str) -> int:
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    except OSError as exc:
        return _fail(command, ConfigError(f"{option} {path}: cannot write: {exc.strerror or exc}"))
    return 0


def run_bench(args: argparse.Namespace) -> int:
    """`cpn bench predictor`: print the evaluation table; exit 2 on unusable inputs."""
    from models.evaluation import bench, format_report

    command = "bench predictor"
    try:
        names = _names(args.estimators)
        _check_estimators(names)
        if args.json_out:
            _check_writable(args.json_out, "--json")
        rows, catalog, _ = _load_inputs(args, command)
        test = _usable_rows(args.test, catalog, "--test") if args.test else None
        step = itertools.count(1)

        def progress(msg: str) -> None:
            print(f"cpn {command}: [{next(step)}] {msg} ...", file=sys.stderr, flush=True)

        report = bench(rows, catalog, names, test_rows=test, seed=args.seed, progress=progress)
    except _input_errors() as exc:
        return _fail(command, exc)
    print(format_report(report))
    if args.json_out:
        if _write(args.json_out, json.dumps(report, indent=2) + "\n", command, "--json"):
            return 2
        print(f"\nwrote {args.json_out}")
    return 0


def _completions(args: argparse.Namespace) -> list:
    """Completed jobs of the job store (`--store`, else this home's if it exists), as CompletedRuns."""
    from config.runtime import job_store, store_exists
    from config.settings import DEMO_DIR, load_profile
    from cpn.engine.feedback import completed_runs
    from cpn.inventory import nodes_from_config
    from cpn.store import JobStore

    path = job_store(args.store)
    if not store_exists(path):
        if args.store:
            raise ConfigError(f"--store {args.store}: no such job store")
        return []
    nodes = nodes_from_config(load_profile(args.config_dir or DEMO_DIR).clusters)
    with JobStore(path) as store:
        return completed_runs(store, nodes)


def run_train(args: argparse.Namespace) -> int:
    """`cpn predictor train`: one MLflow run per estimator, tagged with one training id; prints the champion
    decisions.

    Trains on the table plus the job store's completed jobs, and records the latest completion on the runs
    (`cpn.completions_until`), as the retraining flow does, so that the next retraining counts only jobs
    completed after it as new.
    """
    from models.retrain import retrain

    try:
        names = _names(args.estimators)
        _check_estimators(names)
        rows, catalog, data = _load_inputs(args, "predictor train")
        runs = _completions(args)
        if runs:
            print(f"training on {Path(data).name} plus {len(runs)} completed jobs", file=sys.stderr)
        results = retrain(
            runs,
            rows,
            catalog,
            tracking_uri=args.tracking_uri,
            data_source=Path(data).name,
            estimators=names,
            experiment=args.experiment,
            model_name=args.model_name,
            seed=args.seed,
            session="train",
        )
    except _input_errors() as exc:
        return _fail("predictor train", exc)
    for r in results:
        version = f"version {r.version}" if r.version else "no version registered"
        print(f"{r.estimator:<9} run {r.run_id} {version}: {r.reason}")
    shown = hide_password(args.tracking_uri)
    print(f"tracking store: {shown}  (mlflow ui --backend-store-uri {shown})")
    return 0


def run_predict(args: argparse.Namespace) -> int:
    """`cpn predictor predict`: the champion's estimate on each GPU type, as JSON."""
    from cpn.jobs import JobSpec
    from models.registry import PredictorUnavailable, load_champion

    job = JobSpec(
        job_id="cli",
        model=args.model,
        batch_size=args.batch_size,
        num_gpus=args.gpus,
        epochs=args.epochs,
        data_size_gb=args.data_size_gb,
        total_steps=args.total_steps,
    )
    try:
        predictor = load_champion(args.tracking_uri, args.model_name)
        gpu_types = args.gpu_type or list(predictor.catalog.gpu_types())
        estimates = predictor.estimate_many([job], gpu_types)["cli"]
    except (PredictorUnavailable, *_input_errors()) as exc:
        return _fail("predictor predict", exc)
    print(json.dumps({gpu: est.__dict__ for gpu, est in estimates.items()}, indent=2))
    return 0


def run_ingest(args: argparse.Namespace) -> int:
    """`cpn predictor ingest`: parse benchmark logs, merge, validate, write a benchmarks YAML."""
    from config.benchmarks import dump_benchmarks, load_benchmarks
    from models.benchmarks import BenchmarkCatalog, merge_results, parse_benchmark_log

    command = "predictor ingest"
    try:
        _check_writable(args.out, "--out")
        results = []
        for log in args.logs:
            try:
                text = Path(log).read_text()
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{log}: not a text log (byte {exc.start} is not UTF-8)") from None
            except OSError as exc:
                raise ConfigError(f"{log}: cannot read: {exc.strerror}") from None
            results += parse_benchmark_log(text, source=log)
        merged = merge_results(results, load_benchmarks(args.benchmarks) if args.benchmarks else None)
        catalog = BenchmarkCatalog(merged, source=args.out)
    except _input_errors() as exc:
        return _fail(command, exc)
    try:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        dump_benchmarks(merged, args.out)
    except OSError as exc:
        return _fail(command, ConfigError(f"--out {args.out}: cannot write: {exc.strerror or exc}"))
    nodes = sorted({r.node for r in results})
    print(f"wrote {args.out}: {len(results)} results from {len(nodes)} node(s): {', '.join(nodes)}")
    if (warning := catalog.spec_warning()) is not None:
        print(f"cpn {command}: warning: {warning}", file=sys.stderr)
    return 0


def _names(csv_names: str) -> list[str]:
    names = [n.strip() for n in csv_names.split(",") if n.strip()]
    if not names:
        raise ConfigError("--estimators names no estimator")
    return names
