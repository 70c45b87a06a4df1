"""Which weights a fake-quantized model really quantizes: a coverage report by kind.

Every parameter of two or more dimensions is a weight matrix (Linear weights, embeddings, stacked
or fused 3-D expert weights, router weights) and falls in one kind, read from its module path:

- ``attention``: a path part containing ``attn``/``attention`` (q/k/v/o, fused qkv, MLA projections);
- ``experts``: under a part starting with ``experts`` (routed experts, whatever their layout);
- ``ffn``: dense FFNs and shared experts (``mlp``, ``feed_forward``, ``shared_expert(s)``, ...);
- ``embeddings``, ``lm_head``, ``router``: kept in high precision by the deployment default
  (REFERENCE.md section 1), as are norms and biases (vectors, listed but not in the fractions);
- ``other``: anything else.

``fraction()`` is the quantized share of attention + FFN + expert weights (elements), the
number a model's config implies should be close to 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from co_design.quant.fused import is_fused_quantized, quantized_fused_weights
from co_design.quant.modules import FakeQuant, FakeQuantLinear

__all__ = ["QUANTIZABLE_KINDS", "CoverageReport", "quantization_coverage"]

QUANTIZABLE_KINDS = ("attention", "ffn", "experts")
KEPT_KINDS = ("lm_head", "embeddings", "router", "other")
_LABELS = {"attention": "attention", "ffn": "dense FFN", "experts": "experts", "lm_head": "lm_head",
           "embeddings": "embeddings", "router": "router", "other": "other", "norms": "norms",
           "biases": "biases/vectors"}
_FFN_PARTS = ("mlp", "ffn", "feed_forward", "feedforward", "shared_expert", "shared_experts", "shared", "dense")
_HEAD_LEAVES = ("lm_head", "output", "embed_out", "head")


def _kind(path: str, module: nn.Module, embedding_ids: set[int], p_id: int) -> str:
    parts = path.lower().split(".")
    leaf = parts[-1] if parts else ""
    if p_id in embedding_ids or isinstance(module, nn.Embedding) or any("embed" in q or q in ("wte", "wpe")
                                                                         for q in parts):
        return "embeddings"
    if leaf in _HEAD_LEAVES:
        return "lm_head"
    if any("router" in q for q in parts) or leaf == "gate" or "router" in type(module).__name__.lower():
        return "router"
    if any(q.startswith("experts") for q in parts):
        return "experts"
    if any("attn" in q or "attention" in q for q in parts):
        return "attention"
    if any(q in _FFN_PARTS or "mlp" in q for q in parts):
        return "ffn"
    return "other"


@dataclass(frozen=True)
class CoverageReport:
    """Elements of weight matrices by kind: ``{kind: (quantized, total)}``, plus what stayed high precision.

    ``kept`` counts elements of weights left in high precision per kind (lm_head, embeddings,
    router, other, and the norms and biases); ``skipped`` names modules ``quantize_model`` could
    not quantize, with the reason.
    """

    format: str | None
    kinds: dict[str, tuple[int, int]]
    kept: dict[str, int]
    skipped: dict[str, str] = field(default_factory=dict)

    def fraction(self, kinds: tuple[str, ...] = QUANTIZABLE_KINDS) -> float:
        """Quantized share (elements) of the weights of ``kinds``; 1.0 when there are none."""
        q = sum(self.kinds.get(k, (0, 0))[0] for k in kinds)
        t = sum(self.kinds.get(k, (0, 0))[1] for k in kinds)
        return q / t if t else 1.0

    @property
    def quantized_elements(self) -> int:
        return sum(q for q, _ in self.kinds.values())

    def metrics(self, prefix: str = "co_design/quant/coverage") -> dict[str, float]:
        """Fractions for loggers: the attention+FFN+experts share, each kind present, and all weights."""
        out = {prefix: self.fraction()}
        for k in QUANTIZABLE_KINDS:
            if self.kinds.get(k, (0, 0))[1]:
                out[f"{prefix}_{k}"] = self.fraction((k,))
        out[f"{prefix}_all_weights"] = self.fraction(tuple(self.kinds))
        return out

    def lines(self) -> list[str]:
        fmt = self.format or "no format"
        q = sum(self.kinds.get(k, (0, 0))[0] for k in QUANTIZABLE_KINDS)
        t = sum(self.kinds.get(k, (0, 0))[1] for k in QUANTIZABLE_KINDS)
        out = [f"{fmt} fake-quantization covers {self.fraction():.1%} of attention+FFN+expert weights "
               f"({q:,} of {t:,} elements); {self.fraction(tuple(self.kinds)):.1%} of all weight matrices"]
        for k in QUANTIZABLE_KINDS:
            kq, kt = self.kinds.get(k, (0, 0))
            if kt:
                out.append(f"  {_LABELS[k]:<10} {kq / kt:6.1%}  ({kq:,} of {kt:,})")
        kept = ", ".join(f"{_LABELS[k]} {n:,}" for k, n in self.kept.items() if n)
        out.append(f"  kept in high precision: {kept or 'nothing'}")
        for name, reason in self.skipped.items():
            out.append(f"  skipped {name}: {reason}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _quantized_params(model: nn.Module) -> tuple[set[int], set[str]]:
    ids: set[int] = set()
    formats: set[str] = set()
    for module in model.modules():
        if isinstance(module, FakeQuantLinear):
            ids.add(id(module.weight))
            formats.add(module.config.format)
        elif getattr(type(module), "_co_design_experts", False):
            quants = [getattr(module, a, None) for a in ("weight_quant", "input_quant")]
            quants = [q for q in quants if isinstance(q, FakeQuant)]
            if quants:
                ids.update(id(p) for p in module.parameters(recurse=False) if p.dim() == 3)
                formats.update(q.format for q in quants)
        elif is_fused_quantized(module):
            ids.update(id(p) for _, p, _ in quantized_fused_weights(module))
            formats.add(module._co_design_fused_spec.config.format)
    return ids, formats


def quantization_coverage(model: nn.Module, skipped: dict[str, str] | None = None) -> CoverageReport:
    """The coverage report of ``model`` as it is now (after :func:`~co_design.quant.quantize_model`)."""
    quantized, formats = _quantized_params(model)
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    kinds: dict[str, list[int]] = {}
    kept = {k: 0 for k in (*KEPT_KINDS, "norms", "biases")}
    seen: set[int] = set()
    for mpath, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if p.dim() < 2 or pname.endswith("bias"):  # gpt-oss's per-expert biases are (E, out)
                norm = "norm" in type(module).__name__.lower() or "norm" in mpath.rsplit(".", 1)[-1].lower()
                kept["norms" if norm else "biases"] += p.numel()
                continue
            path = f"{mpath}.{pname}" if pname != "weight" else mpath
            k = _kind(path, module, embedding_ids, id(p))
            q = p.numel() if id(p) in quantized else 0
            entry = kinds.setdefault(k, [0, 0])
            entry[0] += q
            entry[1] += p.numel()
            if not q and k in KEPT_KINDS:
                kept[k] += p.numel()
    fmt = "+".join(sorted(formats)) or None
    return CoverageReport(fmt, {k: (v[0], v[1]) for k, v in kinds.items()}, kept, dict(skipped or {}))
