"""Infer an :class:`~co_design.arch.Architecture` from a ``torch.nn.Module``.

Three sources, tried in order (:func:`infer_architecture`):

1. an attribute holding an ``Architecture`` on the module or any submodule
   (``self.arch``, ``self.model.arch``, or a value saved with
   ``save_hyperparameters``);
2. the model's own config, on the outermost module that has one
   (:func:`find_model_config`): a Hugging Face ``PretrainedConfig`` or HF-style mapping in
   ``config`` (:mod:`co_design.readers.hf`), a LitGPT ``Config`` in ``config``
   (:mod:`co_design.readers.litgpt`), torchtitan model args in ``model_args``/``args``/``config``
   (:mod:`co_design.readers.torchtitan`);
3. inspection of the layers (:func:`inspect_layers`): vocabulary and hidden
   width from the token ``nn.Embedding``, the number of layers from the longest
   run of identical blocks in an ``nn.ModuleList`` / ``nn.Sequential``, the FFN
   width and gating from the block's ``nn.Linear`` shapes (experts: a ModuleList of
   identical FFNs, or fused 3-D expert parameters such as transformers 5's
   ``gate_up_proj``/``down_proj``), attention heads from an integer attribute such as
   ``n_head`` (or ``nn.MultiheadAttention``), else guessed from the projection width --
   a fused ``qkv`` projection does not show the head count, and the evidence names the
   attribute or argument that makes it exact.

Every result carries, per field, the evidence it came from, so the callback
can say what was inferred and from what; guessed fields are flagged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from co_design.arch import Architecture, ArchitectureError
from co_design.readers.base import ArchitectureInference
from co_design.readers.hf import architecture_from_hf, hf_config_mapping
from co_design.readers.litgpt import architecture_from_litgpt, is_litgpt_config
from co_design.readers.torchtitan import architecture_from_torchtitan, is_torchtitan_args

__all__ = ["ArchitectureInference", "infer_architecture", "inspect_layers", "architecture_mismatches",
           "find_model_config"]

# Integer attributes that name the number of attention heads / KV heads / head width (nanoGPT,
# minGPT, HF, torch.nn, Llama reference code, x-transformers).
_HEAD_ATTRS = ("n_head", "n_heads", "num_heads", "num_attention_heads", "nhead", "heads", "n_heads_q")
_KV_HEAD_ATTRS = ("n_kv_heads", "n_kv_head", "num_key_value_heads", "num_kv_heads", "kv_heads", "n_head_kv")
_HEAD_DIM_ATTRS = ("head_dim", "d_head", "head_size", "dim_head")
# Name components that mark a module path as attention (so its Linears are not read as FFN).
_ATTN_PARTS = ("attn", "attention")
_Q_NAMES = {"q", "q_proj", "query", "wq", "to_q", "q_lin"}
_K_NAMES = {"k", "k_proj", "key", "wk", "to_k", "k_lin"}
_V_NAMES = {"v", "v_proj", "value", "wv", "to_v", "v_lin"}
_QKV_NAMES = {"qkv", "qkv_proj", "c_attn", "in_proj", "wqkv", "query_key_value", "to_qkv", "w_qkv"}
_ATTN_LINEAR_NAMES = _Q_NAMES | _K_NAMES | _V_NAMES | _QKV_NAMES | {"o_proj", "out_proj", "wo", "to_out"}


# --------------------------------------------------------------------------- entry points
def infer_architecture(module: nn.Module) -> ArchitectureInference:
    """Find or infer the architecture of ``module`` (see the module docstring for the order).

    Raises :class:`~co_design.arch.ArchitectureError` when nothing works, for
    example when the module has no ``nn.Linear`` layers.
    """
    found = _find_architecture_attribute(module)
    if found is not None:
        path, arch = found
        return ArchitectureInference(arch, f"attribute {path!r}", {"all fields": f"the Architecture at {path!r}"})
    config_error = None
    found_config = find_model_config(module)
    if found_config is not None:
        library, path, cfg, reader = found_config
        try:
            arch = reader(cfg, name=type(module).__name__)
        except ArchitectureError as exc:
            config_error = f"{library} config {path!r} is unreadable ({exc})"
        else:
            return ArchitectureInference(arch, f"{library} config {path!r}",
                                         {"all fields": f"the model's own {library} config at {path!r}"})
    inference = inspect_layers(module)
    if config_error:
        inference = ArchitectureInference(
            inference.architecture,
            inference.source,
            {"note": config_error + "; fell back to layer inspection", **inference.evidence},
            inference.guessed,
        )
    return inference


def architecture_mismatches(arch: Architecture, module: nn.Module) -> list[str]:
    """Ways in which ``arch`` contradicts what the module's layers show (empty when consistent).

    Checks ``vocab`` and ``hidden`` against the token embedding, and ``layers``,
    ``ffn`` and (when read, not guessed) ``heads`` against layer inspection.
    """
    out = []
    embedding = _token_embedding(module)
    checked = set()
    if embedding is not None:
        name, emb, _, _ = embedding
        for field_name, theirs, where in (
            ("vocab", emb.num_embeddings, f"{name}.num_embeddings"),
            ("hidden", emb.embedding_dim, f"{name}.embedding_dim"),
        ):
            checked.add(field_name)
            if getattr(arch, field_name) != theirs:
                out.append(f"{field_name}={getattr(arch, field_name)} but the module has {theirs} ({where})")
    try:
        seen = inspect_layers(module)
    except ArchitectureError:
        return out  # e.g. MoE experts are not nn.Linear: only the embedding can be checked
    # layers of different kinds (leading dense layers, every n-th MoE) are not one run of identical blocks
    fields = ["layers", "heads", "kv_heads"] if not (arch.dense_layers or arch.moe_every > 1) else ["heads", "kv_heads"]
    if not arch.is_moe:  # routed experts are not nn.Linear: the FFN read from Linears would be a dense one
        fields += ["ffn", "gated_ffn"]
    if embedding is None:
        fields += ["vocab", "hidden"]
    for name in fields:
        if name in seen.guessed or name in checked:
            continue
        mine, theirs = getattr(arch, name), getattr(seen.architecture, name)
        if mine != theirs:
            out.append(f"{name}={mine} but the module has {theirs} ({seen.evidence.get(name, 'layer inspection')})")
    return out


_POSITION_HINTS = ("pos", "wpe", "position")
_TOKEN_HINTS = ("tok", "wte", "word", "embed_tokens")


def _token_embedding(module: nn.Module) -> tuple[str, nn.Embedding, str | None, nn.Linear | None] | None:
    """(name, token embedding, output head name, output head), or None without an nn.Embedding.

    The output head is a Linear outside the repeated blocks that shares the embedding's weight
    or maps ``embedding_dim -> num_embeddings``. The token embedding is the one with the best
    evidence: a shared weight, then a matching head, then a token-like name, then not a
    position-like name, then the most rows.
    """
    embeddings = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Embedding)]
    if not embeddings:
        return None
    blocks = _find_blocks(module)
    in_blocks = {id(m) for block in (blocks[1] if blocks else []) for m in block.modules()}
    heads = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear) and id(m) not in in_blocks]
    best: tuple[tuple, tuple[str, nn.Embedding, str | None, nn.Linear | None]] | None = None
    for en, e in embeddings:
        tied = next(((ln, lin) for ln, lin in heads if lin.weight is e.weight), None)
        shape = (e.num_embeddings, e.embedding_dim)
        shaped = [(ln, lin) for ln, lin in heads if (lin.out_features, lin.in_features) == shape]
        head = tied or (shaped[-1] if shaped else None)  # the last matching Linear: heads come last
        leaf = en.rsplit(".", 1)[-1].lower()
        score = (
            tied is not None,
            head is not None,
            any(h in leaf for h in _TOKEN_HINTS),
            not any(h in leaf for h in _POSITION_HINTS),
            e.num_embeddings,
        )
        if best is None or score > best[0]:
            best = (score, (en, e, head[0] if head else None, head[1] if head else None))
    assert best is not None
    return best[1]


# --------------------------------------------------------------------------- 1. attribute
def _find_architecture_attribute(module: nn.Module) -> tuple[str, Architecture] | None:
    for prefix, sub in module.named_modules():
        for attr, value in vars(sub).items():
            path = f"{prefix}.{attr}" if prefix else attr
            if isinstance(value, Architecture):
                return path, value
            if isinstance(value, Mapping) and attr not in ("_modules", "_parameters", "_buffers"):
                # save_hyperparameters(arch=...) keeps values in an AttributeDict (`_hparams`)
                for key, item in value.items():
                    if isinstance(item, Architecture):
                        return f"{path}[{key!r}]", item
    return None


# --------------------------------------------------------------------------- 2. model config
_CONFIG_ATTRS = ("config", "model_args", "args")


def _hf_like(cfg: Any) -> dict[str, Any] | None:
    """The mapping of an HF ``PretrainedConfig`` or HF-style mapping/object (``hidden_size`` or ``text_config``)."""
    if not (isinstance(cfg, Mapping) or callable(getattr(cfg, "to_dict", None)) or hasattr(cfg, "__dict__")):
        return None
    if isinstance(cfg, (str, bytes, int, float, nn.Module)):
        return None
    try:
        data = hf_config_mapping(cfg)
    except ArchitectureError:
        return None
    return data if ("hidden_size" in data or "text_config" in data) else None


def find_model_config(module: nn.Module) -> tuple[str, str, Any, Callable[..., Architecture]] | None:
    """(library, attribute path, config, reader) of the outermost model config on ``module`` or a submodule.

    Looks at the attributes ``config`` (transformers, LitGPT), ``model_args`` and ``args``
    (torchtitan) of each module, outermost first, and returns the first it can classify:
    a LitGPT ``Config`` (``n_embd``/``n_layer``/``n_head``), torchtitan model args
    (``dim``/``n_layers``/``n_heads``/``vocab_size``) or an HF config (``hidden_size``).
    """
    for prefix, sub in module.named_modules():
        for attr in _CONFIG_ATTRS:
            cfg = vars(sub).get(attr)
            if cfg is None or isinstance(cfg, (str, bytes, int, float, bool, nn.Module)):
                continue
            path = f"{prefix}.{attr}" if prefix else attr
            if is_litgpt_config(cfg):
                return "LitGPT", path, cfg, architecture_from_litgpt
            if is_torchtitan_args(cfg):
                return "torchtitan", path, cfg, architecture_from_torchtitan
            data = _hf_like(cfg)
            if data is not None:
                return "HF", path, data, architecture_from_hf
    return None


# --------------------------------------------------------------------------- 3. layers
@dataclass
class _Lin:
    name: str  # path relative to the block
    module: nn.Linear

    @property
    def i(self) -> int:
        return self.module.in_features

    @property
    def o(self) -> int:
        return self.module.out_features

    @property
    def leaf(self) -> str:
        return self.name.rsplit(".", 1)[-1].lower()

    @property
    def is_attention(self) -> bool:
        parts = [p.lower() for p in self.name.split(".")]
        return self.leaf in _ATTN_LINEAR_NAMES or any(a in p for p in parts[:-1] for a in _ATTN_PARTS)


def _signature(module: nn.Module) -> tuple:
    """What makes two blocks 'the same layer': classes and Linear/attention shapes in order."""
    sig: list[Any] = [type(module).__name__]
    for _, m in module.named_modules():
        if isinstance(m, nn.Linear):
            sig.append((m.in_features, m.out_features))
        elif isinstance(m, nn.MultiheadAttention):
            sig.append(("mha", m.embed_dim, m.num_heads))
    return tuple(sig)


def _has_linear(module: nn.Module) -> bool:
    return any(isinstance(m, nn.Linear) for m in module.modules())


def _find_blocks(module: nn.Module) -> tuple[str, list[nn.Module]] | None:
    """The run of consecutive identical blocks (inside any ModuleList/Sequential) that holds the most
    parameters: the transformer layers, not e.g. the experts inside one layer."""
    best: tuple[tuple[bool, int, int], str, list[nn.Module]] | None = None
    for prefix, sub in module.named_modules():
        if not isinstance(sub, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(sub.children())
        signatures = [_signature(c) for c in children]
        start = 0
        while start < len(children):
            end = start + 1
            while end < len(children) and signatures[end] == signatures[start]:
                end += 1
            first = children[start]
            if _has_linear(first) and not isinstance(first, nn.Linear):
                # repeated beats single; then parameters covered; then length
                covered = (end - start > 1, (end - start) * sum(p.numel() for p in first.parameters()), end - start)
                if best is None or covered > best[0]:
                    where = f"{prefix}[{start}:{end}]" if prefix else f"[{start}:{end}]"
                    best = (covered, where, children[start:end])
            start = end
    return (best[1], best[2]) if best is not None else None


def _int_attr(module: nn.Module, names: tuple[str, ...]) -> tuple[int, str] | None:
    for prefix, sub in module.named_modules():
        for n in names:
            v = vars(sub).get(n)
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                return v, (f"{prefix}.{n}" if prefix else n)
    return None


def inspect_layers(module: nn.Module) -> ArchitectureInference:
    """Infer the architecture from ``nn.Embedding`` / ``nn.Linear`` shapes (see module docstring).

    Raises :class:`~co_design.arch.ArchitectureError` naming what is missing
    (no ``nn.Linear`` layers, no FFN pair of projections, ...).
    """
    mname = type(module).__name__
    linears = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ArchitectureError(
            f"{mname} has no nn.Linear layers, so there is nothing to quantize and no shape to infer; "
            "CoDesignCallback needs a transformer built from nn.Linear (and nn.Embedding) layers"
        )
    ev: dict[str, str] = {}
    guessed: list[str] = []

    # --- token embedding and output head
    found = _token_embedding(module)
    emb_name, emb, head_name, head = found if found is not None else (None, None, None, None)
    if emb is not None:
        vocab, hidden = emb.num_embeddings, emb.embedding_dim
        ev["vocab"] = f"{emb_name}.num_embeddings"
        ev["hidden"] = f"{emb_name}.embedding_dim"
    else:
        head_name, head = linears[-1]
        vocab, hidden = head.out_features, head.in_features
        ev["vocab"] = f"{head_name}.out_features (no nn.Embedding; last Linear read as the output head)"
        ev["hidden"] = f"{head_name}.in_features"
    if head is not None and emb is not None and head.weight is emb.weight:
        tied = True
        ev["tied_embeddings"] = f"{head_name}.weight is {emb_name}.weight"
    elif head is not None:
        tied = False
        ev["tied_embeddings"] = f"separate output Linear {head_name!r}"
    else:
        tied = True
        ev["tied_embeddings"] = f"no output Linear of width {vocab}; logits assumed to reuse {emb_name}.weight"
        guessed.append("tied_embeddings")

    # --- the repeated block
    blocks = _find_blocks(module)
    if blocks is not None:
        where, run = blocks
        layers = len(run)
        block: nn.Module = run[0]
        ev["layers"] = f"{layers} identical blocks at {where}"
        block_lins = [_Lin(n, m) for n, m in block.named_modules() if isinstance(m, nn.Linear)]
    else:
        block = module
        block_lins = [_Lin(n, m) for n, m in linears if m is not head]
        layers = 0  # counted from FFN pairs below
    mha = next((m for m in block.modules() if isinstance(m, nn.MultiheadAttention)), None)
    if mha is not None:  # its out_proj is a Linear (NonDynamicallyQuantizableLinear): attention, not FFN
        attn_ids = {id(mha.out_proj)}
    else:
        attn_ids = {id(lin.module) for lin in block_lins if lin.is_attention}
    attn = [lin for lin in block_lins if id(lin.module) in attn_ids]
    ffn_lins = [lin for lin in block_lins if id(lin.module) not in attn_ids]

    # --- MoE: a run of identical expert FFNs inside the block, and a router Linear hidden -> experts
    moe_kwargs: dict[str, Any] = {}
    if blocks is not None:
        moe = _read_moe(block, ffn_lins, hidden) or _read_fused_moe(block, ffn_lins, hidden)
        if moe is not None:
            moe_kwargs, ffn_lins, moe_ev, moe_guessed = moe
            ev.update(moe_ev)
            guessed.extend(moe_guessed)

    # --- FFN: ups (hidden -> F), down (F -> hidden); two ups of width F or one of 2F = gated
    ffn_read = _read_ffn(ffn_lins, hidden) if not moe_kwargs or ffn_lins else None
    if moe_kwargs:  # the dense `ffn` field: unused by MoE layers; the shared expert's FFN when there is one
        if ffn_read is not None:
            moe_kwargs["shared_experts"] = ffn_read[2]
            moe_kwargs["shared_expert_ffn"] = ffn_read[0]
            ev["shared_experts"] = f"{ffn_read[2]} FFN(s) beside the experts ({ffn_read[3]})"
        ffn_read = (moe_kwargs["expert_ffn"], moe_kwargs.pop("gated_ffn"), 1, ev["expert_ffn"], ev.pop("expert_gated"))
    if ffn_read is None:
        shapes = ", ".join(f"{lin.name}: {lin.i}->{lin.o}" for lin in ffn_lins) or "none"
        raise ArchitectureError(
            f"{mname}: could not find an FFN (a Linear {hidden}->F followed by one F->{hidden}) "
            f"among the non-attention Linear layers ({shapes}); pass architecture=Architecture(...)"
        )
    ffn_width, gated, n_ffn, ev["ffn"], ev["gated_ffn"] = ffn_read
    if blocks is None:
        layers = n_ffn
        ev["layers"] = f"{layers} FFN(s) of width {ffn_width} (no repeated block found)"

    # --- attention: widths from the projections, heads from an attribute (else guessed)
    q_dim, kv_dim, attention_bias, attn_ev = _read_attention(attn, mha, hidden)
    heads_attr = _int_attr(block, _HEAD_ATTRS) or _int_attr(module, _HEAD_ATTRS)
    kv_attr = _int_attr(block, _KV_HEAD_ATTRS) or _int_attr(module, _KV_HEAD_ATTRS)
    hd_attr = _int_attr(block, _HEAD_DIM_ATTRS) or _int_attr(module, _HEAD_DIM_ATTRS)
    if mha is not None:
        heads, head_dim = mha.num_heads, mha.head_dim
        ev["heads"] = "nn.MultiheadAttention.num_heads"
    elif heads_attr is not None and q_dim % heads_attr[0] == 0:
        heads, head_dim = heads_attr[0], q_dim // heads_attr[0]
        ev["heads"] = f"attribute {heads_attr[1]}"
    elif hd_attr is not None and q_dim % hd_attr[0] == 0:
        head_dim = hd_attr[0]
        heads = q_dim // head_dim
        ev["heads"] = f"query width {q_dim} / attribute {hd_attr[1]}={head_dim}"
    else:
        head_dim = next(d for d in (128, 64, 32, 16, 8, 4, 2, 1) if q_dim % d == 0 and kv_dim % d == 0)
        heads = q_dim // head_dim
        ev["heads"] = f"no head-count attribute; assumed head_dim={head_dim}"
        guessed.extend(["heads", "kv_heads"])
    if kv_attr is not None and heads % kv_attr[0] == 0:
        kv_heads = kv_attr[0]
        ev["kv_heads"] = f"attribute {kv_attr[1]}"
    else:
        kv_heads = max(1, kv_dim // head_dim)
        ev.setdefault("kv_heads", f"key/value width {kv_dim} / head_dim {head_dim}")
    if attn_ev:
        ev["attention"] = attn_ev
    if not attn:
        guessed.append("attention")
    kwargs: dict[str, Any] = dict(
        **moe_kwargs,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        ffn=ffn_width,
        vocab=vocab,
        gated_ffn=gated,
        tied_embeddings=tied,
        attention_bias=attention_bias,
        name=mname,
    )
    if heads * head_dim != hidden:
        kwargs["head_dim"] = head_dim
    try:
        arch = Architecture(**kwargs)
    except ArchitectureError as exc:
        raise ArchitectureError(
            f"{mname}: the layer shapes give an inconsistent architecture ({exc}); read: {ev}; "
            "pass architecture=Architecture(...)"
        ) from None
    return ArchitectureInference(arch, "module layers", ev, tuple(dict.fromkeys(guessed)))


def _read_ffn(lins: list[_Lin], hidden: int) -> tuple[int, bool, int, str, str] | None:
    """(width, gated, number of FFNs, width evidence, gating evidence), or None when no FFN is found.

    Down projections are ``F -> hidden``; each has two ``hidden -> F`` up projections
    (gate and up) when gated, one of width ``2F`` when gate and up are fused, else one.
    """
    downs = [lin for lin in lins if lin.o == hidden and lin.i != hidden]
    if not downs:  # an FFN as wide as hidden: only square matrices, two per FFN
        square = [lin for lin in lins if lin.i == hidden and lin.o == hidden]
        if len(square) < 2:
            return None
        return hidden, False, len(square) // 2, f"{square[-1].name}.in_features", "square projections = not gated"
    width = downs[-1].i  # the down projection usually comes last
    n = sum(1 for d in downs if d.i == width)
    ups = [lin for lin in lins if lin.i == hidden and lin.o == width]
    fused = [lin for lin in lins if lin.i == hidden and lin.o == 2 * width]
    where = f"{downs[-1].name}.in_features"
    if fused and len(fused) >= n:
        return width, True, n, where, f"fused gate/up {fused[0].name} of width 2x{width}"
    if ups and len(ups) >= 2 * n:
        return width, True, n, where, f"two up-projections per FFN ({', '.join(u.name for u in ups[:2])}) = gated"
    if ups:
        return width, False, n, where, f"one up-projection per FFN ({ups[0].name}) = not gated"
    return None


_TOP_K_ATTRS = ("top_k", "num_experts_per_tok", "experts_per_token", "topk", "n_activated_experts", "moe_top_k")


def _read_moe(
    block: nn.Module, ffn_lins: list[_Lin], hidden: int
) -> tuple[dict[str, Any], list[_Lin], dict[str, str], list[str]] | None:
    """Experts as a ModuleList of identical FFNs (Mixtral/Qwen-MoE style in plain torch), or None.

    Returns Architecture kwargs (experts, experts_per_token, expert_ffn, gated_ffn), the FFN
    Linears left outside the experts (shared experts), evidence and guessed fields.
    """
    inner = _find_blocks(block)
    if inner is None or len(inner[1]) < 2:
        return None
    where, experts = inner
    expert_lins = [_Lin(n, m) for n, m in experts[0].named_modules() if isinstance(m, nn.Linear)]
    one = _read_ffn(expert_lins, hidden)
    if one is None or one[2] != 1:
        return None
    n = len(experts)
    in_experts = {id(m) for e in experts for m in e.modules()}
    rest = [lin for lin in ffn_lins if id(lin.module) not in in_experts]
    router = next((lin for lin in rest if lin.i == hidden and lin.o == n), None)
    rest = [lin for lin in rest if lin is not router]
    ev = {"experts": f"{n} identical expert FFNs at {where}", "expert_ffn": f"expert {one[3]}", "expert_gated": one[4]}
    if router is None:
        ev["experts"] += f" (no router Linear {hidden}->{n} found)"
    k, guessed = _top_k(block, n, ev)
    kwargs = dict(experts=n, experts_per_token=k, expert_ffn=one[0], gated_ffn=one[1])
    return kwargs, rest, ev, guessed


def _top_k(block: nn.Module, n: int, ev: dict[str, str]) -> tuple[int, list[str]]:
    """Experts per token from the block's top-k attribute, else 2 (then listed as guessed); ``ev`` says which."""
    top_k = _int_attr(block, _TOP_K_ATTRS)
    if top_k is not None and 1 <= top_k[0] <= n:
        ev["experts_per_token"] = f"attribute {top_k[1]}"
        return top_k[0], []
    k = min(2, n)
    ev["experts_per_token"] = f"no top-k attribute; assumed {k}"
    return k, ["experts_per_token"]


