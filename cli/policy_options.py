"""`--policy` and `--set KEY=VALUE`: one way for every command to say how the scheduler decides.

The config folder's `policy.yaml` (config.policies.SchedulerPolicy) gives the policy and its settings;
`--policy` picks another policy with its own defaults (the file's settings are for the file's policy) and
each `--set` overrides one setting, `cpu_threshold` included, exactly as `cpn bench --set` does. `cpn run`,
`cpn up`, `cpn plan` and `cpn demo` all read them here, so a setting the benchmark reached can be run as
the service.
"""

from __future__ import annotations

import argparse

from config.policies import POLICY_NAMES, SchedulerPolicy, parse_overrides


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--policy` and `--set` to `parser`."""
    parser.add_argument(
        "--policy",
        choices=POLICY_NAMES,
        help="scheduling policy with its own defaults (default: the config folder's policy.yaml, with its "
        "settings); add settings with --set",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting of the policy.yaml (repeatable): e.g. --set preemption=true "
        "--set rebalance=true, --set time_limit_s=2 (milp), --set cpu_threshold=0.8 (docs/optimiser.md)",
    )


def policy_arguments(args: argparse.Namespace) -> list[str]:
    """The `--policy`/`--set` arguments of `args` again, to pass on to a command this one starts."""
    out = ["--policy", args.policy] if args.policy else []
    for pair in args.set:
        out += ["--set", pair]
    return out


def scheduler_policy(args: argparse.Namespace, configured: SchedulerPolicy) -> SchedulerPolicy:
    """The config folder's policy (`configured`) with `--policy` and `--set` applied: ValueError
    (config.policies.PolicySettingsError) naming the setting at fault."""
    return configured.overridden(args.policy, parse_overrides(args.set))
