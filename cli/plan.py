"""`cpn plan`: a dry run, the scheduling round without an executor, submitting nothing.

It opens the service `cpn run` builds over the job store (`--store`, else this cpn home's; an empty one if
none was made yet) read-only, on the config folder's clusters, policy and teams, the registered champion's
estimates unless `--estimates` says otherwise (cpn.bootstrap.open_dry_run), and takes one decision on the
store's queue with the jobs of the given manifests queued after it, as if submitted now: running jobs,
saved progress, copies in flight, teams and whole cards for jobs to explore count as in the round itself,
and the `schedule-round` flow's dry run on the same store decides alike. Clusters with a kube_context are
read live through their kubeconfig (read-only calls: nodes and pods); simulated ones as the store's
journal left them (all cards free without one).

For each placed job, the objects cpn would submit, validated as before a real submission, are written to
`OUTDIR/<cluster>/<namespace>-<name>.yaml`; `OUTDIR/plan.json` says per queued job where it goes (cluster,
nodes, GPUs, GPU type, predicted runtime, transfer seconds) or why it would wait (and when it is predicted
to start) or is rejected, and which running jobs the round would stop for it.

Exit status: 0 written, every job placed or waiting; 1 written, but a job is rejected (it would be refused
in its first round: the line and plan.json say why) or an object failed validation, or a cluster could not
be read; 2 invalid input (a manifest, the config, or a manifest's job stored with other content).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from cli.policy_options import add_policy_arguments, scheduler_policy
from config.runtime import job_store, runtime_settings
from config.settings import DEMO_DIR, ConfigError, load_profile
from cpn.bootstrap import open_dry_run, service_teams
from cpn.decisions import Decision, Snapshot
from cpn.dry_run import PlannedJob, planned_jobs
from cpn.formats.throughput import GAVEL_ISOLATED, ThroughputTable
from cpn.intake import IntakeError, parse_manifests
from cpn.store import StoreError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `plan` sub-command."""
    p = sub.add_parser(
        "plan",
        help="dry run: what the next round would do with the queue and the given manifests (submits nothing)",
        description=(
            "Decide as the next scheduling round would on the job store's queue, with the jobs of the given "
            "manifests queued after it, on the configured clusters as they are now; write each object cpn "
            "would submit to OUTDIR/<cluster>/<namespace>-<name>.yaml and a summary to OUTDIR/plan.json. "
            "Nothing is submitted or stored."
        ),
        epilog="Exit status: 0 written, every job placed or waiting; 1 a job rejected, an object invalid or "
        "a cluster unreadable; 2 invalid input.",
    )
    p.add_argument("--config", default=str(DEMO_DIR), help="config folder (default: the built-in demo)")
    p.add_argument("--out", required=True, help="folder to write the plan to")
    p.add_argument(
        "--store",
        default=None,
        help="job store whose queue is planned, read only (default: this cpn home's, as `cpn run` uses; "
        "an empty one if none was made yet)",
    )
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
    p.add_argument(
        "files", nargs="*", metavar="FILE", help="manifest file(s) of jobs to plan as if submitted now"
    )
    p.set_defaults(func=run_plan)


def _progress(message: str) -> None:
    print(f"cpn plan: {message}", file=sys.stderr, flush=True)


def run_plan(args: argparse.Namespace) -> int:
    """Plan the queue and the manifests and write what would be submitted; exit 2 on bad input, 1 when a
    cluster cannot be read. The kubernetes client is imported here, not when the command line is built."""
    from cpn.adapters.kubernetes import ApiError, KubernetesBinder, validate_object
    from models.sources import estimate_source

    try:
        profile = load_profile(args.config)
        policy = scheduler_policy(args, profile.policy)
        teams = service_teams(args.config, profile.clusters)
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
        service = open_dry_run(
            config, job_store(args.store), policy, table, estimator=source, teams=teams, proposed=jobs
        )
    except ApiError as exc:
        print(f"cpn plan: a cluster could not be read: {exc}", file=sys.stderr)
        return 1
    except (StoreError, ValueError) as exc:
        print(f"cpn plan: {exc}", file=sys.stderr)
        return 2
    try:
        snapshot = service.scheduler.snapshot()
        decision = service.scheduler.decide(snapshot)
    except ApiError as exc:
        print(f"cpn plan: a cluster could not be read: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a job stored with other content, a GPU type the predictor cannot estimate
        print(f"cpn plan: {exc}", file=sys.stderr)
        return 2
    finally:
        service.close()
    by_name = {(s.node.cluster, s.node.name): s.node for s in snapshot.nodes}

    def lookup(cluster: str, name: str):
        return by_name[(cluster, name)]

    binders = {
        c.name: KubernetesBinder(
            config.label_domain, lookup, hami=c.hami, hami_resource_pool=c.hami_resource_pool
        )
        for c in config.clusters
    }
    planned = planned_jobs(
        snapshot,
        decision,
        binders=binders,
        validate=lambda cluster, obj: validate_object(obj, config.cluster(cluster).kubernetes_version),
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(_summary(out, snapshot, decision, planned), indent=2) + "\n")
    for p in planned:
        where = f"{p.cluster} {', '.join(f'{n}x{c}' for n, c in p.nodes)} ({p.gpu_type})" if p.cluster else ""
        if p.explore:
            where += f" explore: estimate +-{p.uncertainty:.0%}, learnt from this run"
        print(f"{p.job_id}: {p.outcome} {where or p.code} {p.reason}".rstrip())
    for stop in decision.preemptions:
        print(f"{stop.job_id}: stopped for {stop.for_job} ({stop.reason})")
    print(f"wrote {out / 'plan.json'}")
    return 1 if any(p.outcome in ("invalid", "rejected") for p in planned) else 0


def _summary(out: Path, snapshot: Snapshot, decision: Decision, planned: list[PlannedJob]) -> dict:
    """plan.json: the scheduler's time, every queued job's outcome (its objects written beside), and the
    running jobs the round would stop."""
    return {
        "now": snapshot.now,
        "jobs": [_write(out, p) for p in planned],
        "preemptions": [
            {"job_id": s.job_id, "for_job": s.for_job, "reason": s.reason, "lost_gpu_hours": s.lost_gpu_hours}
            for s in decision.preemptions
        ],
    }


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
    if p.predicted_start is not None:
        entry["predicted_start"] = p.predicted_start
    if p.reason:
        entry["reason"] = p.reason
    if p.objects:
        meta = p.objects[0]["metadata"]
        path = out / p.cluster / f"{meta['namespace']}-{meta['name']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump_all(list(p.objects), sort_keys=False))
        entry["file"] = str(path.relative_to(out))
    return entry
