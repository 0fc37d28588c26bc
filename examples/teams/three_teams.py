"""Writes three-teams.csv: one team submits 1,000 jobs at once, two others arrive over the following hours.

Team `bulk` queues 1,000 one-GPU ResNet-18 jobs at t=0; teams `late-a` and `late-b` each send one job
every 6 minutes from hour 1 to hour 6 (50 each). Steps are drawn from a seeded RNG so that a job runs
about 0.5-2 h on a K80 (ResNet-18, batch 32, Gavel's table: 7.2 steps/s). Run from the repository root:
`python examples/teams/three_teams.py` (seed 0; the checked-in CSV is its output).
"""

import csv
import random
from pathlib import Path

K80_STEPS_PER_S = 7.18


def rows(seed: int = 0) -> list[dict]:
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

    out += [job("bulk", i, 0.0) for i in range(1000)]
    for ns in ("late-a", "late-b"):
        out += [job(ns, i, 3600.0 + 360.0 * i) for i in range(50)]
    return sorted(out, key=lambda r: float(r["arrival_s"]))


if __name__ == "__main__":
    path = Path(__file__).with_name("three-teams.csv")
    data = rows()
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(data[0]))
        writer.writeheader()
        writer.writerows(data)
    print(f"wrote {len(data)} jobs to {path}")
