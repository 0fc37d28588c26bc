"""`cpn plan`: a dry run on the configured clusters' current inventory, submitting nothing.

For the given manifests, one scheduling decision (the config's policy, the registered champion's
estimates unless `--estimates` says otherwise, transfer times from the WAN links), and for each placed
job the objects cpn would
submit, validated as before a real submission, written to `OUTDIR/<cluster>/<namespace>-<name>.yaml`;
`OUTDIR/plan.json` says per job where it goes (cluster, nodes, GPUs, GPU type, predicted runtime,
transfer seconds) or why it would wait or is rejected. Clusters with a kube_context are read live
through their kubeconfig (read-only calls: nodes and pods); the others as the config describes them,
all cards free.

Exit status: 0 written, every job placed or waiting; 1 written, but a job is rejected (it would be refused
in its first round: the line and plan.json say why) or an object failed validation, or a cluster could not
be read; 2 invalid input (a manifest or the config).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from cli.policy_options import add_policy_arguments, scheduler_policy
from config.runtime import runtime_settings
from config.settings import DEMO_DIR, ClustersConfig, ConfigError, load_profile
from cpn.engine.plan import PlannedJob, plan
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.intake import IntakeError, parse_manifests
from cpn.inventory import NodeState, nodes_from_config
from cpn.policies import make_policy
from cpn.transfer import TransferTimes


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `plan` sub-command."""
    p = sub.add_parser(
        "plan",
        help="dry run: where manifests would go and the objects cpn would submit (submits nothing)",
        description=(
            "Decide placements for the jobs of the given manifests on the configured clusters as they are "
            "now, and write each object cpn would submit to OUTDIR/<cluster>/<namespace>-<name>.yaml and "
            "a summary to OUTDIR/plan.json. Nothing is submitted."
        ),
        epilog="Exit status: 0 written, every job placed or waiting; 1 a job rejected, an object invalid or "
        "a cluster unreadable; 2 invalid input.",
    )
    p.add_argument("--config", default=str(DEMO_DIR), help="config folder (default: the built-in demo)")
    p.add_argument("--out", required=True, help="folder to write the plan to")
    add_policy_arguments(p)
    p.add_argument(
        "--estimates",
        default="champion",
        help="runtime estimates: champion (the registered model, trained on --throughputs first if there "
        "is none), predictor, or oracle or noisy:SIGMA, simulated clusters only (default: %(default)s)",
    )
    p.add_argument(
        "--throughputs",
        default=str(GAVEL_ISOLATED),
        help="throughput table the estimates are trained on, or read from (oracle) (default: Gavel's)",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="manifest file(s)")
    p.set_defaults(func=run_plan)


def _progress(message: str) -> None:
    print(f"cpn plan: {message}", file=sys.stderr, flush=True)


def _inventory(config: ClustersConfig) -> tuple[NodeState, ...]:
    """Live nodes of the real clusters; the simulated ones as configured, all cards free."""
    from cpn.adapters.kubernetes import gateway_for

    configured = nodes_from_config(config)
    states: list[NodeState] = []
    for cluster in config.clusters:
        if cluster.kube_context:
            states += gateway_for(cluster, config.label_domain, config.gpu_aliases).inventory()
        else:
            states += [NodeState(n, n.gpu_count) for n in configured if n.cluster == cluster.name]
    return tuple(states)


def run_plan(args: argparse.Namespace) -> int:
    """Plan the manifests and write what would be submitted; exit 2 on bad input, 1 when a cluster
    cannot be read. The kubernetes client is imported here, not when the command line is built."""
    from cpn.adapters.kubernetes import ApiError, KubernetesBinder, validate_object
    from models.sources import estimate_source

    try:
        profile = load_profile(args.config)
        policy = scheduler_policy(args, profile.policy)
        jobs: list = []
        for name in args.files:
            jobs += parse_manifests(Path(name).read_text(), name)
        table = ThroughputTable.load(args.throughputs)
        source = estimate_source(
            args.estimates,
            table,
            benchmarks=runtime_settings().predictor_benchmarks,
            clusters=profile.clusters,
            progress=_progress,
        )
    except (ConfigError, IntakeError, OSError, ValueError) as exc:
        print(f"cpn plan: {exc}", file=sys.stderr)
        return 2
    config = profile.clusters
    try:
        nodes = _inventory(config)
    except ApiError as exc:
        print(f"cpn plan: a cluster could not be read: {exc}", file=sys.stderr)
        return 1
    by_name = {(s.node.cluster, s.node.name): s.node for s in nodes}

    def lookup(cluster: str, name: str):
        return by_name[(cluster, name)]

    binders = {
        c.name: KubernetesBinder(
            config.label_domain, lookup, hami=c.hami, hami_resource_pool=c.hami_resource_pool
        )
        for c in config.clusters
    }
    gpu_types = tuple(sorted({s.node.gpu_type for s in nodes}))
    try:
        # a service runs until deleted: it has no runtime to estimate, and is placed without one
        estimates = source.estimates(tuple(j for j in jobs if not j.is_service), gpu_types)
    except ValueError as exc:  # a GPU type or job the predictor cannot estimate
        print(f"cpn plan: {exc}", file=sys.stderr)
        return 2
    transfers = TransferTimes(config)
    planned = plan(
        tuple(jobs),
        nodes,
        make_policy(policy.settings),
        binders=binders,
        validate=lambda cluster, obj: validate_object(obj, config.cluster(cluster).kubernetes_version),
        estimates=estimates,
        transfer_s={job.job_id: transfers.row(job, job.source_cluster) for job in jobs},
        cpu_threshold=policy.cpu_threshold,
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = [_write(out, p) for p in planned]
    (out / "plan.json").write_text(json.dumps({"jobs": summary}, indent=2) + "\n")
    for p in planned:
        where = f"{p.cluster} {', '.join(f'{n}x{c}' for n, c in p.nodes)} ({p.gpu_type})" if p.cluster else ""
        if p.explore:
            where += f" explore: estimate +-{p.uncertainty:.0%}, learnt from this run"
        print(f"{p.job_id}: {p.outcome} {where or p.code} {p.reason}".rstrip())
    print(f"wrote {out / 'plan.json'}")
    return 1 if any(p.outcome in ("invalid", "rejected") for p in planned) else 0


def _write(out: Path, p: PlannedJob) -> dict:
    entry: dict = {"job_id": p.job_id, "outcome": p.outcome}
    if p.cluster is not None:
        entry.update(
            cluster=p.cluster,
            nodes=[{"node": n, "gpus": c} for n, c in p.nodes],
            gpus=p.gpus,
            gpu_type=p.gpu_type,
            predicted_runtime_s=p.predicted_runtime_s,
            uncertainty=p.uncertainty,
            explore=p.explore,
            transfer_s=p.transfer_s,
        )
    if p.code:
        entry["waiting"] = p.code
    if p.reason:
        entry["reason"] = p.reason
    if p.objects:
        meta = p.objects[0]["metadata"]
        path = out / p.cluster / f"{meta['namespace']}-{meta['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump_all(list(p.objects), sort_keys=False))
        entry["file"] = str(path.relative_to(out))
    return entry
