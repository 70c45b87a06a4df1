"""The quantization recipe of an exported shape: which modules go to NVFP4 (or FP8), which stay 16-bit.

The plan follows what co-design's performance model assumes (``co_design.perf``: "embeddings,
lm_head, router and norms stay bf16"): every Linear of attention and of the (expert) FFNs takes
the deployment's weight/activation format; the token embedding, the LM head, the MoE router
(``mlp.gate``, not the FFN's ``gate_proj``) and the norms stay in 16 bits. Written for two tools:

* TensorRT Model Optimizer (ModelOpt) ``mtq.quantize(model, config, forward_loop)``: a config of
  ``quant_cfg`` (an ordered list of entries ``{quantizer_name: <fnmatch wildcard>, cfg: {...},
  enable: ...}``, later entries override earlier ones) and ``algorithm``. NVFP4 is
  ``num_bits: [2, 1]`` (E2M1) with ``block_sizes: {-1: 16, type: dynamic, scale_bits: [4, 3]}``
  (16-element blocks along the last axis, E4M3 scales); FP8 is ``num_bits: [4, 3]``.
  Format: https://nvidia.github.io/Model-Optimizer/guides/_quant_cfg.html and
  https://nvidia.github.io/TensorRT-Model-Optimizer/reference/generated/modelopt.torch.quantization.config.html
* LLM Compressor ``oneshot(model=..., recipe=...)``: a recipe YAML whose stage holds a
  ``QuantizationModifier`` with ``targets: [Linear]``, ``scheme: NVFP4`` (or ``FP8``) and
  ``ignore`` (module names, ``re:`` for a regular expression).
  Format: https://docs.vllm.ai/projects/llm-compressor/en/0.7.0/examples/quantization_w4a4_fp4/
  FP8 is compressed-tensors' ``FP8`` preset: weights and input activations scaled per tensor,
  statically (calibrated), the scaling the performance model costs with ``fp8_scaling="tensor"``;
  not ``FP8_DYNAMIC`` (per-channel weights), whose per-token activation scales a runtime computes
  in a kernel of its own before each GEMM. Weight-only FP8 has no preset: it is written as a
  ``config_groups`` entry of per-tensor FP8 weights (presets: compressed-tensors
  ``src/compressed_tensors/quantization/quant_scheme.py``, ``PRESET_SCHEMES``).

Module names are those of the transformers family :mod:`co_design.export.hf_config` writes
(Llama, Qwen3-MoE: router ``mlp.gate``; DeepSeek-V3: router ``mlp.gate``, shared experts
``mlp.shared_experts``, quantized like the routed ones). Imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import copy

import yaml

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.perf import Deployment

__all__ = ["quantization_plan", "modelopt_config", "llmcompressor_recipe", "MODELOPT_URL", "LLMCOMPRESSOR_URL"]

MODELOPT_URL = "https://nvidia.github.io/Model-Optimizer/guides/_quant_cfg.html"
LLMCOMPRESSOR_URL = "https://docs.vllm.ai/projects/llm-compressor/en/0.7.0/examples/quantization_w4a4_fp4/"

# Deployment format -> (ModelOpt quantizer attributes, LLM Compressor scheme)
_NVFP4 = {"num_bits": [2, 1], "block_sizes": {-1: 16, "type": "dynamic", "scale_bits": [4, 3]}}
_FP8 = {"num_bits": [4, 3], "axis": None}
_FORMATS = {"nvfp4": (_NVFP4, "NVFP4"), "fp8": (_FP8, "FP8")}
# weight-only FP8 for LLM Compressor (no preset): per-tensor FP8 weights, 16-bit activations
_FP8_WEIGHT_ONLY = {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True, "dynamic": False}


def _check(dep: "Deployment") -> None:
    if dep.weights not in _FORMATS:
        raise ValueError(f"weights={dep.weights!r}: a quantization recipe is written for nvfp4 or fp8 weights; "
                         f"{dep.weights} weights need none (export with --weights nvfp4 or fp8)")
    if dep.activations not in (dep.weights, "bf16", "fp16"):
        raise ValueError(f"activations={dep.activations!r} with weights={dep.weights!r}: the recipes quantize "
                         "activations to the weights' format or leave them 16-bit")
    if dep.fp8_scaling != "tensor":
        raise ValueError(f"fp8_scaling={dep.fp8_scaling!r}: the recipes written here scale FP8 per tensor (ModelOpt) "
                         "(ModelOpt, LLM Compressor's FP8 preset), not in 128x128 blocks; export with "
                         "--fp8-scaling tensor")


def quantization_plan(arch: "Architecture", dep: "Deployment") -> list[dict[str, str]]:
    """One row per module group: ``modules`` (HF names), ``format``, ``why``."""
    _check(dep)
    hi = "bf16"
    w = dep.weights
    act = dep.activations if dep.activations == w else "16-bit activations"
    rows = [
        {"modules": "self_attn.{q,k,v,o}_proj" if arch.mla is None else
         "self_attn.{q_a,q_b,kv_a_proj_with_mqa,kv_b,o}_proj", "format": w,
         "why": f"attention GEMMs; activations {act}"},
    ]
    if arch.moe_layers < arch.layers:
        rows.append({"modules": "mlp.{gate,up,down}_proj (dense layers)", "format": w, "why": "dense FFN GEMMs"})
    if arch.is_moe:
        rows.append({"modules": "mlp.experts.*", "format": w, "why": "routed expert GEMMs"})
        if arch.shared_experts:
            rows.append({"modules": "mlp.shared_experts.*", "format": w, "why": "shared expert GEMMs"})
        rows.append({"modules": "mlp.gate (router)", "format": hi,
                     "why": "routing logits: small, and 4-bit routing changes which experts run"})
    rows += [
        {"modules": "lm_head", "format": hi, "why": "output logits; the performance model costs it in bf16"},
        {"modules": "model.embed_tokens", "format": hi, "why": "a lookup, not a GEMM"},
        {"modules": "*norm*", "format": hi, "why": "RMSNorm weights, elementwise"},
    ]
    if dep.kv_cache == "fp8":
        rows.append({"modules": "KV cache", "format": "fp8", "why": "set in the serving config "
                     "(kv_cache_config.dtype); ModelOpt also calibrates its scales (*[kv]_bmm_quantizer)"})
    return rows


def modelopt_config(arch: "Architecture", dep: "Deployment") -> dict[str, Any]:
    """ModelOpt ``{"quant_cfg": [...], "algorithm": "max"}`` for ``mtq.quantize`` (format: :data:`MODELOPT_URL`)."""
    _check(dep)
    attrs = _FORMATS[dep.weights][0]
    entries: list[dict[str, Any]] = [
        {"quantizer_name": "*", "enable": False},  # start from nothing quantized, then enable what the plan says
        {"quantizer_name": "*weight_quantizer", "cfg": copy.deepcopy(attrs), "enable": True},
    ]
    if dep.activations == dep.weights:
        entries.append({"quantizer_name": "*input_quantizer", "cfg": copy.deepcopy(attrs), "enable": True})
    if dep.kv_cache == "fp8":
        entries.append({"quantizer_name": "*[kv]_bmm_quantizer", "cfg": copy.deepcopy(_FP8), "enable": True})
    keep = ["*lm_head*", "*embed_tokens*", "*norm*", "*router*"]
    if arch.is_moe:
        keep.append("*mlp.gate.*")  # the router; the FFN's gate_proj does not match (no "." after "gate")
    entries += [{"quantizer_name": k, "enable": False} for k in keep]
    return {"quant_cfg": entries, "algorithm": "max"}


def llmcompressor_recipe(arch: "Architecture", dep: "Deployment") -> dict[str, Any]:
    """LLM Compressor recipe mapping (format: :data:`LLMCOMPRESSOR_URL`)."""
    _check(dep)
    ignore = ["lm_head"]
    if arch.is_moe:
        ignore.append("re:.*mlp.gate$")
    modifier: dict[str, Any]
    if dep.activations == dep.weights:
        modifier = {"targets": ["Linear"], "scheme": _FORMATS[dep.weights][1], "ignore": ignore}
    elif dep.weights == "nvfp4":
        modifier = {"targets": ["Linear"], "scheme": "NVFP4A16", "ignore": ignore}
    else:  # weight-only FP8: no preset (compressed-tensors' FP8 preset quantizes the activations too)
        modifier = {"config_groups": {"group_0": {"targets": ["Linear"], "weights": dict(_FP8_WEIGHT_ONLY)}},
                    "ignore": ignore}
    if dep.kv_cache == "fp8":
        modifier["kv_cache_scheme"] = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
                                       "symmetric": True}
    return {"default_stage": {"default_modifiers": {"QuantizationModifier": modifier}}}


def _header(lines: list[str]) -> str:
    return "".join(f"# {x}\n" if x else "#\n" for x in lines)


def plan_comment(arch: "Architecture", dep: "Deployment") -> list[str]:
    return [f"  {r['modules']}: {r['format']} ({r['why']})" for r in quantization_plan(arch, dep)]


def modelopt_yaml(arch: "Architecture", dep: "Deployment") -> str:
    head = ["ModelOpt quantization config for modelopt.torch.quantization.quantize(model, config, forward_loop),",
            f"written by co-design export for {arch.name}. Format: {MODELOPT_URL}",
            "Plan:", *plan_comment(arch, dep)]
    return _header(head) + yaml.safe_dump(modelopt_config(arch, dep), sort_keys=False)


def llmcompressor_yaml(arch: "Architecture", dep: "Deployment") -> str:
    static = [x for x, on in (("input activation", dep.activations == dep.weights), ("KV-cache", dep.kv_cache == "fp8"))
              if on]
    calib = (f"dataset=... (the {' and '.join(static)} scales are static: calibrated on its samples), " if static
             else "")
    head = [f"LLM Compressor recipe for llmcompressor.oneshot(model=..., {calib}recipe=this file),",
            f"written by co-design export for {arch.name}. Format: {LLMCOMPRESSOR_URL}",
            "Plan:", *plan_comment(arch, dep)]
    return _header(head) + yaml.safe_dump(llmcompressor_recipe(arch, dep), sort_keys=False)