_DOWN_NAMES = ("down_proj", "w_down", "w2", "down")


def _read_fused_moe(
    block: nn.Module, ffn_lins: list[_Lin], hidden: int
) -> tuple[dict[str, Any], list[_Lin], dict[str, str], list[str]] | None:
    """Experts stored as 3-D parameters (E, ., .) of one module: transformers 5's fused
    ``gate_up_proj``/``down_proj``, torchtitan's ``w1``/``w2``/``w3``, co-design's GroupedExperts.

    The expert width is the dimension of the down projection that is not ``hidden``; gated
    when there is a fused ``gate_up`` or a separate gate parameter (three matrices).
    """
    for path, sub in block.named_modules():
        params = {n: p for n, p in sub.named_parameters(recurse=False) if p.dim() == 3}
        if len(params) < 2 or len({p.shape[0] for p in params.values()}) != 1:
            continue
        down_name = next((n for n in params if n in _DOWN_NAMES), None)
        if down_name is None:
            continue
        n = params[down_name].shape[0]
        a, b = params[down_name].shape[1:]
        if hidden not in (a, b):
            continue
        width = b if a == hidden else a
        gated = any("gate" in name for name in params) or len(params) >= 3
        shapes = ", ".join(f"{name} {tuple(p.shape)}" for name, p in params.items())
        router = next((lin for lin in ffn_lins if lin.i == hidden and lin.o == n), None)
        rest = [lin for lin in ffn_lins if lin is not router]
        ev = {"experts": f"{n} experts as 3-D parameters of {path or 'the block'} ({shapes})",
              "expert_ffn": f"{down_name} dimension that is not hidden={hidden}",
              "expert_gated": "fused/separate gate projection = gated" if gated else "no gate projection = not gated"}
        k, guessed = _top_k(block, n, ev)
        return dict(experts=n, experts_per_token=k, expert_ffn=width, gated_ffn=gated), rest, ev, guessed
    return None


