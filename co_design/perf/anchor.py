"""Anchor the runtime's overheads to decode latencies measured on the runtime a team deploys on.

The fitted :class:`~co_design.perf.types.Runtime` defaults describe the runtimes behind the published
rows they were fitted on. One deployment setting decodes up to 1.33x faster on one runtime version than
on another (``benchmarks/results/runtime_spread.md``), and at small batch much of a step is time the
GPU's rates do not set: kernels that wait on each other, collectives' synchronization, host scheduling
(in the model's DeepSeek-R1 TP8 decode step at concurrency 1, the collectives alone are about 40 %). :func:`anchor_runtime` rescales those four fitted quantities together
(:data:`ANCHORED_FIELDS`) by one factor, chosen so the model reproduces TPOTs the user measured on
their own runtime, and leaves the GPU's physics (FLOP rates, HBM and link bandwidths) alone. Measure
one model you already serve, anchor, then predict the candidate shapes on that runtime.

Held-out check (``python benchmarks/validate_perf.py --anchored``, ``benchmarks/results/anchored.md``):
each concurrency-1 test row predicted from rows of the same runtime version measured on other settings.

Pure Python.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, NamedTuple, Sequence

from co_design.perf.serving import predict
from co_design.perf.types import Deployment, Runtime

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.hardware import GPU

__all__ = ["ANCHORED_FIELDS", "MAX_SCALE", "TPOTMeasurement", "anchor_runtime", "scaled_runtime"]

# the Runtime quantities that are the runtime's time rather than the GPU's rates (see Runtime's docstring)
ANCHORED_FIELDS = ("kernel_gap_s", "collective_overhead_s", "iteration_overhead_s", "request_overhead_s")
MAX_SCALE = 16.0  # the largest factor searched: 16x the fitted overheads (a runtime far slower than any fitted)


class TPOTMeasurement(NamedTuple):
    """One measured decode latency: ``arch`` served on ``gpu`` as ``deployment`` (its ``concurrency`` set:
    requests in flight), ``tpot_s`` seconds per output token (mean TPOT or inter-token latency)."""

    arch: "Architecture"
    gpu: "GPU | str"
    deployment: Deployment
    tpot_s: float


def scaled_runtime(runtime: Runtime, scale: float) -> Runtime:
    """``runtime`` with each of :data:`ANCHORED_FIELDS` multiplied by ``scale`` (>= 0)."""
    if not scale >= 0:
        raise ValueError(f"scale must be >= 0, got {scale}")
    return dataclasses.replace(runtime, **{f: getattr(runtime, f) * scale for f in ANCHORED_FIELDS})


def _check(m: TPOTMeasurement, i: int) -> None:
    if not isinstance(m.deployment, Deployment):
        raise ValueError(f"measurements[{i}].deployment must be a Deployment, got {type(m.deployment).__name__}")
    if m.deployment.concurrency is None:
        raise ValueError(f"measurements[{i}].deployment.concurrency is None: a TPOT is measured at a number of "
                         "requests in flight; set Deployment(concurrency=...) to the benchmark's concurrency")
    if isinstance(m.tpot_s, bool) or not isinstance(m.tpot_s, (int, float)) or not m.tpot_s > 0 \
            or not math.isfinite(m.tpot_s):
        raise ValueError(f"measurements[{i}].tpot_s must be a positive number of seconds, got {m.tpot_s!r}")


def _log_error(measurements: Sequence[TPOTMeasurement], runtime: Runtime, scale: float) -> float:
    rt = scaled_runtime(runtime, scale)
    return sum(math.log(predict(m.arch, m.gpu, m.deployment.replace(runtime=rt)).tpot_s / m.tpot_s) ** 2
               for m in measurements)


def anchor_runtime(measurements: Sequence[TPOTMeasurement], runtime: Runtime | None = None) -> tuple[Runtime, float]:
    """``(runtime, scale)``: ``runtime`` (default: the first measurement's ``deployment.runtime``) with its
    :data:`ANCHORED_FIELDS` scaled by the one factor ``scale`` in [0, :data:`MAX_SCALE`] that brings the
    predicted TPOTs closest to the measured ones (least squares of the log ratio; one measurement is met
    exactly when it can be). Every measurement's own ``deployment.runtime`` is replaced by the runtime being
    anchored. Predicted TPOT grows with the factor, so with one measurement:

    * a measurement faster than the model's TPOT with no overheads at all (``scale = 0``: kernels at the
      fitted rates, back to back) raises ValueError naming that floor: the runtime beats the model's rates,
      which the overheads cannot absorb;
    * one slower than :data:`MAX_SCALE` times the overheads raises ValueError too.

    With several, the factor is the best compromise in the range, which may sit at either end.
    """
    ms = list(measurements)
    if not ms:
        raise ValueError("measurements is empty: give at least one TPOTMeasurement of the runtime to anchor")
    for i, m in enumerate(ms):
        _check(m, i)
    rt = runtime if runtime is not None else ms[0].deployment.runtime
    if len(ms) == 1:
        m = ms[0]

        def tpot(scale: float) -> float:
            return predict(m.arch, m.gpu, m.deployment.replace(runtime=scaled_runtime(rt, scale))).tpot_s

        lo, hi = 0.0, MAX_SCALE
        floor, ceiling = tpot(lo), tpot(hi)
        if m.tpot_s < floor:
            raise ValueError(f"measured TPOT {m.tpot_s * 1e3:.3f} ms is below the model's {floor * 1e3:.3f} ms with "
                             "no runtime overheads at all: this runtime's kernels beat the fitted rates, which "
                             "anchoring the overheads cannot express")
        if m.tpot_s > ceiling:
            raise ValueError(f"measured TPOT {m.tpot_s * 1e3:.3f} ms is above the model's {ceiling * 1e3:.3f} ms at "
                             f"{MAX_SCALE:g}x the fitted overheads: check the deployment (GPU, mapping, formats, "
                             "concurrency) matches the measurement")
        for _ in range(60):  # bisection on a monotone function; 2**-60 of the range
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if tpot(mid) < m.tpot_s else (lo, mid)
        scale = 0.5 * (lo + hi)
    else:
        lo, hi = 0.0, MAX_SCALE  # golden-section search of the summed squared log error
        g = (math.sqrt(5) - 1) / 2
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        fa, fb = _log_error(ms, rt, a), _log_error(ms, rt, b)
        for _ in range(60):
            if fa <= fb:
                hi, b, fb = b, a, fa
                a = hi - g * (hi - lo)
                fa = _log_error(ms, rt, a)
            else:
                lo, a, fa = a, b, fb
                b = lo + g * (hi - lo)
                fb = _log_error(ms, rt, b)
        scale = 0.5 * (lo + hi)
        for edge in (0.0, MAX_SCALE):  # the error need not be unimodal near the ends of the range
            if _log_error(ms, rt, edge) < _log_error(ms, rt, scale):
                scale = edge
    return scaled_runtime(rt, scale), scale
