"""Architecture: validation, parameter counts against published totals, HF loading."""

import json

import pytest

from co_design.arch import MLA, Architecture, ArchitectureError

LLAMA3_8B = dict(
    model_type="llama", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, intermediate_size=14336, vocab_size=128256, rope_theta=500000.0,
    tie_word_embeddings=False, hidden_act="silu",
)
MIXTRAL_8X7B = dict(
    model_type="mixtral", hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
    num_key_value_heads=8, intermediate_size=14336, vocab_size=32000, num_local_experts=8,
    num_experts_per_tok=2, sliding_window=None,
)
DEEPSEEK_V3 = dict(
    model_type="deepseek_v3", hidden_size=7168, num_hidden_layers=61, num_attention_heads=128,
    num_key_value_heads=128, intermediate_size=18432, vocab_size=129280, n_routed_experts=256,
    num_experts_per_tok=8, n_shared_experts=1, moe_intermediate_size=2048, first_k_dense_replace=3,
    moe_layer_freq=1, kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128, qk_rope_head_dim=64,
    v_head_dim=128,
)
QWEN3_30B_A3B = dict(
    model_type="qwen3_moe", hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
    num_key_value_heads=4, head_dim=128, intermediate_size=6144, vocab_size=151936, num_experts=128,
    num_experts_per_tok=8, moe_intermediate_size=768, decoder_sparse_step=1, mlp_only_layers=[],
    tie_word_embeddings=False,
)
GPT_OSS_120B = dict(
    model_type="gpt_oss", hidden_size=2880, num_hidden_layers=36, num_attention_heads=64,
    num_key_value_heads=8, head_dim=64, intermediate_size=2880, vocab_size=201088,
    num_local_experts=128, num_experts_per_tok=4, experts_per_token=4, sliding_window=128,
    layer_types=["sliding_attention", "full_attention"] * 18, tie_word_embeddings=False,
)
LLAMA4_MAVERICK = dict(
    model_type="llama4",
    text_config=dict(
        model_type="llama4_text", hidden_size=5120, num_hidden_layers=48, num_attention_heads=40,
        num_key_value_heads=8, head_dim=128, intermediate_size=8192, intermediate_size_mlp=16384,
        vocab_size=202048, num_local_experts=128, num_experts_per_tok=1, interleave_moe_layer_step=2,
        attention_chunk_size=8192,
    ),
)


@pytest.mark.parametrize(
    "config, total_b, active_b",
    [
        # Published sizes: Llama 3.1 8B = 8.03B; Mixtral 8x7B = 46.7B total / 12.9B active;
        # DeepSeek-V3 = 671B / 37B (without the 14B MTP module); Qwen3-30B-A3B = 30.5B / 3.3B;
        # gpt-oss-120b = 116.8B / 5.1B; Llama-4 Maverick = 400B / 17B.
        (LLAMA3_8B, 8.03, 8.03),
        (MIXTRAL_8X7B, 46.7, 12.9),
        (DEEPSEEK_V3, 671.0, 37.5),
        (QWEN3_30B_A3B, 30.5, 3.35),
        (GPT_OSS_120B, 116.8, 5.7),  # model card's 5.1B active leaves out the 0.58B embedding
        (LLAMA4_MAVERICK, 400.7, 17.2),
    ],
)
def test_param_counts_match_published_totals(config, total_b, active_b):
    counts = Architecture.from_hf_config(config).param_counts()
    assert counts.total / 1e9 == pytest.approx(total_b, rel=0.012)
    assert counts.active / 1e9 == pytest.approx(active_b, rel=0.03)


def test_param_counts_by_hand_one_layer():
    a = Architecture(hidden=8, layers=1, heads=2, kv_heads=1, ffn=16, vocab=10)
    # embed 80, lm_head 80, q 8*8, k/v 2*8*4, o 8*8 -> 192, SwiGLU 3*8*16 = 384, norms 3*8.
    c = a.param_counts()
    assert (c.embedding, c.lm_head, c.attention, c.dense_ffn, c.norms) == (80, 80, 192, 384, 24)
    assert c.total == c.active == 80 + 80 + 192 + 384 + 24


def test_moe_layer_layout():
    a = Architecture(hidden=64, layers=6, heads=4, ffn=128, vocab=32, experts=4, experts_per_token=2,
                     dense_layers=2, moe_every=2)
    assert [a.layer_is_moe(i) for i in range(6)] == [False, False, False, True, False, True]
    assert a.moe_layers == 2


def test_layer_windows_follow_pattern():
    a = Architecture.from_hf_config(GPT_OSS_120B)
    assert a.sliding_window == 128 and a.full_attention_every == 2
    assert [a.layer_window(i) for i in range(4)] == [128, None, 128, None]
    m = Architecture.from_hf_config(LLAMA4_MAVERICK)
    assert [m.layer_window(i) for i in range(4)] == [8192, 8192, 8192, None]
    assert [m.layer_is_moe(i) for i in range(4)] == [False, True, False, True]


def test_mla_kv_cache_is_latent():
    a = Architecture.from_hf_config(DEEPSEEK_V3)
    assert isinstance(a.mla, MLA)
    assert a.kv_cache_per_token_per_layer == 512 + 64
    plain = Architecture.from_hf_config(LLAMA3_8B)
    assert plain.kv_cache_per_token_per_layer == 2 * 8 * 128


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(heads=0), "heads must be >= 1"),
        (dict(heads=3), "heads=3 does not divide hidden=64"),
        (dict(kv_heads=3), "kv_heads=3 must divide heads=4"),
        (dict(experts=4, experts_per_token=5), "experts_per_token=5 must be between 1 and experts=4"),
        (dict(experts_per_token=2), "need experts > 0"),
        (dict(hidden=64.0), "hidden must be an integer"),
        (dict(experts=4, experts_per_token=1, dense_layers=2), "dense_layers=2 leaves no MoE layer"),
    ],
)
def test_nonsense_is_rejected_with_the_value(kwargs, message):
    base = dict(hidden=64, layers=2, heads=4, ffn=128, vocab=32)
    with pytest.raises(ArchitectureError, match=message):
        Architecture(**{**base, **kwargs})


def test_explicit_head_dim_allows_heads_times_head_dim_other_than_hidden():
    a = Architecture.from_hf_config(QWEN3_30B_A3B)
    assert a.heads * a.head_dim == 4096 != a.hidden


def test_hf_missing_field_is_named():
    cfg = dict(LLAMA3_8B)
    del cfg["intermediate_size"]
    with pytest.raises(ArchitectureError, match="missing 'intermediate_size'"):
        Architecture.from_hf_config(cfg)


def test_yaml_round_trip_and_unknown_key(tmp_path):
    a = Architecture.from_hf_config(DEEPSEEK_V3)
    import yaml

    p = tmp_path / "ds.yaml"
    p.write_text(yaml.safe_dump(a.to_dict()))
    assert Architecture.load(p) == a
    p.write_text("hidden: 64\nlayers: 2\nheads: 4\nffn: 128\nvocab: 32\nhiden: 3\n")
    with pytest.raises(ArchitectureError, match=r"unknown architecture field\(s\) \['hiden'\]"):
        Architecture.load(p)


def test_load_hf_config_json(tmp_path):
    d = tmp_path / "Llama-3.1-8B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA3_8B))
    a = Architecture.load(d / "config.json")
    assert a.name == "Llama-3.1-8B" and a.kv_heads == 8 and a.head_dim == 128


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ArchitectureError, match="does not exist"):
        Architecture.load(tmp_path / "nope.yaml")
