"""Writes three-teams.csv: one team submits 1,000 jobs at once, two others arrive over the following hours.

Team `bulk` queues `--bulk` (1,000) one-GPU ResNet-18 jobs at t=0, each `--bulk-h` (2-6) hours long on a
K80 (ResNet-18, batch 32, Gavel's table: 7.2 steps/s; a P100 or V100 runs it 4-5 times faster), enough to
hold every card of examples/clusters/gavel-36x3.yaml for many hours. Team `late-a` arrives at hour 1 and
`late-b` at hour 2 (`--first-h`, `--stagger-h`); each queues a burst of `--burst` (36) jobs at its arrival,
its third of the 108 cards at once, then one job every `--gap-s` (80 s) for `--hours` (4) hours, each
`--late-h` (1.5-4.5) hours on a K80: a third of the cards (12 of each type) runs about 40 such jobs an
hour and 45 arrive, so that each late team wants its share while it submits, and its queue stays short
(its jobs wait well under an hour once it holds its share). Durations are drawn from a seeded RNG
(`--seed`, 0). How often a team checkpoints is in teams.yaml (a team default), not in the trace. Run from
the repository root: `python examples/teams/three_teams.py` (the checked-in CSV is its output with the
defaults).
"""

import argparse
import csv
import random
from pathlib import Path

K80_STEPS_PER_S = 7.18


def rows(
    seed: int = 0,
    bulk: int = 1000,
    bulk_h: tuple[float, float] = (2.0, 6.0),
    burst: int = 36,
    gap_s: float = 80.0,
    hours: float = 4.0,
    late_h: tuple[float, float] = (1.5, 4.5),
    first_h: float = 1.0,
    stagger_h: float = 1.0,
) -> list[dict]:
    """The trace's rows, sorted by arrival (module doc for the parameters)."""
    rng = random.Random(seed)
    out = []

    def job(ns: str, i: int, arrival: float, k80_h: tuple[float, float]) -> dict:
        return {
            "job_id": f"j{i:04d}",
            "arrival_s": f"{arrival:g}",
            "model": "ResNet-18",
            "batch_size": 32,
            "num_gpus": 1,
            "total_steps": int(rng.uniform(*k80_h) * 3600 * K80_STEPS_PER_S),
            "namespace": ns,
        }

    out += [job("bulk", i, 0.0, bulk_h) for i in range(bulk)]
    for k, ns in enumerate(("late-a", "late-b")):
        start = 3600.0 * (first_h + k * stagger_h)
        arrivals = [start] * burst + [start + gap_s * (i + 1) for i in range(int(hours * 3600 / gap_s))]
        out += [job(ns, i, t, late_h) for i, t in enumerate(arrivals)]
    return sorted(out, key=lambda r: float(r["arrival_s"]))


def _hours(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    return float(low), float(high or low)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bulk", type=int, default=1000)
    parser.add_argument("--bulk-h", type=_hours, default=(2.0, 6.0), help="LOW,HIGH hours on a K80")
    parser.add_argument("--burst", type=int, default=36)
    parser.add_argument("--gap-s", type=float, default=80.0)
    parser.add_argument("--hours", type=float, default=4.0)
    parser.add_argument("--late-h", type=_hours, default=(1.5, 4.5), help="LOW,HIGH hours on a K80")
    parser.add_argument("--first-h", type=float, default=1.0)
    parser.add_argument("--stagger-h", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("three-teams.csv"))
    args = parser.parse_args()
    data = rows(
        args.seed,
        args.bulk,
        args.bulk_h,
        args.burst,
        args.gap_s,
        args.hours,
        args.late_h,
        args.first_h,
        args.stagger_h,
    )
    with args.out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(data[0]))
        writer.writeheader()
        writer.writerows(data)
    print(f"wrote {len(data)} jobs to {args.out}")
