"""The verbs: quantize_model / dequantize_model (reversible, state_dict-compatible) and stats."""

from __future__ import annotations

import warnings
from fnmatch import fnmatchcase

import torch
from torch import Tensor, nn
from torch.nn.utils import parametrize

from co_design.quant.config import QuantConfig
from co_design.quant.coverage import CoverageReport, quantization_coverage
from co_design.quant.formats import BLOCK_SIZE, E2M1_MAX, _nvfp4_scales, _round_e2m1_, fake_quantize
from co_design.quant.fused import (
    dequantize_fused_experts,
    fused_expert_weights,
    is_fused_quantized,
    quantize_fused_experts,
    quantized_fused_weights,
)
from co_design.quant.modules import FakeQuant, FakeQuantLinear, InputFakeQuant, WeightFakeQuant

__all__ = ["QuantizedModules", "dequantize_model", "is_experts_module", "quantization_stats", "quantize_model"]


class QuantizedModules(list):
    """The names of the modules :func:`quantize_model` changed (a list), with the whole story beside it.

    ``coverage``: the :class:`~co_design.quant.coverage.CoverageReport` of the model after the call
    (which share of attention/FFN/expert weights is quantized, what stayed high precision);
    ``skipped``: ``{module name: reason}`` for what could not be quantized.
    """

    coverage: CoverageReport
    skipped: dict[str, str]


def is_experts_module(module: nn.Module) -> bool:
    """True for grouped-experts modules implementing the protocol (class sets ``_co_design_experts``)."""
    return bool(getattr(type(module), "_co_design_experts", False))


