"""Cross-check NVFP4 fake-quant against an independent library on CPU.

Library: torchao 0.18.0 (``torchao.prototype.mx_formats.nvfp4_tensor.NVFP4Tensor``), installed with
``pip install --no-deps torchao==0.18.0`` next to torch 2.13.0; its quantize/dequantize runs on CPU.
Skipped when torchao is not installed.

Known, documented differences (REFERENCE.md section 1), excluded here on purpose:
* tiny block scales: torchao clamps the E4M3 block scale at 2**-6 (no subnormal scales); we follow
  the pinned semantics (plain RNE cast, subnormal scales, 0 below half the smallest subnormal). The
  inputs below keep every block amax above amax / 28672, where s >= 2**-6 and both agree.
* operation order: torchao scales by x * ((1/g) / s), we by x / (g*s). The two can differ by one fp32
  ulp, which flips an element sitting within an ulp of an E2M1 midpoint (rare; bf16 inputs hit it
  more often because their few mantissa bits land on midpoints). Such elements are checked to be
  midpoint cases instead of equal.
* all-zero tensors: torchao gives NaN (0/0), we give zeros (tested in tests/quant/test_formats.py).
"""

from __future__ import annotations

import pytest
import torch

from co_design.quant import fake_quantize_nvfp4

# torchao==0.18.0 is pinned in the test extra: a missing or moved module must fail, not skip.
from torchao.prototype.mx_formats import nvfp4_tensor  # noqa: E402

MIDPOINTS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


def _torchao_fake_quant(x: torch.Tensor) -> torch.Tensor:
    scale = nvfp4_tensor.per_tensor_amax_to_scale(x.float().abs().max())
    return nvfp4_tensor.NVFP4Tensor.to_nvfp4(x, per_tensor_scale=scale).dequantize(x.dtype)


def _scaled(x: torch.Tensor) -> torch.Tensor:
    """x / (g*s) per element, as we compute it (fp32)."""
    rows, k = x.shape
    xb = x.float().reshape(rows, k // 16, 16)
    g = xb.abs().max() / 2688.0
    s = (xb.abs().amax(-1, keepdim=True) / 6 / g).clamp(max=448).to(torch.float8_e4m3fn).float()
    return (xb / (g * s)).reshape(rows, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_torchao_nvfp4tensor(dtype: torch.dtype, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    # rows scaled over 3 decades: block amaxes stay well above amax / 28672 (normal E4M3 scales)
    x = (torch.randn(128, 256, generator=gen) * torch.logspace(-2, 1, 128)[:, None]).to(dtype)
    block_amax = x.float().reshape(128, 16, 16).abs().amax(-1)
    assert block_amax.min() > x.float().abs().max() / 28672 * 4  # outside the tiny-scale regime

    ours, theirs = fake_quantize_nvfp4(x), _torchao_fake_quant(x)
    differ = ours != theirs
    # fp32: essentially all bit-identical; bf16: ~0.3% of elements sit exactly on a midpoint
    assert differ.float().mean() < (1e-4 if dtype == torch.float32 else 1e-2)
    if differ.any():  # the rest: E2M1 midpoint cases flipped by fp32 operation order
        y = _scaled(x).abs()[differ]
        ulp = torch.finfo(torch.float32).eps * y  # (1/g)/s and g*s each carry ~1 ulp of rounding
        assert ((y[:, None] - MIDPOINTS).abs().min(-1).values <= 4 * ulp).all()


def test_matches_torchao_on_exact_ties() -> None:
    # g = 1 (amax 6 * 448); block 1 has amax 6 * 32, so s = 32 and both x / (g*s) and torchao's
    # x * ((1/g) / s) are exact: every tie is decided by E2M1 round-half-to-even alone.
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    x = torch.zeros(4, 32)
    x[:, 0] = 6.0 * 448.0
    x[:, 16:31] = torch.tensor([6.0, *ties, *[-t for t in ties]]) * 32.0
    ours = fake_quantize_nvfp4(x)
    assert ours[0, 17:24].tolist() == [v * 32.0 for v in (0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0)]
    assert torch.equal(ours, _torchao_fake_quant(x))
