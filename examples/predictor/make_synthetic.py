"""Synthetic throughput table over 6 GPU types cpn's data has never seen, plus a matching benchmarks YAML.

Law: steps/s = ref[model] * (32/batch)^beta[model] * speed[gpu]^alpha[model] * n^scaling[model]
     * lognormal(0.05)
Benchmark scores: resnet50 = 250*speed^0.9, yolov8m = 40*speed^1.05, llama3 = 1800*speed^0.8.
Usage: python examples/predictor/make_synthetic.py [OUTDIR] [SEED]
Writes synthetic.csv and synthetic-benchmarks.yaml (the ones beside this script: OUTDIR = here, SEED = 0).
A check that the predictor generalises to GPU types and models cpn ships no data for; not evidence about
real GPUs: the table follows the very law (speed^alpha per model) the prior assumes.
"""

import csv
import sys
from pathlib import Path

import numpy as np

out = Path(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent))
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
rng = np.random.default_rng(seed)
out.mkdir(parents=True, exist_ok=True)

# spelling as a user's table would write it -> (canonical key, relative speed, spec)
GPUS = {
    "Tesla T4": ("t4", 1.0, None),  # data/gpus/devices.csv has a T4 row
    "NVIDIA L4": ("l4", 1.6, (24, 300, 30.3)),
    "NVIDIA A10G": ("a10g", 1.9, (24, 600, 31.2)),
    "NVIDIA GeForce RTX 4090": ("rtx4090", 3.3, (24, 1008, 82.6)),
    "NVIDIA-A100-SXM4-80GB": ("a100-sxm4-80gb", 4.0, (80, 2039, 19.5)),
    "NVIDIA H100 80GB HBM3": ("h100-80gb-hbm3", 7.0, (80, 3350, 67.0)),
}
# model -> (ref steps/s at batch 32 on speed 1, batch sizes (None = fixed batch), alpha, beta, scaling)
MODELS = {
    "ResNet-50": (4.0, (32, 64, 128), 0.95, 0.9, 0.92),
    "BERT-base": (6.0, (16, 32), 0.85, 0.8, 0.88),
    "GPT2-small": (3.0, (8, 16), 0.75, 0.7, 0.85),
    "ViT-B16": (2.5, (32, 64), 1.0, 0.95, 0.9),
    "YOLOv8m": (1.5, (16,), 1.05, 0.9, 0.8),
    "llama-7b-lora": (0.4, (4, 8), 0.7, 0.6, 0.75),
    "PPO": (20.0, (None,), 0.5, 0.0, 0.6),
    "StableDiffusion": (0.8, (None,), 0.9, 0.0, 0.9),
}
COUNTS = (1, 2, 4, 8)

with (out / "synthetic.csv").open("w", newline="") as fh:
    w = csv.writer(fh)
    w.writerow(["model", "batch_size", "gpu_product", "num_gpus", "steps_per_sec"])
    for model, (ref, batches, alpha, beta, scaling) in MODELS.items():
        for b in batches:
            for spelled, (_, speed, _) in GPUS.items():
                for n in COUNTS:
                    tp = ref * ((32 / b) ** beta if b else 1.0) * speed**alpha * n**scaling
                    tp *= float(np.exp(rng.normal(0, 0.05)))
                    w.writerow([model, "" if b is None else b, spelled, n, f"{tp:.4g}"])

lines = [
    "workloads:",
    "  resnet50: {unit: images/s, method: synthetic}",
    "  yolov8m: {unit: images/s, method: synthetic}",
    "  llama3: {unit: tokens/s, method: synthetic}",
    "gpus:",
]
for key, speed, spec in GPUS.values():
    s = {"resnet50": 250 * speed**0.9, "yolov8m": 40 * speed**1.05, "llama3": 1800 * speed**0.8}
    lines.append(f"  {key}:")
    lines.append("    scores: {" + ", ".join(f"{k}: {v:.4g}" for k, v in s.items()) + "}")
    if spec:
        mem, bw, fp32 = spec
        lines.append(
            f"    spec: {{memory_gb: {mem}, mem_bw_gbps: {bw}, fp32_tflops: {fp32}, "
            "source: vendor datasheet (approximate)}"
        )
(out / "synthetic-benchmarks.yaml").write_text("\n".join(lines) + "\n")
print(f"wrote {out / 'synthetic.csv'} and {out / 'synthetic-benchmarks.yaml'}")
