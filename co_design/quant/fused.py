"""Fake quantization of experts stored as fused 3-D parameters (transformers 5 MoE layout).

transformers 5 stores each MoE layer's experts as ``nn.Parameter`` tensors of shape (E, ., .)
(``gate_up_proj``, ``down_proj``; ``up_proj`` without a gate) inside one module decorated with
``transformers.integrations.moe.use_experts_implementation``, which records the layout as
``is_transposed``: False (Mixtral, Qwen3-MoE, DeepSeek-V3) means (E, out, in), read with
``F.linear(x, w[e])`` -- the reduction dim is the last; True (gpt-oss) means (E, in, out), read
with ``x @ w[e]`` -- the reduction dim is dim 1. Shapes alone cannot tell (``gate_up_proj`` of a
model with ``hidden == 2 * expert_ffn`` is square), so a module without that attribute is not
quantized and is named, with the attribute to set.

How: the module's class is swapped (in place, once per class) for a subclass whose ``forward``
puts the fake-quantized weights in the instance ``__dict__`` under the parameters' own names
for the duration of the call (attribute lookup finds them before ``nn.Module.__getattr__``
reaches ``_parameters``), so every experts implementation (eager loop, ``grouped_mm``,
``batched_mm``) multiplies by the quantized weights; the Parameters, their names and the
state_dict are untouched. NVFP4 weights: 16-element blocks along the reduction dim, one global
scale per expert matrix. Activations (W4A4): a torch-function mode quantizes the first operand
of every matmul-like call whose second operand is (a view of) a quantized expert weight -- one
global scale per call (per expert in the eager loop, per layer with ``grouped_mm``/``batched_mm``;
``batched_mm``'s ``bmm(w, x)`` has the weight first, so x is quantized along its dim -2). A weight
read by no such call (an implementation whose matmuls are hidden in a custom kernel) gets a
warning naming it: its input stayed unquantized.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from co_design.quant.config import QuantConfig
from co_design.quant.formats import BLOCK_SIZE
from co_design.quant.modules import InputFakeQuant, WeightFakeQuant

__all__ = ["FusedExpertsSpec", "fused_expert_weights", "is_fused_quantized", "quantize_fused_experts",
           "dequantize_fused_experts"]

#: names transformers 5 gives fused expert weights (integrations/moe.py)
FUSED_NAMES = ("gate_up_proj", "up_proj", "gate_proj", "down_proj")
_MATMUL_HINTS = ("linear", "matmul", "mm")  # linear, matmul/__matmul__, mm/bmm/grouped_mm/_grouped_mm/...
# ops whose result is a weight still (copy or view): w[expert_ids], w.index_select(...), w.to(dtype), ...
_DERIVING = ("__getitem__", "index_select", "contiguous", "to", "reshape", "view", "transpose", "t", "permute",
             "unsqueeze", "squeeze", "expand", "clone")
_CLASSES: dict[type, type] = {}


@dataclass(frozen=True)
class FusedExpertsSpec:
    """The fused weights of one experts module: ``{parameter name: reduction dim}`` and the quantizers."""

    reduction_dims: dict[str, int]
    config: QuantConfig


def fused_expert_weights(module: nn.Module) -> tuple[dict[str, int] | None, str | None]:
    """(``{name: reduction dim}``, None) for a module holding fused 3-D expert weights, (None, reason) when
    it holds some but their layout is unknown, (None, None) when it holds none."""
    params = {n: p for n, p in module.named_parameters(recurse=False) if p.dim() == 3}
    if not params or getattr(type(module), "_co_design_experts", False):
        return None, None
    layout = getattr(module, "is_transposed", None)
    if not isinstance(layout, bool):
        shapes = ", ".join(f"{n} {tuple(p.shape)}" for n, p in params.items())
        return None, (
            f"{type(module).__name__} holds 3-D expert weights ({shapes}) with no declared layout; set "
            "its is_transposed attribute: False when each expert is (out, in) as F.linear reads it, True when "
            "(in, out) as x @ w reads it"
        )
    return {n: (1 if layout else 2) for n in params}, None


def _quantize_weight(quant: nn.Module, w: Tensor, dim: int) -> Tensor:
    """Fake-quantize (E, a, b) with blocks along ``dim``: move it last, quantize, move it back."""
    if dim == w.dim() - 1:
        return quant(w)
    return quant(w.transpose(dim, -1)).transpose(dim, -1)


class _InputQuantMode(TorchFunctionMode):
    """Quantize the input operand of matmul-like calls whose other operand is a quantized expert weight
    (or a view or indexed copy of one: ``w[e]``, ``w[expert_ids]``, ``w.transpose(-2, -1)``)."""

    def __init__(self, weights: dict[str, Tensor], quant: nn.Module) -> None:
        super().__init__()
        self.storage = {w.untyped_storage().data_ptr(): n for n, w in weights.items()}
        self.quant = quant
        self.seen: set[str] = set()

    def _weight(self, t: Any) -> str | None:
        return self.storage.get(t.untyped_storage().data_ptr()) if isinstance(t, Tensor) and t.numel() else None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        fname = getattr(func, "__name__", str(func)).rsplit(".", 1)[-1].lower()
        if len(args) >= 2 and isinstance(args[0], Tensor) and isinstance(args[1], Tensor) and any(
            h in fname for h in _MATMUL_HINTS
        ):
            if (name := self._weight(args[1])) is not None:  # x @ w, F.linear(x, w), grouped_mm(x, w)
                self.seen.add(name)
                if args[0].numel():
                    args = (self.quant(args[0]), *args[1:])  # reduction dim of x: last
            elif (name := self._weight(args[0])) is not None:  # bmm(w, x): reduction dim of x is -2
                self.seen.add(name)
                if args[1].numel():
                    args = (args[0], self.quant(args[1].transpose(-2, -1)).transpose(-2, -1), *args[2:])
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if fname in _DERIVING and args and isinstance(out, Tensor) and (name := self._weight(args[0])) is not None:
            self.storage.setdefault(out.untyped_storage().data_ptr(), name)  # an indexed copy of a weight
        return out


class _FusedFakeQuantMixin:
    """forward: quantized weights shadow the Parameters for the call (see the module docstring)."""

    _co_design_fused_spec: FusedExpertsSpec

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        spec = self._co_design_fused_spec
        c = spec.config
        params = self._parameters  # type: ignore[attr-defined]
        weights = {n: (_quantize_weight(self.co_design_weight_quant, params[n], d) if c.weights else params[n])
                   for n, d in spec.reduction_dims.items()}
        self.__dict__.update(weights)
        try:
            if not c.activations:
                return super().forward(*args, **kwargs)  # type: ignore[misc]
            mode = _InputQuantMode(weights, self.co_design_input_quant)
            with mode:
                out = super().forward(*args, **kwargs)  # type: ignore[misc]
            missed = sorted(set(weights) - mode.seen)
            if missed and not self.__dict__.get("_co_design_warned"):
                self.__dict__["_co_design_warned"] = True
                warnings.warn(
                    f"quantize_model: {type(self).__name__} multiplied {', '.join(missed)} in a way co-design cannot "
                    "trace (a custom kernel?); their input activations were not fake-quantized (the weights were)",
                    stacklevel=2,
                )
            return out
        finally:
            for n in weights:
                self.__dict__.pop(n, None)


def _fused_class(cls: type) -> type:
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"FakeQuant{cls.__name__}", (_FusedFakeQuantMixin, cls), {"_co_design_fused_base": cls})
    return _CLASSES[cls]


def is_fused_quantized(module: nn.Module) -> bool:
    return isinstance(module, _FusedFakeQuantMixin)


def quantize_fused_experts(module: nn.Module, dims: dict[str, int], config: QuantConfig) -> str | None:
    """Make ``module`` fake-quantize its fused expert weights; a reason instead when it cannot."""
    if config.format == "nvfp4":
        bad = [f"{n} {tuple(module._parameters[n].shape)} (reduction dim {d})"
               for n, d in dims.items() if module._parameters[n].shape[d] % BLOCK_SIZE]
        if bad:
            return f"reduction dim of {', '.join(bad)} is not a multiple of {BLOCK_SIZE} (NVFP4 block size)"
    mask = config.mask_grad_beyond_amax
    module.co_design_weight_quant = WeightFakeQuant(config.format, mask_grad_beyond_amax=mask)
    module.co_design_input_quant = InputFakeQuant(config.format, mask_grad_beyond_amax=mask)
    module._co_design_fused_spec = FusedExpertsSpec(dict(dims), config)
    module.__class__ = _fused_class(type(module))
    return None


def dequantize_fused_experts(module: nn.Module) -> None:
    """Undo :func:`quantize_fused_experts` (the original class, no quantizers)."""
    module.__class__ = type(module)._co_design_fused_base  # type: ignore[attr-defined]
    for attr in ("co_design_weight_quant", "co_design_input_quant"):
        delattr(module, attr)
    for attr in ("_co_design_fused_spec", "_co_design_warned"):
        module.__dict__.pop(attr, None)


@torch.no_grad()
def quantized_fused_weights(module: nn.Module) -> list[tuple[str, Tensor, int]]:
    """(name, parameter, reduction dim) of a fused-quantized module's weights."""
    spec: FusedExpertsSpec = module._co_design_fused_spec  # type: ignore[assignment]
    return [(n, module._parameters[n], d) for n, d in spec.reduction_dims.items()]
