"""An :class:`~co_design.arch.Architecture` -> a Hugging Face ``config.json`` that ``transformers`` loads.

The inverse of :mod:`co_design.readers.hf` for the families it writes, so
``architecture_from_hf(hf_config(a)) == a``:

* dense, gated FFN, no attention biases, full attention: ``llama`` (``LlamaForCausalLM``);
* MoE without shared experts or leading dense layers, standard attention: ``qwen3_moe``
  (``Qwen3MoeForCausalLM``; ``decoder_sparse_step`` = ``moe_every``). Qwen3 adds a per-head RMSNorm on
  q and k (2 · head_dim weights per layer) that :meth:`Architecture.param_counts` does not count;
* MLA attention (with or without shared experts and leading dense layers): ``deepseek_v3``
  (``DeepseekV3ForCausalLM``; one routing group, so any expert count loads).

A shape none of them holds (sliding window, non-gated FFN, attention biases, a shared expert
without MLA) is refused with an ArchitectureError naming the field. Imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from co_design.arch import ArchitectureError

if TYPE_CHECKING:
    from co_design.arch import Architecture

__all__ = ["hf_config", "hf_family", "hf_extra_params"]


def hf_family(arch: "Architecture") -> str:
    """The ``model_type`` :func:`hf_config` writes for ``arch``; ArchitectureError if none fits."""
    if arch.sliding_window is not None:
        raise ArchitectureError(f"sliding_window={arch.sliding_window}: no exported family holds local attention "
                                "yet; export a full-attention shape (sliding_window=None)")
    if not arch.gated_ffn:
        raise ArchitectureError("gated_ffn=False: the exported families (Llama, Qwen3-MoE, DeepSeek-V3) use a gated "
                                "SwiGLU FFN; export a gated shape")
    if arch.mla is not None:
        if not arch.is_moe:
            raise ArchitectureError("mla without experts: DeepSeek-V3 (the exported MLA family) is an MoE; "
                                    "set experts or drop mla")
        if arch.head_dim != arch.mla.v_head_dim:
            raise ArchitectureError(f"head_dim={arch.head_dim} with mla: DeepSeek-V3 configs carry no head_dim of "
                                    f"their own (the reader takes v_head_dim); set head_dim={arch.mla.v_head_dim}")
        if arch.shared_experts and arch.shared_expert_ffn != arch.expert_ffn:
            raise ArchitectureError(f"shared_expert_ffn={arch.shared_expert_ffn} differs from expert_ffn="
                                    f"{arch.expert_ffn}: DeepSeek-V3 sizes its shared experts as its routed ones")
        return "deepseek_v3"
    if arch.attention_bias:
        raise ArchitectureError("attention_bias=True: Llama and Qwen3-MoE have no q/k/v biases; export without them")
    if not arch.is_moe:
        return "llama"
    if arch.shared_experts or arch.dense_layers:
        raise ArchitectureError("shared_experts / dense_layers without mla: Qwen3-MoE has neither; give the shape "
                                "MLA (DeepSeek-V3) or drop them")
    return "qwen3_moe"


def hf_extra_params(arch: "Architecture") -> int:
    """Weights the exported family has that :meth:`Architecture.param_counts` does not count.

    Qwen3-MoE: q_norm and k_norm, head_dim each, per layer (Llama and DeepSeek-V3: none; DeepSeek-V3's
    ``e_score_correction_bias`` is a buffer, not a parameter).
    """
    return 2 * arch.head_dim * arch.layers if hf_family(arch) == "qwen3_moe" else 0


def hf_config(arch: "Architecture", *, dtype: str = "bfloat16", max_position_embeddings: int = 131072) -> dict[str, Any]:
    """The ``config.json`` mapping of ``arch`` (see the module docstring for the families)."""
    family = hf_family(arch)
    cfg: dict[str, Any] = {
        "architectures": [{"llama": "LlamaForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                           "deepseek_v3": "DeepseekV3ForCausalLM"}[family]],
        "model_type": family,
        "hidden_size": arch.hidden,
        "intermediate_size": arch.ffn,
        "num_hidden_layers": arch.layers,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.kv_heads,
        "head_dim": arch.head_dim,
        "vocab_size": arch.vocab,
        "hidden_act": "silu",
        "tie_word_embeddings": arch.tied_embeddings,
        "attention_bias": False,
        "rms_norm_eps": 1e-5 if family == "llama" else 1e-6,
        "max_position_embeddings": max_position_embeddings,
        "rope_theta": arch.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": arch.rope_theta},
        "dtype": dtype,
    }
    if family == "llama":
        cfg["mlp_bias"] = False
    elif family == "qwen3_moe":
        cfg.update(num_experts=arch.experts, num_experts_per_tok=arch.experts_per_token,
                   moe_intermediate_size=arch.expert_ffn, decoder_sparse_step=arch.moe_every, mlp_only_layers=[],
                   norm_topk_prob=True, use_sliding_window=False)
    else:
        m = arch.mla
        del cfg["head_dim"]
        cfg.update(n_routed_experts=arch.experts, num_experts_per_tok=arch.experts_per_token,
                   n_shared_experts=arch.shared_experts, moe_intermediate_size=arch.expert_ffn,
                   first_k_dense_replace=arch.dense_layers, moe_layer_freq=arch.moe_every,
                   kv_lora_rank=m.kv_lora_rank, q_lora_rank=m.q_lora_rank or None,
                   qk_nope_head_dim=m.qk_nope_head_dim, qk_rope_head_dim=m.qk_rope_head_dim,
                   v_head_dim=m.v_head_dim, head_dim=m.qk_rope_head_dim, n_group=1, topk_group=1,
                   norm_topk_prob=True, num_key_value_heads=arch.heads)
    return cfg
