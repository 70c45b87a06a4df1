"""Per-GPU memory: weights + KV cache + activations + runtime reserve vs usable HBM.

* Weights: every Linear of attention, FFN and experts at the weight format,
  sharded as the deployment shards them (attention, dense FFN and shared experts
  replicated under attention-DP; K/V projections replicated when tp exceeds
  kv_heads; routed experts over ``tp`` = ``ep × tp/ep``); embeddings, lm_head (vocab-parallel over tp), router
  and norms in bf16. Layers of the slowest pipeline stage, plus embedding and head.
  Under attention-DP the embedding and lm_head are whole on every rank, as
  TensorRT-LLM builds them (see :func:`co_design.perf.ops.shards`).
* KV cache per request, per GPU, at ISL+OSL tokens: Σ_layers min(ISL+OSL, window)
  × per-GPU K/V width (MLA: latent + rope, replicated over the attention-TP
  ranks) × KV bytes, divided by the Helix KV split. Under attention-DP each rank
  holds whole requests, ``batch / tp`` of them.
* Activations: the runtime's token budget (``max_num_tokens``) times the widest
  per-token buffers of a layer, bf16, plus fp32 logits for the batch. Under
  attention-DP the routed experts of each rank receive every rank's tokens, so
  their buffers hold ``tp`` budgets (TensorRT-LLM sizes the MoE workspace for
  ``max_num_tokens * ep_size * top_k`` permuted rows); the dense FFN and the
  shared experts see the rank's own.
* Reserve: ``Runtime.reserve_bytes``. The KV pool gets ``kv_cache_memory_fraction``
  of what remains; the batch fits while its KV cache fits that pool.

Pure Python.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

from co_design.perf.ops import shards
from co_design.perf.roofline import bytes_per_element
from co_design.perf.types import Deployment, MemoryBreakdown

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.hardware import GPU

__all__ = ["weights_bytes_per_gpu", "kv_bytes_per_request", "activation_bytes_per_gpu", "memory_breakdown",
           "max_batch"]

_BF16 = 2.0


@lru_cache(maxsize=4096)
def weights_bytes_per_gpu(arch: "Architecture", dep: Deployment) -> float:
    """Bytes of weights on the busiest GPU."""
    s = shards(arch, dep)
    wb = bytes_per_element(dep.weights)
    h = arch.hidden
    if arch.mla is None:
        kv_w = 2 * h * s.kv_dim  # K and V projections (replicated when a_tp > kv_heads)
        attn = (h * s.q_dim + kv_w + s.o_in * h) * wb
        if arch.attention_bias:
            attn += (s.q_dim + 2 * s.kv_dim) * _BF16
    else:
        m = arch.mla
        q = h * m.q_lora_rank + m.q_lora_rank * s.q_dim if m.q_lora_rank else h * s.q_dim
        kv_b = m.kv_lora_rank * s.heads * (m.qk_nope_head_dim + m.v_head_dim)
        attn = (q + h * s.kv_dim + kv_b + s.o_in * h) * wb + (m.kv_lora_rank + m.q_lora_rank) * _BF16
    mats = arch.ffn_matrices
    dense = mats * h * s.ffn * wb
    moe = (s.experts * mats * h * s.expert_ffn + mats * h * s.shared_ffn) * wb + arch.experts * h * _BF16
    # MoE share of the slowest stage's layers (the model's mix, scaled)
    n_moe = min(s.stage_layers, math.ceil(arch.moe_layers * s.stage_layers / arch.layers))
    layers = s.stage_layers * (attn + 2 * h * _BF16) + n_moe * moe + (s.stage_layers - n_moe) * dense
    emb = arch.vocab * h * _BF16 / (dep.tp // s.a_dp)  # whole under attention-DP, like the head
    head = 0.0 if arch.tied_embeddings else s.vocab * h * _BF16
    edges = emb + head + h * _BF16 if dep.pp == 1 else max(emb, head + h * _BF16)  # + final norm
    return layers + edges


@lru_cache(maxsize=16384)
def _cached_tokens(arch: "Architecture", layers: int, tokens: int) -> float:
    """Σ over the first ``layers`` layers of the tokens each caches: min(tokens, window)."""
    total = 0.0
    for i in range(layers):
        w = arch.layer_window(i)
        total += min(tokens, w) if w else tokens
    return total


def kv_bytes_per_request(arch: "Architecture", dep: Deployment, tokens: int) -> float:
    """KV-cache bytes one request of ``tokens`` tokens occupies on each GPU that holds it."""
    s = shards(arch, dep)
    kvb = bytes_per_element(dep.kv_cache)
    width = s.kv_dim if arch.mla is not None else 2 * s.kv_dim  # elements per token per layer, this GPU
    total = _cached_tokens(arch, s.stage_layers if dep.pp > 1 else arch.layers, tokens)
    return total * width * kvb / s.kv_split


@lru_cache(maxsize=4096)
def activation_bytes_per_gpu(arch: "Architecture", dep: Deployment) -> float:
    """Peak transient buffers of one step at the runtime's token budget."""
    s = shards(arch, dep)
    rt = dep.runtime
    tok = rt.max_num_tokens
    h = arch.hidden
    widest = max(s.q_dim + 2 * s.kv_dim, s.ffn * 2, 1)
    # under attention-DP every rank's tokens reach each rank's routed experts (all-gather, or an all-to-all whose
    # receive side is sized for the worst case): their buffers hold a_dp x max_num_tokens tokens
    # (TensorRT-LLM sizes the MoE workspace for max_num_tokens * ep_size * top_k permuted rows); the dense FFN
    # and the shared experts take the rank's own tokens then (data-parallel), every token of the replica under TP
    expert_tok = tok * s.a_dp
    routed = expert_tok * (4 * h + 4 * s.expert_ffn * arch.experts_per_token) if arch.is_moe else 0.0
    shared = tok * (4 * h + 4 * s.shared_ffn) if s.shared_ffn else 0.0
    logits = min(rt.max_batch, tok) * s.vocab * 4.0
    return max(tok * (4 * h + 2 * widest), tok * (4 * h + 4 * s.ffn), routed, shared) * _BF16 + logits


