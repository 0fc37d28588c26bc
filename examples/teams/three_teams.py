"""Writes three-teams.csv: one team submits 1,000 jobs at once, two others arrive over the following hours.

Team `bulk` queues `--bulk` (1,000) one-GPU ResNet-18 jobs at t=0. Team `late-a` arrives at hour 1 and
`late-b` at hour 2 (`--first-h`, `--stagger-h`); each queues a burst of `--burst` (36) jobs at its arrival,
enough to want its third of the 108 cards of examples/clusters/gavel-36x3.yaml at once, then one job every
`--gap-s` (120 s) for `--hours` (4) hours, so that its queue stays substantial while the bulk team's backlog
lasts. Steps are drawn from a seeded RNG (`--seed`, 0) so that a job runs about 0.5-2 h on a K80 (ResNet-18,
batch 32, Gavel's table: 7.2 steps/s). How often a team checkpoints is in teams.yaml (a team default), not
in the trace. Run from the repository root: `python examples/teams/three_teams.py` (the checked-in CSV is
its output with the defaults).
"""

import argparse
import csv
import random
from pathlib import Path

K80_STEPS_PER_S = 7.18


def rows(
    seed: int = 0,
    bulk: int = 1000,
    burst: int = 36,
    gap_s: float = 120.0,
    hours: float = 4.0,
    first_h: float = 1.0,
    stagger_h: float = 1.0,
) -> list[dict]:
    """The trace's rows, sorted by arrival (module doc for the parameters)."""
    rng = random.Random(seed)
    out = []

    def job(ns: str, i: int, arrival: float) -> dict:
        steps = int(rng.uniform(0.5, 2.0) * 3600 * K80_STEPS_PER_S)
        return {
            "job_id": f"j{i:04d}",
            "arrival_s": f"{arrival:g}",
            "model": "ResNet-18",
            "batch_size": 32,
            "num_gpus": 1,
            "total_steps": steps,
            "namespace": ns,
        }

    out += [job("bulk", i, 0.0) for i in range(bulk)]
    for k, ns in enumerate(("late-a", "late-b")):
        start = 3600.0 * (first_h + k * stagger_h)
        arrivals = [start] * burst + [start + gap_s * (i + 1) for i in range(int(hours * 3600 / gap_s))]
        out += [job(ns, i, t) for i, t in enumerate(arrivals)]
    return sorted(out, key=lambda r: float(r["arrival_s"]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bulk", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=36)
    parser.add_argument("--gap-s", type=float, default=120.0)
    parser.add_argument("--hours", type=float, default=4.0)
    parser.add_argument("--first-h", type=float, default=1.0)
    parser.add_argument("--stagger-h", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("three-teams.csv"))
    args = parser.parse_args()
    data = rows(args.seed, args.bulk, args.burst, args.gap_s, args.hours, args.first_h, args.stagger_h)
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(data[0]))
        writer.writeheader()
        writer.writerows(data)
    print(f"wrote {len(data)} jobs to {args.out}")
