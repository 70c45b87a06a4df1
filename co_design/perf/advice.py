"""Shape advice: dimensions and per-GPU shards off multiples of 128/256, with the model's gain.

For each GEMM-facing dimension (hidden, head_dim for non-MLA attention, FFN,
expert FFN, shared-expert FFN, vocab) the per-GPU shard is what the kernels see:
``ffn / tp``, ``expert_ffn / (tp/ep)``, ``shared_expert_ffn / tp``, ``vocab / tp``
(hidden and head_dim are not split). A shard
that is not a multiple of 128 pays partial tiles (and misses 128-byte K
alignment); on GPUs with 256-wide tiles (Blackwell 2-SM pairs) a multiple of 128
that is not one of 256 can still waste half a tile. For each such dimension the
nearest total value whose shard is aligned is scored by the model at the same
deployment and batch, and ``gain`` is the relative change in output tokens/s per
GPU (positive: faster). No rule of thumb: a misalignment the model finds harmless
gets a gain near zero, and is not advised (see :data:`MIN_GAIN`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from co_design.hardware import get_gpu
from co_design.perf.ops import shards
from co_design.perf.serving import max_throughput, predict
from co_design.perf.types import Advice, Deployment

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.hardware import GPU

__all__ = ["shape_advice"]

#: Smallest relative gain in output tokens/s per GPU (0.01 = 1 %) worth advising. Below it the
#: change is within what the roofline model does not resolve (per-shape kernel quirks, see the
#: co_design.perf docstring) and not worth changing a model's shape for; a loss is never advice.
MIN_GAIN = 0.01


def _dims(arch: "Architecture", dep: Deployment) -> list[tuple[str, int, int]]:
    """(dimension, total value, ways split per GPU) for each GEMM-facing dimension."""
    s = shards(arch, dep)
    out = [("hidden", arch.hidden, 1)]
    if arch.mla is None:
        out.append(("head_dim", arch.head_dim, 1))
    if arch.moe_layers < arch.layers:
        out.append(("ffn", arch.ffn, s.ffn_tp))
    if arch.is_moe:
        out.append(("expert_ffn", arch.expert_ffn, s.moe_tp))
        if arch.shared_experts:
            out.append(("shared_expert_ffn", arch.shared_expert_ffn, s.ffn_tp))
    out.append(("vocab", arch.vocab, dep.tp // s.a_dp))
    return out


def _change(arch: "Architecture", dim: str, value: int) -> "Architecture":
    if dim == "hidden":
        return arch.replace(hidden=value, head_dim=arch.head_dim)
    return arch.replace(**{dim: value})


def shape_advice(arch: "Architecture", gpu: "GPU | str", deployment: Deployment, *,
                 min_gain: float = MIN_GAIN) -> list[Advice]:
    """Misaligned dimensions/shards and the model-computed gain of the nearest aligned values.

    For each dimension whose per-GPU shard is not a multiple of 128 (or, on GPUs
    with 256-wide tiles, of 256 while a multiple of 128), both neighbours (the
    aligned value below and above) are scored at ``deployment.concurrency`` if
    given, else at the batch :func:`max_throughput` picks for the current shape.
    Only neighbours that gain at least ``min_gain`` (a fraction of output tokens/s
    per GPU; default :data:`MIN_GAIN` = 0.01, i.e. 1 %) are advised: rounding up
    adds work, so its gain is often negative, and a change worth less than 1 % is
    below what the model resolves. The advice carries the neighbour with the
    larger gain; the message gives every neighbour kept. Sorted by gain, largest
    first. ``min_gain=-math.inf`` lists every misalignment whatever its gain (a
    diagnostic, as CoDesignCallback's alignment warnings do), not advice.
    """
    gpu = get_gpu(gpu)
    dep = deployment
    base = predict(arch, gpu, dep) if dep.concurrency is not None else max_throughput(arch, gpu, dep)
    dep = dep.replace(concurrency=base.batch)
    ref = base.output_tokens_per_s_per_gpu
    wide = max(t[1] for t in gpu.gemm_tiles)
    out: list[Advice] = []
    for dim, value, ways in _dims(arch, deployment):
        per_gpu = value // ways
        if per_gpu % 128:
            unit = 128
        elif wide >= 256 and per_gpu >= 256 and per_gpu % 256:
            unit = 256
        else:
            continue
        lo, hi = (per_gpu // unit) * unit, -(-per_gpu // unit) * unit
        scored: list[tuple[float, int]] = []
        for shard in (lo, hi):
            if shard <= 0:
                continue
            try:
                new = predict(_change(arch, dim, shard * ways), gpu, dep)
            except ValueError:
                continue
            gain = new.output_tokens_per_s_per_gpu / ref - 1.0
            if gain >= min_gain:
                scored.append((gain, shard))
        if not scored:
            continue
        gain, shard = max(scored)
        split = f" ({per_gpu} per GPU, {ways}-way split)" if ways > 1 else ""
        options = "; ".join(f"{dim}={s * ways}{f' ({s} per GPU)' if ways > 1 else ''}: {g:+.1%}" for g, s in scored)
        # listed below MIN_GAIN only when asked for every misalignment (a diagnostic): say it is not advice
        verdict = "" if gain >= MIN_GAIN else (
            f"; no aligned neighbour gains the {MIN_GAIN:.0%} worth a change: keep the shape")
        out.append(Advice(
            dimension=dim, value=value, per_gpu_value=per_gpu, aligned_value=shard * ways, gain=gain,
            message=(f"{dim}={value}{split} is not a multiple of {unit}; output tokens/s per GPU on {gpu.name} "
                     f"at batch {base.batch}: {options}{verdict}"),
        ))
    return sorted(out, key=lambda a: -a.gain)
