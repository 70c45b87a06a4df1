"""torchtitan model args → Architecture (duck-typed; torchtitan need not be installed).

Field names from torchtitan's ``models/*/model/args.py``:

- Llama 3 ``TransformerModelArgs``: ``dim``, ``n_layers``, ``n_heads``, ``n_kv_heads`` (None = MHA),
  ``vocab_size``, ``multiple_of``, ``ffn_dim_multiplier``, ``rope_theta``. The FFN width is not a
  field: ``llama3/model/model.py`` builds ``FeedForward(hidden_dim=4 * dim, ...)``, which takes
  ``int(2 * hidden_dim / 3)``, multiplies by ``ffn_dim_multiplier`` when set and rounds up to a
  multiple of ``multiple_of``.
- Qwen 3 ``Qwen3ModelArgs``: ``head_dim``, ``hidden_dim`` (the FFN width), ``enable_weight_tying``,
  ``moe_enabled``, ``moe_inter_dim``, ``moe_args``.
- DeepSeek-V3 ``DeepSeekV3ModelArgs``: ``inter_dim``, ``moe_inter_dim``, ``n_dense_layers``,
  ``moe_args`` (``num_experts``, ``top_k``, ``num_shared_experts``), MLA ``q_lora_rank``,
  ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``.
"""

from __future__ import annotations

from typing import Any

from co_design.arch import Architecture
from co_design.readers.base import ConfigFields

__all__ = ["architecture_from_torchtitan", "is_torchtitan_args"]


def is_torchtitan_args(args: Any) -> bool:
    """Whether ``args`` looks like torchtitan model args (``dim``, ``n_layers``, ``n_heads``, ``vocab_size``)."""
    return ConfigFields(args, "torchtitan").has("dim", "n_layers", "n_heads", "vocab_size")


def _llama3_ffn(dim: int, multiple_of: int, multiplier: float | None) -> int:
    hidden = int(2 * (4 * dim) / 3)
    if multiplier is not None:
        hidden = int(multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def architecture_from_torchtitan(args: Any, *, name: str | None = None) -> Architecture:
    """The Architecture of torchtitan model args (object or mapping); ArchitectureError naming the field."""
    f = ConfigFields(args, "torchtitan")
    dim, layers, heads = f.integer("dim"), f.integer("n_layers"), f.integer("n_heads")
    ffn = f.integer("hidden_dim", None) or f.integer("inter_dim", None)
    if ffn is None:
        multiplier = f.get("ffn_dim_multiplier")
        ffn = _llama3_ffn(dim, f.integer("multiple_of", 256), None if multiplier is None else float(multiplier))
    kw: dict[str, Any] = dict(
        hidden=dim,
        layers=layers,
        heads=heads,
        kv_heads=f.integer("n_kv_heads", None) or heads,
        head_dim=f.integer("head_dim", None) or dim // heads,
        ffn=ffn,
        vocab=f.integer("vocab_size"),
        tied_embeddings=f.flag("enable_weight_tying", False),
        rope_theta=f.number("rope_theta", 10000.0),
        name=name or type(args).__name__,
    )
    moe = f.get("moe_args")
    moe_on = f.flag("moe_enabled", moe is not None)
    if moe is not None and moe_on:
        m = ConfigFields(moe, "torchtitan moe_args")
        kw.update(
            experts=m.integer("num_experts"),
            experts_per_token=m.integer("top_k"),
            shared_experts=m.integer("num_shared_experts", 0, minimum=0),
            expert_ffn=f.integer("moe_inter_dim", None) or ffn,
            dense_layers=f.integer("n_dense_layers", 0, minimum=0),
        )
    if f.get("kv_lora_rank") is not None:
        kw["mla"] = dict(
            kv_lora_rank=f.integer("kv_lora_rank"),
            qk_nope_head_dim=f.integer("qk_nope_head_dim"),
            qk_rope_head_dim=f.integer("qk_rope_head_dim"),
            v_head_dim=f.integer("v_head_dim"),
            q_lora_rank=f.integer("q_lora_rank", 0, minimum=0),
        )
        kw["head_dim"] = kw["mla"]["v_head_dim"]
    return f.build(kw)
