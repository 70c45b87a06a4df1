"""A deliberately plain, unfused NVFP4 quantize-dequantize: the test oracle and benchmark baseline.

Same semantics as :func:`co_design.quant.fake_quantize_nvfp4` (REFERENCE.md section 1), written
the obvious way: E2M1 rounding by comparing against every midpoint of the grid, ties decided by an
explicit table, scales computed per block from a reshaped view. No autograd (plain tensors out).
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["E2M1_GRID", "reference_fake_quantize_nvfp4", "reference_round_e2m1"]

#: Non-negative FP4 E2M1 values in code order 0..7 (codes with an even index have mantissa bit 0).
E2M1_GRID: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def reference_round_e2m1(y: Tensor) -> Tensor:
    """Round fp32 values to the nearest E2M1 value, ties to the even code, |v| > 6 -> 6; NaN kept."""
    a = y.abs()
    q = torch.zeros_like(a)
    for i in range(len(E2M1_GRID) - 1):
        lo, hi = E2M1_GRID[i], E2M1_GRID[i + 1]
        mid = (lo + hi) / 2  # exact in fp32
        upper_is_even = (i + 1) % 2 == 0  # the tie goes to the even code
        goes_up = (a > mid) | ((a == mid) & upper_is_even)
        q = torch.where(goes_up, torch.full_like(a, hi), q)
    q = torch.where(torch.isnan(a), a, q)  # comparisons with NaN are False: restore it
    return torch.where(y < 0, -q, q)


def reference_fake_quantize_nvfp4(x: Tensor, block_size: int = 16) -> Tensor:
    """NVFP4 quantize-dequantize of ``x`` (any leading shape, last dim % 16 == 0), fp32 math."""
    if x.shape[-1] % block_size != 0:
        raise ValueError(f"last dimension {x.shape[-1]} is not a multiple of {block_size}")
    xf = x.detach().to(torch.float32)
    blocks = xf.reshape(-1, xf.shape[-1] // block_size, block_size)  # (rows, nblocks, 16)
    block_amax = blocks.abs().amax(dim=-1, keepdim=True)  # (rows, nblocks, 1)
    amax = xf.abs().max()  # scalar
    g = amax / (6.0 * 448.0)
    if g == 0:
        return torch.zeros_like(x)
    s = block_amax / 6.0 / g
    s = torch.clamp(s, max=448.0)
    s = s.to(torch.float8_e4m3fn).to(torch.float32)
    scale = g * s  # (rows, nblocks, 1)
    q = torch.zeros_like(blocks)
    nonzero = (scale != 0).expand_as(blocks)
    y = blocks / scale  # inf/NaN where scale == 0; masked out just below
    q = torch.where(nonzero, reference_round_e2m1(y), q)
    q = torch.where(torch.isnan(scale).expand_as(blocks), torch.nan, q)  # non-finite input
    out = q * scale
    return out.reshape(x.shape).to(x.dtype)
