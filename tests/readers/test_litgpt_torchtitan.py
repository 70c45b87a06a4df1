"""LitGPT Config and torchtitan model args (duck-typed), and what layer inspection says without them."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

import pytest
import torch
from torch import nn

from co_design.arch import Architecture, ArchitectureError
from co_design.readers import architecture_from_config, architecture_from_litgpt, architecture_from_torchtitan
from co_design.readers.modules import infer_architecture, inspect_layers

LITGPT_LLAMA = dict(name="tiny", n_embd=64, n_layer=2, n_head=4, n_query_groups=2, head_size=64, vocab_size=100,
                    padding_multiple=64, mlp_class_name="LLaMAMLP", intermediate_size=128, bias=False,
                    rope_base=500000)
LLAMA_FIELDS = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=64, ffn=128, vocab=128, rope_theta=500000.0)
EXPECTED_LLAMA = Architecture(**LLAMA_FIELDS)


def test_litgpt_mapping_as_in_model_config_yaml():
    # padded_vocab_size absent: vocab_size 100 rounded up to padding_multiple 64 = 128 (litgpt.config.find_multiple)
    assert architecture_from_litgpt(LITGPT_LLAMA) == EXPECTED_LLAMA
    moe = LITGPT_LLAMA | dict(mlp_class_name="LLaMAMoE", n_expert=8, n_expert_per_token=2, moe_intermediate_size=32)
    assert architecture_from_config(moe) == Architecture(**LLAMA_FIELDS, experts=8, experts_per_token=2,
                                                                 expert_ffn=32)
    neox = LITGPT_LLAMA | dict(mlp_class_name="GptNeoxMLP", intermediate_size=None, bias=True)
    assert architecture_from_litgpt(neox) == Architecture(**LLAMA_FIELDS | dict(ffn=256, gated_ffn=False,
                                                                                  attention_bias=True))
    window = LITGPT_LLAMA | dict(n_layer=4, sliding_window_size=16, sliding_window_indices=[1, 0, 1, 0])
    assert architecture_from_litgpt(window) == Architecture(**LLAMA_FIELDS | dict(layers=4, sliding_window=16,
                                                                                  full_attention_every=2))
    with pytest.raises(ArchitectureError, match="LitGPT config: n_head must be an integer >= 1, got '4'"):
        architecture_from_litgpt(LITGPT_LLAMA | {"n_head": "4"})


if os.environ.get("CI") == "true":  # CI installs it (.ci/run): missing there is a failure, not a skip
    import litgpt
else:
    litgpt = pytest.importorskip("litgpt", reason="install it as the README does: pip install --no-deps litgpt==0.5.13")


def test_litgpt_gpt_reads_its_config_not_the_fused_qkv():
    cfg = litgpt.Config(**LITGPT_LLAMA)
    model = litgpt.GPT(cfg)
    inf = infer_architecture(model)
    assert inf.architecture == EXPECTED_LLAMA and inf.source == "LitGPT config 'config'" and not inf.guessed
    # without the config, the fused qkv (64 -> 512) does not show the heads: read as 2 x 128, flagged, fix named
    seen = inspect_layers(model)
    assert (seen.architecture.heads, seen.architecture.kv_heads, seen.architecture.head_dim) == (2, 1, 128)
    assert {"heads", "kv_heads"} <= set(seen.guessed)
    assert "n_head/n_kv_heads" in seen.evidence["attention"] and "architecture=Architecture(" in seen.evidence[
        "attention"]


# ----------------------------------------------------------------------------- torchtitan (not installed)
@dataclass
class TransformerModelArgs:  # torchtitan/models/llama3/model/args.py, Llama 3 8B values
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int | None = 8
    vocab_size: int = 128256
    multiple_of: int = 1024
    ffn_dim_multiplier: float | None = 1.3
    norm_eps: float = 1e-5
    rope_theta: float = 500000


@dataclass
class MoEArgs:
    num_experts: int = 8
    num_shared_experts: int = 1
    top_k: int = 1


@dataclass
class DeepSeekV3ModelArgs:  # torchtitan/models/deepseek_v3/model/args.py defaults (16B)
    vocab_size: int = 102400
    dim: int = 2048
    inter_dim: int = 10944
    moe_inter_dim: int = 1408
    n_layers: int = 27
    n_dense_layers: int = 1
    n_heads: int = 16
    moe_args: MoEArgs = field(default_factory=lambda: MoEArgs(num_experts=64, num_shared_experts=2, top_k=6))
    q_lora_rank: int = 0
    kv_lora_rank: int = 512
    qk_nope_head_dim: int = 128
    qk_rope_head_dim: int = 64
    v_head_dim: int = 128
    rope_theta: float = 10000.0


def test_torchtitan_llama3_ffn_width_by_hand():
    # FeedForward(hidden_dim=4*dim): int(2*16384/3) = 10922; * 1.3 -> int 14198; up to a multiple of 1024 = 14336
    a = architecture_from_torchtitan(TransformerModelArgs())
    assert a == Architecture(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256,
                             rope_theta=500000.0)
    assert a.param_counts().total == 8_030_261_248  # Llama 3 8B


def test_torchtitan_deepseek_v3_args():
    a = architecture_from_config(DeepSeekV3ModelArgs())
    assert a == Architecture(hidden=2048, layers=27, heads=16, head_dim=128, ffn=10944, vocab=102400, experts=64,
                             experts_per_token=6, shared_experts=2, expert_ffn=1408, dense_layers=1,
                             mla=dict(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128))


def test_module_carrying_torchtitan_args_is_read_from_them():
    args = dataclasses.replace(TransformerModelArgs(), dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128,
                               multiple_of=16, ffn_dim_multiplier=None)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model_args = args
            self.tok_embeddings = nn.Embedding(128, 64)
            self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(2))

    inf = infer_architecture(Model())
    assert inf.source == "torchtitan config 'model_args'"
    assert inf.architecture == Architecture(hidden=64, layers=2, heads=4, kv_heads=2, ffn=176, vocab=128,
                                            rope_theta=500000.0)  # int(2*256/3)=170 -> 176
    assert torch.is_tensor(next(Model().parameters()))
