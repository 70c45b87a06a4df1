"""The number formats co-design knows, defined once: the performance model, the hardware catalog,
fake-quantization, the CLI, the callback and the search job all take their names from here.

``nvfp4``: 4-bit E2M1 elements, one E4M3 scale per 16-element block, an FP32 tensor scale
(4.5 bits per element); ``fp8``: E4M3 with a per-tensor scale; ``bf16``: bfloat16. No torch.

FP8 activation scaling at serving time (``FP8Scaling``): ``tensor``, one static scale per tensor
(TensorRT Model Optimizer FP8), or ``block``, one scale per 128 activations of a token found at run
time beside 128x128 weight blocks (the FP8 checkpoints of DeepSeek-V3/R1, Qwen3, MiniMax-M2).
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["Precision", "PRECISIONS", "FP8Scaling", "FP8_SCALINGS"]

Precision = Literal["nvfp4", "fp8", "bf16"]
#: every format, narrowest first
PRECISIONS: tuple[str, ...] = get_args(Precision)
FP8Scaling = Literal["tensor", "block"]
FP8_SCALINGS: tuple[str, ...] = get_args(FP8Scaling)
