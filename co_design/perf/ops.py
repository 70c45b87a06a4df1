"""Per-op cost table of one serving step on one GPU.

A *step* is one in-flight-batching iteration of one replica (its ``tp`` GPUs,
one pipeline stage): ``decode`` sequences each emit one token while reading
their KV cache, and ``prefill`` prompt tokens (new requests' context, possibly
a chunk) run through the same GEMMs. Layers of the same kind (dense or MoE FFN,
full or windowed attention) are costed once and multiplied by their count, so
a 126-layer model costs no more than a 1-layer one.

The op list is that of a CUDA-graph, fused runtime (TensorRT-LLM): every row is
a kernel that runs, and a kernel pays ``gpu.kernel_overhead_s`` plus the runtime's
``kernel_gap_s`` once (a collective: ``gpu.collective_latency_s`` plus ``collective_overhead_s`` per
synchronization step, one for a small-message one-shot all-reduce, two for a two-shot one;
:mod:`co_design.perf.comm`). Work that
such a runtime fuses into a neighbour keeps its bytes and drops its launch. An iteration that carries a
new prompt's tokens for its TTFT runs outside a CUDA graph (runtimes capture decode-only batches), so
there each kernel also takes at least the host's ``Runtime.eager_launch_s`` to launch: the
RMSNorm (+ residual + quantize) rides the all-reduce before it when there is one
(TP); RoPE and the KV-cache write of decode tokens run inside the decode attention
kernel; the MoE gated activation runs in the first grouped GEMM's epilogue and the
MoE finalize rides the FFN all-reduce under TP. Per layer (per GPU, shard shapes
after parallelism; see :class:`Shards`):

* ``attn_norm`` (own kernel only without a collective before it), ``qkv_proj``
  GEMM (M=tokens, N=(q + 2·kv heads)·head_dim / shard, K=hidden); MLA: one
  ``qkv_a`` GEMM (W_DQ, W_DKV and W_KR read one input: TensorRT-LLM's Fuse_A_GEMM,
  SGLang's ``fused_qkv_a_proj_with_mqa``), the ``q_a_norm`` RMSNorm (``kv_a_norm``
  beside it on a side stream), the ``q_b`` GEMM, ``kv_b`` for prompt tokens, and for
  decode the absorbed per-head ``mla_q_absorb``/``mla_v_up`` batched GEMMs.
* ``rope_kv_write`` for prompt tokens (TensorRT-LLM's QKV pre-processing kernel).
* ``attention_prefill``: causal FLOPs ``2·heads·(d_qk + d_v)·pairs`` where pairs =
  Σ_i min(i, window) over prompt positions; FlashAttention IO (Q, K, V, O once);
  fp8 math when the KV cache and activations are 8-bit or narrower (FP8 context
  FMHA), else bf16, at the GPU's ``prefill_attention`` law for that precision
  (:func:`prefill_attention_tile_efficiency`: short prompts below the long-prompt
  rate; MLA at its own ``prefill_mla`` law where the GPU has one). A head_dim the
  GPU's kernels do not implement (``gpu.attention_head_dims``) runs padded to the
  next size they do.
* ``attention_decode``: reads each sequence's KV cache (``min(context, window)``
  tokens) and writes the new token's K/V, FLOPs ``2·heads·(d_qk + d_v)`` per
  cached token; MLA absorbed: ``2·heads·(2·kv_lora + rope)`` per cached token over
  the shared latent (read once per sequence, MQA-like), no ``kv_b_proj`` over the cache.
  At the GPU's ``decode_attention`` law for the KV-cache format
  (:func:`decode_attention_time_s`: the bytes at the law's fraction of the HBM
  bandwidth, plus its cost per wave of CTAs, one per sequence and KV head, and its
  stream's ramp, in full once each SM streams enough bytes); MLA at
  the GPU's ``decode_mla`` law (:func:`decode_mla_time_s`: the longer of its FLOPs at
  the law's fraction of the bf16 peak and its bytes, the latent cache at one fraction
  of the HBM bandwidth and the per-head queries and outputs at another, plus its cost
  per wave of CTAs, one per sequence), or, on a GPU without one, the grouped-query
  kernel's law with one CTA per sequence.
* ``o_proj`` GEMM (Helix: TP over all ``tp`` ranks after the all-to-all); TP
  all-reduce; ``ffn_norm`` (fused into that all-reduce under TP).
* With block-scaled FP8 activations (``Deployment.fp8_scaling == "block"``) a
  ``<gemm>_act_quant`` kernel before each dense GEMM whose input comes from a
  norm or from attention (``qkv_proj``/``qkv_a_proj``, ``q_proj``, ``q_b_proj``,
  ``kv_b_proj``, ``o_proj``, ``gate_up_proj``, ``shared_gate_up``): it reads the bf16 input and writes FP8 plus one fp32 scale
  per 128 values.
* FFN: ``gate_up``/``activation`` (SwiGLU + quantize, one kernel)/``down``
  sharded by tp; under attention-DP whole on every rank over its own tokens
  (so are the shared experts: :attr:`Shards.ffn_tp`). MoE: ``router``; ``moe_permute``; ``experts_gate_up``/
  ``experts_down`` grouped GEMMs over the experts the *busiest* expert-parallel
  rank runs (:func:`busiest_rank_experts`) with the tokens it receives
  (:func:`busiest_rank_load`: routing skew from a published statistic plus the
  binomial spread of a finite batch), under block-scaled FP8 plus the tiles the
  kernel launches for the rank's idle experts (``Runtime.idle_expert_tile_s``,
  0 by default); ``moe_finalize``; ``shared_*`` for shared
  experts, on an auxiliary CUDA stream beside the routed chain (TensorRT-LLM's
  ``maybe_execute_in_parallel``, SGLang's dual-stream MoE): their bytes and FLOPs
  count, their launches overlap the routed kernels'.
* Communication: TP all-reduce after attention and FFN; with attention-DP an
  all-gather of the tokens before the routed experts and a reduce-scatter after them, or,
  for EP over multi-node NVLink (NVL72) with ep > top_k, an all-to-all
  dispatch/combine (each token sent once to each distinct rank holding one of
  its experts, :func:`ranks_per_token`, times the busiest rank's excess), as
  TensorRT-LLM 1.0 chooses; Helix all-to-all of partial
  attention outputs; PP point-to-point.

Plus ``embedding``, ``final_norm``, ``lm_head`` (bf16) and ``sampling`` per step:
vocab-parallel over the replica's sequences, or under attention-DP whole on
every rank over its own sequences, with no logits gather (TensorRT-LLM's layout).
Pure Python.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from co_design.perf.comm import collective_time_s
from co_design.perf.roofline import bytes_per_element, gemm, math_precision, roofline
from co_design.perf.types import Deployment, OpCost

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.hardware import GPU
    from co_design.perf.types import Runtime

__all__ = ["Shards", "shards", "step_ops", "step_time", "expected_experts_touched", "attended_pairs",
           "expected_max_normal", "busiest_rank_load", "busiest_rank_experts", "ranks_per_token", "attention_head_dim",
           "prefill_attention_tile_efficiency", "decode_attention_time_s"]

_BF16 = 2.0
# block-scaled FP8 (Deployment.fp8_scaling == "block"): the dense GEMMs whose input comes from a norm or from
# attention, so a separate per-token-group quantization kernel runs first; MLA's fused qkv_a_proj is one GEMM,
# the down projections take the SwiGLU kernel's quantized output, the fused MoE
# quantizes inside its permute
_BLOCK_QUANT_INPUTS = frozenset({"qkv_proj", "qkv_a_proj", "q_proj", "q_b_proj", "kv_b_proj", "o_proj", "gate_up_proj",
                                 "shared_gate_up"})
_FP8_GROUP = 128  # activation values per scale
# output columns per tile of the block-scaled FP8 grouped GEMM (one weight scale block wide): the tiles it
# launches for an expert with no rows (Runtime.idle_expert_tile_s)
_IDLE_TILE_COLS = 128
_NODE_GPUS = 8  # GPUs of one HGX node (one NVLink baseboard); a larger NVLink domain is multi-node NVLink (NVL72)


def expected_experts_touched(experts: int, top_k: int, tokens: float) -> float:
    """Expected number of distinct experts hit when ``tokens`` tokens each pick ``top_k`` of ``experts``.

    Each expert is missed by one token with probability ``1 - k/E`` (uniform
    routing), so E[touched] = E · (1 - (1 - k/E)^tokens). One token touches k;
    a large batch touches all E (a decode step reads far more than top-k experts).
    """
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k={top_k} must be between 1 and experts={experts}")
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def attended_pairs(length: float, window: int | None) -> float:
    """Σ_{i=1..L} min(i, w): (query, key) pairs of causal attention over a prompt of L tokens."""
    if length <= 0:
        return 0.0
    if window is None or window >= length:
        return length * (length + 1) / 2
    return window * (window + 1) / 2 + (length - window) * window


@lru_cache(maxsize=128)
def expected_max_normal(n: int) -> float:
    """E[max of ``n`` independent standard normals] (0 for n <= 1), by Simpson's rule on [-9, 9].

    1.0294 for n = 4, 1.4236 for n = 8, 2.0697 for n = 32.
    """
    if n <= 1:
        return 0.0
    steps, lo, hi = 3600, -9.0, 9.0
    h = (hi - lo) / steps
    total = 0.0
    for i in range(steps + 1):
        x = lo + i * h
        pdf = math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1.0 + math.erf(x / math.sqrt(2)))
        w = 1 if i in (0, steps) else (4 if i % 2 else 2)
        total += w * x * n * pdf * cdf ** (n - 1)
    return total * h / 3


def busiest_rank_load(experts: int, top_k: int, tokens: float, ep: int, expert_load_cv: float) -> float:
    """Token-expert assignments on the busiest of ``ep`` expert-parallel ranks (``tokens × top_k / ep`` on average).

    A rank holds E/ep experts. Its load varies for two reasons: experts are not
    equally popular (per-expert load with coefficient of variation
    ``expert_load_cv``; over E/ep independent experts the rank's CV is
    cv_e / sqrt(E/ep)) and a finite batch lands unevenly (binomial: CV² =
    (1 - 1/ep) / mean). The busiest rank carries mean × (1 + z_ep × CV), z_ep
    being the expected maximum of ep standard normals. Check against the source
    of the default cv_e = 1.28 (DeepSeek-R1, EP 32, 8 experts per rank, 1024
    assignments per rank): the rank CV comes out at 0.45 against 0.48 measured.
    Capped at every token sending all its picks that a rank can hold to it.
    """
    assignments = tokens * top_k
    if ep <= 1 or assignments <= 0:
        return assignments
    mean = assignments / ep
    per_rank = experts / ep
    cv = math.sqrt(expert_load_cv ** 2 / per_rank + (1.0 - 1.0 / ep) / mean)
    return min(mean * (1.0 + expected_max_normal(ep) * cv), tokens * min(top_k, per_rank), assignments)


@lru_cache(maxsize=1 << 14)
def busiest_rank_experts(experts: int, top_k: int, tokens: int, ep: int) -> float:
    """Expected distinct experts the busiest of ``ep`` ranks runs when ``tokens`` tokens pick ``top_k`` of ``experts``.

    Each expert is hit with probability p = 1 - (1 - k/E)^tokens (uniform
    routing); a rank's count of hit experts among its n = E/ep is Binomial(n, p)
    and the step waits for the rank with the most: E[max] = Σ_{j=1..n} (1 -
    F(j-1)^ep), F the binomial CDF. ep = 1: the mean, E·p.
    """
    mean_touched = expected_experts_touched(experts, top_k, tokens)  # validates top_k; E * p
    if ep <= 1 or mean_touched <= 0:
        return mean_touched
    p = mean_touched / experts
    n = experts // ep
    if p >= 1.0:
        return float(n)
    # pmf in log space: math.comb(n, j) overflows a float beyond n of about 1030
    lp, lq = math.log(p), math.log1p(-p)
    pmf = [math.exp(math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq)
           for j in range(n + 1)]
    out, cdf = 0.0, 0.0
    for j in range(1, n + 1):
        cdf += pmf[j - 1]
        out += 1.0 - min(1.0, cdf) ** ep
    return out


def ranks_per_token(experts: int, top_k: int, ep: int) -> float:
    """Expected distinct expert-parallel ranks one token's ``top_k`` experts live on (what a deduplicating
    dispatch sends it to): ep · (1 - C(E - E/ep, k) / C(E, k)), a rank being missed when none of the k
    distinct experts is among its E/ep."""
    if ep <= 1:
        return 1.0
    n = experts // ep
    return ep * (1.0 - math.comb(experts - n, top_k) / math.comb(experts, top_k))


def attention_head_dim(head_dim: int, gpu: "GPU") -> int:
    """Head size the GPU's fused attention kernels run ``head_dim`` at: itself when supported (or when the
    GPU lists no sizes), else the next supported size; above the largest, the next multiple of 64."""
    dims = gpu.attention_head_dims
    if not dims or head_dim in dims:
        return head_dim
    bigger = [d for d in dims if d >= head_dim]
    return bigger[0] if bigger else -(-head_dim // 64) * 64


@dataclass(frozen=True)
class Shards:
    """Per-GPU shares of one layer under a deployment (validated against the architecture)."""

    a_tp: int  # ways the attention heads split (1 with attention-DP)
    a_dp: int  # ways the requests split for attention (tp with attention-DP, else 1)
    kv_split: int  # ways each sequence's KV splits along the sequence (helix)
    heads: int  # query heads per GPU
    kv_heads: float  # KV heads stored per GPU (ceil when duplicated)
    q_dim: int  # per-GPU query width
    kv_dim: int  # per-GPU K (=V) width; MLA: the latent + rope width (shared by heads)
    o_in: int  # per-GPU input width of o_proj
    o_tp: int  # ways o_proj splits (and ranks of its all-reduce): a_tp, or all tp ranks under Helix
    ffn_tp: int  # ways the dense FFN and the shared experts split: tp, or 1 under attention-DP
    ffn: int  # dense FFN width per GPU
    experts: int  # experts per GPU
    expert_ffn: int  # expert FFN width per GPU
    shared_ffn: int  # shared experts' total width per GPU
    vocab: int  # lm_head rows per GPU (the whole vocabulary under attention-DP)
    stage_layers: int  # layers on the slowest pipeline stage
    moe_tp: int  # ways each expert splits


def _check_divides(what: str, value: int, parts: int, field_name: str) -> None:
    if value % parts:
        raise ValueError(f"{field_name}={parts} does not divide {what}={value}; choose a degree that divides it")


@lru_cache(maxsize=4096)
def shards(arch: "Architecture", dep: Deployment) -> Shards:
    """Per-GPU shard shapes; ValueError naming the value for degrees that do not divide what they split."""
    tp, ep, pp, helix = dep.tp, dep.ep, dep.pp, dep.helix
    if ep > 1 and not arch.is_moe:
        raise ValueError(f"ep={ep} needs an MoE model; {arch.name} is dense (use ep=1)")
    if arch.is_moe and arch.experts % ep:
        raise ValueError(f"ep={ep} does not divide experts={arch.experts}; choose a degree that divides it")
    if pp > arch.layers:
        raise ValueError(f"pp={pp} exceeds layers={arch.layers}")
    if dep.attention_dp:
        a_tp, a_dp = 1, tp
    else:
        a_tp, a_dp = tp // helix, 1
        _check_divides("heads", arch.heads, a_tp, "tp" if helix == 1 else "tp/helix")
        if arch.mla is None and arch.kv_heads % a_tp and a_tp % arch.kv_heads:
            raise ValueError(f"tp/helix={a_tp} and kv_heads={arch.kv_heads}: one must divide the other "
                             "(KV heads split or replicate evenly)")
    heads = arch.heads // a_tp
    # Helix: after the all-to-all each GPU holds all sequences' outputs of heads/tp heads, and the
    # output projection runs TP over all tp ranks (arXiv 2507.07120)
    o_tp = tp if helix > 1 else a_tp
    if helix > 1:
        _check_divides("heads", arch.heads, tp, "tp (Helix output projection)")
    if arch.mla is not None:
        m = arch.mla
        kv_heads = float(heads)
        q_dim = heads * m.qk_head_dim
        kv_dim = m.kv_lora_rank + m.qk_rope_head_dim
        o_in = arch.heads // o_tp * m.v_head_dim
    else:
        kv_heads = arch.kv_heads / a_tp if a_tp <= arch.kv_heads else 1.0
        q_dim = heads * arch.head_dim
        kv_dim = int(kv_heads * arch.head_dim)
        o_in = arch.heads // o_tp * arch.head_dim
    has_dense = arch.moe_layers < arch.layers
    # attention-DP: the dense FFN layers and the shared experts run data-parallel as well, whole on every rank
    # over its own tokens, with no collective; only the routed experts see every rank's tokens (TensorRT-LLM:
    # DeepseekV3DecoderLayer._compute_mlp_tp_size and Deepseekv3MoE._compute_shared_expert_tp_size return 1
    # under attention-DP, Llama4DecoderLayer / Llama4MoE build their GatedMLP with overridden_tp_size=1)
    ffn_tp = 1 if dep.attention_dp else tp
    if has_dense:
        _check_divides("ffn", arch.ffn, ffn_tp, "tp")
    moe_tp = tp // ep
    if arch.is_moe:
        _check_divides("expert_ffn", arch.expert_ffn, moe_tp, "tp/ep")
        if arch.shared_experts:
            _check_divides("shared_expert_ffn", arch.shared_expert_ffn * arch.shared_experts, ffn_tp, "tp")
    return Shards(
        a_tp=a_tp,
        a_dp=a_dp,
        kv_split=helix,
        heads=heads,
        kv_heads=kv_heads,
        q_dim=q_dim,
        kv_dim=kv_dim,
        o_in=o_in,
        o_tp=o_tp,
        ffn_tp=ffn_tp,
        ffn=arch.ffn // ffn_tp if has_dense else 0,
        experts=arch.experts // ep if arch.is_moe else 0,
        expert_ffn=arch.expert_ffn // moe_tp if arch.is_moe else 0,
        shared_ffn=(arch.shared_expert_ffn * arch.shared_experts) // ffn_tp if arch.is_moe else 0,
        # attention-DP: TensorRT-LLM keeps the embedding and lm_head whole on every rank, each rank's
        # own sequences through them ("the problem size of different ranks are different", so no
        # all-reduce: Qwen3MoEModel / Llama4Model embed_tokens, DecoderModelForCausalLM lm_head unless
        # enable_lm_head_tp_in_adp); SGLang replicates the embedding too, its lm_head stays
        # vocab-parallel unless --enable-dp-lm-head
        vocab=arch.vocab if dep.attention_dp else math.ceil(arch.vocab / tp),
        stage_layers=math.ceil(arch.layers / pp),
        moe_tp=moe_tp,
    )


@lru_cache(maxsize=4096)
def layer_kinds(arch: "Architecture", pp: int) -> tuple[tuple[bool, int | None, float], ...]:
    """(is_moe, window, count on the slowest stage) for each distinct layer kind, in order of first occurrence.

    O(1) in the number of layers: the counts come in closed form from :meth:`Architecture.layer_kinds`.
    """
    scale = math.ceil(arch.layers / pp) / arch.layers
    return tuple((moe, w, c * scale) for moe, w, c in arch.layer_kinds())


_ATTN_TILE = 128  # query rows and KV columns of a fused attention kernel's tile (GPU.prefill_attention)


def prefill_attention_tile_efficiency(prompt_len: float, window: int | None, overhead: float) -> float:
    """Fraction of a causal prompt attention kernel's tile-loop time spent on the prompt's attended pairs: each
    128-row query tile computes its diagonal KV tile whole (half of it masked) and pays ``overhead`` KV tiles'
    time once (``GPU.prefill_attention``), so ``pairs / (pairs + nq * (1/2 + overhead))`` in tiles, ``nq =
    ceil(prompt_len / 128)``: 0.40 for a 1024-token prompt at an overhead of 5.5, 0.84 at 8192."""
    if prompt_len <= 0:
        return 1.0
    tiles = attended_pairs(prompt_len, window) / _ATTN_TILE ** 2
    return tiles / (tiles + math.ceil(prompt_len / _ATTN_TILE - 1e-9) * (0.5 + overhead))


def decode_attention_time_s(nbytes: float, ctas: float, hbm_bytes_per_s: float, sms: int, fraction: float,
                            cta_s: float, ramp_s: float = 0.0, ramp_bytes: float = 0.0) -> float:
    """Seconds of a decode attention kernel's work under the GPU's ``decode_attention`` law: ``nbytes`` (the KV
    cache read, q in, o out) streamed at ``fraction`` of ``hbm_bytes_per_s``, plus ``cta_s`` for each wave of its
    ``ctas`` CTAs (one per sequence and KV head: loading the query, the softmax's final rescale and writing the
    output, paid however short the cache) over the ``sms`` SMs: ``ceil(ctas / sms)`` waves, at least one, plus
    the stream's ramp: ``ramp_s`` once the SMs stream ``ramp_bytes`` each or more, in proportion below that (the fill
    and drain of every SM's load pipeline and the reduction of a cache split over several CTAs, which a short
    stream pays on its few bytes, so it runs well below ``fraction`` while a long one approaches it). No launch:
    the serving model charges kernels' launches itself."""
    waves = max(1, math.ceil(ctas / sms - 1e-9)) if ctas > 0 else 0
    ramp = ramp_s * min(1.0, nbytes / (sms * ramp_bytes)) if ramp_bytes > 0 else 0.0
    return nbytes / (hbm_bytes_per_s * fraction) + waves * cta_s + ramp


