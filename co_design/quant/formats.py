"""Fake-quantization (quantize then dequantize) for NVFP4, FP8 (E4M3) and BF16.

Every function takes a tensor and returns a tensor of the same shape, dtype and device holding the
values the low-precision format can represent. Gradients pass straight through (identity STE, as in
torchao and NVIDIA ModelOpt), optionally masked where the value was clipped.

NVFP4 semantics, as the public implementations agree on them (torchao 0.18 ``NVFP4Tensor``,
NVIDIA ModelOpt 0.47 ``NVFP4QTensor``, compressed-tensors 0.20 NVFP4 preset; NVIDIA's "Introducing
NVFP4" technical blog for the format):

* blocks of 16 consecutive elements along the last dimension;
* per-tensor fp32 global scale ``g = amax(|x|) / (6 * 448)``;
* per-block scale ``s = block_amax / 6 / g`` clamped to <= 448 and cast to float8_e4m3fn with
  round-to-nearest-even (subnormal E4M3 scales allowed, a scale that rounds to 0 zeroes its block);
* ``q = RNE_E2M1(x / (g * s))`` with E2M1 values +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}, ties to even,
  |v| > 6 saturating to 6; output ``q * (g * s)`` computed in fp32 and cast back to x's dtype.

All-zero tensors and zero blocks give zeros. Non-finite input is not fixed up: a NaN or inf anywhere
makes the global scale non-finite, so the whole output is NaN.
"""

from __future__ import annotations

import threading
import warnings
from typing import Final

import torch
from torch import Tensor

from co_design.precision import PRECISIONS, Precision

__all__ = [
    "BLOCK_SIZE",
    "E2M1_MAX",
    "E4M3_MAX",
    "FORMATS",
    "Format",
    "fake_quantize",
    "fake_quantize_bf16",
    "fake_quantize_fp8",
    "fake_quantize_nvfp4",
]

Format = Precision  # a fake-quantization format is a serving precision (co_design.precision)
FORMATS: Final[tuple[str, ...]] = PRECISIONS

BLOCK_SIZE: Final = 16  # NVFP4 elements per block scale (REFERENCE.md section 1)
E2M1_MAX: Final = 6.0  # largest FP4 E2M1 magnitude
E4M3_MAX: Final = 448.0  # largest float8_e4m3fn magnitude

_ABS_BITS: Final = 0x7FFFFFFF  # fp32 bits & mask == |v|
_EXPONENT_BITS: Final = 0x7F800000  # fp32 exponent field: bits & mask == 2**floor(log2|v|) as fp32
# (v + C) - C rounds v to a multiple of `step` with round-to-nearest-even when C = 1.5 * 2**23 * step
# (the sum lands in [2**23 * step, 2**24 * step), where the fp32 spacing is exactly `step`).
# With p = 2**floor(log2|v|) clamped to [1, 4], the E2M1 step is p / 2, so C = p * 0.75 * 2**23.
_MAGIC_PER_P: Final = 0.75 * 2.0**23
_SMALLEST_FP32: Final = 2.0**-149  # smallest positive (subnormal) float32
_FLOAT_DTYPES: Final = (torch.float32, torch.bfloat16, torch.float16)


def _check_input(x: Tensor, what: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{what} expects a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{what} supports float32, bfloat16 and float16 tensors, got {x.dtype}; "
            "convert with x.float() first"
        )


def _check_block_dim(x: Tensor) -> None:
    if x.dim() == 0 or x.shape[-1] % BLOCK_SIZE != 0:
        last = x.shape[-1] if x.dim() else "none (0-d tensor)"
        raise ValueError(
            f"NVFP4 needs the last dimension to be a multiple of {BLOCK_SIZE} (blocks of "
            f"{BLOCK_SIZE} along the reduction dim); got shape {tuple(x.shape)} with last "
            f"dimension {last}. Pad it to a multiple of {BLOCK_SIZE} or skip this tensor."
        )


