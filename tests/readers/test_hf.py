"""HF configs in transformers 4 and 5 spellings: mappings, saved config.json files and PretrainedConfig objects."""

from __future__ import annotations

import json

import pytest
import transformers  # the test extra

from co_design.arch import Architecture, ArchitectureError
from co_design.cli import main
from co_design.readers import architecture_from_config, architecture_from_hf

QWEN3_MOE = dict(model_type="qwen3_moe", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, intermediate_size=128, moe_intermediate_size=32,
                 num_experts_per_tok=2, vocab_size=128)
EXPECTED = Architecture(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128, vocab=128, experts=4,
                        experts_per_token=2, expert_ffn=32, rope_theta=1e6)


@pytest.mark.parametrize("experts_key", ["num_experts", "num_local_experts"])  # transformers 4 / 5 on disk
def test_qwen3_moe_expert_count_under_either_name(experts_key):
    cfg = QWEN3_MOE | {experts_key: 4, "rope_theta": 1e6}
    assert architecture_from_hf(cfg) == EXPECTED


def test_missing_expert_count_names_the_key():
    with pytest.raises(ArchitectureError, match="missing 'num_experts'"):
        architecture_from_hf(QWEN3_MOE)


def test_rope_theta_from_rope_parameters():
    cfg = QWEN3_MOE | {"num_local_experts": 4, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}
    assert architecture_from_hf(cfg) == EXPECTED
    per_kind = {"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}}
    assert architecture_from_hf(QWEN3_MOE | {"num_local_experts": 4, "rope_parameters": per_kind}) == EXPECTED
    with pytest.raises(ArchitectureError, match="rope_parameters.rope_theta must be a number"):
        architecture_from_hf(QWEN3_MOE | {"num_local_experts": 4, "rope_parameters": {"rope_theta": "1e6"}})


def test_deepseek_reads_num_local_experts_alias():
    cfg = dict(model_type="deepseek_v3", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=128, moe_intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
               vocab_size=128, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16)
    assert architecture_from_hf(cfg).experts == 8


def test_transformers5_config_objects_and_files(tmp_path, capsys):
    config = transformers.Qwen3MoeConfig(num_experts=4, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                                         **{k: v for k, v in QWEN3_MOE.items() if k != "model_type"})
    assert architecture_from_hf(config) == EXPECTED  # a PretrainedConfig object
    assert Architecture.from_hf_config(config) == EXPECTED
    assert architecture_from_config(config) == EXPECTED
    config.save_pretrained(tmp_path)  # transformers 5 writes num_local_experts and rope_parameters
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["num_local_experts"] == 4 and "num_experts" not in saved and "rope_theta" not in saved
    assert Architecture.load(tmp_path / "config.json") == EXPECTED
    assert main(["predict", str(tmp_path / "config.json"), "--json", "--no-advice"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == tmp_path.name and out["output_tokens_per_s_per_gpu"] > 0
