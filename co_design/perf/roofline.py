"""The roofline: one function turns (compute time, memory time) into an op's time.

Everything else in :mod:`co_design.perf` composes :func:`roofline` — GEMMs via
:func:`gemm`, which first counts tiles and waves on the GPU, fused attention,
elementwise (memory-bound) ops. Pure Python: no torch, no numpy.

Precision rules (per tensor class):

* Storage bytes per element: bf16 2, fp8 1, nvfp4 0.5625 (4-bit E2M1 value plus
  one 8-bit E4M3 scale per 16-element block: 4.5 bits; REFERENCE.md §1).
* GEMM math precision = the *wider* of the weight and activation formats, since
  a tensor core multiplies both operands in one format: W4A16 runs at the bf16
  rate (reading 4-bit weights, dequantized in the kernel), W8A8 at the fp8 rate,
  W4A8 at the fp8 rate (Blackwell's mixed f8f6f4 MMA), W4A4 at the nvfp4 rate.
* A format the GPU has no kernel for is refused, never emulated by widening
  (NVFP4 on Hopper would be FP8 math on 4.5-bit weights, a kernel that does not
  exist): the serving entry points check each deployment against the GPU's
  precision table (:func:`co_design.hardware.check_precision`) and
  :func:`math_precision` raises if the GPU has no rate for the format.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

from co_design.precision import PRECISIONS, Precision

if TYPE_CHECKING:
    from co_design.hardware import GPU

__all__ = [
    "Precision",
    "BYTES_PER_ELEMENT",
    "PRECISIONS",
    "bytes_per_element",
    "math_precision",
    "roofline",
    "tile_wave",
    "gemm",
    "GemmCost",
]

BYTES_PER_ELEMENT: dict[str, float] = {"bf16": 2.0, "fp8": 1.0, "nvfp4": 0.5625}
_WIDTH = {"nvfp4": 0, "fp8": 1, "bf16": 2}
_SWAP_AB_MAX_ROWS = 64  # tiles with fewer rows are swap-AB kernels for small M; their operand reuse is poor
_MATH_BYTES = {"nvfp4": 0.5, "fp8": 1.0, "bf16": 2.0}  # element bytes inside the MMA (scales aside)


def bytes_per_element(precision: str) -> float:
    """Storage bytes per element, block scales included (nvfp4: 0.5625)."""
    try:
        return BYTES_PER_ELEMENT[precision]
    except KeyError:
        raise ValueError(f"unknown precision {precision!r}; use one of {sorted(BYTES_PER_ELEMENT)}") from None


def math_precision(weights: str, activations: str, gpu: "GPU") -> str:
    """Tensor-core format a GEMM runs at: the wider of the two operand formats.

    ValueError if ``gpu`` has no tensor-core rate at it (no silent widening to another format).
    """
    bytes_per_element(weights), bytes_per_element(activations)  # validate
    prec = PRECISIONS[max(_WIDTH[weights], _WIDTH[activations])]
    if prec not in gpu.peak_flops_per_s:
        raise ValueError(f"GPU {gpu.name!r} has no {prec} tensor-core rate (it has {sorted(gpu.peak_flops_per_s)}); "
                         f"serve weights={weights!r} activations={activations!r} on a GPU with {prec}")
    return prec


def roofline(compute_s: float, memory_s: float, overhead_s: float = 0.0) -> tuple[float, str]:
    """THE roofline: an op takes ``max(compute_s, memory_s) + overhead_s`` seconds.

    Returns ``(time_s, bound)`` with bound ``"compute"`` or ``"memory"``.
    """
    if compute_s >= memory_s:
        return compute_s + overhead_s, "compute"
    return memory_s + overhead_s, "memory"


def tile_wave(m: int, n: int, tile_m: int, tile_n: int, sms: int, sms_per_tile: int = 1) -> tuple[int, int, float, float]:
    """Tile and wave quantization of an (m × n) GEMM output.

    The output splits into ``ceil(m/tile_m) * ceil(n/tile_n)`` tiles; a partial
    tile costs a full one. Tiles run in waves of ``sms // sms_per_tile``; a
    partial last wave costs a full one. Returns ``(tiles, waves,
    tile_efficiency, wave_efficiency)`` where tile_efficiency = m*n / (tiles *
    tile_m*tile_n) and wave_efficiency = tiles / (waves * tiles_per_wave).
    """
    tiles = math.ceil(m / tile_m) * math.ceil(n / tile_n)
    per_wave = max(1, sms // sms_per_tile)
    waves = math.ceil(tiles / per_wave)
    return tiles, waves, (m * n) / (tiles * tile_m * tile_n), tiles / (waves * per_wave)


class GemmCost(tuple):
    """``(time_s, bound, flops, bytes, tile_efficiency, wave_efficiency, compute_s, memory_s, tile)``."""

    __slots__ = ()
    time_s = property(lambda s: s[0])
    bound = property(lambda s: s[1])
    flops = property(lambda s: s[2])
    bytes = property(lambda s: s[3])
    tile_efficiency = property(lambda s: s[4])
    wave_efficiency = property(lambda s: s[5])
    compute_s = property(lambda s: s[6])
    memory_s = property(lambda s: s[7])
    tile = property(lambda s: s[8])


def gemm(gpu: "GPU", m: int, n: int, k: int, *, weights: str, activations: str, groups: int = 1,
         out_bytes_per_element: float = 2.0, split_k: bool = True, efficiency: float = 1.0,
         bandwidth_efficiency: float = 1.0, tile_overhead_s: float = 0.0, token_tiles: bool = False,
         kernel_overhead_s: float | None = None) -> GemmCost:
    """Time of ``groups`` independent (m×k)·(k×n) GEMMs run as one (grouped) kernel on one GPU.

    * FLOPs (useful) = 2·m·n·k·groups.
    * Compute: the kernel picks the schedule that minimizes time, as an
      autotuner would, over the GPU's output tiles (``gpu.gemm_tiles``, each with
      its own main-loop rate) and three ways to spread them over the SMs:

      - data-parallel: whole tiles in waves of ``sms / sms_per_tile``; a partial
        last wave costs a full one (wave quantization);
      - split-K (when the tiles fill less than one wave): K split 2–16 ways over
        idle SMs, fp32 partials written and re-read;
      - stream-K (``gpu.stream_k``): the K loops of all tiles divided evenly over
        the SMs, each SM's share rounded up to whole k-tiles, plus one fp32
        partial tile written and read per SM (the fix-up).

      Tiles of fewer than 64 rows are swap-AB kernels (the few tokens on the
      MMA's N side): candidates only when M fits in one of them, since their
      operand reuse is poor.
    * ``token_tiles`` (grouped MoE expert GEMMs): the MoE kernels also offer a
      tile with each group's tokens on the MMA's N side, ``tile_tokens_dim`` =
      tokens per expert rounded up to a power of two, clamped to 8-128, and the
      weights on the full-rate 128-row side (TensorRT-LLM
      ``fused_moe_trtllm_gen.calculate_tile_tokens_dim``; TensorRT-LLM's sm90
      MoE GEMMs likewise run CTA shapes 128 x {16..256}), so m = 36 tokens pay
      a 64-token tile at the full rate, not a half-rate 64-row or a 128-row tile.
    * Tiles pad m and n (tile quantization) and K pads to ``gpu.k_tile_bytes`` of
      the math format. A tile of rate r runs at ``r × peak[math_precision] ×
      gpu.gemm_efficiency_at(math_precision) × efficiency / sms`` FLOP/s per SM.
    * Tile latency: every tile an SM runs adds ``tile_overhead_s`` after the
      roofline (pipeline fill and epilogue not hidden behind the next tile's main
      loop, whether the main loop waits on math or on memory): small-K GEMMs and
      many small groups, such as fine-grained experts, pay it on little work.
    * Memory: weights n·k·groups at the weight format, inputs m·k·groups at the
      activation format, outputs m·n·groups at ``out_bytes_per_element``, each
      moved once (L2 absorbs re-reads), at ``hbm_bytes_per_s × memory_efficiency
      × bandwidth_efficiency``.
    * Plus ``kernel_overhead_s`` seconds per kernel (default ``gpu.kernel_overhead_s``,
      an isolated kernel's; a serving step adds its runtime's gap); combined by :func:`roofline`.
    """
    if m <= 0 or n <= 0 or k <= 0 or groups <= 0:
        return GemmCost((0.0, "memory", 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, (0, 0, 0)))
    return _gemm_cached(gpu, m, n, k, weights, activations, groups, out_bytes_per_element, split_k, efficiency,
                        bandwidth_efficiency, tile_overhead_s, token_tiles,
                        gpu.kernel_overhead_s if kernel_overhead_s is None else kernel_overhead_s)


@lru_cache(maxsize=256)
def _tiles(gpu: "GPU") -> tuple[tuple[int, int, int, int, float], ...]:
    """(tile_m, tile_n, sms_per_tile, tiles_per_wave, rate) for the GPU's GEMM kernels."""
    return tuple((tm, tn, spt, max(1, gpu.sms // spt), rate) for tm, tn, spt, rate in gpu.gemm_tiles)


@lru_cache(maxsize=1 << 17)
def _gemm_cached(gpu: "GPU", m: int, n: int, k: int, weights: str, activations: str, groups: int,
                 out_b: float, split_k: bool, eff: float, bw_eff: float, tile_oh: float,
                 token_tiles: bool, kernel_oh: float) -> GemmCost:
    prec = math_precision(weights, activations, gpu)
    wb, ab = BYTES_PER_ELEMENT[weights], BYTES_PER_ELEMENT[activations]
    rate_per_sm = gpu.peak_flops_per_s[prec] * gpu.gemm_efficiency_at(prec) * eff / gpu.sms  # FLOP/s per SM at rate 1
    # K pads to whole k-tiles of k_tile_bytes in the math format (128 B = 64 bf16 / 128 fp8 / 256 fp4 elements)
    k_tile = max(1, int(gpu.k_tile_bytes / _MATH_BYTES[prec]))
    k_iters = -(-k // k_tile)
    k_pad = k_iters * k_tile
    flops = 2.0 * m * n * k * groups
    bw = gpu.hbm_bytes_per_s * gpu.memory_efficiency * bw_eff
    base_bytes = groups * (n * k * wb + m * k * ab + m * n * out_b)
    base_memory_s = base_bytes / bw
    best = None
    tiles_list = _tiles(gpu)
    if token_tiles:  # tokens on the N side: a power of two of 8..128 tokens by 128 weight rows, full rate
        tiles_list = tiles_list + ((min(128, max(8, 1 << (m - 1).bit_length())), 128, 1, max(1, gpu.sms), 1.0),)
    for tm, tn, spt, per_wave, rate in tiles_list:
        if tm < _SWAP_AB_MAX_ROWS and m > tm:
            continue  # a swap-AB tile (tokens on the MMA's N side) serves a GEMM whose M fits in one tile
        tiles = -(-m // tm) * -(-n // tn) * groups  # tile quantization
        t_eff = m * n * groups / (tiles * tm * tn)
        tile_s = 2.0 * tm * tn / (rate_per_sm * rate * spt)  # seconds per K element of one tile
        # data-parallel: waves of whole tiles (wave quantization)
        waves = -(-tiles // per_wave)
        c, lat = waves * tile_s * k_pad, waves * tile_oh
        key = (max(c, base_memory_s) + lat, c)
        if best is None or key < best[0]:
            best = (key, c, base_memory_s, base_bytes, t_eff, tiles / (waves * per_wave), (tm, tn, 1), lat)
        if split_k and tiles < per_wave:
            # split-K: spread K over idle SMs (at least 4 k-tiles per split); fp32 partials written and re-read
            for splits in (2, 4, 8, 16):
                if splits * tiles > per_wave or k_pad // (splits * k_tile) < 4:
                    break
                k_split = -(-k_pad // (splits * k_tile)) * k_tile
                nbytes = base_bytes + groups * m * n * 8.0 * splits
                c, mem = tile_s * k_split, nbytes / bw  # one wave
                key = (max(c, mem) + tile_oh, c)
                if key < best[0]:
                    best = (key, c, mem, nbytes, t_eff, tiles * splits / per_wave, (tm, tn, splits), tile_oh)
        if gpu.stream_k and tiles > per_wave and tiles % per_wave:
            # stream-K: every worker takes ceil(tiles * k_iters / workers) k-tiles; each worker that starts
            # mid-tile leaves one fp32 partial tile to fix up (written once, read once)
            per_worker = -(-(tiles * k_iters) // per_wave)
            c = tile_s * per_worker * k_tile
            nbytes = base_bytes + per_wave * tm * tn * 8.0
            mem = nbytes / bw
            lat = tile_oh * (per_worker / k_iters + 1)  # a worker touches about share / k_iters + 1 tiles
            key = (max(c, mem) + lat, c)
            if key < best[0]:
                best = (key, c, mem, nbytes, t_eff, tiles * k_iters / (per_worker * per_wave), (tm, tn, 0), lat)
    _, compute_s, memory_s, nbytes, t_eff, w_eff, tile, lat = best
    time_s, bound = roofline(compute_s, memory_s, kernel_oh + lat)
    return GemmCost((time_s, bound, flops, nbytes, t_eff, w_eff, compute_s, memory_s, tile))