def decode_mla_time_s(flops: float, cache_bytes: float, io_bytes: float, ctas: float, bf16_flops_per_s: float,
                      hbm_bytes_per_s: float, sms: int, compute_fraction: float, fraction: float, io_fraction: float,
                      cta_s: float) -> tuple[float, str]:
    """Seconds and bound (``"compute"``/``"memory"``) of an absorbed MLA decode kernel's work under the GPU's
    ``decode_mla`` law: the longer of its ``flops`` at ``compute_fraction`` of ``bf16_flops_per_s`` and its
    bytes, the latent cache read (``cache_bytes``) at ``fraction`` of ``hbm_bytes_per_s`` and the rest
    (``io_bytes``: the queries in and outputs out, per head and in bf16 whatever the cache's format, and the new
    token's latent) at ``io_fraction`` of it, plus ``cta_s`` for each wave of its ``ctas`` CTAs (one per sequence)
    over the ``sms`` SMs. No launch (as :func:`decode_attention_time_s`)."""
    waves = max(1, math.ceil(ctas / sms - 1e-9)) if ctas > 0 else 0
    compute_s = flops / (bf16_flops_per_s * compute_fraction)
    memory_s = (cache_bytes / fraction + io_bytes / io_fraction) / hbm_bytes_per_s
    return max(compute_s, memory_s) + waves * cta_s, "compute" if compute_s >= memory_s else "memory"


