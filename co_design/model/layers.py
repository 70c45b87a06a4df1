"""Building blocks of the proxy transformer: RMSNorm, rotary embedding, MLP."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RMSNorm", "RotaryEmbedding", "apply_rotary", "MLP"]


class RMSNorm(nn.Module):
    """Root-mean-square layer norm with a learned scale (Zhang & Sennrich, 2019); no bias."""

    def __init__(self, dim: int, *, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # (dim,)

    def forward(self, x: Tensor) -> Tensor:  # (..., dim) -> (..., dim)
        if x.dtype == self.weight.dtype:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # mixed precision (e.g. a bf16 projection output under autocast): normalize in fp32
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class RotaryEmbedding(nn.Module):
    """Rotary position embedding tables (RoFormer, Su et al. 2021) for ``dim`` rotated channels.

    Uses the half-split ("rotate half", GPT-NeoX / Llama-in-HF) layout: channel ``j`` pairs with
    channel ``j + dim/2`` and rotates at frequency ``theta ** (-2j / dim)``. The cos/sin tables are
    non-persistent buffers, so they never enter a state_dict.
    """

    def __init__(self, dim: int, *, max_seq_len: int, theta: float = 10000.0) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(
                f"rotary dimension must be even, got {dim}; choose an even head_dim (or mla.qk_rope_head_dim)"
            )
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be >= 1, got {max_seq_len}")
        self.dim, self.max_seq_len, self.theta = dim, max_seq_len, theta
        inv_freq = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (dim/2,)
        angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)  # (T_max, dim/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)  # (T_max, dim/2)
        self.register_buffer("sin", angles.sin().float(), persistent=False)  # (T_max, dim/2)

    def forward(self, seq_len: int) -> tuple[Tensor, Tensor]:
        """cos and sin tables for positions ``0 .. seq_len-1``, each ``(seq_len, dim/2)``."""
        if seq_len > self.max_seq_len:
            raise ValueError(
                f"sequence length {seq_len} exceeds max_seq_len={self.max_seq_len}; "
                "build the model with a larger max_seq_len"
            )
        return self.cos[:seq_len], self.sin[:seq_len]


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` (B, H, T, D) by position; ``cos``/``sin`` are (T, D/2). Computed in x's dtype."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]  # (B, H, T, D/2) each
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)  # (T, D/2), broadcast over B, H
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, T, D)


class MLP(nn.Module):
    """Feed-forward network: SwiGLU ``down(silu(gate(x)) * up(x))`` when gated, else ``down(gelu(up(x)))``.

    No biases. Parameter count: ``(3 if gated else 2) * hidden * ffn``.
    """

    def __init__(self, hidden: int, ffn: int, *, gated: bool = True) -> None:
        super().__init__()
        self.gated = gated
        self.gate_proj = nn.Linear(hidden, ffn, bias=False) if gated else None
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:  # (..., hidden) -> (..., hidden)
        if self.gate_proj is not None:
            h = F.silu(self.gate_proj(x)) * self.up_proj(x)  # (..., ffn)
        else:
            h = F.gelu(self.up_proj(x))  # (..., ffn)
        return self.down_proj(h)  # (..., hidden)
