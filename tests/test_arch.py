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


# --------------------------------------------------------------------------- layer kinds in closed form
def _layer_kinds_by_loop(a):
    counts = {}
    for i in range(a.layers):
        key = (a.layer_is_moe(i), a.layer_window(i))
        counts[key] = counts.get(key, 0) + 1
    return tuple((moe, w, c) for (moe, w), c in counts.items())


def test_layer_kinds_closed_form_matches_the_per_layer_loop():
    # every layout of up to 12 layers: dense and MoE, leading dense layers (also more than layers for a dense
    # model), MoE every 1..5 layers, no window / windows with full attention every 0..6 layers
    checked = 0
    for layers in range(1, 13):
        for experts, dense_range in ((0, range(0, layers + 2)), (4, range(0, layers))):
            for d in dense_range:
                for m in range(1, 6):
                    for window, fulls in ((None, (0,)), (16, range(0, 7))):
                        for f in fulls:
                            a = Architecture(hidden=64, layers=layers, heads=4, ffn=64, vocab=32, experts=experts,
                                             experts_per_token=2 if experts else 0, dense_layers=d, moe_every=m,
                                             sliding_window=window, full_attention_every=f)
                            # same kinds, same counts, same order (the op table lists kinds as layers meet them)
                            assert a.layer_kinds() == _layer_kinds_by_loop(a), (layers, experts, d, m, window, f)
                            assert a.moe_layers == sum(a.layer_is_moe(i) for i in range(layers))
                            checked += 1
    assert checked > 5000


def test_layer_kinds_of_published_layouts():
    # gpt-oss: sliding and full alternate; Llama-4 Maverick (48 layers): MoE every 2nd layer, full attention
    # every 4th, so the 12 full layers are all MoE and the 24 dense ones all chunked
    assert Architecture.from_hf_config(GPT_OSS_120B).layer_kinds() == ((True, 128, 18), (True, None, 18))
    assert Architecture.from_hf_config(LLAMA4_MAVERICK).layer_kinds() == (
        (False, 8192, 24), (True, 8192, 12), (True, None, 12))
    assert Architecture.from_hf_config(DEEPSEEK_V3).layer_kinds() == ((False, None, 3), (True, None, 58))


def test_layer_kinds_cost_nothing_at_the_layer_limit():
    from co_design.perf.ops import layer_kinds

    a = Architecture(hidden=64, layers=2**16, heads=4, ffn=64, vocab=32, experts=8, experts_per_token=2,
                     dense_layers=3, moe_every=7, sliding_window=128, full_attention_every=5)
    kinds = layer_kinds(a, 3)  # per stage of 3: ceil(65536 / 3) / 65536 of each kind
    assert sum(c for _, _, c in kinds) == pytest.approx(21846)
    assert [(moe, w) for moe, w, _ in kinds] == [(False, 128), (False, None), (True, None), (True, 128)]


# --------------------------------------------------------------------------- bad input: one line naming the field
BASE = dict(hidden=64, layers=2, heads=4, ffn=128, vocab=32)
MOE = dict(BASE, experts=4, experts_per_token=2)
MLA_OK = dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)
LLAMA = dict(model_type="llama", hidden_size=1024, num_hidden_layers=4, num_attention_heads=8,
             intermediate_size=4096, vocab_size=32000)
BASE_YAML = "hidden: 64\nlayers: 2\nheads: 4\nffn: 128\nvocab: 32\n"


def hf(base=LLAMA, **changes):
    """config.json text of ``base`` with ``changes``."""
    return json.dumps(dict(base, **changes))

