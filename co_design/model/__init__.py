"""Proxy decoder-only transformer (dense or MoE) built from :class:`co_design.arch.Architecture`.

Same shape as the performance model scores: parameter counts equal ``arch.param_counts()``.
Torch only; imports nothing of co_design beyond ``arch``.
"""

from co_design.model.attention import Attention, MLAttention, sliding_window_mask
from co_design.model.layers import MLP, RMSNorm, RotaryEmbedding, apply_rotary
from co_design.model.moe import GroupedExperts, MoE, load_balancing_loss
from co_design.model.parametrization import MuP, optimizer_groups
from co_design.model.transformer import Block, Transformer

__all__ = [
    "Transformer",
    "MuP",
    "optimizer_groups",
    "Block",
    "Attention",
    "MLAttention",
    "MLP",
    "MoE",
    "GroupedExperts",
    "RMSNorm",
    "RotaryEmbedding",
    "apply_rotary",
    "load_balancing_loss",
    "sliding_window_mask",
]
