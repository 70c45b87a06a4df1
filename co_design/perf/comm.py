"""Collective and point-to-point communication times (alpha-beta model).

A collective among ``n`` GPUs moves data at the NVLink bandwidth (per GPU, per
direction) when all ``n`` sit in one NVLink domain, otherwise at the scale-out
bandwidth (the slower hop bounds a hierarchical collective), times the GPU's
``collective_efficiency`` (achieved bus bandwidth); each call pays
``gpu.collective_latency_s``. Bandwidth terms (NCCL's "bus bandwidth" algebra):

* all-reduce of ``S`` bytes: ``2 (n-1)/n · S / bw`` (reduce-scatter + all-gather)
* all-gather / reduce-scatter producing / consuming ``S`` bytes per GPU: ``(n-1)/n · S / bw``
* all-to-all where each GPU sends ``S`` bytes in total: ``(n-1)/n · S / bw``
* point-to-point of ``S`` bytes: ``S / bw``

Pure Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from co_design.hardware import GPU

__all__ = ["link_bytes_per_s", "collective_time_s", "COLLECTIVES"]

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}


def link_bytes_per_s(gpu: "GPU", n: int, efficiency: float = 1.0) -> float:
    """Per-GPU, per-direction bandwidth a collective among ``n`` GPUs achieves, bytes/s: the link's peak ×
    the GPU's ``collective_efficiency`` × ``efficiency`` (a runtime's further fraction)."""
    peak = gpu.nvlink_bytes_per_s if n <= gpu.nvlink_domain else gpu.scaleout_bytes_per_s
    return peak * gpu.collective_efficiency * efficiency


def collective_time_s(kind: str, nbytes: float, n: int, gpu: "GPU", *, span: int | None = None,
                      efficiency: float = 1.0, overhead_s: float = 0.0) -> float:
    """Seconds for collective ``kind`` of ``nbytes`` (see module docstring) among ``n`` GPUs.

    ``span``: GPUs the communicating group is placed across (default ``n``); the
    link is NVLink when ``span`` fits in one NVLink domain, else scale-out. A
    pipeline-stage send between 2 GPUs of a ``tp x pp`` replica larger than the
    domain crosses domains at some stage boundary: ``n=2, span=tp*pp``.
    ``efficiency``: fraction of the GPU's collective bandwidth the runtime reaches;
    ``overhead_s``: the runtime's own seconds per call on top of the link latency.
    """
    if kind not in COLLECTIVES:  # checked first: a typo must not pass silently when n == 1
        raise ValueError(f"unknown collective {kind!r}; use one of {COLLECTIVES}")
    if n <= 1 or nbytes <= 0:
        return 0.0
    bw = link_bytes_per_s(gpu, n if span is None else max(n, span), efficiency)
    if kind == "p2p":
        return gpu.collective_latency_s + overhead_s + nbytes / bw
    factor = _FACTOR[kind]
    return gpu.collective_latency_s + overhead_s + factor * (n - 1) / n * nbytes / bw
