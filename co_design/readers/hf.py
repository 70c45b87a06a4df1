"""Hugging Face configs (``config.json`` or a ``PretrainedConfig``) → :class:`~co_design.arch.Architecture`.

Field names follow each family's ``configuration_*.py`` in ``transformers``:
Llama 3 (``llama``), Qwen2/Qwen3 (``qwen2``, ``qwen3``), Qwen2-MoE/Qwen3-MoE
(``qwen2_moe``, ``qwen3_moe``), Mixtral (``mixtral``), DeepSeek-V3/R1
(``deepseek_v3``; ``deepseek_v2`` alike), gpt-oss (``gpt_oss``) and Llama-4 (``llama4``, whose text
model sits under ``text_config``). Any other ``model_type`` is refused
(ArchitectureError naming it and the supported ones) rather than read as a Llama;
a config without ``model_type`` is read as ``llama``.

Every key is read by type, as ``transformers`` would need it: a size must be a JSON
integer, a switch a JSON ``true``/``false`` (the string ``"false"`` is refused, not
read as true), ``rope_theta`` a number, ``hidden_act`` a string. A wrong one ends
in an ArchitectureError naming the HF key; an inconsistency that
:class:`~co_design.arch.Architecture` finds names its field and the HF key it came
from.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping

from co_design.arch import ArchitectureError

if TYPE_CHECKING:
    from co_design.arch import Architecture

__all__ = ["architecture_kwargs_from_hf", "architecture_from_hf", "hf_config_mapping"]

# model_type values this module translates (``*_text`` variants read as their family)
_FAMILIES = ("deepseek_v2", "deepseek_v3", "gpt_oss", "llama", "llama4", "mixtral", "qwen2", "qwen2_moe", "qwen3",
             "qwen3_moe")
_MISSING = object()
# The same field under another name (transformers 5 ``attribute_map`` aliases, both directions):
# a key absent under its own name is read from the first alias present.
_ALIASES: dict[str, tuple[str, ...]] = {
    "num_experts": ("num_local_experts", "n_routed_experts"),
    "num_local_experts": ("num_experts", "n_routed_experts"),
    "n_routed_experts": ("num_local_experts", "num_experts"),
}


def hf_config_mapping(config: Any) -> dict[str, Any]:
    """A plain mapping of an HF config: a mapping as given, or a ``PretrainedConfig`` (any object with
    ``to_dict()``) with the aliases of its class's ``attribute_map`` added, sub-configs included."""
    if isinstance(config, Mapping):
        return dict(config)
    to_dict = getattr(config, "to_dict", None)
    if callable(to_dict):
        data = dict(to_dict())
    elif hasattr(config, "__dict__"):
        data = {k: v for k, v in vars(config).items() if not k.startswith("_")}
    else:
        raise ArchitectureError(f"HF config must be a mapping or a transformers PretrainedConfig, got "
                                f"{type(config).__name__}")
    for alias, key in (getattr(type(config), "attribute_map", None) or {}).items():
        if data.get(alias) is None and data.get(key) is not None:
            data[alias] = data[key]
    text = getattr(config, "text_config", None)
    if text is not None and not isinstance(text, Mapping) and isinstance(data.get("text_config"), Mapping):
        data["text_config"] = hf_config_mapping(text)
    return data


