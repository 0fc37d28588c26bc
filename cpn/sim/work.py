"""The simulator's truth for jobs that give no total_steps: what their data size and epochs really cost.

The seed writes a training job as `model_name`, `data_size` (GB) and `epoch`. On the simulated clusters such
a job trains `data_size_gb x samples_per_gb x epochs` samples of its model's dataset (`TRUTH_MODELS`: the
public size of each dataset as its usual archive ships it), in steps of its batch size (the job's, else the
model's usual one). How fast:

- a model the throughput table measures at that batch trains at the table's steps/s (cpn.sim.scaling), as
  jobs with total_steps do;
- any other model of TRUTH_MODELS trains `REFERENCE` samples/s on the same cards, scaled by the ratio of
  training compute per sample:
  `samples/s = samples/s(ResNet-50, batch 64) x gflops(ResNet-50) / gflops(model)`.
  Training compute per sample is taken as three times the forward pass (the backward pass costs about
  twice the forward); for LLMs a sample is a token and the cost 6 x parameters (Kaplan et al., "Scaling
  Laws for Neural Language Models", 2020).

This is the simulated world, not what cpn knows: the predictor never reads it (models/ learn from what
completed runs measured). A model neither here nor in the table cannot be timed and fails its run with
that reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cpn.model_names import model_key


@dataclass(frozen=True)
class TruthModel:
    """One model of the simulated world: its dataset's density and its compute per training sample."""

    samples_per_gb: float
    """Training samples per GB of the dataset as its archive ships it."""
    batch_size: int | None
    """Samples per step when the job gives no batch size (None: the table's fixed batch, one sample)."""
    gflops_per_sample: float | None = None
    """Training GFLOPs per sample (forward + backward); None for models only the table times."""


REFERENCE = ("ResNet-50", 64)
"""The table configuration whose samples/s other models' speed is scaled from (the seed's resnet50
benchmark workload, at the batch the benchmarks file scores it)."""

_IMAGENET = 1_281_167 / 138.0
"""ImageNet ILSVRC2012 train: 1,281,167 images in the 138 GB archive (image-net.org)."""

TRUTH_MODELS: dict[str, TruthModel] = {
    # torchvision's model docs: ResNet-50 4.09 GFLOPs, DenseNet-121 2.83 GFLOPs a 224x224 forward pass.
    "resnet50": TruthModel(_IMAGENET, 64, 3 * 4.09),
    "densenet121": TruthModel(_IMAGENET, 64, 3 * 2.83),
    # CIFAR-10: 60,000 images in the 163 MB python archive (cs.toronto.edu/~kriz/cifar.html).
    "resnet18": TruthModel(60_000 / 0.163, 128),
    # COCO train2017: 118,287 images in the 18 GB archive; YOLOv8m 78.9 GFLOPs at 640 (Ultralytics docs).
    "yolov8m": TruthModel(118_287 / 18.0, 16, 3 * 78.9),
    # Llama 3: 8.03 B and 70.6 B parameters (Meta's model cards); a token of English text is about 4 bytes
    # (OpenAI's tokenizer guide: "one token ~ 4 characters"), 2.5e8 tokens per GB; a step of 8 sequences
    # of 8,192 tokens (Llama 3's context).
    "llama3": TruthModel(2.5e8, 8 * 8192, 6 * 8.03),
    "llama38b": TruthModel(2.5e8, 8 * 8192, 6 * 8.03),
    "llama370b": TruthModel(2.5e8, 8 * 8192, 6 * 70.6),
    # Gavel's models (Narayanan et al., OSDI 2020, table 2) on their datasets:
    # WikiText-2: 2,088,628 training tokens in the 10.8 MB wiki.train.tokens; PyTorch's
    # word_language_model steps over sequences of 35 tokens.
    "lm": TruthModel(2_088_628 / 35 / 0.0108, 20),
    # Multi30k: 29,000 training sentence pairs in about 4.5 MB of text (train.en + train.de).
    "transformer": TruthModel(29_000 / 0.0045, 64),
    # monet2photo: an epoch over its 6,287 photos (the larger domain) of the 291 MB archive; batch 1.
    "cyclegan": TruthModel(6_287 / 0.291, None),
    # MovieLens 20M: 138,493 users (the autoencoder's samples) in the 190 MB ml-20m.zip.
    "recommendation": TruthModel(138_493 / 0.19, 2048),
}
"""Model key (cpn.model_names.model_key) -> its truth."""


@dataclass(frozen=True)
class Work:
    """What a job without total_steps runs on the simulated clusters."""

    samples: float
    batch_size: int | None
    """The batch the job trains at (its own, else its model's usual one)."""
    gflops_per_sample: float | None

    @property
    def steps(self) -> int:
        """Training steps: samples over the batch, whole steps per epoch are not modelled."""
        return max(1, math.ceil(self.samples / (self.batch_size or 1)))


def work_of(model: str, batch_size: int | None, data_size_gb: float, epochs: int) -> Work | str:
    """The work of a job that gives no total_steps, or why the simulated world cannot tell it."""
    truth = TRUTH_MODELS.get(model_key(model))
    if truth is None:
        return f"the simulated world does not know model {model!r} (cpn.sim.work.TRUTH_MODELS) nor its steps"
    if not (data_size_gb > 0 and epochs >= 1):
        return "job has no total_steps, and no data_size and epoch to train"
    return Work(
        data_size_gb * truth.samples_per_gb * epochs, batch_size or truth.batch_size, truth.gflops_per_sample
    )
