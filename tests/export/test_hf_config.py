"""config.json export: transformers builds it with the parameter count Architecture predicts, and reading it back
gives the same Architecture (the inverse of co_design.readers.hf)."""

import pytest
import transformers  # the test extra

from co_design import Architecture, ArchitectureError
from co_design.export import hf_config, hf_extra_params, hf_family
from co_design.readers.hf import architecture_from_hf

DENSE = Architecture(hidden=256, layers=3, heads=4, kv_heads=2, ffn=768, vocab=1000, rope_theta=500000.0, name="dense")
MOE = Architecture(hidden=256, layers=3, heads=4, kv_heads=2, head_dim=128, ffn=512, expert_ffn=128, experts=8,
                   experts_per_token=2, vocab=1000, name="moe")
MOE_SPARSE_STEP = MOE.replace(layers=4, moe_every=2)  # layers 2 and 4 MoE (decoder_sparse_step=2), 1 and 3 dense
MLA_MOE = Architecture(hidden=256, layers=3, heads=4, head_dim=32, ffn=512, expert_ffn=128, experts=8,
                       experts_per_token=2, shared_experts=1, dense_layers=1, vocab=1000, name="mla",
                       mla=dict(kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
                                q_lora_rank=96))
SHAPES = [DENSE, MOE, MOE_SPARSE_STEP, MLA_MOE]


@pytest.mark.parametrize("arch", SHAPES, ids=lambda a: f"{a.name}-{a.layers}")
def test_round_trip(arch):
    assert architecture_from_hf(hf_config(arch)) == arch


def test_families():
    assert [hf_family(a) for a in SHAPES] == ["llama", "qwen3_moe", "qwen3_moe", "deepseek_v3"]
    assert hf_config(MOE_SPARSE_STEP)["decoder_sparse_step"] == 2
    assert hf_config(MLA_MOE)["first_k_dense_replace"] == 1 and hf_config(MLA_MOE)["n_shared_experts"] == 1


@pytest.mark.parametrize("arch", SHAPES, ids=lambda a: f"{a.name}-{a.layers}")
def test_transformers_builds_it_with_the_predicted_parameter_count(arch):
    cfg = transformers.AutoConfig.for_model(**hf_config(arch))
    assert cfg.hidden_size == arch.hidden and cfg.num_hidden_layers == arch.layers
    assert cfg.rope_parameters["rope_theta"] == arch.rope_theta
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    assert type(model).__name__ == hf_config(arch)["architectures"][0]
    n = sum(p.numel() for p in model.parameters())
    # Qwen3-MoE's q/k RMSNorms (2 * head_dim per layer) are the only weights param_counts leaves out
    assert n == arch.param_counts().total + hf_extra_params(arch)
    assert hf_extra_params(arch) == (2 * arch.head_dim * arch.layers if hf_family(arch) == "qwen3_moe" else 0)


def test_full_size_model_at_one_layer():
    """A Llama-3.1-8B-sized export, built at depth 1 with a small vocabulary (the layer's count is exact)."""
    full = Architecture(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256, rope_theta=500000.0)
    small = full.replace(layers=1, vocab=256)
    cfg = dict(hf_config(full), num_hidden_layers=1, vocab_size=256)
    assert cfg == hf_config(small)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**cfg))
    n = sum(p.numel() for p in model.parameters())
    # one layer: attention 4096*(4096 + 2*1024 + 4096) + FFN 3*4096*14336 + 2 norms; embedding, head, final norm
    assert n == small.param_counts().total == 4096 * 10240 + 3 * 4096 * 14336 + 3 * 4096 + 2 * 256 * 4096
    # scaled back up: 31 more layers and the full vocabulary's embedding and head give the 8B's count
    per_layer = 4096 * 10240 + 3 * 4096 * 14336 + 2 * 4096
    assert n + 31 * per_layer + 2 * (128256 - 256) * 4096 == full.param_counts().total == 8_030_261_248


@pytest.mark.parametrize("change, field", [
    (dict(sliding_window=4096), "sliding_window"),
    (dict(gated_ffn=False), "gated_ffn"),
    (dict(attention_bias=True), "attention_bias"),
])
def test_unexportable_dense_shapes_name_the_field(change, field):
    with pytest.raises(ArchitectureError, match=field):
        hf_config(DENSE.replace(**change))


def test_shared_expert_without_mla_is_refused():
    with pytest.raises(ArchitectureError, match="shared_experts"):
        hf_config(MOE.replace(shared_experts=1))
    with pytest.raises(ArchitectureError, match="head_dim"):
        hf_config(MLA_MOE.replace(head_dim=64))