def memory_breakdown(arch: "Architecture", gpu: "GPU", dep: Deployment, batch_per_replica: float) -> MemoryBreakdown:
    """Memory of one GPU of a replica serving ``batch_per_replica`` requests at ISL+OSL."""
    s = shards(arch, dep)
    weights = weights_bytes_per_gpu(arch, dep)
    act = activation_bytes_per_gpu(arch, dep)
    reserve = dep.runtime.reserve_bytes
    per_req = kv_bytes_per_request(arch, dep, dep.isl + dep.osl)
    requests_on_gpu = math.ceil(batch_per_replica / s.a_dp - 1e-9)
    free = gpu.hbm_usable_bytes - weights - act - reserve
    pool = max(0.0, free * dep.runtime.kv_cache_memory_fraction)
    return MemoryBreakdown(
        weights_bytes=weights,
        kv_cache_bytes=requests_on_gpu * per_req,
        activation_bytes=act,
        reserve_bytes=reserve,
        capacity_bytes=gpu.hbm_usable_bytes,
        kv_cache_capacity_bytes=pool,
        kv_bytes_per_request=per_req,
    )


def max_batch(arch: "Architecture", gpu: "GPU", dep: Deployment) -> int:
    """Largest number of requests per replica whose KV cache at ISL+OSL fits (0 if the weights do not).

    Also capped by ``Runtime.max_batch`` (per attention rank under attention-DP).
    """
    mb = memory_breakdown(arch, gpu, dep, 0)
    if mb.weights_bytes + mb.activation_bytes + mb.reserve_bytes >= mb.capacity_bytes or mb.kv_bytes_per_request <= 0:
        return 0
    per_gpu = int(mb.kv_cache_capacity_bytes // mb.kv_bytes_per_request)
    s = shards(arch, dep)
    return min(per_gpu, dep.runtime.max_batch) * s.a_dp