# (what is wrong, Architecture keyword arguments, fragment of the message)
BAD_KWARGS = [
    ("bool field as the string 'false'", dict(BASE, gated_ffn="false"), "gated_ffn must be true or false"),
    ("bool field as a number", dict(BASE, tied_embeddings=1), "tied_embeddings must be true or false"),
    ("bool field as 'yes'", dict(BASE, attention_bias="yes"), "attention_bias must be true or false"),
    ("rope_theta a word", dict(BASE, rope_theta="big"), "rope_theta must be a finite number > 0"),
    ("rope_theta NaN", dict(BASE, rope_theta=float("nan")), "rope_theta must be a finite number > 0"),
    ("rope_theta zero", dict(BASE, rope_theta=0), "rope_theta must be a finite number > 0"),
    ("mla a number", dict(BASE, mla=5), "mla must be a mapping of MLA fields"),
    ("mla missing fields", dict(BASE, mla=dict(kv_lora_rank=16)),
     "mla is missing required field(s) ['qk_nope_head_dim'"),
    ("mla unknown field", dict(BASE, mla=dict(MLA_OK, rank=4)), "unknown mla field(s) ['rank']"),
    ("mla size zero", dict(BASE, mla=dict(MLA_OK, kv_lora_rank=0)), "mla.kv_lora_rank must be >= 1"),
    ("float size", dict(BASE, hidden=4096.5), "hidden must be an integer, got 4096.5"),
    ("negative size", dict(BASE, ffn=-128), "ffn must be >= 1, got -128"),
    ("zero layers", dict(BASE, layers=0), "layers must be >= 1"),
    ("10**12 layers (hung the op table)", dict(BASE, layers=10**12), "use layers <= 65,536"),
    ("vocab past any float", dict(BASE, vocab=10**400), "use vocab <= 16,777,216"),
    ("kv_heads not dividing heads", dict(BASE, kv_heads=3), "kv_heads=3 must divide heads=4"),
    ("head_dim zero", dict(BASE, head_dim=0), "head_dim must be >= 1"),
    ("heads not dividing hidden", dict(BASE, heads=3), "heads=3 does not divide hidden=64"),
    ("top-k above experts", dict(MOE, experts_per_token=5), "experts_per_token=5 must be between 1 and experts=4"),
    ("top-k zero", dict(MOE, experts_per_token=0), "experts_per_token=0 must be between 1 and experts=4"),
    ("shared experts without experts", dict(BASE, shared_experts=1),
     "experts_per_token and shared_experts need experts > 0"),
    ("moe_every zero", dict(MOE, moe_every=0), "moe_every must be >= 1"),
    ("no MoE layer left", dict(MOE, dense_layers=2), "dense_layers=2 leaves no MoE layer among layers=2"),
    ("expert_ffn zero", dict(MOE, expert_ffn=0), "expert_ffn must be >= 1"),
    ("sliding window zero", dict(BASE, sliding_window=0), "sliding_window must be >= 1"),
    ("negative full_attention_every", dict(BASE, full_attention_every=-1), "full_attention_every must be >= 0"),
    ("name a number", dict(BASE, name=5), "name must be a string"),
]


@pytest.mark.parametrize("what, kwargs, fragment", BAD_KWARGS, ids=[c[0] for c in BAD_KWARGS])
def test_bad_architecture_is_one_line_naming_the_field(what, kwargs, fragment):
    with pytest.raises(ArchitectureError) as err:
        Architecture(**kwargs)
    assert fragment in str(err.value) and "\n" not in str(err.value)


# (what is wrong, file name, file text, fragment of the message)
BAD_FILES = [
    # project JSON and YAML
    ("empty JSON", "m.json", "", "the file is empty"),
    ("empty YAML", "m.yaml", "\n# nothing\n", "the file is empty"),
    ("JSON list", "m.json", "[1, 2]", "expected a mapping of architecture fields"),
    ("YAML list", "m.yaml", "- 1\n- 2\n", "expected a mapping of architecture fields"),
    ("YAML string", "m.yaml", "just words\n", "got a str"),
    ("truncated JSON", "m.json", '{"hidden": 64,', "not valid JSON"),
    ("unclosed YAML list", "m.yaml", BASE_YAML + "mla: [1\n", "not valid YAML (expected ',' or ']'"),
    ("bad YAML indent", "m.yaml", "hidden: 64\n  layers: 2\n",
     "not valid YAML (mapping values are not allowed here at line 2"),
    ("duplicate JSON key", "m.json", '{"hidden": 64, "hidden": 4096}', "key 'hidden' appears twice"),
    ("duplicate YAML key", "m.yaml", BASE_YAML + "hidden: 4096\n", "key 'hidden' appears twice (again at line 6)"),
    ("JSON bool as string", "m.json", json.dumps(dict(BASE, gated_ffn="false")), "gated_ffn must be true or false"),
    ("YAML bool as string", "m.yaml", BASE_YAML + 'gated_ffn: "false"\n', "gated_ffn must be true or false"),
    ("YAML mla a number", "m.yaml", BASE_YAML + "mla: 5\n", "mla must be a mapping"),
    ("YAML rope_theta a word", "m.yaml", BASE_YAML + "rope_theta: big\n", "rope_theta must be a finite number"),
    ("YAML float written 1e3", "m.yaml", BASE_YAML.replace("hidden: 64", "hidden: 1e3"),
     "hidden must be an integer, got '1e3'"),
    ("YAML key typo", "m.yaml", BASE_YAML + "hiden: 3\n", "unknown architecture field(s) ['hiden']"),
    ("YAML non-string keys", "m.yaml", BASE_YAML + "1: 2\nx: 3\n", "unknown architecture field(s) [1, 'x']"),
    ("missing required field", "m.json", json.dumps({k: v for k, v in BASE.items() if k != "vocab"}),
     "missing required field(s) ['vocab']"),
    # HF config.json
    ("HF bool as string", "config.json", hf(tie_word_embeddings="false"),
     "tie_word_embeddings must be true or false"),
    ("HF bool as number", "config.json", hf(attention_bias=0), "attention_bias must be true or false"),
    ("HF use_sliding_window a string", "config.json", hf(sliding_window=64, use_sliding_window="no"),
     "use_sliding_window must be true or false"),
    ("HF rope_theta a word", "config.json", hf(rope_theta="big"), "rope_theta must be a number"),
    ("HF rope_theta NaN", "config.json", hf(rope_theta=float("nan")), "rope_theta must be a finite number"),
    ("HF float size", "config.json", hf(hidden_size=4096.5), "hidden_size must be an integer >= 1"),
    ("HF zero layers", "config.json", hf(num_hidden_layers=0), "num_hidden_layers must be an integer >= 1"),
    ("HF 10**12 layers", "config.json", hf(num_hidden_layers=10**12),
     "use layers <= 65,536 (HF keys: layers is num_hidden_layers)"),
    ("HF kv heads not dividing heads", "config.json", hf(num_key_value_heads=3),
     "kv_heads is num_key_value_heads"),
    ("HF head_dim a string", "config.json", hf(head_dim="128"), "head_dim must be an integer"),
    ("HF hidden_act a number", "config.json", hf(hidden_act=5), "hidden_act must be a string"),
    ("HF missing key", "config.json", json.dumps({k: v for k, v in LLAMA.items() if k != "vocab_size"}),
     "missing 'vocab_size'"),
    ("HF model_type a number", "config.json", hf(model_type=5), "model_type=5 is not a supported"),
    ("HF text_config a number", "config.json", hf(text_config=5), "text_config must be an object"),
    ("HF layer_types a number", "config.json", hf(sliding_window=64, layer_types=5),
     "layer_types must be a list of strings"),
    ("HF layer_types too short", "config.json",
     hf(sliding_window=64, layer_types=["sliding_attention", "full_attention"]),
     "layer_types has 2 entries but num_hidden_layers=4"),
    ("HF top-k above experts", "config.json", hf(MIXTRAL_8X7B, num_experts_per_tok=16),
     "experts_per_token=16 must be between 1 and experts=8"),
    ("HF MLA rank a string", "config.json", hf(DEEPSEEK_V3, kv_lora_rank="512"),
     "kv_lora_rank must be an integer"),
]