class _Table:
    """Collects one step's ops (helpers keep the formulas short).

    With ``keep=False`` only the per-bound time totals are kept (no OpCost rows):
    the fast path for batch searches and sweeps. Efficiencies come from the
    deployment's :class:`Runtime`: ``compute_efficiency`` on FLOP rates
    (``nvfp4_compute_efficiency`` for FP4 GEMMs; times
    ``grouped_gemm_efficiency`` for grouped expert GEMMs), ``bandwidth_efficiency``
    on HBM (times ``grouped_gemm_bandwidth_efficiency`` for grouped expert GEMMs;
    both rates times ``attention_efficiency`` for the prompt attention kernel and
    ``decode_attention_efficiency`` for the decode one),
    ``collective_efficiency`` on links.
    """

    def __init__(self, gpu: "GPU", phase: str, runtime: "Runtime", keep: bool = True, block_fp8: bool = False,
                 eager: bool = False) -> None:
        self.gpu, self.phase, self.rows, self.keep = gpu, phase, [], keep
        # outside a CUDA graph the host launches every kernel: none finishes sooner than its launch
        self.launch_s = runtime.eager_launch_s if eager else 0.0
        self.block_fp8 = block_fp8  # Deployment.fp8_scaling == "block": see _BLOCK_QUANT_INPUTS
        self.eff, self.bw_eff = runtime.compute_efficiency, runtime.bandwidth_efficiency
        self.grouped, self.coll = runtime.grouped_gemm_efficiency, runtime.collective_efficiency
        self.grouped_bw = runtime.grouped_gemm_bandwidth_efficiency
        self.attn, self.fp4_eff = runtime.attention_efficiency, runtime.nvfp4_compute_efficiency
        self.decode_attn = runtime.decode_attention_efficiency
        self.tile_oh = runtime.expert_tile_overhead_s
        self.idle_tile_s = runtime.idle_expert_tile_s / gpu.sms  # per idle expert tile, spread over the SMs
        self.kernel_oh = gpu.kernel_overhead_s + runtime.kernel_gap_s  # seconds per kernel launched
        self.coll_oh = runtime.collective_overhead_s
        self.bw = gpu.hbm_bytes_per_s * gpu.memory_efficiency * self.bw_eff
        self.by_bound = {"compute": 0.0, "memory": 0.0, "communication": 0.0, "host": 0.0}
        self.precs: dict[tuple[str, str], str] = {}  # (weights, activations) -> math precision

    def _launched(self, seconds: float, bound: str) -> tuple[float, str]:
        """A kernel's time and bound once its host launch is counted: ``"host"`` when the launch outlasts it."""
        return (self.launch_s, "host") if seconds < self.launch_s else (seconds, bound)

    def _achieved(self, bound: str, flops: float, nbytes: float, seconds: float, prec: str) -> float:
        """Fraction of the GPU's peak FLOP rate (compute-bound) or HBM bandwidth (otherwise) an op reaches; 0 for
        an op of 0 s (a launch-free op on a vanishing share of a token underflows to it)."""
        if seconds <= 0:
            return 0.0
        if bound == "compute":
            return flops / seconds / self.gpu.peak_flops_per_s[prec]
        return nbytes / seconds / self.gpu.hbm_bytes_per_s

    def gemm(self, name: str, m: float, n: int, k: int, count: float, *, w: str, a: str, groups: int = 1,
             grouped: bool = False, side_stream: bool = False, idle_groups: int = 0) -> None:
        """A GEMM (and its input's quantization kernel under block-scaled FP8). ``side_stream``: it runs on an
        auxiliary CUDA stream beside a longer chain of kernels, so its launches overlap that chain's (its
        FLOPs and bytes still share the GPU's rates). ``idle_groups``: groups of a grouped GEMM that get no
        rows; a block-scaled FP8 kernel still launches their ``ceil(n / 128)`` output tiles
        (``Runtime.idle_expert_tile_s``)."""
        m = math.ceil(m)
        if m <= 0 or n <= 0 or k <= 0 or count <= 0:
            return
        if self.block_fp8 and a == "fp8" and name in _BLOCK_QUANT_INPUTS:
            # per-token-group quantization of the input: bf16 in, fp8 and one fp32 scale per 128 values out
            self.mem(name + "_act_quant", m * k * (_BF16 + 1 + 4 / _FP8_GROUP), count, side_stream=side_stream)
        prec = self.precs.get((w, a))
        if prec is None:
            prec = self.precs[w, a] = math_precision(w, a, self.gpu)
        eff = (self.fp4_eff if prec == "nvfp4" else self.eff) * (self.grouped if grouped else 1.0)
        g = gemm(self.gpu, m, n, k, weights=w, activations=a, groups=groups, efficiency=eff,
                 bandwidth_efficiency=self.bw_eff * (self.grouped_bw if grouped else 1.0),
                 tile_overhead_s=self.tile_oh if grouped else 0.0,
                 token_tiles=grouped, kernel_overhead_s=0.0 if side_stream else self.kernel_oh)
        t, bound = self._launched(g.time_s, g.bound)
        if idle_groups > 0 and self.block_fp8 and a == "fp8":
            t += idle_groups * -(-n // _IDLE_TILE_COLS) * self.idle_tile_s
        self.by_bound[bound] += t * count
        if not self.keep:
            return
        frac = self._achieved(bound, g.flops, g.bytes, t, prec)
        self.rows.append(OpCost(name, self.phase, "gemm", count, t * count, g.flops * count, g.bytes * count,
                                bound, prec, (m, n, k), groups, g.tile_efficiency, g.wave_efficiency, frac))

    def mem(self, name: str, nbytes: float, count: float, flops: float = 0.0, *, fused: bool = False,
            side_stream: bool = False) -> None:
        """A memory-bound elementwise op moving ``nbytes`` per instance. ``fused``: it runs inside a
        neighbouring kernel (its bytes stay, its kernel does not); ``side_stream``: its own kernel on a side
        stream beside a longer chain (its GPU launch overhead overlaps that chain's; outside a CUDA graph the
        host still launches it)."""
        if nbytes <= 0 or count <= 0:
            return
        t, bound = roofline(0.0, nbytes / self.bw, 0.0 if fused or side_stream else self.kernel_oh)
        if not fused:
            t, bound = self._launched(t, bound)
        self.by_bound[bound] += t * count
        if self.keep:
            self.rows.append(OpCost(name, self.phase, "elementwise", count, t * count, flops * count, nbytes * count,
                                    bound, "bf16", achieved_fraction=self._achieved(bound, 0.0, nbytes, t, "bf16")))

    def attention(self, name: str, flops: float, nbytes: float, count: float, prec: str = "bf16", *,
                  decode: bool = False, prompt_len: float = 0.0, window: int | None = None,
                  kv_cache: str | None = None, ctas: float = 0.0, mla: bool = False, cache_bytes: float = 0.0) -> None:
        """A fused attention kernel: the prompt (FMHA over prompts of ``prompt_len`` tokens, at the GPU's
        ``prefill_attention`` law for ``prec`` where it has one; ``mla``: its ``prefill_mla`` law first) or, with
        ``decode``, the decode one (one query
        token per sequence over its cached KV in format ``kv_cache``, in ``ctas`` CTAs, at the GPU's
        ``decode_attention`` law for that format where it has one; ``mla``: the absorbed MLA kernel, at the GPU's
        ``decode_mla`` law where it has one, ``cache_bytes`` of its ``nbytes`` the latent cache read); elsewhere
        at the GPU's flat ``attention_efficiency`` of the FLOP rate and the HBM bandwidth the other ops reach.
        Each has its own runtime fraction of both rates."""
        if (flops <= 0 and nbytes <= 0) or count <= 0:
            return
        peak = self.gpu.peak_flops_per_s[prec]
        attn = self.decode_attn if decode else self.attn
        law = None if decode else (mla and self.gpu.prefill_mla.get(prec)) or self.gpu.prefill_attention.get(prec)
        if law is not None:  # the published kernel law: its long-prompt fraction, less per query tile
            kernel = law[0] * prefill_attention_tile_efficiency(prompt_len, window, law[1])
        else:
            kernel = self.gpu.attention_efficiency
        mla_law = self.gpu.decode_mla_law(kv_cache) if decode and mla and kv_cache else None
        if mla_law is not None:  # the published MLA kernel law, all of it slower by the runtime's fraction
            t, bound = decode_mla_time_s(flops, cache_bytes, nbytes - cache_bytes, ctas,
                                         self.gpu.peak_flops_per_s["bf16"] * self.eff,
                                         self.gpu.hbm_bytes_per_s * self.bw_eff, self.gpu.sms, *mla_law)
            t, bound = self._launched(t / attn + self.kernel_oh, bound)
            self._count(name, t, bound, flops, nbytes, count, prec)
            return
        compute_s = flops / (peak * kernel * self.eff * attn)
        dlaw = self.gpu.decode_attention_law(kv_cache) if decode and kv_cache else None
        if dlaw is not None:  # the published kernel law (its streaming fraction, each wave of CTAs), all of it slower
            # by the runtime's fraction
            memory_s = decode_attention_time_s(nbytes, ctas, self.gpu.hbm_bytes_per_s * self.bw_eff, self.gpu.sms,
                                               *dlaw) / attn
        else:
            memory_s = nbytes / (self.bw * attn)
        t, bound = self._launched(*roofline(compute_s, memory_s, self.kernel_oh))
        self._count(name, t, bound, flops, nbytes, count, prec)

    def _count(self, name: str, t: float, bound: str, flops: float, nbytes: float, count: float, prec: str) -> None:
        """Book an attention kernel of ``t`` seconds, ``count`` times."""
        self.by_bound[bound] += t * count
        if self.keep:
            self.rows.append(OpCost(name, self.phase, "attention", count, t * count, flops * count, nbytes * count,
                                    bound, prec, achieved_fraction=self._achieved(bound, flops, nbytes, t, prec)))

    def comm(self, name: str, kind: str, nbytes: float, n: int, count: float, span: int | None = None) -> None:
        t = collective_time_s(kind, nbytes, n, self.gpu, span=span, efficiency=self.coll, overhead_s=self.coll_oh)
        if t <= 0 or count <= 0:
            return
        t, bound = self._launched(t, "communication")
        self.by_bound[bound] += t * count
        if self.keep:
            self.rows.append(OpCost(name, self.phase, "communication", count, t * count, 0.0, nbytes * count,
                                    bound, "bf16"))


def step_ops(arch: "Architecture", gpu: "GPU", dep: Deployment, *, decode: float, context: float,
             prefill_tokens: float, prefill_len: float, phase: str = "decode",
             prompt_ranks: float | None = None, eager: bool = False, even_routing: bool = False) -> list[OpCost]:
    """Op table of one step (see :func:`_step`). ``even_routing``: every expert-parallel rank receives exactly
    its share of the token-expert assignments, over as many distinct experts as that share fills (at most the
    experts it holds), as a synthetic balanced benchmark routes them; serving routes at random and its busiest
    rank carries more (the default, :func:`busiest_rank_load` and :func:`busiest_rank_experts`)."""
    return _step(arch, gpu, dep, decode, context, prefill_tokens, prefill_len, phase, True, prompt_ranks,
                 eager, even_routing).rows


def step_time(arch: "Architecture", gpu: "GPU", dep: Deployment, *, decode: float, context: float,
              prefill_tokens: float, prefill_len: float, prompt_ranks: float | None = None,
              eager: bool = False) -> dict[str, float]:
    """Seconds of one step per bound (``compute``/``memory``/``communication``/``host``), without building the
    table."""
    return _step(arch, gpu, dep, decode, context, prefill_tokens, prefill_len, "decode", False,
                 prompt_ranks, eager).by_bound


def _step(arch: "Architecture", gpu: "GPU", dep: Deployment, decode: float, context: float,
          prefill_tokens: float, prefill_len: float, phase: str, keep: bool,
          prompt_ranks: float | None = None, eager: bool = False, even_routing: bool = False) -> _Table:
    """Op table of one step of one replica on its busiest GPU.

    ``decode``: sequences decoding one token each, with ``context`` cached
    tokens on average; ``prefill_tokens``: prompt tokens in the step, from
    prompts of ``prefill_len`` tokens (their attention covers the causal
    triangle of the whole prompt; chunks of one prompt add up to it).
    Counts are per replica (all its tp GPUs); the table is per GPU.
    ``prompt_ranks``: under attention-DP, the attention ranks the prompt tokens
    spread over, the busiest GPU holding ``prefill_tokens / prompt_ranks`` of them
    (1: one request's prompt, at TTFT; None: all of them, as many requests'
    prompts spread in the steady state).
    ``eager``: the step runs outside a CUDA graph, so every kernel takes at least the host's
    ``Runtime.eager_launch_s`` to launch (bound ``"host"`` where that is longer than its GPU time).
    """
    s = shards(arch, dep)
    rt = dep.runtime
    t = _Table(gpu, phase, rt, keep, block_fp8=dep.fp8_scaling == "block", eager=eager)
    w, kvp = dep.weights, dep.kv_cache
    a = dep.activations  # the serving entry points checked it against the GPU's precision table
    ab, kvb = bytes_per_element(a), bytes_per_element(kvp)
    h, tp = arch.hidden, dep.tp
    tokens = decode + prefill_tokens  # through every FFN, per replica
    pf_div = s.a_dp if prompt_ranks is None else min(max(prompt_ranks, 1.0), s.a_dp)  # ranks holding prompt tokens
    pf_attn = prefill_tokens / pf_div  # prompt tokens through attention on the busiest GPU
    t_attn = decode / s.a_dp + pf_attn  # tokens through the attention projections on one GPU
    dec_attn = decode / s.a_dp  # decoding sequences per GPU (attention)
    n_prompts = prefill_tokens / prefill_len if prefill_len > 0 else 0.0

    # a collective before a norm carries it (TensorRT-LLM's all-reduce + residual + RMSNorm + quantize fusion):
    # under TP the FFN's all-reduce, under attention-DP the MoE's reduce-scatter or combine (a data-parallel
    # dense FFN ends in none); each layer's attention norm is counted with its own FFN's collective
    ffn_norm_fused = s.o_tp > 1
    # tokens through the dense FFN and the shared experts on the busiest GPU: every token of the replica under
    # TP; under attention-DP each rank's own (data-parallel, see Shards.ffn_tp)
    f_tok = tokens if s.a_dp == 1 else t_attn
    # prompt attention in fp8 when the KV cache and activations are 8-bit or narrower (FP8 context FMHA)
    pf_prec = "fp8" if (kvp != "bf16" and a != "bf16" and "fp8" in gpu.peak_flops_per_s) else "bf16"
    for is_moe, window, count in layer_kinds(arch, dep.pp):
        # ---------------------------------------------------------------- attention
        t.mem("attn_norm", t_attn * h * (2 * _BF16 + ab), count, fused=s.o_tp > 1 or (s.a_dp > 1 and is_moe))
        if arch.mla is None:
            t.gemm("qkv_proj", t_attn, s.q_dim + 2 * s.kv_dim, h, count, w=w, a=a)
            # prompt tokens: RoPE + KV-cache write as their own pre-processing kernel; decode tokens: inside the
            # decode attention kernel (its IO below)
            t.mem("rope_kv_write", pf_attn * ((s.q_dim + 2 * s.kv_dim) * _BF16 * 2 + 2 * s.kv_dim * kvb), count)
            d_qk = d_v = attention_head_dim(arch.head_dim, gpu)  # padded to a size the kernels implement
            kv_tok_bytes = 2 * s.kv_dim * kvb  # K and V per cached token, this GPU
            new_kv = 2 * s.kv_dim * (_BF16 + kvb)  # per decode token: its new K and V read (bf16) and cached
        else:
            m = arch.mla
            if m.q_lora_rank:
                # W_DQ and W_DKV (with W_KR) read the same input: one GEMM in the runtimes
                t.gemm("qkv_a_proj", t_attn, m.q_lora_rank + s.kv_dim, h, count, w=w, a=a)
                t.mem("q_a_norm", t_attn * m.q_lora_rank * 2 * _BF16, count)
                t.mem("kv_a_norm", t_attn * m.kv_lora_rank * 2 * _BF16, count, side_stream=True)
                t.gemm("q_b_proj", t_attn, s.q_dim, m.q_lora_rank, count, w=w, a=a)
            else:
                t.gemm("q_proj", t_attn, s.q_dim, h, count, w=w, a=a)
                t.gemm("kv_a_proj", t_attn, s.kv_dim, h, count, w=w, a=a)
                t.mem("kv_a_norm", t_attn * m.kv_lora_rank * 2 * _BF16, count)
            t.mem("rope_kv_write", pf_attn * (s.q_dim * _BF16 * 2 + s.kv_dim * (_BF16 + kvb)), count)
            kv_tok_bytes = s.kv_dim * kvb
            new_kv = s.kv_dim * (_BF16 + kvb)
            if prefill_tokens:  # prompt tokens expand the latent: K_nope and V per head
                t.gemm("kv_b_proj", pf_attn, s.heads * (m.qk_nope_head_dim + m.v_head_dim),
                       m.kv_lora_rank, count, w=w, a=a)
            # Decode runs MLA absorbed (DeepSeek-V2, arXiv 2405.04434 sec. 2.1.2; FlashMLA, TensorRT-LLM,
            # SGLang, vLLM): W_UK folds into the query (q_nope . W_UK per head -> latent) and W_UV into
            # the output (latent -> v per head), so kv_b_proj never runs over the cached latents; the
            # attention reads only the latent cache. Per decode token and head: 2 * qk_nope * kv_lora
            # FLOPs (query) and 2 * kv_lora * v_head (output); the per-head W_UK / W_UV are read once
            # per step as bf16 (runtimes keep them as bf16 copies beside kv_b_proj, which prefill
            # runs un-absorbed).
            if decode:
                t.gemm("mla_q_absorb", dec_attn, m.kv_lora_rank, m.qk_nope_head_dim, count, w="bf16", a="bf16",
                       groups=s.heads)
                t.gemm("mla_v_up", dec_attn, m.v_head_dim, m.kv_lora_rank, count, w="bf16", a="bf16", groups=s.heads)
            d_qk, d_v = m.qk_head_dim, m.v_head_dim
        if prefill_tokens:
            # per GPU: heads split a_tp (x helix) ways, prompts over pf_div attention ranks
            pairs = n_prompts * attended_pairs(prefill_len, window) * (s.a_dp / pf_div) / tp
            # FlashAttention IO: Q, K, V read and O written once per prompt token (K/V re-reads hit L2/SMEM)
            kv_io = 2 * s.kv_dim if arch.mla is None else s.heads * (d_qk + d_v)
            io = pf_attn * (s.heads * (d_qk + d_v) + kv_io) * _BF16
            t.attention("attention_prefill", 2.0 * arch.heads * (d_qk + d_v) * pairs, io, count, pf_prec,
                        prompt_len=prefill_len, window=window, mla=arch.mla is not None)
        if decode:
            cached = min(context, window) if window else context
            cached /= s.kv_split
            if arch.mla is None:
                fl = 2.0 * s.heads * (d_qk + d_v) * cached * dec_attn
                q_o = s.heads * (d_qk + d_v)  # per sequence: q in, o out (bf16 elements)
            else:
                # absorbed (MQA-like over the shared latent): per head and cached token, the score
                # q_latent . [c_kv, k_rope] over kv_lora + rope and the value sum over kv_lora; the
                # query enters and the output leaves in latent space (kv_lora + rope in, kv_lora out)
                fl = 2.0 * s.heads * (s.kv_dim + arch.mla.kv_lora_rank) * cached * dec_attn
                q_o = s.heads * (s.kv_dim + arch.mla.kv_lora_rank)
            # one kernel: RoPE and the new token's KV write (new_kv), the cache read, q in and o out
            io = dec_attn * (cached * kv_tok_bytes + q_o * _BF16 + new_kv)
            # the kernel's CTAs: one per sequence and KV head (MLA: one shared latent head)
            ctas = dec_attn * (1.0 if arch.mla is not None else s.kv_heads)
            t.attention("attention_decode", fl, io, count, "bf16", decode=True, kv_cache=kvp, ctas=ctas,
                        mla=arch.mla is not None, cache_bytes=dec_attn * cached * kv_tok_bytes)
            if s.kv_split > 1:  # Helix: combine partial outputs + softmax stats across KV ranks
                # per sequence and head: the partial output (d_v, bf16) and its softmax max and sum (2 x fp32)
                t.comm("helix_all_to_all", "all_to_all", dec_attn * s.heads * (d_v * _BF16 + 2 * 4.0), s.kv_split,
                       count, span=tp)  # KV ranks stride across the tp group
        t.gemm("o_proj", t_attn, h, s.o_in, count, w=w, a=a)
        if s.o_tp > 1:
            t.comm("attn_all_reduce", "all_reduce", tokens * h * _BF16, s.o_tp, count)
        # -------------------------------------------------------------------- FFN
        t.mem("ffn_norm", t_attn * h * (2 * _BF16 + ab), count, fused=ffn_norm_fused)
        if not is_moe:
            n_up = s.ffn * (2 if arch.gated_ffn else 1)
            t.gemm("gate_up_proj", f_tok, n_up, h, count, w=w, a=a)
            t.mem("activation", f_tok * (n_up * _BF16 + s.ffn * ab), count)  # SwiGLU + quantize, one kernel
            t.gemm("down_proj", f_tok, h, s.ffn, count, w=w, a=a)
            if s.ffn_tp > 1:
                t.comm("ffn_all_reduce", "all_reduce", tokens * h * _BF16, tp, count)
            continue
        e, k = arch.experts, arch.experts_per_token
        t.gemm("router", t_attn, e, h, count, w="bf16", a="bf16")
        # the busiest expert-parallel rank sets the pace: its token-expert assignments (routing skew and
        # finite-batch spread, busiest_rank_load) and its distinct experts (busiest_rank_experts)
        if even_routing:
            local = tokens * k / dep.ep
            touched = min(e / dep.ep, local)
        else:
            local = busiest_rank_load(e, k, tokens, dep.ep, dep.runtime.moe_expert_load_cv)
            touched = busiest_rank_experts(e, k, max(1, round(tokens)), dep.ep) if tokens > 0 else 0.0
        touched_n = max(1, min(s.experts, round(touched)))
        imbalance = local / (tokens * k / dep.ep) if tokens > 0 else 1.0
        # attention-DP MoE exchange (TensorRT-LLM 1.0, fused_moe_cutlass.select_alltoall_method_type): an
        # all-to-all only over multi-node NVLink (MNNVL, an NVLink domain beyond one node) and only when
        # ep > top_k; otherwise every rank all-gathers all ranks' (quantized) tokens and reduce-scatters the
        # bf16 outputs, whatever the routing
        a2a = s.a_dp > 1 and dep.ep > 1 and dep.ep > k and gpu.nvlink_domain > _NODE_GPUS
        if a2a:
            # deduplicated dispatch: each token goes once to each distinct rank holding one of its experts;
            # the busiest rank receives `imbalance` x the mean
            fan = ranks_per_token(e, k, dep.ep) * imbalance
            t.comm("moe_dispatch_all_to_all", "all_to_all", t_attn * fan * h * ab, tp, count)
        elif s.a_dp > 1:
            t.comm("ffn_all_gather", "all_gather", tokens * h * ab, tp, count)
        t.mem("moe_permute", tokens * h * ab + local * h * ab, count)  # gather + quantize per expert
        n_up = s.expert_ffn * (2 if arch.gated_ffn else 1)
        m_e = local / touched_n  # tokens per touched expert
        # gated activation fused into the first grouped GEMM's epilogue (CUTLASS MoE)
        idle = s.experts - touched_n  # held but given no tokens this step (block-scaled FP8 still tiles them)
        t.gemm("experts_gate_up", m_e, n_up, h, count, w=w, a=a, groups=touched_n, grouped=True, idle_groups=idle)
        t.gemm("experts_down", m_e, h, s.expert_ffn, count, w=w, a=a, groups=touched_n, grouped=True,
               idle_groups=idle)
        # finalize: weighted sum of each token's k outputs (+ residual); rides the FFN all-reduce under TP
        t.mem("moe_finalize", local * h * _BF16 + tokens * h * _BF16, count, fused=s.a_dp == 1 and tp > 1)
        if s.shared_ffn:
            # on an auxiliary stream beside the routed experts' longer chain (router, permute, two grouped
            # GEMMs): TensorRT-LLM's DeepseekV3MoE / Llama4MoE maybe_execute_in_parallel, SGLang's dual-stream
            # MoE; their launches overlap, their bytes and FLOPs do not
            n_sh = s.shared_ffn * (2 if arch.gated_ffn else 1)
            t.gemm("shared_gate_up", f_tok, n_sh, h, count, w=w, a=a, side_stream=True)
            t.mem("shared_activation", f_tok * (n_sh * _BF16 + s.shared_ffn * ab), count, side_stream=True)
            t.gemm("shared_down", f_tok, h, s.shared_ffn, count, w=w, a=a, side_stream=True)
        if a2a:
            fan = ranks_per_token(e, k, dep.ep) * imbalance
            t.comm("moe_combine_all_to_all", "all_to_all", t_attn * fan * h * _BF16, tp, count)
        elif s.a_dp > 1:
            t.comm("ffn_reduce_scatter", "reduce_scatter", tokens * h * _BF16, tp, count)
        elif tp > 1:
            t.comm("ffn_all_reduce", "all_reduce", tokens * h * _BF16, tp, count)
    # ------------------------------------------------------------- per step
    stage_first = 1.0  # embedding and head: on the first / last stage; the slowest stage is charged both
    t.mem("embedding", t_attn * h * _BF16 * 2, stage_first)
    # sequences producing a next token this step: all of the replica's through a vocab-parallel head; under
    # attention-DP each rank's own (the head is whole on every rank) and no logits gather
    heads_in = decode + n_prompts if s.a_dp == 1 else dec_attn + n_prompts / pf_div
    t.mem("final_norm", heads_in * h * _BF16 * 3, 1.0, fused=tp > 1 and s.a_dp == 1)
    t.gemm("lm_head", heads_in, s.vocab, h, 1.0, w="bf16", a="bf16")
    t.mem("sampling", heads_in * s.vocab * 4.0 * 2, 1.0)
    if tp > 1 and s.a_dp == 1:
        t.comm("logits_all_gather", "all_gather", heads_in * 4.0 * 2, tp, 1.0)  # top-k partials, not full logits
    if dep.pp > 1:
        # the slowest stage boundary crosses NVLink domains when the replica (tp * pp GPUs) exceeds one
        t.comm("pp_send_recv", "p2p", tokens * h * _BF16, 2, 1.0, span=tp * dep.pp)
    return t
