"""The architecture description every part of co-design speaks.

One frozen dataclass, :class:`Architecture`, describes a decoder-only dense or
mixture-of-experts (MoE) transformer: the performance model scores it, the proxy
model is built from it, the search space proposes it and the dashboards show it.

It loads from a Hugging Face ``config.json`` (Llama 3, Qwen2/Qwen3, Qwen3-MoE,
Mixtral, DeepSeek-V3/R1, gpt-oss, Llama-4) or from the project's own YAML, whose
keys are this dataclass's field names (``mla:`` a mapping of :class:`MLA`'s).

This module imports no torch: thousands of candidates cost microseconds.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

__all__ = ["MLA", "Architecture", "ParamCounts", "ArchitectureError"]


class ArchitectureError(ValueError):
    """An architecture field is missing, of the wrong type or inconsistent."""


def _check_positive(name: str, value: Any, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArchitectureError(f"{name} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else ">= 1"
        raise ArchitectureError(f"{name} must be {bound}, got {value}")


@dataclass(frozen=True, kw_only=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank compressed KV.

    The KV cache holds ``kv_lora_rank + qk_rope_head_dim`` values per token and
    layer, shared by all heads (absorbed form, as inference engines run it).
    """

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0  # 0: queries projected directly from hidden

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_positive(f"mla.{f.name}", getattr(self, f.name), allow_zero=f.name == "q_lora_rank")

    @property
    def qk_head_dim(self) -> int:
        """Query/key head dimension: the no-position part plus the rotary part."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts (numbers of parameters, not bytes).

    ``active`` counts what one token uses: attention, dense FFNs, the router,
    ``experts_per_token`` routed experts and the shared experts of each MoE
    layer, plus embeddings and the output head.
    """

    total: int
    active: int
    embedding: int  # input embedding table
    lm_head: int  # output projection; 0 when tied to the embedding
    attention: int  # all layers, norms excluded
    dense_ffn: int  # all dense-FFN layers
    experts: int  # all routed experts, all MoE layers
    shared_experts: int  # all shared experts, all MoE layers
    router: int  # all MoE layers
    norms: int

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, kw_only=True)
class Architecture:
    """A decoder-only transformer, dense or MoE.

    Sizes are counts of elements. Layer ``i`` (0-based) runs an MoE FFN when
    ``experts > 0``, ``i >= dense_layers`` and ``(i - dense_layers + 1) %
    moe_every == 0``; otherwise a dense FFN of width ``ffn``. Layer ``i`` uses
    local (sliding-window or chunked) attention of ``sliding_window`` tokens
    unless ``sliding_window`` is None or ``full_attention_every > 0`` and
    ``(i + 1) % full_attention_every == 0``.

    ``kv_heads`` defaults to ``heads`` (MHA) and ``head_dim`` to
    ``hidden // heads`` (which must then divide exactly); ``expert_ffn``
    defaults to ``ffn`` and ``shared_expert_ffn`` to ``expert_ffn``.
    """

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    kv_heads: int | None = None
    head_dim: int | None = None
    gated_ffn: bool = True  # SwiGLU/GeGLU: gate, up and down matrices; else up and down
    tied_embeddings: bool = False
    attention_bias: bool = False  # biases on the q, k and v projections (Qwen2, gpt-oss)
    # Mixture of experts
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_ffn: int | None = None
    shared_expert_ffn: int | None = None
    dense_layers: int = 0  # the first N layers use a dense FFN (DeepSeek's first_k_dense_replace)
    moe_every: int = 1  # after those, every n-th layer is MoE (Llama-4 Maverick: 2)
    # Attention variants
    mla: MLA | None = None
    sliding_window: int | None = None  # tokens
    full_attention_every: int = 0  # 0: every layer local when sliding_window is set
    rope_theta: float = 10000.0
    name: str = field(default="model", compare=False)

    def __post_init__(self) -> None:
        for name in ("hidden", "layers", "heads", "ffn", "vocab"):
            _check_positive(name, getattr(self, name))
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        _check_positive("kv_heads", self.kv_heads)
        if self.heads % self.kv_heads:
            raise ArchitectureError(
                f"kv_heads={self.kv_heads} must divide heads={self.heads} (grouped-query attention)"
            )
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise ArchitectureError(
                    f"heads={self.heads} does not divide hidden={self.hidden}; "
                    "choose heads that divide hidden or give head_dim explicitly"
                )
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        _check_positive("head_dim", self.head_dim)
        for name in ("experts", "experts_per_token", "shared_experts", "dense_layers", "full_attention_every"):
            _check_positive(name, getattr(self, name), allow_zero=True)
        _check_positive("moe_every", self.moe_every)
        if self.experts:
            if not 1 <= self.experts_per_token <= self.experts:
                raise ArchitectureError(
                    f"experts_per_token={self.experts_per_token} must be between 1 and experts={self.experts}"
                )
            if self.dense_layers >= self.layers:
                raise ArchitectureError(
                    f"dense_layers={self.dense_layers} leaves no MoE layer among layers={self.layers}"
                )
        elif self.experts_per_token or self.shared_experts:
            raise ArchitectureError(
                "experts_per_token and shared_experts need experts > 0 (set experts, or drop them for a dense model)"
            )
        if self.expert_ffn is None:
            object.__setattr__(self, "expert_ffn", self.ffn)
        if self.shared_expert_ffn is None:
            object.__setattr__(self, "shared_expert_ffn", self.expert_ffn)
        _check_positive("expert_ffn", self.expert_ffn)
        _check_positive("shared_expert_ffn", self.shared_expert_ffn)
        if self.sliding_window is not None:
            _check_positive("sliding_window", self.sliding_window)
        if isinstance(self.mla, Mapping):
            object.__setattr__(self, "mla", MLA(**self.mla))
        if self.rope_theta <= 0:
            raise ArchitectureError(f"rope_theta must be > 0, got {self.rope_theta}")

    # ----------------------------------------------------------------- layers
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def layer_is_moe(self, i: int) -> bool:
        """Whether layer ``i`` (0-based) has an MoE FFN."""
        return self.is_moe and i >= self.dense_layers and (i - self.dense_layers + 1) % self.moe_every == 0

    @property
    def moe_layers(self) -> int:
        """Number of layers with an MoE FFN."""
        return sum(self.layer_is_moe(i) for i in range(self.layers))

    def layer_window(self, i: int) -> int | None:
        """Attention span limit of layer ``i`` in tokens, or None for full attention."""
        if self.sliding_window is None:
            return None
        if self.full_attention_every and (i + 1) % self.full_attention_every == 0:
            return None
        return self.sliding_window

    # ------------------------------------------------------------ attention
    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads (elements)."""
        if self.mla is not None:
            return self.heads * self.mla.qk_head_dim
        return self.heads * self.head_dim

    @property
    def kv_cache_per_token_per_layer(self) -> int:
        """Elements cached per token per layer: K and V heads, or MLA's latent."""
        if self.mla is not None:
            return self.mla.kv_lora_rank + self.mla.qk_rope_head_dim
        return 2 * self.kv_heads * self.head_dim

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices per FFN: 3 when gated (gate, up, down), else 2."""
        return 3 if self.gated_ffn else 2

    # ------------------------------------------------------------- counting
    def attention_params_per_layer(self) -> int:
        h = self.hidden
        if self.mla is not None:
            m = self.mla
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * self.heads * m.qk_head_dim
            else:
                q = h * self.heads * m.qk_head_dim
            kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank  # + latent RMSNorm
            kv_b = m.kv_lora_rank * self.heads * (m.qk_nope_head_dim + m.v_head_dim)
            o = self.heads * m.v_head_dim * h
            return q + kv_a + kv_b + o
        q = h * self.heads * self.head_dim
        kv = 2 * h * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * h
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.attention_bias else 0
        return q + kv + o + bias

    def param_counts(self) -> ParamCounts:
        """Parameter counts derived from the shape (see :class:`ParamCounts`)."""
        h, m = self.hidden, self.ffn_matrices
        n_moe = self.moe_layers
        n_dense = self.layers - n_moe
        embedding = self.vocab * h
        lm_head = 0 if self.tied_embeddings else self.vocab * h
        attention = self.layers * self.attention_params_per_layer()
        dense_ffn = n_dense * m * h * self.ffn
        one_expert = m * h * self.expert_ffn
        experts = n_moe * self.experts * one_expert
        shared = n_moe * self.shared_experts * m * h * self.shared_expert_ffn
        router = n_moe * self.experts * h
        norms = (2 * self.layers + 1) * h
        total = embedding + lm_head + attention + dense_ffn + experts + shared + router + norms
        active = total - experts + n_moe * self.experts_per_token * one_expert
        return ParamCounts(
            total=total,
            active=active,
            embedding=embedding,
            lm_head=lm_head,
            attention=attention,
            dense_ffn=dense_ffn,
            experts=experts,
            shared_experts=shared,
            router=router,
            norms=norms,
        )

    # ------------------------------------------------------------ round trip
    def replace(self, **changes: Any) -> "Architecture":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form; ``Architecture.from_dict(a.to_dict()) == a``."""
        d = dataclasses.asdict(self)
        if self.mla is None:
            d.pop("mla")
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Architecture":
        """Build from the project's own keys (this dataclass's field names)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ArchitectureError(f"unknown architecture field(s) {unknown}; known fields: {sorted(known)}")
        missing = [n for n in ("hidden", "layers", "heads", "ffn", "vocab") if n not in data]
        if missing:
            raise ArchitectureError(f"architecture is missing required field(s) {missing}")
        data = dict(data)
        if isinstance(data.get("mla"), Mapping):
            mla_known = {f.name for f in dataclasses.fields(MLA)}
            bad = sorted(set(data["mla"]) - mla_known)
            if bad:
                raise ArchitectureError(f"unknown mla field(s) {bad}; known: {sorted(mla_known)}")
            data["mla"] = MLA(**data["mla"])
        return cls(**data)

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], *, name: str | None = None) -> "Architecture":
        """Build from a Hugging Face ``config.json`` mapping (see module docstring)."""
        from co_design._hf import architecture_kwargs_from_hf

        return cls(**architecture_kwargs_from_hf(config, name=name))

    @classmethod
    def load(cls, path: str | Path) -> "Architecture":
        """Load an HF ``config.json`` or a project YAML/JSON file of Architecture fields.

        A mapping with ``model_type`` or ``architectures`` is read as an HF
        config; any other mapping as the project's own format.
        """
        path = Path(path)
        if not path.is_file():
            raise ArchitectureError(f"architecture file {str(path)!r} does not exist")
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ArchitectureError(f"{path}: not valid JSON ({exc})") from None
        if not isinstance(data, Mapping):
            raise ArchitectureError(f"{path}: expected a mapping of architecture fields, got {type(data).__name__}")
        if "model_type" in data or "architectures" in data or "text_config" in data:
            return cls.from_hf_config(data, name=path.parent.name if path.name == "config.json" else path.stem)
        data = dict(data)
        data.setdefault("name", path.stem)
        return cls.from_dict(data)
