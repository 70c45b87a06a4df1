"""NVFP4 / FP8 / BF16 fake-quant: hand-computed values, edge cases, the reference oracle, STE."""

from __future__ import annotations

import zlib

import pytest
import torch

from co_design.quant import (
    FORMATS,
    fake_quantize,
    fake_quantize_bf16,
    fake_quantize_fp8,
    fake_quantize_nvfp4,
)
from co_design.quant.formats import _nvfp4_scales, _round_e2m1_
from co_design.quant.reference import E2M1_GRID, reference_fake_quantize_nvfp4, reference_round_e2m1



def _block(values: list[float]) -> torch.Tensor:
    """A (1, 16) tensor holding `values` then zeros."""
    x = torch.zeros(1, 16)
    x[0, : len(values)] = torch.tensor(values)
    return x


# --- E2M1 rounding -------------------------------------------------------------------------------

TIES = [(0.25, 0.0), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0), (3.5, 4.0), (5.0, 4.0)]


@pytest.mark.parametrize(("value", "expected"), TIES)
def test_e2m1_ties_round_to_even_in_a_block(value: float, expected: float) -> None:
    # amax 6 in the same block: g = 1/448, s = 6/6/g = 448 exactly, so g*s = 1 and x/(g*s) = x
    x = _block([6.0, value, -value])
    out = fake_quantize_nvfp4(x)
    assert out[0, 1].item() == expected
    assert out[0, 2].item() == -expected
    assert out[0, 0].item() == 6.0


def test_e2m1_grid_values_are_fixed_points() -> None:
    grid = torch.tensor(E2M1_GRID)
    x = torch.cat([grid, -grid]).reshape(1, 16)  # contains 6: g*s = 1
    assert torch.equal(fake_quantize_nvfp4(x), x)


def test_e2m1_rounding_matches_reference_near_every_midpoint_and_boundary() -> None:
    # every fp32 within 64 ulps of each midpoint, grid point and saturation value, both signs
    points = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, *E2M1_GRID, 6.5, 7.0, 8.0])
    bits = points.view(torch.int32)[:, None] + torch.arange(-64, 65, dtype=torch.int32)[None, :]
    v = bits.view(torch.float32).flatten()
    v = v[~v.isnan()]  # bit patterns "below" +0 are NaNs
    v = torch.cat([v, -v, torch.linspace(-10, 10, 100_001), torch.tensor([1e-45, 1e-38, 1e30])])
    assert torch.equal(_round_e2m1_(v.clone()), reference_round_e2m1(v))


def test_saturation_beyond_six() -> None:
    # scaled values above 6 occur when the E4M3 block scale rounds down (see the masked-STE test)
    assert _round_e2m1_(torch.tensor([6.4, 6.9, 7.0, 9.0, -100.0])).tolist() == [6.0, 6.0, 6.0, 6.0, -6.0]


# --- scales --------------------------------------------------------------------------------------


def test_block_with_known_scale() -> None:
    # block 0 holds amax 6 (g = 1/448); block 1 has amax 3: s = 3/6*448 = 224 (exact in E4M3),
    # g*s = 0.5, so 1.3 -> 2.6 -> 3 (step 1) -> 1.5, 0.3 -> 0.6 -> 0.5 -> 0.25, 3 -> 6 -> 3.
    x = torch.zeros(1, 32)
    x[0, 0] = 6.0
    x[0, 16:19] = torch.tensor([3.0, 1.3, 0.3])
    out = fake_quantize_nvfp4(x)
    assert out[0, 16:19].tolist() == [3.0, 1.5, 0.25]


def test_block_scale_rounds_with_e4m3_rne() -> None:
    # amax 6 elsewhere (g = 1/448); block amax 6*(17/448)*(1+1/32): s = 17.53 -> E4M3 step 2 at
    # [16, 32) -> 18; the block max maps to 6*17.53/18 = 5.84 -> 6; out = 6 * g * 18
    x = torch.zeros(1, 32)
    x[0, 0] = 6.0
    block_amax = 6.0 * 17.0 / 448.0 * (1 + 1 / 32)
    x[0, 16] = block_amax
    out = fake_quantize_nvfp4(x)
    assert out[0, 16].item() == pytest.approx(6.0 * 18.0 / 448.0, rel=1e-6)


