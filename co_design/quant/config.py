"""QuantConfig: what to fake-quantize and how (the config half of "config object plus one verb")."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from co_design.quant.formats import FORMATS, Format

__all__ = ["DEFAULT_SKIP", "QuantConfig"]

#: fnmatch patterns on module names kept in high precision by default: the common deployment
#: default keeps lm_head, embeddings and the MoE router (gate) unquantized (REFERENCE.md section 1).
DEFAULT_SKIP: tuple[str, ...] = ("lm_head", "*embed*", "*router*", "*.gate")


@dataclass(frozen=True, kw_only=True)
class QuantConfig:
    """Fake-quantization settings for :func:`co_design.quant.quantize_model`.

    Attributes:
        format: "nvfp4" (16-element blocks, E4M3 block scales), "fp8" (E4M3, per-tensor scale)
            or "bf16" (round trip through bfloat16).
        weights: fake-quantize Linear / expert weights.
        activations: fake-quantize the inputs of those matmuls (False: weight-only, e.g. W4A16).
        skip: fnmatch patterns on module names (``model.named_modules()``) left unquantized;
            a pattern matches any dotted sub-path of a name, so ``"lm_head"`` also
            skips ``model.lm_head`` and everything under it.
        mask_grad_beyond_amax: zero the straight-through gradient of clipped elements.
    """

    format: Format = "nvfp4"
    weights: bool = True
    activations: bool = True
    skip: tuple[str, ...] = DEFAULT_SKIP
    mask_grad_beyond_amax: bool = False

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            close = difflib.get_close_matches(str(self.format).lower(), FORMATS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"QuantConfig.format={self.format!r} is not a known format{hint}; "
                f"choose one of {', '.join(FORMATS)}"
            )
        for name in ("weights", "activations", "mask_grad_beyond_amax"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(f"QuantConfig.{name} must be True or False, got {value!r}")
        if not (self.weights or self.activations):
            raise ValueError(
                "QuantConfig(weights=False, activations=False) quantizes nothing; "
                "set weights=True (weight-only) or activations=True, or do not call quantize_model"
            )
        if isinstance(self.skip, str):
            raise TypeError(
                f"QuantConfig.skip must be a sequence of fnmatch patterns, got the string "
                f"{self.skip!r}; write skip=({self.skip!r},)"
            )
        skip = tuple(self.skip)
        bad = [p for p in skip if not isinstance(p, str)]
        if bad:
            raise TypeError(f"QuantConfig.skip patterns must be strings, got {bad!r}")
        object.__setattr__(self, "skip", skip)  # lists (e.g. from YAML) become a hashable tuple
