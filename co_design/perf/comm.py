"""Collective and point-to-point communication times (alpha-beta model).

A collective among ``n`` GPUs moves data at the NVLink bandwidth (per GPU, per
direction) when all ``n`` sit in one NVLink domain, otherwise at the scale-out
bandwidth (the slower hop bounds a hierarchical collective), times the GPU's
``collective_efficiency`` (achieved bus bandwidth). Each synchronization step
pays ``gpu.collective_latency_s`` (a point-to-point hand-off) plus the runtime's
``overhead_s``. Bandwidth terms (NCCL's "bus bandwidth" algebra):

* all-gather / reduce-scatter producing / consuming ``S`` bytes per GPU: one step,
  ``(n-1)/n · S / bw``
* all-to-all where each GPU sends ``S`` bytes in total: one step, ``(n-1)/n · S / bw``
* point-to-point of ``S`` bytes: one step, ``S / bw``
* all-reduce of ``S`` bytes, the faster of the two algorithms a serving runtime
  switches between by message size (TensorRT-LLM's custom all-reduce, ``AUTO``
  strategy):

  - *two-shot* (reduce-scatter, then all-gather): two steps, ``2 (n-1)/n · S / bw``;
  - *one-shot* (every GPU reads its ``n-1`` peers' whole buffers and reduces
    locally): one step, ``(n-1) · S / bw``; it needs the peers' buffers mapped,
    so only inside one NVLink domain.

  Small messages (decode at small batch) go one-shot and pay one latency; large
  ones go two-shot and pay two. At ``n = 2`` both move the same bytes, so one-shot
  always wins.

Pure Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from co_design.hardware import GPU

__all__ = ["link_bytes_per_s", "collective_time_s", "all_reduce_algorithm", "COLLECTIVES", "ALL_REDUCE_ALGORITHMS"]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
ALL_REDUCE_ALGORITHMS = ("auto", "one_shot", "two_shot")
_FACTOR = {"all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}


def link_bytes_per_s(gpu: "GPU", n: int, efficiency: float = 1.0) -> float:
    """Per-GPU, per-direction bandwidth a collective among ``n`` GPUs achieves, bytes/s: the link's peak ×
    the GPU's ``collective_efficiency`` × ``efficiency`` (a runtime's further fraction)."""
    peak = gpu.nvlink_bytes_per_s if n <= gpu.nvlink_domain else gpu.scaleout_bytes_per_s
    return peak * gpu.collective_efficiency * efficiency


def _link(gpu: "GPU", n: int, span: int | None, efficiency: float, overhead_s: float) -> tuple[int, float, float]:
    """(GPUs the group spans, bytes/s per GPU, seconds per synchronization step) of a collective among ``n``."""
    group = n if span is None else max(n, span)
    return group, link_bytes_per_s(gpu, group, efficiency), gpu.collective_latency_s + overhead_s


def _all_reduce(nbytes: float, n: int, gpu: "GPU", span: int | None, efficiency: float, overhead_s: float,
                algorithm: str) -> tuple[float, str]:
    """(seconds, algorithm charged) of an all-reduce among ``n > 1`` GPUs (arguments of :func:`collective_time_s`)."""
    group, bw, step_s = _link(gpu, n, span, efficiency, overhead_s)
    two_shot = 2.0 * step_s + 2.0 * (n - 1) / n * nbytes / bw
    if algorithm == "two_shot" or group > gpu.nvlink_domain:
        return two_shot, "two_shot"
    one_shot = step_s + (n - 1) * nbytes / bw
    if algorithm == "one_shot" or one_shot <= two_shot:
        return one_shot, "one_shot"
    return two_shot, "two_shot"


def _check(kind: str, algorithm: str) -> None:
    if kind not in COLLECTIVES:  # checked first: a typo must not pass silently when n == 1
        raise ValueError(f"unknown collective {kind!r}; use one of {COLLECTIVES}")
    if algorithm not in ALL_REDUCE_ALGORITHMS:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; use one of {ALL_REDUCE_ALGORITHMS}")


def collective_time_s(kind: str, nbytes: float, n: int, gpu: "GPU", *, span: int | None = None,
                      efficiency: float = 1.0, overhead_s: float = 0.0, algorithm: str = "auto") -> float:
    """Seconds for collective ``kind`` of ``nbytes`` (see module docstring) among ``n`` GPUs.

    ``span``: GPUs the communicating group is placed across (default ``n``); the
    link is NVLink when ``span`` fits in one NVLink domain, else scale-out. A
    pipeline-stage send between 2 GPUs of a ``tp x pp`` replica larger than the
    domain crosses domains at some stage boundary: ``n=2, span=tp*pp``.
    ``efficiency``: fraction of the GPU's collective bandwidth the runtime reaches;
    ``overhead_s``: the runtime's own seconds per synchronization step on top of the
    link latency. ``algorithm`` (all-reduce only): ``"auto"`` takes the faster of
    one-shot and two-shot, the others force one (one-shot outside an NVLink domain
    falls back to two-shot).
    """
    _check(kind, algorithm)
    if n <= 1 or nbytes <= 0:
        return 0.0
    if kind == "all_reduce":
        return _all_reduce(nbytes, n, gpu, span, efficiency, overhead_s, algorithm)[0]
    _, bw, step_s = _link(gpu, n, span, efficiency, overhead_s)
    if kind == "p2p":
        return step_s + nbytes / bw
    return step_s + _FACTOR[kind] * (n - 1) / n * nbytes / bw


def all_reduce_algorithm(nbytes: float, n: int, gpu: "GPU", *, span: int | None = None, efficiency: float = 1.0,
                         overhead_s: float = 0.0) -> str:
    """``"one_shot"`` or ``"two_shot"``: the all-reduce algorithm :func:`collective_time_s` charges for
    ``nbytes`` among ``n`` GPUs (same arguments); ``"none"`` when nothing moves (``n <= 1`` or no bytes)."""
    if n <= 1 or nbytes <= 0:
        return "none"
    return _all_reduce(nbytes, n, gpu, span, efficiency, overhead_s, "auto")[1]
