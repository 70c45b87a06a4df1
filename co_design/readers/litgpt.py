"""LitGPT ``litgpt.Config`` (or its ``model_config.yaml`` as a mapping) → Architecture.

Duck-typed: litgpt need not be installed. Field meanings from ``litgpt/config.py`` and
``litgpt/model.py`` (0.5.x): ``n_embd`` hidden, ``n_layer``, ``n_head``, ``n_query_groups`` (KV
heads; default ``n_head``), ``head_size`` (default ``n_embd // n_head``), ``intermediate_size`` (default
``4 * n_embd``), ``padded_vocab_size`` (the embedding's rows; default ``vocab_size`` rounded up to
``padding_multiple``), ``mlp_class_name`` (``LLaMAMLP``/``GemmaMLP``/``LLaMAMoE`` are gated, ``GptNeoxMLP``
is not), ``bias``/``attn_bias`` (the fused ``qkv`` Linear has a bias when either is set),
``rope_base``, MoE ``n_expert``, ``n_expert_per_token``, ``moe_intermediate_size`` (default
``intermediate_size``), ``n_shared_expert``, ``first_k_dense_replace``, ``sliding_window_size`` with
``sliding_window_indices`` (1 = local layer), and ``latent_attention`` (DeepSeek MLA). LitGPT keeps
``lm_head`` separate from the token embedding (no weight tying).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from co_design.arch import Architecture
from co_design.readers.base import ConfigFields

__all__ = ["architecture_from_litgpt", "is_litgpt_config"]

_GATED = ("LLaMAMLP", "GemmaMLP", "LLaMAMoE")
_KNOWN_MLP = (*_GATED, "GptNeoxMLP")


def is_litgpt_config(config: Any) -> bool:
    """Whether ``config`` looks like a LitGPT Config (``n_embd``, ``n_layer``, ``n_head``, ``mlp_class_name``
    or ``padded_vocab_size``)."""
    f = ConfigFields(config, "LitGPT")
    return f.has("n_embd", "n_layer", "n_head") and (f.has("mlp_class_name") or f.has("padded_vocab_size"))


def architecture_from_litgpt(config: Any, *, name: str | None = None) -> Architecture:
    """The Architecture of a LitGPT ``Config`` (object or mapping); ArchitectureError naming the attribute."""
    f = ConfigFields(config, "LitGPT")
    hidden, layers, heads = f.integer("n_embd"), f.integer("n_layer"), f.integer("n_head")
    mlp = f.get("mlp_class_name", "GptNeoxMLP")
    if mlp not in _KNOWN_MLP:
        raise f.fail(f"mlp_class_name={mlp!r} is not one co-design reads (known: {', '.join(_KNOWN_MLP)})")
    padded = f.integer("padded_vocab_size", None)
    if padded is None:
        vocab, multiple = f.integer("vocab_size"), f.integer("padding_multiple", 512)
        padded = -(-vocab // multiple) * multiple  # litgpt.config.find_multiple
    kw: dict[str, Any] = dict(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=f.integer("n_query_groups", heads),
        head_dim=f.integer("head_size", None) or hidden // heads,
        ffn=f.integer("intermediate_size", None) or 4 * hidden,
        vocab=padded,
        gated_ffn=mlp in _GATED,
        tied_embeddings=False,
        attention_bias=f.flag("bias", True) or f.flag("attn_bias", False),
        rope_theta=f.number("rope_base", 10000.0),
        name=name or str(f.get("name") or "litgpt"),
    )
    if mlp == "LLaMAMoE":
        n_expert = f.integer("n_expert")
        kw.update(
            experts=n_expert,
            experts_per_token=f.integer("n_expert_per_token"),
            expert_ffn=f.integer("moe_intermediate_size", None) or kw["ffn"],
            shared_experts=f.integer("n_shared_expert", 0, minimum=0),
            dense_layers=f.integer("first_k_dense_replace", 0, minimum=0),
        )
    window = f.integer("sliding_window_size", None)
    if window is not None:
        kw["sliding_window"] = window
        indices = f.get("sliding_window_indices")
        if indices is not None:
            full = [i for i, local in enumerate(indices) if not local]
            if full:
                step = full[0] + 1
                if full != list(range(step - 1, layers, step)):
                    raise f.fail(f"sliding_window_indices {list(indices)} is not periodic")
                kw["full_attention_every"] = step
    mla = f.get("latent_attention")
    if mla is not None:
        if not isinstance(mla, Mapping):
            raise f.fail(f"latent_attention must be a mapping of MLA ranks, got {mla!r}")
        kw["mla"] = {k: mla[k] for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                                         "q_lora_rank") if mla.get(k) is not None}
        kw["head_dim"] = mla.get("v_head_dim") or kw["head_dim"]
    return f.build(kw)