def test_zero_block_and_all_zero_tensor_give_zeros() -> None:
    x = torch.zeros(2, 32)
    x[0, :16] = torch.randn(16)
    out = fake_quantize_nvfp4(x)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0, 16:], torch.zeros(16)) and torch.equal(out[1], torch.zeros(32))
    for fmt in FORMATS:
        z = fake_quantize(torch.zeros(3, 16), fmt)
        assert torch.equal(z, torch.zeros(3, 16)), fmt


def test_tiny_block_scale_is_subnormal_or_zero_by_plain_rne() -> None:
    # pinned semantics: plain RNE cast of s, no clamp at 2**-6 (torchao) or 2**-9 (ModelOpt CPU)
    x = torch.zeros(1, 48)
    x[0, 0] = 6.0 * 448.0  # amax: g = 1
    x[0, 16] = 6.0 * 2.0**-8  # s = 2**-8: an E4M3 subnormal (2 * 2**-9), kept exactly
    x[0, 32] = 6.0 * 2.0**-11  # s = 2**-11 < half the smallest subnormal: rounds to 0 -> zeros
    x[0, 33] = -3.0 * 2.0**-11
    x.requires_grad_(True)
    out = fake_quantize_nvfp4(x, mask_grad_beyond_amax=True)
    assert out[0, 16].item() == 6.0 * 2.0**-8
    assert torch.equal(out[0, 32:], torch.zeros(16))
    out.sum().backward()  # flushed, not clipped: the masked STE keeps their gradient
    assert torch.equal(x.grad, torch.ones(1, 48))


def test_last_dim_not_multiple_of_16_names_the_size() -> None:
    with pytest.raises(ValueError, match="last dimension 24"):
        fake_quantize_nvfp4(torch.randn(4, 24))
    with pytest.raises(ValueError, match="multiple of 16"):
        fake_quantize_nvfp4(torch.tensor(1.0))
    fake_quantize_fp8(torch.randn(4, 24))  # FP8 and BF16 have no block constraint
    fake_quantize_bf16(torch.randn(4, 24))


@pytest.mark.parametrize("fmt", FORMATS)
def test_non_finite_input_propagates_nan(fmt: str) -> None:
    for bad in (float("nan"), float("inf")):
        x = torch.randn(2, 32)
        x[1, 5] = bad
        out = fake_quantize(x, fmt)
        assert not torch.isfinite(out[1, 5]), (fmt, bad)
        if fmt != "bf16":  # the scale is non-finite, so no output value is silently "fixed"
            assert torch.isnan(out).any()
    assert torch.isnan(fake_quantize_nvfp4(torch.full((1, 16), float("nan")))).all()