def _read_attention(attn: list[_Lin], mha: nn.MultiheadAttention | None, hidden: int) -> tuple[int, int, bool, str]:
    """(query width, key/value width, q bias?, evidence) of one block's attention."""
    if mha is not None:
        # self-attention: q, k and v are each embed_dim wide (kdim/vdim are input widths, not heads)
        return mha.embed_dim, mha.embed_dim, mha.in_proj_bias is not None, "nn.MultiheadAttention (fused in_proj)"
    if not attn:
        return hidden, hidden, False, "no attention projections found; a standard attention of width hidden assumed"
    by_leaf = {lin.leaf: lin for lin in attn}
    q = next((by_leaf[n] for n in _Q_NAMES if n in by_leaf), None)
    k = next((by_leaf[n] for n in _K_NAMES if n in by_leaf), None)
    qkv = next((by_leaf[n] for n in _QKV_NAMES if n in by_leaf), None)
    outs = [lin for lin in attn if lin.o == hidden and lin is not q and lin is not qkv]
    out = outs[-1] if outs else None
    if q is not None and k is not None:
        return q.o, k.o, q.module.bias is not None, f"{q.name}: {q.i}->{q.o}, {k.name}: {k.i}->{k.o}"
    if qkv is None:  # unnamed: one fused projection wider than hidden, or separate ones in q, k, v order
        wide = [lin for lin in attn if lin.i == hidden and lin is not out]
        if len(wide) == 1:
            qkv = wide[0]
        elif len(wide) >= 3:
            q, k = wide[0], wide[1]
            return q.o, k.o, q.module.bias is not None, f"{q.name}: {q.i}->{q.o}, {k.name}: {k.i}->{k.o} (by order)"
    if qkv is not None:
        q_dim = out.i if out is not None else hidden
        kv_dim = (qkv.o - q_dim) // 2
        if kv_dim <= 0:
            q_dim, kv_dim = qkv.o // 3, qkv.o // 3
        return q_dim, kv_dim, qkv.module.bias is not None, (
            f"fused {qkv.name}: {qkv.i}->{qkv.o} = q {q_dim} + k,v {kv_dim} each (a fused projection does not "
            "show the head count: give the attention module an n_head/n_kv_heads (or head_dim) attribute, keep "
            "the model's config on it, or pass architecture=Architecture(heads=..., kv_heads=..., head_dim=...))"
        )
    return hidden, hidden, False, "attention projections not recognised; width hidden assumed"