def _expert_weights(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    return [(n, p) for n, p in module.named_parameters(recurse=False) if p.dim() == 3]


def _replace_children(model: nn.Module, mapping: dict[int, nn.Module]) -> None:
    """Point every parent at the replacement (handles a module registered under several names)."""
    for parent in list(model.modules()):
        for child_name, child in list(parent._modules.items()):
            if child is not None and id(child) in mapping:
                parent._modules[child_name] = mapping[id(child)]


def _skip_reason(name: str, module: nn.Module, parent: nn.Module | None, config: QuantConfig) -> str | None:
    """Why ``module`` (a Linear) must stay as it is, or None to swap it."""
    if parametrize.is_parametrized(module):
        return "it is parametrized (torch.nn.utils.parametrize); remove the parametrization first"
    if type(module).forward is not nn.Linear.forward:
        return f"{type(module).__name__} overrides nn.Linear.forward; swapping it would change its behaviour"
    if isinstance(parent, nn.MultiheadAttention):
        return "nn.MultiheadAttention reads out_proj.weight directly, so a swapped forward would never run"
    if config.format == "nvfp4" and module.in_features % BLOCK_SIZE:
        return f"in_features={module.in_features} is not a multiple of {BLOCK_SIZE} (NVFP4 block size)"
    return None


def _skipped(name: str, patterns: tuple[str, ...]) -> bool:
    """True if a pattern matches any dotted sub-path of ``name``.

    So a pattern matches a module, its ancestors ("a", "a.b" for "a.b.c") and the same names
    one or more levels down a wrapper: ``"lm_head"`` skips ``lm_head`` as well as
    ``model.lm_head`` inside a LightningModule, and ``"*.gate"`` an HF MoE's ``mlp.gate`` router
    (but not ``gate_proj``).
    """
    parts = name.split(".")
    paths = {".".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}
    return any(fnmatchcase(p, pattern) for p in paths for pattern in patterns)


def quantize_model(model: nn.Module, config: QuantConfig | None = None) -> QuantizedModules:
    """Fake-quantize ``model`` in place for QAT; return the names of the modules changed.

    Every ``nn.Linear`` (and subclasses that keep its forward) becomes a :class:`FakeQuantLinear`
    sharing the same Parameters and hooks; grouped-experts modules implementing the protocol get
    parameter-free ``weight_quant`` / ``input_quant`` quantizers; experts stored as fused 3-D
    parameters (transformers 5: ``gate_up_proj``/``down_proj`` with a declared ``is_transposed``
    layout) fake-quantize them per expert along their reduction dim
    (:mod:`co_design.quant.fused`). The returned list carries ``.coverage`` (a
    :class:`~co_design.quant.coverage.CoverageReport`) and ``.skipped``. Modules whose name, or an
    ancestor's name, matches a ``config.skip`` pattern are left alone silently; layers that cannot
    be quantized (NVFP4 with in_features not a multiple of 16, Linear subclasses with their own
    forward, parametrized Linears, ``nn.MultiheadAttention.out_proj``) are left alone with a
    warning naming them. Modules already quantized are kept as they are (idempotent). State_dict
    keys do not change, so checkpoints load in both directions. Call it before optimizers are
    built (Lightning: in ``setup``); :func:`dequantize_model` undoes it.
    """
    config = config if config is not None else QuantConfig()
    if not isinstance(config, QuantConfig):
        raise TypeError(f"config must be a QuantConfig or None, got {type(config).__name__}")
    if isinstance(model, nn.Linear):
        raise TypeError(
            "quantize_model swaps child modules in place and cannot replace the root nn.Linear; "
            "use FakeQuantLinear.from_linear(linear, config) or wrap it in nn.Sequential"
        )
    parents = {id(child): mod for mod in model.modules() for child in mod.children()}
    mapping: dict[int, nn.Module] = {}
    swapped = QuantizedModules()
    skipped: dict[str, str] = {}

    def skip(name: str, reason: str) -> None:
        skipped[name] = reason
        warnings.warn(f"quantize_model: not quantizing {name!r}: {reason}", stacklevel=3)

    for name, module in model.named_modules():
        if not name or _skipped(name, config.skip):
            continue
        if isinstance(module, FakeQuantLinear) or is_fused_quantized(module):
            continue  # already quantized (quantize_model is idempotent)
        if isinstance(module, nn.Linear):
            reason = _skip_reason(name, module, parents.get(id(module)), config)
            if reason is not None:
                skip(name, reason)
                continue
            mapping[id(module)] = FakeQuantLinear.from_linear(module, config)
            swapped.append(name)
        elif is_experts_module(module):
            reason = _quantize_experts(name, module, config)
            if reason is None:
                swapped.append(name)
            elif reason:
                skip(name, reason)
        else:
            dims, reason = fused_expert_weights(module)
            if dims is not None:
                reason = quantize_fused_experts(module, dims, config)
                if reason is None:
                    swapped.append(name)
            if reason is not None:
                skip(name, reason)
    _replace_children(model, mapping)
    swapped.skipped = skipped
    swapped.coverage = quantization_coverage(model, skipped)
    return swapped


def _quantize_experts(name: str, module: nn.Module, config: QuantConfig) -> str | None:
    """Quantize a grouped-experts module; None when done, else why not ("" when already quantized)."""
    for attr in ("weight_quant", "input_quant"):
        if not isinstance(getattr(module, attr, None), nn.Module):
            raise TypeError(
                f"{name!r} ({type(module).__name__}) sets _co_design_experts but has no nn.Module "
                f"attribute {attr!r}; the experts protocol needs weight_quant and input_quant "
                "(nn.Identity() by default) applied in its forward"
            )
    weights = _expert_weights(module)
    if config.format == "nvfp4":
        bad = [f"{n} {tuple(p.shape)}" for n, p in weights if p.shape[-1] % BLOCK_SIZE]
        if bad:
            return f"in_features of {', '.join(bad)} not a multiple of {BLOCK_SIZE} (NVFP4 block size)"
    mask = config.mask_grad_beyond_amax
    module.weight_quant = nn.Identity()
    module.input_quant = nn.Identity()
    if config.weights:
        module.weight_quant = WeightFakeQuant(config.format, mask_grad_beyond_amax=mask)
    if config.activations:
        module.input_quant = InputFakeQuant(config.format, mask_grad_beyond_amax=mask)
    return None


def dequantize_model(model: nn.Module) -> list[str]:
    """Undo :func:`quantize_model`: plain ``nn.Linear`` with the trained Parameters, identity quantizers.

    Returns the names of the modules restored.
    """
    mapping: dict[int, nn.Module] = {}
    restored: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, FakeQuantLinear):
            mapping[id(module)] = module.to_linear()
            restored.append(name)
        elif is_experts_module(module) and (
            isinstance(getattr(module, "weight_quant", None), FakeQuant)
            or isinstance(getattr(module, "input_quant", None), FakeQuant)
        ):
            module.weight_quant = nn.Identity()
            module.input_quant = nn.Identity()
            restored.append(name)
        elif is_fused_quantized(module):
            dequantize_fused_experts(module)
            restored.append(name)
    _replace_children(model, mapping)
    return restored