def test_bad_format_and_dtype_errors() -> None:
    with pytest.raises(ValueError, match="'nvfp5'.*nvfp4, fp8, bf16"):
        fake_quantize(torch.randn(16), "nvfp5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="float32, bfloat16 and float16"):
        fake_quantize_nvfp4(torch.ones(16, dtype=torch.float64))


# --- against the reference oracle, shapes and dtypes --------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(16,), (8, 64), (2, 3, 32), (2, 1, 2, 48)])
def test_matches_reference_bit_for_bit(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    # a seed fixed by the case (hash() of a tuple of strings changes with PYTHONHASHSEED on every run)
    gen = torch.Generator().manual_seed(zlib.crc32(repr((shape, str(dtype))).encode()))
    # magnitudes spread over 4 decades along the last dim: many block scales, some subnormal
    x = torch.randn(shape, generator=gen) * torch.logspace(-4, 0, shape[-1])
    x = (x * 100).to(dtype)
    out = fake_quantize_nvfp4(x)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out, reference_fake_quantize_nvfp4(x))


def test_output_values_are_on_the_grid_times_block_scale() -> None:
    x = torch.randn(4, 64)
    out = fake_quantize_nvfp4(x)
    ref_scales = reference_fake_quantize_nvfp4(x).reshape(4, 4, 16).abs().amax(-1, keepdim=True) / 6
    codes = (out.reshape(4, 4, 16) / ref_scales).abs()  # (4, 4, 16), ~E2M1 values
    nearest = torch.tensor(E2M1_GRID)[(codes[..., None] - torch.tensor(E2M1_GRID)).abs().argmin(-1)]
    torch.testing.assert_close(codes, nearest, rtol=1e-6, atol=0)


def test_non_contiguous_input() -> None:
    x = torch.randn(32, 48).t()  # (48, 32) non-contiguous
    assert torch.equal(fake_quantize_nvfp4(x), reference_fake_quantize_nvfp4(x.contiguous()))


def test_group_dims_gives_each_matrix_its_own_global_scale() -> None:
    w = torch.randn(3, 8, 32) * torch.tensor([1.0, 1e-3, 1e3])[:, None, None]
    out = fake_quantize_nvfp4(w, group_dims=1)
    for e in range(3):
        assert torch.equal(out[e], fake_quantize_nvfp4(w[e]))
    with pytest.raises(ValueError, match="group_dims"):
        fake_quantize_nvfp4(w, group_dims=3)


def test_fp8_per_tensor_scale() -> None:
    # amax 448*2 -> scale 2; 3.3*2 ... E4M3 near 3.3: step 0.25 in [2,4) -> 3.25 -> 6.5
    x = torch.tensor([896.0, 6.6, -6.6, 0.0])
    assert fake_quantize_fp8(x).tolist() == [896.0, 6.5, -6.5, 0.0]
    y = torch.randn(64) * 5
    s = y.abs().max() / 448
    assert torch.equal(fake_quantize_fp8(y), (y / s).to(torch.float8_e4m3fn).float() * s)


def test_bf16_round_trip() -> None:
    x = torch.tensor([1.0 + 2.0**-8, 3.0])  # bf16 spacing at 1 is 2**-7: a tie, to even -> 1.0
    assert fake_quantize_bf16(x).tolist() == [1.0, 3.0]
    b = torch.randn(8, dtype=torch.bfloat16)
    assert fake_quantize_bf16(b) is b


# --- straight-through gradient --------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_ste_gradient_is_identity(fmt: str) -> None:
    x = torch.randn(4, 32, requires_grad=True)
    upstream = torch.randn(4, 32)
    fake_quantize(x, fmt).backward(upstream)
    assert torch.equal(x.grad, upstream)


def test_ste_bf16_input_keeps_dtype_in_gradient() -> None:
    x = torch.randn(4, 32, dtype=torch.bfloat16, requires_grad=True)
    fake_quantize_nvfp4(x).sum().backward()
    assert x.grad.dtype == torch.bfloat16 and torch.equal(x.grad, torch.ones_like(x))


def test_masked_ste_zeroes_gradient_of_clipped_elements() -> None:
    # g = 1 (amax 2688); block 1 amax 0.95*8*6 = 45.6 -> s = 7.6 -> E4M3 7.5: x/(g*s) = 6.08 > 6
    x = torch.zeros(1, 32)
    x[0, 0] = 2688.0
    x[0, 16] = 45.6
    x[0, 17] = 10.0
    x.requires_grad_(True)
    fake_quantize_nvfp4(x, mask_grad_beyond_amax=True).sum().backward()
    expected = torch.ones(1, 32)
    expected[0, 16] = 0.0
    assert torch.equal(x.grad, expected)
    x.grad = None
    fake_quantize_nvfp4(x).sum().backward()  # unmasked: identity
    assert torch.equal(x.grad, torch.ones(1, 32))


def test_no_grad_path_equals_grad_path() -> None:
    x = torch.randn(4, 32)
    with torch.no_grad():
        a = fake_quantize_nvfp4(x)
    b = fake_quantize_nvfp4(x.clone().requires_grad_(True))
    assert torch.equal(a, b.detach())


def test_input_is_not_modified() -> None:
    x = torch.randn(4, 32)
    before = x.clone()
    fake_quantize_nvfp4(x)
    assert torch.equal(x, before)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_paths_match_cpu(dtype: torch.dtype) -> None:
    import co_design.quant.formats as formats

    x = (torch.randn(64, 256) * torch.logspace(-3, 1, 256)).to(dtype)
    expected = fake_quantize_nvfp4(x)
    fused = fake_quantize_nvfp4(x.cuda()).cpu()  # torch.compile path
    formats.use_compile_on_cuda = False
    try:
        eager = fake_quantize_nvfp4(x.cuda()).cpu()
    finally:
        formats.use_compile_on_cuda = True
    assert torch.equal(eager, expected)
    assert torch.equal(fused, expected)


def test_functional_math_behind_the_cuda_compile_path_matches_reference() -> None:
    from co_design.quant.formats import _nvfp4_functional

    x = torch.randn(8, 64) * torch.logspace(-4, 1, 64)
    x[2] = 0.0
    assert torch.equal(_nvfp4_functional(x, 0), reference_fake_quantize_nvfp4(x))
    w = torch.randn(2, 8, 32)
    assert torch.equal(_nvfp4_functional(w, 1), fake_quantize_nvfp4(w, group_dims=1))


@pytest.mark.slow
def test_torch_compiled_math_matches_reference_on_cpu() -> None:
    # the CUDA fused path is torch.compile(_nvfp4_functional); Inductor's CPU backend checks that the
    # compiled graph keeps the exact semantics (needs a C++ compiler; ~20-60 s on 2 busy cores)
    from co_design.quant.formats import _nvfp4_functional

    compiled = torch.compile(_nvfp4_functional, dynamic=True)
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(64, 256) * torch.logspace(-4, 1, 256)).to(dtype)
        x[1] = 0.0
        assert torch.equal(compiled(x, 0), reference_fake_quantize_nvfp4(x))


