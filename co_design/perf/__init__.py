"""Roofline performance model of LLM inference on Hopper and Blackwell GPUs.

>>> from co_design.arch import Architecture
>>> from co_design.perf import Deployment, max_throughput
>>> p = max_throughput(Architecture.load("config.json"), "b200", Deployment(tp=1, isl=1000, osl=1000))
>>> p.output_tokens_per_s_per_gpu, p.batch, p.fits

Pure Python (no torch, no numpy): one prediction costs well under a millisecond.
Module map: ``roofline`` (the one max(compute, memory) function, tile/wave
quantization), ``ops`` (per-op table of a step), ``comm`` (collectives),
``memory`` (per-GPU memory, max batch), ``serving`` (predict, max_throughput,
pareto), ``anchor`` (the runtime's overheads scaled to measured TPOTs),
``advice`` (shape advice), ``report`` (text report).

Accuracy on 220 published TensorRT-LLM / MLPerf rows and what the model does not
capture (speculative decoding, queueing and ramp effects, per-shape kernel
quirks, compute/communication overlap, prefix caching, disaggregated serving):
benchmarks/results/validation.md.
"""

from co_design.perf.advice import shape_advice
from co_design.perf.anchor import TPOTMeasurement, anchor_runtime
from co_design.perf.roofline import Precision, bytes_per_element, math_precision
from co_design.perf.serving import max_throughput, parallelisms, pareto, predict
from co_design.perf.types import SLO, Advice, Deployment, MemoryBreakdown, OpCost, Prediction, Runtime

__all__ = [
    "Deployment",
    "Runtime",
    "SLO",
    "Prediction",
    "OpCost",
    "MemoryBreakdown",
    "Advice",
    "Precision",
    "predict",
    "max_throughput",
    "pareto",
    "parallelisms",
    "shape_advice",
    "TPOTMeasurement",
    "anchor_runtime",
    "bytes_per_element",
    "math_precision",
]
