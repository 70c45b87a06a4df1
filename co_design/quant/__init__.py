"""Fake quantization for quantization-aware proxy training: NVFP4, FP8 (E4M3) and BF16.

Config object plus one verb (like torchao's ``quantize_``)::

    from co_design.quant import QuantConfig, quantize_model
    swapped = quantize_model(model, QuantConfig(format="nvfp4"))   # W4A4 QAT, in place
    print(swapped.coverage)                                       # what is quantized, by kind
    dequantize_model(model)                                       # plain modules, trained weights

Imports torch and nothing else of co_design.
"""

from co_design.quant.api import (
    QuantizedModules,
    dequantize_model,
    is_experts_module,
    quantization_stats,
    quantize_model,
)
from co_design.quant.config import DEFAULT_SKIP, QuantConfig
from co_design.quant.coverage import CoverageReport, quantization_coverage
from co_design.quant.formats import (
    BLOCK_SIZE,
    FORMATS,
    Format,
    fake_quantize,
    fake_quantize_bf16,
    fake_quantize_fp8,
    fake_quantize_nvfp4,
)
from co_design.quant.modules import FakeQuant, FakeQuantLinear, InputFakeQuant, WeightFakeQuant

__all__ = [
    "BLOCK_SIZE",
    "CoverageReport",
    "DEFAULT_SKIP",
    "FORMATS",
    "FakeQuant",
    "FakeQuantLinear",
    "Format",
    "InputFakeQuant",
    "QuantConfig",
    "QuantizedModules",
    "WeightFakeQuant",
    "dequantize_model",
    "fake_quantize",
    "fake_quantize_bf16",
    "fake_quantize_fp8",
    "fake_quantize_nvfp4",
    "is_experts_module",
    "quantization_coverage",
    "quantization_stats",
    "quantize_model",
]
