"""Hugging Face ``config.json`` → :class:`~co_design.arch.Architecture` keyword arguments.

Field names follow each family's ``configuration_*.py`` in ``transformers``:
Llama 3 (``llama``), Qwen2/Qwen3 (``qwen2``, ``qwen3``), Qwen2-MoE/Qwen3-MoE
(``qwen2_moe``, ``qwen3_moe``), Mixtral (``mixtral``), DeepSeek-V3/R1
(``deepseek_v3``; ``deepseek_v2`` alike), gpt-oss (``gpt_oss``) and Llama-4 (``llama4``, whose text
model sits under ``text_config``). Any other ``model_type`` is refused
(ArchitectureError naming it and the supported ones) rather than read as a Llama;
a config without ``model_type`` is read as ``llama``.
"""

from __future__ import annotations

from typing import Any, Mapping

from co_design.arch import MLA, ArchitectureError

__all__ = ["architecture_kwargs_from_hf"]

# model_type values this module translates (``*_text`` variants read as their family)
_FAMILIES = ("deepseek_v2", "deepseek_v3", "gpt_oss", "llama", "llama4", "mixtral", "qwen2", "qwen2_moe", "qwen3",
             "qwen3_moe")


def _get(cfg: Mapping[str, Any], key: str, model_type: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise ArchitectureError(f"HF config ({model_type}) is missing {key!r}, needed to describe the model")
    return cfg[key]


def architecture_kwargs_from_hf(config: Mapping[str, Any], *, name: str | None = None) -> dict[str, Any]:
    """Translate an HF config mapping into Architecture keyword arguments."""
    if "text_config" in config and isinstance(config["text_config"], Mapping):
        cfg = dict(config["text_config"])
        cfg.setdefault("model_type", config.get("model_type", "llama4"))
    else:
        cfg = dict(config)
    mt = str(cfg.get("model_type", "llama")).removesuffix("_text")
    if mt not in _FAMILIES:
        raise ArchitectureError(f"HF config model_type={cfg.get('model_type')!r} is not a supported model family "
                                f"(supported: {', '.join(_FAMILIES)}); describe the model as a project YAML of "
                                "Architecture fields instead")

    def need(key: str) -> Any:
        return _get(cfg, key, mt)

    kw: dict[str, Any] = dict(
        hidden=need("hidden_size"),
        layers=need("num_hidden_layers"),
        heads=need("num_attention_heads"),
        kv_heads=cfg.get("num_key_value_heads") or need("num_attention_heads"),
        head_dim=cfg.get("head_dim"),
        ffn=need("intermediate_size"),
        vocab=need("vocab_size"),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", mt in ("qwen2", "qwen2_moe"))),
        gated_ffn=str(cfg.get("hidden_act", "silu")) not in ("gelu", "gelu_new", "relu"),
        rope_theta=float(cfg.get("rope_theta") or 10000.0),
        name=name or cfg.get("_name_or_path") or mt,
    )
    if cfg.get("sliding_window") and cfg.get("use_sliding_window", True):
        kw["sliding_window"] = int(cfg["sliding_window"])
        layer_types = cfg.get("layer_types")
        if layer_types:
            full = [i for i, t in enumerate(layer_types) if t == "full_attention"]
            if full:
                step = full[0] + 1
                if full != list(range(step - 1, len(layer_types), step)):
                    raise ArchitectureError(f"HF config ({mt}): layer_types pattern {layer_types} is not periodic")
                kw["full_attention_every"] = step

    if mt == "deepseek_v3" or mt == "deepseek_v2":
        kw.update(
            experts=need("n_routed_experts"),
            experts_per_token=need("num_experts_per_tok"),
            shared_experts=int(cfg.get("n_shared_experts") or 0),
            expert_ffn=need("moe_intermediate_size"),
            dense_layers=int(cfg.get("first_k_dense_replace") or 0),
            moe_every=int(cfg.get("moe_layer_freq") or 1),
            mla=MLA(
                kv_lora_rank=need("kv_lora_rank"),
                qk_nope_head_dim=need("qk_nope_head_dim"),
                qk_rope_head_dim=need("qk_rope_head_dim"),
                v_head_dim=need("v_head_dim"),
                q_lora_rank=int(cfg.get("q_lora_rank") or 0),
            ),
        )
        kw["head_dim"] = need("v_head_dim")
    elif mt in ("qwen3_moe", "qwen2_moe"):
        if cfg.get("mlp_only_layers"):
            raise ArchitectureError(f"HF config ({mt}): mlp_only_layers is not supported; only leading dense layers are")
        kw.update(
            experts=need("num_experts"),
            experts_per_token=need("num_experts_per_tok"),
            expert_ffn=need("moe_intermediate_size"),
            moe_every=int(cfg.get("decoder_sparse_step") or 1),
        )
        if cfg.get("shared_expert_intermediate_size"):
            kw.update(shared_experts=1, shared_expert_ffn=int(cfg["shared_expert_intermediate_size"]))
    elif mt == "mixtral":
        kw.update(experts=need("num_local_experts"), experts_per_token=need("num_experts_per_tok"))
    elif mt == "gpt_oss":
        kw.update(
            experts=need("num_local_experts"),
            experts_per_token=cfg.get("num_experts_per_tok") or need("experts_per_token"),
            attention_bias=True,
        )
    elif mt == "llama4":
        step = int(cfg.get("interleave_moe_layer_step") or 1)
        kw.update(
            experts=need("num_local_experts"),
            experts_per_token=need("num_experts_per_tok"),
            shared_experts=1,  # Llama-4's MoE always adds one shared expert
            expert_ffn=need("intermediate_size"),
            ffn=int(cfg.get("intermediate_size_mlp") or need("intermediate_size")),
            moe_every=step,
        )
        if cfg.get("attention_chunk_size"):
            # Chunked local attention on 3 of 4 layers; every 4th layer is global (no RoPE).
            kw.update(sliding_window=int(cfg["attention_chunk_size"]), full_attention_every=4)
    return kw
