"""co-design: hardware-aware LLM architecture search.

The public API, small and typed. ``import co_design`` stays fast and loads no
torch: the torch-backed names (quantization, the proxy model, the Lightning
callback) are imported on first use.

- :class:`Architecture` — the one shape description everything speaks.
- :mod:`co_design.hardware` — the GPU catalog (:func:`get_gpu`, :func:`list_gpus`).
- :mod:`co_design.perf` — the roofline model (:func:`predict`, :func:`max_throughput`,
  :func:`pareto`, :func:`shape_advice`).
- :mod:`co_design.quant` — NVFP4/FP8 fake-quant (:func:`quantize_model`).
- :mod:`co_design.model` — the proxy :class:`Transformer`.
- :class:`CoDesignCallback` — all of it inside an existing Lightning training.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from co_design.arch import MLA, Architecture, ArchitectureError, ParamCounts

__version__ = "0.1.0"

# name -> module that defines it; imported lazily (PEP 562) so the core stays torch-free.
_LAZY = {
    "GPU": "co_design.hardware",
    "get_gpu": "co_design.hardware",
    "list_gpus": "co_design.hardware",
    "Deployment": "co_design.perf",
    "SLO": "co_design.perf",
    "Prediction": "co_design.perf",
    "predict": "co_design.perf",
    "max_throughput": "co_design.perf",
    "pareto": "co_design.perf",
    "shape_advice": "co_design.perf",
    "QuantConfig": "co_design.quant",
    "quantize_model": "co_design.quant",
    "dequantize_model": "co_design.quant",
    "fake_quantize_nvfp4": "co_design.quant",
    "Transformer": "co_design.model",
    "CoDesignCallback": "co_design.callback",
}

__all__ = ["MLA", "Architecture", "ArchitectureError", "ParamCounts", *_LAZY]

if TYPE_CHECKING:  # pragma: no cover
    from co_design.callback import CoDesignCallback
    from co_design.hardware import GPU, get_gpu, list_gpus
    from co_design.model import Transformer
    from co_design.perf import SLO, Deployment, Prediction, max_throughput, pareto, predict, shape_advice
    from co_design.quant import QuantConfig, dequantize_model, fake_quantize_nvfp4, quantize_model


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'co_design' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