def _weight_stats(w: Tensor, fmt: str, group_dims: int) -> dict[str, float]:
    """Sums over one weight tensor: squared error, squared norm, saturated/zeroed/block counts."""
    wf = w.detach().float()
    q = fake_quantize(wf, fmt, group_dims=group_dims)  # type: ignore[arg-type]
    s: dict[str, float] = {
        "err_sq": float((wf - q).square().sum()),
        "norm_sq": float(wf.square().sum()),
        "numel": float(wf.numel()),
        "flushed": float(((q == 0) & (wf != 0)).sum()),
    }
    if fmt == "nvfp4":
        blocks = wf.reshape(*wf.shape[:-1], wf.shape[-1] // BLOCK_SIZE, BLOCK_SIZE)  # (..., nblocks, 16)
        g, scale = _nvfp4_scales(blocks.abs().amax(-1), group_dims)  # E4M3 block scales s (..., nblocks)
        y = blocks / torch.where(g * scale == 0, 1.0, g * scale).unsqueeze(-1)
        s["clipped"] = float((y.abs() > E2M1_MAX).sum())
        s["saturated"] = float((_round_e2m1_(y).abs() == E2M1_MAX).sum())
        s["blocks"] = float(scale.numel())
        s["subnormal_scale_blocks"] = float(((scale < 2.0**-6) & (scale > 0)).sum())  # E4M3 min normal 2**-6
        s["zero_scale_blocks"] = float(((scale == 0) & (blocks.abs().amax(-1) > 0)).sum())
    elif fmt == "fp8":
        amax = wf.abs().amax()
        s["saturated"] = float((q.abs() >= amax).sum()) if amax > 0 else 0.0
    return s


@torch.no_grad()
def quantization_stats(model: nn.Module) -> dict[str, float]:
    """Cheap summary of the fake-quantized weights of ``model`` for logging (no gradients).

    Keys (empty dict when nothing is quantized):
        quantized_modules: count of FakeQuantLinear / quantized experts modules (weights quantized).
        weight_relative_error_mean, weight_relative_error_max: ||w - q(w)|| / ||w|| per weight
            tensor (dimensionless ratio), mean and max over tensors.
        weight_flushed_to_zero_fraction: nonzero weights that quantize to 0.
        weight_saturated_fraction: weights at the format's largest magnitude (NVFP4: |q|=6 on the
            block grid; FP8: at the tensor amax).
        weight_clipped_fraction (NVFP4): weights beyond 6*g*s, clipped because the E4M3 block
            scale rounded down.
        block_scale_subnormal_fraction, block_scale_zero_fraction (NVFP4): blocks whose E4M3 scale
            is subnormal (< 2**-6, coarser) or rounded to 0 although the block is nonzero.
    """
    rel_errors: list[float] = []
    modules = 0
    totals: dict[str, float] = {}
    for module in model.modules():
        if isinstance(module, FakeQuantLinear) and module.config.weights:
            tensors, fmt = [(module.weight, 0)], module.config.format
        elif is_experts_module(module) and isinstance(getattr(module, "weight_quant", None), FakeQuant):
            fmt = module.weight_quant.format
            tensors = [(p, max(p.dim() - 2, 0) if fmt == "nvfp4" else 0) for _, p in _expert_weights(module)]
        elif is_fused_quantized(module) and module._co_design_fused_spec.config.weights:
            fmt = module._co_design_fused_spec.config.format
            tensors = [(p if d == p.dim() - 1 else p.transpose(d, -1), 1 if fmt == "nvfp4" else 0)
                       for _, p, d in quantized_fused_weights(module)]
        else:
            continue
        modules += 1
        for w, group_dims in tensors:
            st = _weight_stats(w, fmt, group_dims)
            rel_errors.append((st["err_sq"] / st["norm_sq"]) ** 0.5 if st["norm_sq"] > 0 else 0.0)
            for k, v in st.items():
                totals[k] = totals.get(k, 0.0) + v
    if not rel_errors:
        return {}
    n = totals["numel"]
    out = {
        "quantized_modules": float(modules),
        "weight_relative_error_mean": sum(rel_errors) / len(rel_errors),
        "weight_relative_error_max": max(rel_errors),
        "weight_flushed_to_zero_fraction": totals["flushed"] / n,
    }
    if "saturated" in totals:
        out["weight_saturated_fraction"] = totals["saturated"] / n
    if "blocks" in totals:
        out["weight_clipped_fraction"] = totals["clipped"] / n
        out["block_scale_subnormal_fraction"] = totals["subnormal_scale_blocks"] / totals["blocks"]
        out["block_scale_zero_fraction"] = totals["zero_scale_blocks"] / totals["blocks"]
    return out