@pytest.mark.parametrize("what, filename, text, fragment", BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_model_file_is_one_line_naming_the_field(tmp_path, what, filename, text, fragment):
    p = tmp_path / filename
    p.write_text(text)
    with pytest.raises(ArchitectureError) as err:
        Architecture.load(p)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_binary_file_is_named(tmp_path):
    p = tmp_path / "weights.json"
    p.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ArchitectureError, match="weights.json: not a UTF-8 text file"):
        Architecture.load(p)


def test_accepted_on_purpose(tmp_path):
    # YAML 1.1 booleans (yes/no/on/off) are booleans to PyYAML, so they are accepted as such
    p = tmp_path / "m.yaml"
    p.write_text(BASE_YAML + "gated_ffn: no\nkv_heads: null\nrope_theta: 500000\n")
    a = Architecture.load(p)
    assert a.gated_ffn is False and a.kv_heads == 4 and a.rope_theta == 500000.0
    # an HF config's keys that are not HF keys (our field names among them) are ignored, as transformers does;
    # a null or zero sliding_window means no window, as in Mixtral and Qwen2 configs
    hf = Architecture.from_hf_config(dict(LLAMA, gated_ffn="false", sliding_window=None))
    assert hf.gated_ffn is True and hf.sliding_window is None
    # YAML merge keys are not duplicates
    p.write_text("defaults: &d {hidden: 64}\n" + BASE_YAML)
    with pytest.raises(ArchitectureError, match=r"unknown architecture field\(s\) \['defaults'\]"):
        Architecture.load(p)


def test_load_litgpt_model_config_yaml(tmp_path):
    # the model_config.yaml litgpt writes beside a checkpoint (Llama-style, n_head=4, n_query_groups=2, head_size=64)
    path = tmp_path / "model_config.yaml"
    path.write_text(
        "name: tiny-llama\nn_embd: 128\nn_layer: 3\nn_head: 4\nn_query_groups: 2\nhead_size: 64\n"
        "intermediate_size: 384\nmlp_class_name: LLaMAMLP\npadded_vocab_size: 512\nvocab_size: 500\n"
        "bias: false\nrope_base: 500000\n"
    )
    arch = Architecture.load(path)
    assert (arch.hidden, arch.layers, arch.heads, arch.kv_heads, arch.head_dim, arch.ffn, arch.vocab) == (
        128, 3, 4, 2, 64, 384, 512)
    assert arch.gated_ffn and not arch.tied_embeddings and arch.rope_theta == 500000 and arch.name == "tiny-llama"


def test_load_torchtitan_model_args_json(tmp_path):
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"dim": 256, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 1024,
                                "multiple_of": 256, "ffn_dim_multiplier": None, "rope_theta": 10000}))
    arch = Architecture.load(path)
    assert (arch.hidden, arch.layers, arch.heads, arch.kv_heads, arch.vocab) == (256, 2, 4, 2, 1024)
    assert arch.ffn == 768  # torchtitan's Llama rule: 256 * ceil(int(2 * 4 * 256 / 3) / 256)
    assert arch.name == "args"
