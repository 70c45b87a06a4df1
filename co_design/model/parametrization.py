"""Width parametrizations: the standard one (GPT-2 init, one learning rate) and μP.

Under the maximal update parametrization (μP; Yang et al. 2022, "Tensor Programs V",
arXiv 2203.03466, Table 3 / Table 8 for Adam) the learning rate and initialisation tuned at
one width stay (nearly) optimal at every other width of the same shape family, so a narrow
proxy's hyperparameters also hold for its full-size candidate. Relative to a base width
``base_hidden`` and width multiplier ``m = hidden / base_hidden``:

* hidden (matrix-like) weights -- attention and FFN/expert projections, whose fan-in and
  fan-out both grow with the width: initial std divided by ``sqrt(m)``, Adam learning rate
  divided by ``m``;
* input-like and vector-like parameters -- the token embedding, norm gains, biases: unchanged;
* output-like weights -- the LM head (or tied embedding used as one) and the MoE routers, whose
  fan-in grows but fan-out does not: their logits are multiplied by ``1/m``; init and learning
  rate unchanged;
* attention logits use ``1/d`` scaling instead of ``1/sqrt(d)``: ``sqrt(base_head_dim) / d``,
  equal to the usual ``1/sqrt(d)`` at ``d = base_head_dim``.

At ``m = 1`` and ``head_dim = base_head_dim`` μP and the standard parametrization coincide.
The ``mup`` package implements the same rules, but it requires torchvision, which does not
install beside the CPU build of torch this project pins; these few rules are written here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch import nn

__all__ = ["MuP", "is_hidden_weight", "optimizer_groups"]


@dataclass(frozen=True)
class MuP:
    """μP relative to a base shape: ``base_hidden`` (the model width, in elements, at which the
    learning rate and initialisation were tuned) and ``base_head_dim`` (the head dimension at
    which attention keeps its ``1/sqrt(d)`` scale)."""

    base_hidden: int = 128
    base_head_dim: int = 16

    def __post_init__(self) -> None:
        for name in ("base_hidden", "base_head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"MuP.{name}={value!r} must be a positive integer (a width in elements)")

    def width_mult(self, hidden: int) -> float:
        """``hidden / base_hidden`` (dimensionless)."""
        return hidden / self.base_hidden

    def attention_scale(self, head_dim: int) -> float:
        """Softmax scale of attention logits for ``head_dim``: ``sqrt(base_head_dim) / head_dim``."""
        return math.sqrt(self.base_head_dim) / head_dim


def is_hidden_weight(name: str, param: nn.Parameter) -> bool:
    """Whether parameter ``name`` of a :class:`~co_design.model.Transformer` is matrix-like
    (both fans grow with width): every weight of 2 or more dims except the token embedding,
    the LM head and the MoE routers."""
    if param.ndim < 2:
        return False
    leaf = name.rsplit(".", 2)
    return not (name.endswith("embed.weight") or name.endswith("lm_head.weight") or leaf[-2:] == ["router", "weight"])


def optimizer_groups(model: nn.Module, *, lr: float, weight_decay: float, mup: MuP | None, hidden: int) -> list[dict[str, Any]]:
    """AdamW parameter groups of ``model``: ``lr`` (and ``weight_decay`` on weights of 2+ dims
    other than embeddings), with hidden weights at ``lr / m`` under ``mup``.

    Returns non-empty groups only, each with ``params``, ``lr``, ``weight_decay`` and a ``name``.
    """
    m = mup.width_mult(hidden) if mup is not None else 1.0
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = p.ndim >= 2 and "embed" not in name
        groups.setdefault((is_hidden_weight(name, p), decay), []).append(p)
    out = []
    for (hidden_w, decay), params in sorted(groups.items()):
        out.append({
            "name": f"{'hidden' if hidden_w else 'other'}{'' if decay else ' (no decay)'}",
            "params": params,
            "lr": lr / m if hidden_w else lr,
            "weight_decay": weight_decay if decay else 0.0,
        })
    return out