def test_reused_cpu_scratch_buffer_gives_the_same_results_across_sizes() -> None:
    xs = [torch.randn(64, 64), torch.randn(4, 16), torch.randn(128, 48), torch.randn(2, 32)]
    for x in xs + xs[::-1]:
        assert torch.equal(fake_quantize_nvfp4(x), reference_fake_quantize_nvfp4(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_reference_with_subnormal_and_flushed_block_scales(dtype: torch.dtype) -> None:
    # block amax from amax down to amax * 1e-7: normal, subnormal (< amax/28672) and zero (< amax/458752) scales
    x = (torch.randn(16, 256, generator=torch.Generator().manual_seed(7)) * torch.logspace(-7, 0, 256)).to(dtype)
    _, s = _nvfp4_scales(x.float().reshape(16, 16, 16).abs().amax(-1), 0)  # (16, 16) E4M3 scales
    assert (s == 0).any() and ((s > 0) & (s < 2.0**-6)).any() and (s >= 2.0**-6).any()
    assert torch.equal(fake_quantize_nvfp4(x), reference_fake_quantize_nvfp4(x))


def test_scratch_buffer_first_made_under_inference_mode_works_in_training() -> None:
    # An evaluation under torch.inference_mode (Lightning's trainer.validate/test/predict) before
    # training: the per-thread scratch buffer made there must stay usable outside it. A fresh
    # thread has no buffer yet, so its first call allocates one inside inference mode.
    import threading

    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    results: dict[str, object] = {}

    def run() -> None:
        try:
            with torch.inference_mode():
                results["eval"] = fake_quantize_nvfp4(x)
            w = x.clone().requires_grad_()
            fake_quantize_nvfp4(w).sum().backward()
            results["train"] = fake_quantize_nvfp4(x)
            results["grad"] = w.grad
        except Exception as exc:  # re-raised in the test's thread
            results["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in results:
        raise results["error"]  # type: ignore[misc]
    expected = reference_fake_quantize_nvfp4(x)
    assert torch.equal(results["eval"], expected) and torch.equal(results["train"], expected)
    assert torch.equal(results["grad"], torch.ones_like(x))


def test_failed_torch_compile_falls_back_to_eager_with_a_warning(monkeypatch) -> None:
    # The CUDA fused path compiles lazily; a missing/broken Triton must not fail the training step.
    from co_design.quant import formats

    def broken_compile(fn, **kwargs):
        def run(*args):
            raise RuntimeError("Cannot find a working triton installation")

        return run

    monkeypatch.setattr(formats, "_compiled_nvfp4", None)
    monkeypatch.setattr(formats, "use_compile_on_cuda", True)
    monkeypatch.setattr(torch, "compile", broken_compile)
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(5))
    with pytest.warns(RuntimeWarning, match="torch.compile failed.*triton.*eager path"):
        out = formats._nvfp4_cuda_fused(x, 0)  # the CPU tensor stands in for a CUDA one
    assert torch.equal(out, reference_fake_quantize_nvfp4(x))
    assert formats.use_compile_on_cuda is False
