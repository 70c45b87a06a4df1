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
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

__all__ = ["MLA", "Architecture", "ParamCounts", "ArchitectureError"]


class ArchitectureError(ValueError):
    """An architecture field is missing, of the wrong type or inconsistent."""


# Upper bounds on sizes, far above any published model (largest: vocab 262,144, ffn 73,728, 384 experts,
# 126 layers). They keep the performance model's products finite floats and its per-layer sums
# (co_design.perf.memory sums the KV cache layer by layer) to milliseconds; 10**12 layers hung it.
_MAX_SIZE = 2**24
_MAX_LAYERS = 2**16


def _check_positive(name: str, value: Any, *, allow_zero: bool = False, maximum: int | None = _MAX_SIZE) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArchitectureError(f"{name} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else ">= 1"
        raise ArchitectureError(f"{name} must be {bound}, got {value}")
    if maximum is not None and value > maximum:
        raise ArchitectureError(f"{name}={value} is beyond any real model (and what the performance model can "
                                f"cost); use {name} <= {maximum:,}")


def _crt(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    """The residue class (r, P) of the n with n ≡ a[0] (mod a[1]) and n ≡ b[0] (mod b[1]); None if none."""
    (r1, m1), (r2, m2) = a, b
    g = math.gcd(m1, m2)
    if (r2 - r1) % g:
        return None
    # n = r1 + m1·t with m1·t ≡ r2 - r1 (mod m2), so t ≡ (r2 - r1)/g · (m1/g)⁻¹ (mod m2/g)
    t = (r2 - r1) // g * pow(m1 // g, -1, m2 // g) % (m2 // g)
    period = m1 // g * m2
    return (r1 + m1 * t) % period, period


def _count_in(cls: tuple[int, int] | None, lo: int, hi: int) -> int:
    """How many n in [lo, hi] lie in the residue class ``cls`` = (r, P)."""
    if cls is None or hi < lo:
        return 0
    r, p = cls
    return (hi - r) // p - (lo - 1 - r) // p


def _first_in(cls: tuple[int, int] | None, lo: int) -> int | None:
    """The smallest n >= lo in the residue class ``cls`` = (r, P)."""
    return None if cls is None else lo + (cls[0] - lo) % cls[1]


def _first_of(candidates: tuple[int, ...], ok: Callable[[int], Any]) -> int | None:
    return next((n for n in candidates if ok(n)), None)


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ArchitectureError(f"{name} must be true or false (a boolean, not a string or number), got {value!r}")


def _mla_from_mapping(data: Mapping[str, Any]) -> "MLA":
    """An :class:`MLA` from a mapping of its fields; ArchitectureError naming unknown or missing ones."""
    fields = {f.name: f for f in dataclasses.fields(MLA)}
    unknown = sorted(set(data) - set(fields), key=str)
    if unknown:
        raise ArchitectureError(f"unknown mla field(s) {unknown}; known: {sorted(fields)}")
    missing = [n for n, f in fields.items() if f.default is dataclasses.MISSING and n not in data]
    if missing:
        raise ArchitectureError(f"mla is missing required field(s) {missing}")
    return MLA(**data)


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

    Every field is checked on construction, ArchitectureError naming it: sizes
    are integers (at most 2**24; ``layers`` at most 2**16), switches real
    booleans (the string ``"false"`` is refused, not read as true),
    ``rope_theta`` a finite number, ``mla`` an :class:`MLA` or a mapping of its
    fields.
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
        if not isinstance(self.name, str):
            raise ArchitectureError(f"name must be a string, got {self.name!r}")
        for name in ("gated_ffn", "tied_embeddings", "attention_bias"):
            _check_bool(name, getattr(self, name))
        for name in ("hidden", "heads", "ffn", "vocab"):
            _check_positive(name, getattr(self, name))
        _check_positive("layers", self.layers, maximum=_MAX_LAYERS)
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
        for name in ("experts", "experts_per_token", "shared_experts"):
            _check_positive(name, getattr(self, name), allow_zero=True)
        for name in ("dense_layers", "full_attention_every"):  # layer counts: anything above layers is moot
            _check_positive(name, getattr(self, name), allow_zero=True, maximum=None)
        _check_positive("moe_every", self.moe_every, maximum=None)
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
            _check_positive("sliding_window", self.sliding_window, maximum=None)  # tokens; min(context, window)
        if isinstance(self.mla, Mapping):
            object.__setattr__(self, "mla", _mla_from_mapping(self.mla))
        elif self.mla is not None and not isinstance(self.mla, MLA):
            names = ", ".join(f.name for f in dataclasses.fields(MLA))
            raise ArchitectureError(f"mla must be a mapping of MLA fields ({names}) or absent for standard "
                                    f"attention, got {self.mla!r}")
        theta = self.rope_theta
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not (math.isfinite(theta) and theta > 0):
            raise ArchitectureError(f"rope_theta must be a finite number > 0 (e.g. 10000.0), got {theta!r}")
        object.__setattr__(self, "rope_theta", float(theta))

    # ----------------------------------------------------------------- layers
    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def layer_is_moe(self, i: int) -> bool:
        """Whether layer ``i`` (0-based) has an MoE FFN."""
        return self.is_moe and i >= self.dense_layers and (i - self.dense_layers + 1) % self.moe_every == 0

    @property
    def moe_layers(self) -> int:
        """Number of layers with an MoE FFN: ⌊(layers - dense_layers) / moe_every⌋ (see :meth:`layer_is_moe`)."""
        return max(0, self.layers - self.dense_layers) // self.moe_every if self.is_moe else 0

    def layer_window(self, i: int) -> int | None:
        """Attention span limit of layer ``i`` in tokens, or None for full attention."""
        if self.sliding_window is None:
            return None
        if self.full_attention_every and (i + 1) % self.full_attention_every == 0:
            return None
        return self.sliding_window

    def layer_kinds(self) -> tuple[tuple[bool, int | None, int], ...]:
        """``(is_moe, window, count)`` of each distinct layer kind, in order of first occurrence.

        What ``[(layer_is_moe(i), layer_window(i)) for i in range(layers)]`` would tally, in closed form
        (O(1) in layers). With n = i + 1 the 1-based layer number, layer n is MoE when n > d and
        n ≡ d (mod m) (d = ``dense_layers``, m = ``moe_every``) and runs full attention when n ≡ 0 (mod f)
        (f = ``full_attention_every``; f = 1, every layer full, without ``sliding_window``; f = 0: none).
        Of L layers ⌊(L - d) / m⌋ are MoE, ⌊L / f⌋ full, and the MoE-and-full ones are the n in (d, L] of
        the one residue class mod lcm(m, f) that meets both congruences (Chinese remainder theorem), if any.
        """
        n_layers, d, m, window = self.layers, self.dense_layers, self.moe_every, self.sliding_window
        f = 1 if window is None else self.full_attention_every
        moe = (d % m, m) if self.is_moe else None  # MoE layers: this residue class, above d
        moe_full = _crt(moe, (0, f)) if moe and f else None
        n_moe, n_full = self.moe_layers, (n_layers // f if f else 0)
        n_moe_full = _count_in(moe_full, d + 1, n_layers)
        # First layer of each kind, for the order. Two candidates settle the MoE-local and the dense-full
        # kinds: if d + m and d + 2m are both full, f divides m and every later MoE layer is full too (and
        # likewise with m and f swapped). Layer 1 is dense and local whenever that kind exists at all.
        first_moe_local = _first_of((d + m, d + 2 * m), lambda n: not f or n % f) if moe else None
        if not f or f <= d:  # none, or the first full layer is among the leading dense ones
            first_dense_full = f or None
        else:
            full_above_d = _first_in((0, f), d + 1)
            first_dense_full = _first_of((full_above_d, full_above_d + f), lambda n: not moe or (n - d) % m)
        kinds = [  # (first layer, is_moe, window, count); without a window only the full kinds count
            (_first_in(moe_full, d + 1), True, None, n_moe_full),
            (first_moe_local, True, window, n_moe - n_moe_full),
            (first_dense_full, False, None, n_full - n_moe_full),
            (1, False, window, n_layers - n_moe - n_full + n_moe_full),
        ]
        return tuple((is_moe, w, c) for _, is_moe, w, c in sorted(k for k in kinds if k[3] > 0))

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
        unknown = sorted(set(data) - known, key=str)
        if unknown:
            raise ArchitectureError(f"unknown architecture field(s) {unknown}; known fields: {sorted(known)}")
        missing = [n for n in ("hidden", "layers", "heads", "ffn", "vocab") if n not in data]
        if missing:
            raise ArchitectureError(f"architecture is missing required field(s) {missing}")
        return cls(**data)  # __post_init__ reads an mla mapping

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any] | Any, *, name: str | None = None) -> "Architecture":
        """Build from a Hugging Face ``config.json`` mapping or a ``transformers`` ``PretrainedConfig``
        (transformers 4 and 5 spellings; see :mod:`co_design.readers.hf`)."""
        from co_design.readers.hf import architecture_from_hf

        return architecture_from_hf(config, name=name)

    @classmethod
    def load(cls, path: str | Path) -> "Architecture":
        """Load an HF ``config.json``, a LitGPT ``model_config.yaml``, torchtitan model args (YAML or
        JSON) or a project YAML/JSON file of Architecture fields.

        A mapping with ``model_type`` or ``architectures`` is read as an HF config, one with
        LitGPT's or torchtitan's field names by their readers (:mod:`co_design.readers`); any
        other mapping as the project's own format.
        """
        path = Path(path)
        if not path.is_file():
            raise ArchitectureError(f"architecture file {str(path)!r} does not exist")
        try:
            text = path.read_text()
        except UnicodeDecodeError as exc:
            raise ArchitectureError(f"{path}: not a UTF-8 text file ({exc.reason} at byte {exc.start}); "
                                    "give an HF config.json or a project YAML") from None
        empty = f"{path}: the file is empty; give an HF config.json or a project YAML of Architecture fields"
        if not text.strip():
            raise ArchitectureError(empty)
        if path.suffix in (".yaml", ".yml"):
            data = _load_yaml(text, path)
            if data is None:  # comments only
                raise ArchitectureError(empty)
        else:
            try:
                data = json.loads(text, object_pairs_hook=_unique_keys)
            except json.JSONDecodeError as exc:
                raise ArchitectureError(f"{path}: not valid JSON ({exc})") from None
            except _DuplicateKey as exc:
                raise ArchitectureError(f"{path}: key {exc.args[0]!r} appears twice; keep one") from None
        if not isinstance(data, Mapping):
            raise ArchitectureError(f"{path}: expected a mapping of architecture fields (an HF config.json object "
                                    f"or a YAML of Architecture fields), got a {type(data).__name__}")
        if "model_type" in data or "architectures" in data or "text_config" in data:
            return cls.from_hf_config(data, name=path.parent.name if path.name == "config.json" else path.stem)
        from co_design.readers import architecture_from_config, is_litgpt_config, is_torchtitan_args

        if is_litgpt_config(data) or is_torchtitan_args(data):  # LitGPT's model_config.yaml, torchtitan's args
            return architecture_from_config(data, name=str(data.get("name") or path.stem))
        data = dict(data)
        data.setdefault("name", path.stem)
        return cls.from_dict(data)


class _DuplicateKey(Exception):
    """A key given twice in one mapping of a model file (JSON and PyYAML would keep the last silently)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _load_yaml(text: str, path: Path) -> Any:
    """``yaml.safe_load`` refusing a key given twice; ArchitectureError (one line) naming the file."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen = set()
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    key = (key_node.tag, key_node.value)
                    if key in seen:
                        raise _DuplicateKey(key_node.value, key_node.start_mark.line + 1)
                    seen.add(key)
            return super().construct_mapping(node, deep)

    try:
        return yaml.load(text, Loader=Loader)
    except _DuplicateKey as exc:
        key, line = exc.args
        raise ArchitectureError(f"{path}: key {key!r} appears twice (again at line {line}); keep one") from None
    except yaml.YAMLError as exc:  # PyYAML's own text spans several lines: say what is wrong and where
        problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        if problem and mark is not None:
            problem = f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
        raise ArchitectureError(f"{path}: not valid YAML ({problem or ' '.join(str(exc).split())})") from None
