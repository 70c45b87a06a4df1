"""Fake-quantized modules: a drop-in Linear and parameter-free quantizers for grouped MoE experts."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from co_design.quant.config import QuantConfig
from co_design.quant.formats import fake_quantize

__all__ = ["FakeQuant", "FakeQuantLinear", "InputFakeQuant", "WeightFakeQuant"]

# per-module hook registries (torch.nn.Module attributes) carried over by from_linear / to_linear
_HOOK_DICTS = (
    "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called", "_backward_pre_hooks", "_backward_hooks",
    "_state_dict_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
)


def _move_state(src: nn.Module, dst: nn.Module) -> None:
    """Share src's Parameters, training flag and hooks with dst (the swap keeps user hooks)."""
    dst.weight = src.weight
    dst.bias = src.bias
    dst.train(src.training)
    for name in _HOOK_DICTS:
        if name in src.__dict__:
            dst.__dict__[name] = src.__dict__[name]


class FakeQuantLinear(nn.Linear):
    """``nn.Linear`` whose weight and/or input are fake-quantized per ``config`` (QAT).

    Parameter names are those of nn.Linear (``weight``, ``bias``), so state_dicts load both ways.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, config: QuantConfig | None = None,
        device: torch.device | str | None = None, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.config = config if config is not None else QuantConfig()

    def forward(self, x: Tensor) -> Tensor:  # x (..., in_features) -> (..., out_features)
        c = self.config
        mask = c.mask_grad_beyond_amax
        w = fake_quantize(self.weight, c.format, mask_grad_beyond_amax=mask) if c.weights else self.weight
        x = fake_quantize(x, c.format, mask_grad_beyond_amax=mask) if c.activations else x
        return F.linear(x, w, self.bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear, config: QuantConfig | None = None) -> FakeQuantLinear:
        """Wrap ``linear``'s own Parameters (shared, not copied: optimizers and ties stay valid).

        Its hooks and training flag carry over too.
        """
        new = cls(linear.in_features, linear.out_features, linear.bias is not None, config=config, device="meta")
        _move_state(linear, new)
        return new

    def to_linear(self) -> nn.Linear:
        """A plain ``nn.Linear`` holding this module's (trained) Parameters."""
        linear = nn.Linear(self.in_features, self.out_features, self.bias is not None, device="meta")
        _move_state(self, linear)
        return linear

    def extra_repr(self) -> str:
        c = self.config
        what = "+".join(n for n, on in (("weights", c.weights), ("activations", c.activations)) if on)
        return f"{super().extra_repr()}, format={c.format}, quantize={what}"


class FakeQuant(nn.Module):
    """Parameter-free fake-quantizer, ``forward(x) = fake_quantize(x, format)``.

    ``per_matrix=True`` gives every (out, in) matrix of a stacked (..., out, in) weight its own
    NVFP4 global scale, as when each expert weight is quantized separately.
    """

    def __init__(
        self, format: str = "nvfp4", *, mask_grad_beyond_amax: bool = False, per_matrix: bool = False
    ) -> None:
        super().__init__()
        QuantConfig(format=format)  # type: ignore[arg-type]  # validates the name
        self.format = format
        self.mask_grad_beyond_amax = mask_grad_beyond_amax
        self.per_matrix = per_matrix

    def forward(self, x: Tensor) -> Tensor:
        group_dims = max(x.dim() - 2, 0) if self.per_matrix and self.format == "nvfp4" else 0
        mask = self.mask_grad_beyond_amax
        return fake_quantize(x, self.format, mask_grad_beyond_amax=mask, group_dims=group_dims)  # type: ignore[arg-type]

    def extra_repr(self) -> str:
        return f"format={self.format}, per_matrix={self.per_matrix}"


class WeightFakeQuant(FakeQuant):
    """``weight_quant`` of the MoE experts protocol: per-expert global scale on (E, out, in)."""

    def __init__(self, format: str = "nvfp4", *, mask_grad_beyond_amax: bool = False) -> None:
        super().__init__(format, mask_grad_beyond_amax=mask_grad_beyond_amax, per_matrix=True)


class InputFakeQuant(FakeQuant):
    """``input_quant`` of the MoE experts protocol: one global scale per call."""

    def __init__(self, format: str = "nvfp4", *, mask_grad_beyond_amax: bool = False) -> None:
        super().__init__(format, mask_grad_beyond_amax=mask_grad_beyond_amax, per_matrix=False)
