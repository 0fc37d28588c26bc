"""GPU memory a training job needs per card: the simulator's memory truth and the generator's declaration.

    memory = CUDA_CONTEXT_GB
           + parameters x bytes of training state per parameter   (weights, gradients, optimiser state)
           + batch size x activation memory per sample
           + (more than one GPU) parameters x 4 B of DDP gradient buckets + NCCL_BUFFERS_GB

Parameter counts are the public ones of the models Gavel measured (see data/README.md for each);
per-sample activation figures are estimates from the layer shapes at the inputs Gavel trained on. The
model agrees with Gavel's throughput table: every configuration measured as running fits its card
(K80 12 GB, P100/V100 16 GB), and the only configurations measured as not running (ResNet-50 at batch
128 on 2, 4 or 8 K80s) do not fit, because the data-parallel overhead pushes them over 12 GB. The
ResNet-50 activation figure is the one value set by that calibration (it must lie in 84-87 MB per
sample); the tests check the agreement over the whole table.

Batch size is per GPU: in Gavel's table steps/s grows with the GPU count at a fixed batch size, so
every card processes the full batch each step.
"""

from __future__ import annotations

from dataclasses import dataclass

from cpn.model_names import model_key

CUDA_CONTEXT_GB = 0.5
"""CUDA context, cuDNN/cuBLAS handles and allocator slack of one PyTorch process."""

NCCL_BUFFERS_GB = 0.4
"""NCCL communicator buffers of a data-parallel job, per card."""

DDP_BUCKET_BYTES_PER_PARAM = 4
"""PyTorch DDP keeps a flat fp32 copy of the gradients (its buckets) on every card."""


@dataclass(frozen=True)
class ModelMemory:
    """Memory figures of one model as Gavel trains it."""

    params_m: float
    """Parameters, millions."""
    state_bytes_per_param: int
    """fp32 weights + gradients (8 B) plus optimiser state: SGD 0, momentum 4, Adam 8."""
    per_sample_gb: float
    """Activations kept for the backward pass, per sample of the batch."""
    fixed_batch: int | None = None
    """Batch size of models measured at one fixed batch (A3C, CycleGAN); None = batch given by the job."""


MODELS: dict[str, ModelMemory] = {
    # CIFAR-10 ResNet-18 (32x32 inputs), SGD with momentum.
    "resnet18": ModelMemory(params_m=11.2, state_bytes_per_param=12, per_sample_gb=0.008),
    # ImageNet ResNet-50 (224x224 inputs), SGD with momentum; per-sample figure calibrated (see above).
    "resnet50": ModelMemory(params_m=25.6, state_bytes_per_param=12, per_sample_gb=0.086),
    # Transformer (6+6 layers, d_model 512, shared target embedding) on Multi30k, Adam.
    "transformer": ModelMemory(params_m=52.0, state_bytes_per_param=16, per_sample_gb=0.030),
    # Two-layer LSTM language model (200 units) on WikiText-2 (33,278 words, 35-step BPTT), plain SGD.
    "lm": ModelMemory(params_m=14.0, state_bytes_per_param=8, per_sample_gb=0.015),
    # Autoencoder recommender on MovieLens-20M (20,108 items, 600-200 hidden), Adam.
    "recommendation": ModelMemory(params_m=24.4, state_bytes_per_param=16, per_sample_gb=0.0005),
    # A3C actor-critic on Atari (4 conv layers + 256-unit LSTM), shared Adam; one 20-step rollout.
    "a3c": ModelMemory(params_m=0.6, state_bytes_per_param=16, per_sample_gb=0.05, fixed_batch=1),
    # CycleGAN: two ResNet-9 generators + two PatchGAN discriminators, 256x256 images, Adam.
    "cyclegan": ModelMemory(params_m=28.3, state_bytes_per_param=16, per_sample_gb=2.5, fixed_batch=1),
}
"""Known models by key (cpn.model_names.model_key: `ResNet-50`, `resnet50` and `resnet_50` are `resnet50`)."""


def gpu_memory_gb(model: str, batch_size: int | None, num_gpus: int = 1) -> float | None:
    """GB each card needs to train `model` at `batch_size` on `num_gpus` cards; None if unknown.

    Unknown: a model not in MODELS, or a batched model without a batch size.
    """
    spec = MODELS.get(model_key(model))
    if spec is None:
        return None
    batch = batch_size if batch_size is not None else spec.fixed_batch
    if batch is None:
        return None
    mem = (
        CUDA_CONTEXT_GB + spec.params_m * 1e6 * spec.state_bytes_per_param / 1e9 + batch * spec.per_sample_gb
    )
    if num_gpus > 1:
        mem += spec.params_m * 1e6 * DDP_BUCKET_BYTES_PER_PARAM / 1e9 + NCCL_BUFFERS_GB
    return mem
