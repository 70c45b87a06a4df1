"""Quantization recipes: resolved module by module the way each tool reads them (ModelOpt: fnmatch wildcards,
the last matching entry wins; LLM Compressor: names or `re:` regular expressions), on transformers' real names."""

import fnmatch
import re

import pytest
import yaml

from co_design import Architecture
from co_design.export.quant_recipes import (llmcompressor_recipe, llmcompressor_yaml, modelopt_config, modelopt_yaml,
                                            quantization_plan)
from co_design.perf import Deployment

DENSE = Architecture(hidden=256, layers=2, heads=4, kv_heads=2, ffn=768, vocab=1000)
MOE = Architecture(hidden=256, layers=2, heads=4, kv_heads=2, ffn=512, expert_ffn=128, experts=8, experts_per_token=2,
                   vocab=1000)
NVFP4 = Deployment()  # nvfp4 weights and activations, fp8 KV cache


def _modelopt_enabled(cfg: dict, quantizer: str) -> bool:
    on = False
    for entry in cfg["quant_cfg"]:  # ordered: later entries override earlier ones
        if fnmatch.fnmatch(quantizer, entry["quantizer_name"]) and "enable" in entry:
            on = entry["enable"]
    return on


def _llmc_quantized(recipe: dict, module: str) -> bool:
    mod = recipe["default_stage"]["default_modifiers"]["QuantizationModifier"]
    for pat in mod["ignore"]:
        if (pat.startswith("re:") and re.match(pat[3:], module)) or pat == module.split(".")[-1] or pat == module:
            return False
    return True


def test_modelopt_nvfp4_attributes():
    cfg = modelopt_config(DENSE, NVFP4)
    weight = next(e for e in cfg["quant_cfg"] if e["quantizer_name"] == "*weight_quantizer")
    # NVFP4 = E2M1 values in 16-element blocks along the last axis with E4M3 scales
    assert weight["cfg"] == {"num_bits": [2, 1], "block_sizes": {-1: 16, "type": "dynamic", "scale_bits": [4, 3]}}
    assert cfg["algorithm"] == "max"


@pytest.mark.parametrize("name, quantized", [
    ("model.layers.0.self_attn.q_proj.weight_quantizer", True),
    ("model.layers.0.self_attn.o_proj.input_quantizer", True),
    ("model.layers.1.mlp.gate_proj.weight_quantizer", True),  # the FFN's gate projection is a GEMM: quantized
    ("model.layers.1.mlp.down_proj.weight_quantizer", True),
    ("model.layers.1.mlp.experts.3.up_proj.weight_quantizer", True),
    ("model.layers.1.mlp.gate.weight_quantizer", False),  # the router stays 16-bit
    ("model.layers.1.mlp.gate.input_quantizer", False),
    ("lm_head.weight_quantizer", False),
    ("model.embed_tokens.weight_quantizer", False),
    ("model.layers.0.input_layernorm.weight_quantizer", False),
])
def test_modelopt_module_by_module(name, quantized):
    assert _modelopt_enabled(modelopt_config(MOE, NVFP4), name) is quantized


def test_modelopt_yaml_reads_back_and_cites_its_format():
    text = modelopt_yaml(MOE, NVFP4)
    assert "https://nvidia.github.io/Model-Optimizer/guides/_quant_cfg.html" in text
    assert "&id" not in text  # no YAML anchors: each entry stands alone
    assert yaml.safe_load(text) == modelopt_config(MOE, NVFP4)


def test_modelopt_fp8_weights_only():
    cfg = modelopt_config(DENSE, Deployment(weights="fp8", activations="bf16", kv_cache="bf16"))
    names = [e["quantizer_name"] for e in cfg["quant_cfg"] if e.get("enable")]
    assert names == ["*weight_quantizer"]
    assert cfg["quant_cfg"][1]["cfg"]["num_bits"] == [4, 3]


@pytest.mark.parametrize("name, quantized", [
    ("model.layers.0.self_attn.k_proj", True),
    ("model.layers.0.mlp.gate_proj", True),
    ("model.layers.0.mlp.gate", False),
    ("lm_head", False),
])
def test_llmcompressor_module_by_module(name, quantized):
    recipe = llmcompressor_recipe(MOE, NVFP4)
    mod = recipe["default_stage"]["default_modifiers"]["QuantizationModifier"]
    assert mod["scheme"] == "NVFP4" and mod["targets"] == ["Linear"]
    assert mod["ignore"] == ["lm_head", "re:.*mlp.gate$"]
    assert _llmc_quantized(recipe, name) is quantized


def test_llmcompressor_dense_and_weight_only():
    assert llmcompressor_recipe(DENSE, NVFP4)["default_stage"]["default_modifiers"]["QuantizationModifier"][
        "ignore"] == ["lm_head"]
    wo = llmcompressor_recipe(DENSE, Deployment(activations="bf16"))
    assert wo["default_stage"]["default_modifiers"]["QuantizationModifier"]["scheme"] == "NVFP4A16"
    text = llmcompressor_yaml(MOE, NVFP4)
    assert "dataset=... (the input activation and KV-cache scales are static" in text
    assert "https://docs.vllm.ai/projects/llm-compressor/" in text and yaml.safe_load(text) == llmcompressor_recipe(MOE, NVFP4)


def test_plan_and_refusal():
    plan = {r["modules"]: r["format"] for r in quantization_plan(MOE, NVFP4)}
    assert plan["mlp.gate (router)"] == "bf16" and plan["lm_head"] == "bf16" and plan["mlp.experts.*"] == "nvfp4"
    with pytest.raises(ValueError, match="weights='bf16'"):
        modelopt_config(DENSE, Deployment(weights="bf16", activations="bf16"))


def test_llmcompressor_fp8_scales_per_tensor_as_predicted():
    # compressed-tensors presets: FP8 = per-tensor static weights and activations (what fp8_scaling="tensor"
    # costs); FP8_DYNAMIC would scale activations per token at run time, a kernel the model does not charge
    fp8 = Deployment(weights="fp8", activations="fp8", kv_cache="bf16")
    mod = llmcompressor_recipe(DENSE, fp8)["default_stage"]["default_modifiers"]["QuantizationModifier"]
    assert mod["scheme"] == "FP8" and mod["targets"] == ["Linear"]
    # weight-only FP8 has no preset ("FP8" would quantize the activations too): an explicit weights-only group
    wo = llmcompressor_recipe(MOE, fp8.replace(activations="bf16"))["default_stage"]["default_modifiers"][
        "QuantizationModifier"]
    assert "scheme" not in wo and wo["ignore"] == ["lm_head", "re:.*mlp.gate$"]
    group = wo["config_groups"]["group_0"]
    assert group["targets"] == ["Linear"] and "input_activations" not in group
    assert group["weights"] == {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True,
                                "dynamic": False}
    # nothing static to calibrate: the header asks for no dataset
    assert "dataset=" not in llmcompressor_yaml(MOE, fp8.replace(activations="bf16"))
