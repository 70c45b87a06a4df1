"""The number formats co-design knows, defined once: the performance model, the hardware catalog,
fake-quantization, the CLI, the callback and the search job all take their names from here.

``nvfp4``: 4-bit E2M1 elements, one E4M3 scale per 16-element block, an FP32 tensor scale
(4.5 bits per element); ``fp8``: E4M3 with a per-tensor scale; ``bf16``: bfloat16. No torch.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["Precision", "PRECISIONS"]

Precision = Literal["nvfp4", "fp8", "bf16"]
#: every format, narrowest first
PRECISIONS: tuple[str, ...] = get_args(Precision)
