"""The proxy decoder-only transformer built from an :class:`~co_design.arch.Architecture`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from co_design.arch import Architecture
from co_design.model.attention import Attention, MLAttention, sliding_window_mask
from co_design.model.layers import MLP, RMSNorm, RotaryEmbedding
from co_design.model.moe import MoE
from co_design.model.parametrization import MuP, is_hidden_weight

__all__ = ["Block", "Transformer"]


class Block(nn.Module):
    """Pre-norm decoder layer ``i``: ``x + attn(attn_norm(x))`` then ``x + ffn(ffn_norm(x))``.

    ``attn`` is :class:`Attention` or :class:`MLAttention` (when ``arch.mla``); ``ffn`` is an
    :class:`MLP` of width ``arch.ffn`` or a :class:`MoE` when ``arch.layer_is_moe(i)``.
    ``window`` is the layer's attention span in tokens (None: full causal attention).
    """

    def __init__(self, arch: Architecture, layer: int) -> None:
        super().__init__()
        self.layer, self.window, self.is_moe = layer, arch.layer_window(layer), arch.layer_is_moe(layer)
        self.attn_norm = RMSNorm(arch.hidden)
        self.attn = MLAttention(arch) if arch.mla is not None else Attention(arch)
        self.ffn_norm = RMSNorm(arch.hidden)
        if self.is_moe:
            self.ffn: MLP | MoE = MoE(
                arch.hidden,
                experts=arch.experts,
                experts_per_token=arch.experts_per_token,
                expert_ffn=arch.expert_ffn,
                shared_experts=arch.shared_experts,
                shared_ffn=arch.shared_expert_ffn,
                gated=arch.gated_ffn,
            )
        else:
            self.ffn = MLP(arch.hidden, arch.ffn, gated=arch.gated_ffn)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """x (B, T, hidden); cos/sin (T, rope_dim/2); attn_mask (T, T) bool for windowed layers, else None."""
        x = x + self.attn(self.attn_norm(x), cos, sin, attn_mask)  # (B, T, hidden)
        return x + self.ffn(self.ffn_norm(x))  # (B, T, hidden)


class Transformer(nn.Module):
    """Decoder-only language model: ``embed`` -> ``layers`` -> ``norm`` -> ``lm_head``.

    ``forward(tokens (B, T)) -> logits (B, T, vocab)``. With ``arch.tied_embeddings`` there is no
    ``lm_head`` module: the logits use ``embed.weight``. After each forward ``aux_loss`` holds the
    sum over MoE layers of the unscaled load-balancing loss (0-dim; 1.0 per layer when balanced,
    zero for a dense model); add ``coef * model.aux_loss`` (e.g. coef 0.01) to the training loss.

    Initialization follows GPT-2/nanoGPT: normal(0, 0.02) weights, zero biases, unit norm scales,
    and residual-output projections (``o_proj``, ``down_proj``, experts' ``w_down``) scaled by
    ``1/sqrt(2 * layers)``. The parameter count equals ``arch.param_counts().total``.

    ``mup``: the maximal update parametrization relative to ``mup.base_hidden``
    (:mod:`co_design.model.parametrization`): hidden weights' initial std divided by
    ``sqrt(m)``, logits of the LM head and of MoE routers multiplied by ``output_mult = 1/m``,
    attention scaled by ``sqrt(base_head_dim)/head_dim``; build the optimizer with
    :func:`~co_design.model.parametrization.optimizer_groups` for the matching learning rates.
    None (default): the standard parametrization (``output_mult`` 1).
    """

    def __init__(self, arch: Architecture, *, max_seq_len: int = 4096, mup: MuP | None = None) -> None:
        super().__init__()
        if not isinstance(arch, Architecture):
            raise TypeError(f"arch must be a co_design.arch.Architecture, got {type(arch).__name__}")
        self.arch = arch
        self.max_seq_len = max_seq_len
        rope_dim = arch.mla.qk_rope_head_dim if arch.mla is not None else arch.head_dim
        self.embed = nn.Embedding(arch.vocab, arch.hidden)
        self.rope = RotaryEmbedding(rope_dim, max_seq_len=max_seq_len, theta=arch.rope_theta)
        self.layers = nn.ModuleList(Block(arch, i) for i in range(arch.layers))
        self.norm = RMSNorm(arch.hidden)
        self.lm_head = None if arch.tied_embeddings else nn.Linear(arch.hidden, arch.vocab, bias=False)
        self.aux_loss: Tensor = torch.zeros(())
        self._masks: dict[tuple[int, torch.device], Tensor] = {}  # (window, device) -> (T_max, T_max)
        self.apply(self._init_weights)
        residual_std = 0.02 / math.sqrt(2 * arch.layers)
        for name, p in self.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight", "experts.w_down")):
                nn.init.normal_(p, std=residual_std)
        self.mup = mup
        self.output_mult = 1.0
        if mup is not None:
            m = mup.width_mult(arch.hidden)
            self.output_mult = 1.0 / m
            with torch.no_grad():
                for name, p in self.named_parameters():
                    if is_hidden_weight(name, p):
                        p.div_(math.sqrt(m))
            for module in self.modules():
                if isinstance(module, (Attention, MLAttention)):
                    module.scale = mup.attention_scale(arch.mla.qk_head_dim if arch.mla is not None else arch.head_dim)
                elif isinstance(module, MoE):
                    module.router_mult = self.output_mult

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        """Number of parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())

    def _window_mask(self, seq_len: int, window: int | None, device: torch.device) -> Tensor | None:
        """Banded causal mask for a windowed layer: one cached mask per (window, device), built for
        the longest T seen and sliced (the mask depends only on i - j), so varying lengths do not
        pile up masks."""
        if window is None or seq_len <= window:
            return None  # plain causal attention (is_causal) is the same thing
        key = (window, device)
        mask = self._masks.get(key)
        if mask is None or mask.shape[0] < seq_len:
            mask = self._masks[key] = sliding_window_mask(seq_len, window, device)  # (T, T)
        return mask[:seq_len, :seq_len]  # (T, T)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens (B, T) int64 -> logits (B, T, vocab)."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be (batch, seq_len), got shape {tuple(tokens.shape)}")
        T = tokens.shape[1]
        if T > self.max_seq_len:
            raise ValueError(
                f"sequence length {T} exceeds max_seq_len={self.max_seq_len}; "
                "build the Transformer with a larger max_seq_len"
            )
        x = self.embed(tokens)  # (B, T, hidden)
        cos, sin = self.rope(T)  # (T, rope_dim/2) each
        aux = x.new_zeros((), dtype=torch.float32)
        for block in self.layers:
            x = block(x, cos, sin, self._window_mask(T, block.window, x.device))  # (B, T, hidden)
            if block.is_moe:
                aux = aux + block.ffn.aux_loss
        self.aux_loss = aux
        x = self.norm(x)  # (B, T, hidden)
        logits = F.linear(x, self.embed.weight) if self.lm_head is None else self.lm_head(x)  # (B, T, vocab)
        return logits * self.output_mult if self.output_mult != 1.0 else logits  # μP: 1/width_mult
