"""Causal self-attention: grouped-query attention (GQA/MQA/MHA) and multi-head latent attention (MLA).

Both run through :func:`torch.nn.functional.scaled_dot_product_attention`, with ``is_causal`` for
full attention and a cached banded boolean mask (:func:`sliding_window_mask`) for local layers.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from co_design.arch import Architecture
from co_design.model.layers import RMSNorm, apply_rotary

__all__ = ["Attention", "MLAttention", "sliding_window_mask"]

# ``enable_gqa`` (K/V heads shared by groups of query heads without copying) arrived in torch 2.5.
_SDPA_HAS_GQA = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def sliding_window_mask(seq_len: int, window: int, device: torch.device | str | None = None) -> Tensor:
    """Boolean (T, T) mask, True where query ``i`` may attend key ``j``: ``i - window < j <= i``.

    A query sees itself and the ``window - 1`` tokens before it (the Mistral / Hugging Face
    convention: ``sliding_window`` tokens in all).
    """
    i = torch.arange(seq_len, device=device)
    offset = i[:, None] - i[None, :]  # (T, T): query index minus key index
    return (offset >= 0) & (offset < window)  # (T, T)


def _sdpa(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, scale: float | None = None) -> Tensor:
    """Causal SDPA; q (B, H, T, Dqk), k (B, Hkv, T, Dqk), v (B, Hkv, T, Dv) -> (B, H, T, Dv).

    ``scale``: the logits' softmax scale (None: ``1/sqrt(Dqk)``)."""
    gqa = q.shape[1] != k.shape[1]
    if gqa and not _SDPA_HAS_GQA:  # older torch: materialize the shared heads
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # (B, H, T, D)
        gqa = False
    kw: dict[str, object] = {"enable_gqa": True} if gqa else {}
    if scale is not None:
        kw["scale"] = scale
    if attn_mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, **kw)


class Attention(nn.Module):
    """Grouped-query attention with RoPE on all head channels.

    ``q_proj``: hidden -> heads*head_dim, ``k_proj``/``v_proj``: hidden -> kv_heads*head_dim
    (biases on these three when ``arch.attention_bias``), ``o_proj``: heads*head_dim -> hidden.
    ``scale``: the softmax scale of the logits (None: ``1/sqrt(head_dim)``; μP sets its own).
    """

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = arch.heads, arch.kv_heads, arch.head_dim
        bias = arch.attention_bias
        self.q_proj = nn.Linear(arch.hidden, arch.heads * arch.head_dim, bias=bias)
        self.k_proj = nn.Linear(arch.hidden, arch.kv_heads * arch.head_dim, bias=bias)
        self.v_proj = nn.Linear(arch.hidden, arch.kv_heads * arch.head_dim, bias=bias)
        self.o_proj = nn.Linear(arch.heads * arch.head_dim, arch.hidden, bias=False)
        self.scale: float | None = None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """x (B, T, hidden); cos/sin (T, head_dim/2); attn_mask (T, T) bool or None (causal)."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)  # (B, Hkv, T, D)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        y = _sdpa(q, k, v, attn_mask, self.scale)  # (B, H, T, D)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, self.heads * self.head_dim))  # (B, T, hidden)


class MLAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434 §2.1), training (non-absorbed) form.

    Queries: ``q_proj`` (hidden -> heads*qk_head_dim), or with ``q_lora_rank`` the low-rank pair
    ``q_a_proj`` -> ``q_a_norm`` -> ``q_b_proj``. Keys/values: ``kv_a_proj`` compresses hidden to a
    ``kv_lora_rank`` latent plus one ``qk_rope_head_dim`` rotary key shared by all heads;
    ``kv_a_norm`` normalizes the latent and ``kv_b_proj`` expands it to per-head no-position keys
    (``qk_nope_head_dim``) and values (``v_head_dim``). RoPE acts only on the decoupled rotary
    channels. ``o_proj``: heads*v_head_dim -> hidden. No biases (``attention_bias`` does not apply),
    matching :meth:`Architecture.attention_params_per_layer`. ``scale``: the softmax scale
    (None: ``1/sqrt(qk_head_dim)``).
    """

    def __init__(self, arch: Architecture) -> None:
        super().__init__()
        m = arch.mla
        if m is None:
            raise ValueError("MLAttention needs arch.mla; use Attention for GQA/MHA architectures")
        self.heads = arch.heads
        self.nope_dim, self.rope_dim = m.qk_nope_head_dim, m.qk_rope_head_dim
        self.v_dim, self.kv_rank = m.v_head_dim, m.kv_lora_rank
        qk_dim = m.qk_head_dim
        if m.q_lora_rank:
            self.q_proj = None
            self.q_a_proj = nn.Linear(arch.hidden, m.q_lora_rank, bias=False)
            self.q_a_norm = RMSNorm(m.q_lora_rank)
            self.q_b_proj = nn.Linear(m.q_lora_rank, arch.heads * qk_dim, bias=False)
        else:
            self.q_proj = nn.Linear(arch.hidden, arch.heads * qk_dim, bias=False)
            self.q_a_proj = self.q_a_norm = self.q_b_proj = None
        self.kv_a_proj = nn.Linear(arch.hidden, m.kv_lora_rank + m.qk_rope_head_dim, bias=False)
        self.kv_a_norm = RMSNorm(m.kv_lora_rank)
        self.kv_b_proj = nn.Linear(m.kv_lora_rank, arch.heads * (m.qk_nope_head_dim + m.v_head_dim), bias=False)
        self.o_proj = nn.Linear(arch.heads * m.v_head_dim, arch.hidden, bias=False)
        self.scale: float | None = None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, attn_mask: Tensor | None = None) -> Tensor:
        """x (B, T, hidden); cos/sin (T, qk_rope_head_dim/2); attn_mask (T, T) bool or None (causal)."""
        B, T, _ = x.shape
        H = self.heads
        if self.q_proj is not None:
            q = self.q_proj(x)  # (B, T, H*Dqk)
        else:
            q = self.q_b_proj(self.q_a_norm(self.q_a_proj(x)))  # (B, T, H*Dqk)
        q = q.view(B, T, H, self.nope_dim + self.rope_dim).transpose(1, 2)  # (B, H, T, Dqk)
        q_nope, q_rope = q.split([self.nope_dim, self.rope_dim], dim=-1)  # (B, H, T, Dn), (B, H, T, Dr)

        latent, k_rope = self.kv_a_proj(x).split([self.kv_rank, self.rope_dim], dim=-1)  # (B, T, R), (B, T, Dr)
        kv = self.kv_b_proj(self.kv_a_norm(latent))  # (B, T, H*(Dn+Dv))
        kv = kv.view(B, T, H, self.nope_dim + self.v_dim).transpose(1, 2)  # (B, H, T, Dn+Dv)
        k_nope, v = kv.split([self.nope_dim, self.v_dim], dim=-1)  # (B, H, T, Dn), (B, H, T, Dv)

        q_rope = apply_rotary(q_rope, cos, sin)  # (B, H, T, Dr)
        k_rope = apply_rotary(k_rope.unsqueeze(1), cos, sin)  # (B, 1, T, Dr): one rotary key for all heads
        q = torch.cat((q_nope, q_rope), dim=-1)  # (B, H, T, Dqk)
        k = torch.cat((k_nope, k_rope.expand(B, H, T, self.rope_dim)), dim=-1)  # (B, H, T, Dqk)
        y = _sdpa(q, k, v, attn_mask, self.scale)  # (B, H, T, Dv)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, H * self.v_dim))  # (B, T, hidden)