class _Reader:
    """Typed reads of one HF config; remembers which HF key each Architecture field came from."""

    def __init__(self, cfg: Mapping[str, Any], model_type: str) -> None:
        self.cfg, self.mt = cfg, model_type
        self.source: dict[str, str] = {}  # Architecture field -> HF key

    def _fail(self, msg: str) -> ArchitectureError:
        return ArchitectureError(f"HF config ({self.mt}): {msg}")

    def _absent(self, key: str, default: Any) -> Any:
        """The value of a key that is absent or null: ``default``, or an error when it is required."""
        if default is _MISSING:
            raise self._fail(f"missing {key!r}, needed to describe the model")
        return default

    def _get(self, key: str) -> tuple[str, Any]:
        """(the key actually present, its value): ``key``, else its first transformers-5 alias present."""
        for k in (key, *_ALIASES.get(key, ())):
            if self.cfg.get(k) is not None:
                return k, self.cfg[k]
        return key, None

    def integer(self, key: str, default: Any = _MISSING, *, minimum: int = 1, field: str | None = None) -> Any:
        key, value = self._get(key)
        if value is None:
            return self._absent(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self._fail(f"{key} must be an integer >= {minimum}, got {value!r}")
        if field:
            self.source[field] = key
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._fail(f"{key} must be true or false (a JSON boolean, not a string or number), got {value!r}")
        return value

    def number(self, key: str, default: float, *, field: str) -> float:
        value = self.cfg.get(key)
        if value is None and key == "rope_theta":  # transformers 5: inside rope_parameters
            key, value = self._rope_theta()
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._fail(f"{key} must be a number, got {value!r}")
        self.source[field] = key
        return value

    def _rope_theta(self) -> tuple[str, Any]:
        """``rope_parameters.rope_theta``; with one mapping per attention type, the full-attention one's."""
        rope = self.cfg.get("rope_parameters")
        if not isinstance(rope, Mapping):
            return "rope_theta", None
        if "rope_theta" in rope:
            return "rope_parameters.rope_theta", rope["rope_theta"]
        for kind in ("full_attention", *sorted(k for k in rope if isinstance(rope[k], Mapping))):
            inner = rope.get(kind)
            if isinstance(inner, Mapping) and inner.get("rope_theta") is not None:
                return f"rope_parameters.{kind}.rope_theta", inner["rope_theta"]
        return "rope_theta", None

    def string(self, key: str, default: Any) -> Any:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._fail(f"{key} must be a string, got {value!r}")
        return value


def _model_type(config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The text model's config (Llama-4 nests it under ``text_config``) and its family."""
    text = config.get("text_config")
    if text is not None and not isinstance(text, Mapping):
        raise ArchitectureError(f"HF config: text_config must be an object of the text model's keys, got {text!r}")
    if text is not None:
        cfg = dict(text)
        cfg.setdefault("model_type", config.get("model_type", "llama4"))
    else:
        cfg = dict(config)
    mt = cfg.get("model_type", "llama")
    if not isinstance(mt, str) or mt.removesuffix("_text") not in _FAMILIES:
        raise ArchitectureError(f"HF config model_type={mt!r} is not a supported model family "
                                f"(supported: {', '.join(_FAMILIES)}); describe the model as a project YAML of "
                                "Architecture fields instead")
    return cfg, mt.removesuffix("_text")


def architecture_kwargs_from_hf(config: Mapping[str, Any] | Any, *, name: str | None = None) -> dict[str, Any]:
    """Translate an HF config (mapping or ``PretrainedConfig``) into Architecture keyword arguments."""
    return _read(hf_config_mapping(config), name)[0]


def architecture_from_hf(config: Mapping[str, Any] | Any, *, name: str | None = None) -> "Architecture":
    """The Architecture of an HF config (mapping or ``PretrainedConfig``); an inconsistency names the field
    and its HF key."""
    from co_design.arch import Architecture

    kw, r = _read(hf_config_mapping(config), name)
    try:
        return Architecture(**kw)
    except ArchitectureError as exc:
        msg = str(exc)
        named = [(f, k) for f, k in r.source.items() if f != k and re.search(rf"(?<![\w.]){re.escape(f)}\b", msg)]
        keys = [f"{f} is {k}" for f, k in named]
        raise r._fail(msg + (f" (HF keys: {', '.join(keys)})" if keys else "")) from None


def _read(config: Mapping[str, Any], name: str | None) -> tuple[dict[str, Any], _Reader]:
    cfg, mt = _model_type(config)
    r = _Reader(cfg, mt)
    heads = r.integer("num_attention_heads", field="heads")
    kw: dict[str, Any] = dict(
        hidden=r.integer("hidden_size", field="hidden"),
        layers=r.integer("num_hidden_layers", field="layers"),
        heads=heads,
        kv_heads=r.integer("num_key_value_heads", heads, field="kv_heads"),
        head_dim=r.integer("head_dim", None, field="head_dim"),
        ffn=r.integer("intermediate_size", field="ffn"),
        vocab=r.integer("vocab_size", field="vocab"),
        tied_embeddings=r.flag("tie_word_embeddings", False),
        attention_bias=r.flag("attention_bias", mt in ("qwen2", "qwen2_moe")),
        gated_ffn=r.string("hidden_act", "silu") not in ("gelu", "gelu_new", "relu"),
        rope_theta=r.number("rope_theta", 10000.0, field="rope_theta"),
        name=name or r.string("_name_or_path", None) or mt,
    )
    window = r.integer("sliding_window", None, minimum=0, field="sliding_window")
    if window and r.flag("use_sliding_window", True):
        kw["sliding_window"] = window
        layer_types = cfg.get("layer_types")
        if layer_types is not None and (not isinstance(layer_types, list)
                                        or not all(isinstance(t, str) for t in layer_types)):
            raise r._fail(f"layer_types must be a list of strings such as 'full_attention', got {layer_types!r}")
        if layer_types:
            if len(layer_types) != kw["layers"]:
                raise r._fail(f"layer_types has {len(layer_types)} entries but num_hidden_layers={kw['layers']}; "
                              "give one per layer")
            full = [i for i, t in enumerate(layer_types) if t == "full_attention"]
            if full:
                step = full[0] + 1
                if full != list(range(step - 1, len(layer_types), step)):
                    raise r._fail(f"layer_types pattern {layer_types} is not periodic")
                kw["full_attention_every"] = step

    if mt == "deepseek_v3" or mt == "deepseek_v2":
        kw.update(
            experts=r.integer("n_routed_experts", field="experts"),
            experts_per_token=r.integer("num_experts_per_tok", field="experts_per_token"),
            shared_experts=r.integer("n_shared_experts", 0, minimum=0, field="shared_experts"),
            expert_ffn=r.integer("moe_intermediate_size", field="expert_ffn"),
            dense_layers=r.integer("first_k_dense_replace", 0, minimum=0, field="dense_layers"),
            moe_every=r.integer("moe_layer_freq", 1, field="moe_every"),
            mla=dict(  # a mapping: Architecture builds the MLA, so its errors name the HF key too
                kv_lora_rank=r.integer("kv_lora_rank", field="mla.kv_lora_rank"),
                qk_nope_head_dim=r.integer("qk_nope_head_dim", field="mla.qk_nope_head_dim"),
                qk_rope_head_dim=r.integer("qk_rope_head_dim", field="mla.qk_rope_head_dim"),
                v_head_dim=r.integer("v_head_dim", field="mla.v_head_dim"),
                q_lora_rank=r.integer("q_lora_rank", 0, minimum=0, field="mla.q_lora_rank"),
            ),
        )
        kw["head_dim"] = r.integer("v_head_dim", field="head_dim")
    elif mt in ("qwen3_moe", "qwen2_moe"):
        if cfg.get("mlp_only_layers"):
            raise r._fail("mlp_only_layers is not supported; only leading dense layers are")
        kw.update(
            experts=r.integer("num_experts", field="experts"),
            experts_per_token=r.integer("num_experts_per_tok", field="experts_per_token"),
            expert_ffn=r.integer("moe_intermediate_size", field="expert_ffn"),
            moe_every=r.integer("decoder_sparse_step", 1, field="moe_every"),
        )
        shared_ffn = r.integer("shared_expert_intermediate_size", 0, minimum=0, field="shared_expert_ffn")
        if shared_ffn:
            kw.update(shared_experts=1, shared_expert_ffn=shared_ffn)
    elif mt == "mixtral":
        kw.update(experts=r.integer("num_local_experts", field="experts"),
                  experts_per_token=r.integer("num_experts_per_tok", field="experts_per_token"))
    elif mt == "gpt_oss":
        top_k = r.integer("num_experts_per_tok", None, field="experts_per_token")
        kw.update(
            experts=r.integer("num_local_experts", field="experts"),
            experts_per_token=top_k or r.integer("experts_per_token", field="experts_per_token"),
            attention_bias=True,
        )
    elif mt == "llama4":
        kw.update(
            experts=r.integer("num_local_experts", field="experts"),
            experts_per_token=r.integer("num_experts_per_tok", field="experts_per_token"),
            shared_experts=1,  # Llama-4's MoE always adds one shared expert
            expert_ffn=r.integer("intermediate_size", field="expert_ffn"),
            ffn=r.integer("intermediate_size_mlp", kw["ffn"], field="ffn"),
            moe_every=r.integer("interleave_moe_layer_step", 1, field="moe_every"),
        )
        chunk = r.integer("attention_chunk_size", None, minimum=0, field="sliding_window")
        if chunk:
            # Chunked local attention on 3 of 4 layers; every 4th layer is global (no RoPE).
            kw.update(sliding_window=chunk, full_attention_every=4)
    return kw, r