def _nvfp4_scales(block_amax: Tensor, group_dims: int) -> tuple[Tensor, Tensor]:
    """(g, s) from per-block amax (*lead, nblocks): the fp32 global scale g (broadcastable to
    (*lead, nblocks)) and the E4M3-rounded block scale s (*lead, nblocks) as fp32."""
    # per-tensor amax over everything except the first `group_dims` dims (per expert for 3-D weights)
    reduce_dims = tuple(range(group_dims, block_amax.dim()))
    amax = block_amax.amax(dim=reduce_dims, keepdim=True) if reduce_dims else block_amax
    g = amax / (E2M1_MAX * E4M3_MAX)  # fp32 global scale; NaN/inf propagate
    g_safe = torch.where(g == 0, torch.ones_like(g), g)  # all-zero tensor: every block_amax is 0
    s = (block_amax / E2M1_MAX / g_safe).clamp_(max=E4M3_MAX)
    s = s.to(torch.float8_e4m3fn).to(torch.float32)  # RNE cast; tiny scales may round to 0
    return g, s


def _blocks(x: Tensor) -> Tensor:
    """fp32 view (copy for bf16/fp16 or non-contiguous input) of x as (*lead, K // 16, 16)."""
    _check_block_dim(x)
    xf = x.float()  # no copy for fp32
    return xf.reshape(*xf.shape[:-1], xf.shape[-1] // BLOCK_SIZE, BLOCK_SIZE)


def _nvfp4_scaled(x: Tensor, group_dims: int) -> tuple[Tensor, Tensor]:
    """Return (y, scale): y = x / (g*s) as a fresh fp32 (*lead, nblocks, 16) tensor, and g*s."""
    x_blocks = _blocks(x)  # (*lead, nblocks, 16)
    y = torch.empty(x_blocks.shape, dtype=torch.float32, device=x_blocks.device)  # becomes the output
    y_bits = y.view(torch.int32)
    # |x| by clearing the sign bit; as int32 the order of non-negative floats is kept and NaN
    # (0x7FC00000) sorts above inf, so the integer amax is the float amax with NaN propagating.
    # (Much faster on CPU than abs() + a float amax over a 16-wide inner dim.)
    torch.bitwise_and(x_blocks.view(torch.int32), _ABS_BITS, out=y_bits)
    block_amax = y_bits.amax(dim=-1).view(torch.float32)  # (*lead, nblocks)
    g, s = _nvfp4_scales(block_amax, group_dims)  # (*lead, nblocks)
    scale = (g * s).unsqueeze(-1)  # (*lead, nblocks, 1) fp32
    # zero scale (zero block, or a scale that rounded to 0): divide by the smallest fp32 instead,
    # giving 0 or +-inf, which round to 0 or +-6 and then times the zero scale give 0. (Only zeros
    # change: every positive fp32 is >= 2**-149. One op instead of eq + fill + where.)
    torch.div(x_blocks, scale.clamp(min=_SMALLEST_FP32), out=y)  # exactly x / (g*s) in fp32, as pinned
    return y, scale


_scratch = threading.local()
# Keep at most a 64 MiB int32 scratch per thread (CPU only): 16M elements, e.g. 4096 tokens x 4096
# features. One buffer per thread that only grows to the largest tensor seen (no per-shape
# entries); bigger tensors get a fresh allocation each call.
_SCRATCH_MAX_BYTES = 1 << 26


def _scratch_like(y: Tensor) -> Tensor:
    """An int32 buffer shaped like y. On CPU one buffer per thread is reused across calls: fresh
    large allocations cost page faults there (a 64 MiB one takes tens of ms on a busy VM)."""
    if y.device.type != "cpu" or y.numel() * 4 > _SCRATCH_MAX_BYTES:
        return torch.empty_like(y, dtype=torch.int32)
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.numel() < y.numel():
        # a normal tensor even when first made under torch.inference_mode (Lightning's
        # trainer.validate/test/predict, any eval loop): an inference tensor can never again be
        # written outside inference mode, so every later training step would fail
        with torch.inference_mode(False):
            buf = _scratch.buf = torch.empty(y.numel(), dtype=torch.int32)
    return buf[: y.numel()].view(y.shape)


def _round_e2m1_(y: Tensor) -> Tensor:
    """In place: round fp32 y to the E2M1 grid, nearest with ties to even, saturating at +-6."""
    # p = 2**floor(log2|y|) from the exponent bits (sign dropped), clamped to [1, 4] -> step p/2
    magic = _scratch_like(y)
    torch.bitwise_and(y.view(torch.int32), _EXPONENT_BITS, out=magic)
    magic_f = magic.view(torch.float32).clamp_(1.0, 4.0).mul_(_MAGIC_PER_P)  # 1.5 * 2**23 * step
    y.add_(magic_f).sub_(magic_f)  # RNE to a multiple of step: 0.5 below 2, 1 below 4, 2 above
    return y.clamp_(-E2M1_MAX, E2M1_MAX)  # e.g. 6.9 -> 6 and 7 -> 8 -> 6; NaN stays NaN


def _nvfp4_forward(x: Tensor, group_dims: int, want_keep: bool) -> tuple[Tensor, Tensor | None]:
    y, scale = _nvfp4_scaled(x, group_dims)  # (*lead, nblocks, 16), (*lead, nblocks, 1)
    keep = (y.abs() <= E2M1_MAX) | (scale == 0) if want_keep else None  # not clipped by saturation
    out = _round_e2m1_(y).mul_(scale).view(x.shape).to(x.dtype)
    return out, (keep.view(x.shape) if keep is not None else None)


_compiled_nvfp4 = None


def _nvfp4_functional(x: Tensor, group_dims: int) -> Tensor:
    """The same math without out= / in-place ops (what torch.compile fuses on CUDA)."""
    x_blocks = _blocks(x)  # (*lead, nblocks, 16)
    g, s = _nvfp4_scales(x_blocks.abs().amax(dim=-1), group_dims)
    scale = (g * s).unsqueeze(-1)  # (*lead, nblocks, 1)
    y = x_blocks / torch.where(scale == 0, torch.ones_like(scale), scale)
    # step 0.5 / 1 / 2 from the exponent bits; torch.round is half-to-even. (round() rather than the
    # (y + C) - C trick of the eager path, which a fast-math compiler could fold away.)
    step = (y.view(torch.int32) & _EXPONENT_BITS).view(torch.float32).clamp(1.0, 4.0) * 0.5
    q = (torch.round(y / step) * step).clamp(-E2M1_MAX, E2M1_MAX)
    return (q * scale).view(x.shape).to(x.dtype)


def _nvfp4_cuda_fused(x: Tensor, group_dims: int) -> Tensor:
    """torch.compile'd :func:`_nvfp4_functional` (CUDA only): the elementwise chain in one kernel.

    If compiling fails (no working Triton, an unsupported GPU, ...), warn once and stay on the
    eager path for the rest of the process rather than failing the training step.
    """
    global _compiled_nvfp4, use_compile_on_cuda
    if _compiled_nvfp4 is None:
        _compiled_nvfp4 = torch.compile(_nvfp4_functional, dynamic=True)
    try:
        return _compiled_nvfp4(x, group_dims)
    except Exception as exc:  # torch.compile raises backend-specific types
        use_compile_on_cuda = False
        warnings.warn(
            f"NVFP4 fake-quant: torch.compile failed ({type(exc).__name__}: {str(exc)[:200]}); using the "
            "eager path from now on (set co_design.quant.formats.use_compile_on_cuda = False to skip compiling)",
            RuntimeWarning,
            stacklevel=2,
        )
        return _nvfp4_forward(x, group_dims, want_keep=False)[0]


#: Set to False to keep CUDA tensors on the eager path (the fused path is used only on CUDA).
use_compile_on_cuda: bool = True


def _fp8_forward(x: Tensor, want_keep: bool) -> tuple[Tensor, Tensor | None]:
    xf = x.float()
    s = xf.abs().amax() / E4M3_MAX  # fp32 per-tensor scale
    y = xf / torch.where(s == 0, torch.ones_like(s), s)  # fresh fp32 buffer
    keep = y.abs() <= E4M3_MAX if want_keep else None
    y.clamp_(-E4M3_MAX, E4M3_MAX)
    out = y.to(torch.float8_e4m3fn).to(torch.float32).mul_(s).to(x.dtype)
    return out, keep


def _bf16_forward(x: Tensor, want_keep: bool) -> tuple[Tensor, Tensor | None]:
    keep = x.abs() <= torch.finfo(torch.bfloat16).max if want_keep else None
    return x.to(torch.bfloat16).to(x.dtype), keep


class _FakeQuantSTE(torch.autograd.Function):
    """Quantize-dequantize forward; identity gradient, optionally zero where the value was clipped."""

    @staticmethod
    def forward(ctx, x: Tensor, fmt: str, mask_grad: bool, group_dims: int) -> Tensor:  # type: ignore[override]
        out, keep = _dispatch(x, fmt, mask_grad, group_dims)
        ctx.mask_grad = mask_grad
        if mask_grad:
            ctx.save_for_backward(keep)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        if ctx.mask_grad:
            (keep,) = ctx.saved_tensors
            return grad_out * keep, None, None, None
        return grad_out, None, None, None


def _dispatch(x: Tensor, fmt: str, want_keep: bool, group_dims: int) -> tuple[Tensor, Tensor | None]:
    with torch.no_grad():
        if fmt == "nvfp4":
            if x.is_cuda and use_compile_on_cuda and not want_keep:
                return _nvfp4_cuda_fused(x, group_dims), None
            return _nvfp4_forward(x, group_dims, want_keep)
        if fmt == "fp8":
            return _fp8_forward(x, want_keep)
        if fmt == "bf16":
            return _bf16_forward(x, want_keep)
    raise ValueError(_unknown_format(fmt))


def _unknown_format(fmt: object) -> str:
    return f"unknown quantization format {fmt!r}; choose one of {', '.join(FORMATS)}"


def fake_quantize(
    x: Tensor, format: Format, *, mask_grad_beyond_amax: bool = False, group_dims: int = 0
) -> Tensor:
    """Quantize-dequantize ``x`` in ``format`` ("nvfp4", "fp8" or "bf16").

    Args:
        x: float32, bfloat16 or float16 tensor of any shape (NVFP4: last dim a multiple of 16).
        format: target format.
        mask_grad_beyond_amax: zero the gradient of elements the format clipped (ModelOpt's option;
            with dynamic scales no element exceeds the tensor amax, so the bound used is the clip
            value each element actually saw: 6 * g * s for NVFP4, 448 * scale for FP8, the bf16
            max for BF16). False: identity straight-through gradient.
        group_dims: NVFP4 only; the number of leading dims that index separate tensors, each with
            its own global scale (1 for stacked expert weights of shape (E, out, in)).
    Returns:
        A tensor of x's shape, dtype and device.
    """
    _check_input(x, "fake_quantize")
    if format not in FORMATS:
        raise ValueError(_unknown_format(format))
    if format == "nvfp4":
        _check_block_dim(x)
    if x.numel() == 0:
        return x.clone()
    if not 0 <= group_dims < max(x.dim(), 1):
        raise ValueError(
            f"group_dims must be in [0, {max(x.dim() - 1, 0)}] for a {x.dim()}-d tensor, got {group_dims}"
        )
    if format == "bf16" and x.dtype == torch.bfloat16:
        return x  # already bf16: identity, gradient included
    if torch.is_grad_enabled() and x.requires_grad:
        return _FakeQuantSTE.apply(x, format, mask_grad_beyond_amax, group_dims)
    return _dispatch(x, format, False, group_dims)[0]


def fake_quantize_nvfp4(x: Tensor, *, mask_grad_beyond_amax: bool = False, group_dims: int = 0) -> Tensor:
    """NVFP4 quantize-dequantize (16-element blocks on the last dim); see the module docstring."""
    return fake_quantize(x, "nvfp4", mask_grad_beyond_amax=mask_grad_beyond_amax, group_dims=group_dims)


def fake_quantize_fp8(x: Tensor, *, mask_grad_beyond_amax: bool = False) -> Tensor:
    """FP8 E4M3 quantize-dequantize with one fp32 per-tensor scale amax/448 (RNE, saturating)."""
    return fake_quantize(x, "fp8", mask_grad_beyond_amax=mask_grad_beyond_amax)


def fake_quantize_bf16(x: Tensor) -> Tensor:
    """Round-trip through bfloat16 (RNE); the identity on bf16 input."""
    return fake_quantize(x, "bf16")
