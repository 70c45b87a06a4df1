"""`co_design.advise` and `co_design.perf.neighbours`: misalignment facts of public models, the exact
neighbourhood, dominance, the plot."""

import math

import pytest

from co_design import Architecture
from co_design.advise import advise, format_advisory, plot_advisory
from co_design.perf import Deployment, predict, shape_advice
from co_design.perf.neighbours import dominating_neighbours, neighbourhood, params_front

# Public Hugging Face config.json fields (the ones the reader uses), copied from:
# https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
LLAMA_31_8B = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=4096, intermediate_size=14336,
                   num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                   rope_theta=500000.0, tie_word_embeddings=False, hidden_act="silu", head_dim=128,
                   attention_bias=False, mlp_bias=False, max_position_embeddings=131072)
# https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
LLAMA_31_70B = dict(LLAMA_31_8B, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                    num_attention_heads=64)
# https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
QWEN3_30B_A3B = dict(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", hidden_size=2048,
                     intermediate_size=6144, moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
                     num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8, vocab_size=151936,
                     decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, rope_theta=1000000.0,
                     tie_word_embeddings=False, hidden_act="silu", use_sliding_window=False, sliding_window=None,
                     attention_bias=False, max_position_embeddings=40960)
# https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json
GPT_OSS_20B = dict(architectures=["GptOssForCausalLM"], model_type="gpt_oss", hidden_size=2880,
                   intermediate_size=2880, num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8,
                   head_dim=64, num_local_experts=32, num_experts_per_tok=4, experts_per_token=4, vocab_size=201088,
                   sliding_window=128, layer_types=["sliding_attention", "full_attention"] * 12, rope_theta=150000,
                   tie_word_embeddings=False, hidden_act="silu", attention_bias=True)

ALL = -math.inf  # shape_advice's diagnostic mode: every misalignment, whatever its gain


def _facts(cfg, **dep):
    arch = Architecture.from_hf_config(cfg)
    return {(a.dimension, a.value, a.per_gpu_value) for a in shape_advice(arch, "b200", Deployment(**dep), min_gain=ALL)}


class TestPublicModels:
    def test_llama_31_8b_is_aligned_on_one_gpu(self):
        # hidden 4096 = 16*256, head_dim 128, FFN 14336 = 56*256 (= 112*128), vocab 128256 = 501*256: nothing to say
        assert _facts(LLAMA_31_8B) == set()

    def test_llama_31_8b_tp8_vocab_shard(self):
        # FFN 14336 / 8 = 1792 = 7*256 stays aligned; the vocab shard 128256 / 8 = 16032 = 125*128 + 32 does not
        assert _facts(LLAMA_31_8B, tp=8) == {("vocab", 128256, 16032)}
        arch = Architecture.from_hf_config(LLAMA_31_8B)
        (a,) = shape_advice(arch, "b200", Deployment(tp=8), min_gain=ALL)
        assert a.aligned_value in (125 * 128 * 8, 126 * 128 * 8)  # 128000 or 129024
        assert "not a multiple of 128" in a.message

    def test_llama_31_70b(self):
        # FFN 28672 = 112*256, its TP8 shard 3584 = 14*256; only the vocab shard misses, as on the 8B
        assert _facts(LLAMA_31_70B) == set()
        assert _facts(LLAMA_31_70B, tp=8) == {("vocab", 128256, 16032)}

    def test_qwen3_30b_a3b(self):
        # expert FFN 768 = 3*256 is aligned; vocab 151936 = 593*256 + 128 misses a 256-wide tile on B200
        assert _facts(QWEN3_30B_A3B) == {("vocab", 151936, 151936)}
        # TP8 without EP splits each expert 8 ways: 768 / 8 = 96 < 128; vocab 151936 / 8 = 18992 = 148*128 + 48
        assert _facts(QWEN3_30B_A3B, tp=8) == {("vocab", 151936, 18992), ("expert_ffn", 768, 96)}
        # EP8 keeps every expert whole on one GPU: only the vocab shard is left
        assert _facts(QWEN3_30B_A3B, tp=8, ep=8) == {("vocab", 151936, 18992)}

    def test_gpt_oss_20b(self):
        # hidden = expert FFN = 2880 = 22*128 + 64; head_dim 64 < 128; vocab 201088 = 785*256 + 128
        assert _facts(GPT_OSS_20B) == {("hidden", 2880, 2880), ("expert_ffn", 2880, 2880), ("head_dim", 64, 64),
                                       ("vocab", 201088, 201088)}
        # TP8 without EP: each expert's shard 2880 / 8 = 360 = 2*128 + 104
        assert ("expert_ffn", 2880, 360) in _facts(GPT_OSS_20B, tp=8)


class TestNeighbourhood:
    def test_only_the_ffn_varies_counted_by_hand(self):
        # hidden and layers fixed (no steps); one head, so the only KV option is 1 (2 does not divide 1).
        # Params: embedding + lm_head 2*1000*128, attention 4*128*128 per layer, norms (2L+1)*128, FFN 3*128*ffn.
        arch = Architecture(hidden=128, layers=2, heads=1, kv_heads=1, ffn=1024, vocab=1000)
        pc = arch.param_counts().total
        assert pc == 2 * 1000 * 128 + 2 * (4 * 128 * 128) + 5 * 128 + 2 * 3 * 128 * 1024  # 1,174,144
        shapes = neighbourhood(arch, budget_pct=0.25, hidden_steps=0, layer_steps=0)
        # one FFN step of 128 adds 2 layers * 3 * 128 * 128 = 98,304 params; ±25 % = ±293,536 = ±2.99 steps -> ±2
        assert sorted(s.ffn for s in shapes) == [768, 896, 1152, 1280]
        assert all(s.hidden == 128 and s.layers == 2 for s in shapes)

    def test_every_neighbour_in_the_band_and_aligned(self):
        arch = Architecture.from_hf_config(LLAMA_31_8B)
        total = arch.param_counts().total
        shapes = neighbourhood(arch, tp=2, budget_pct=0.05)
        assert shapes and arch not in shapes
        for s in shapes:
            assert abs(s.param_counts().total / total - 1) <= 0.05
            assert s.ffn % 256 == 0 and s.hidden % 128 == 0  # FFN step 128 * tp
            assert s.head_dim == 128 and s.heads * 128 == s.hidden  # heads scale with hidden
            assert s.kv_heads in (4, 8, 16) and abs(s.layers - 32) <= 4
        assert len({(s.hidden, s.layers, s.kv_heads, s.ffn) for s in shapes}) == len(shapes)

    def test_budget_is_checked(self):
        arch = Architecture.from_hf_config(LLAMA_31_8B)
        with pytest.raises(ValueError, match="budget_pct"):
            neighbourhood(arch, budget_pct=10)


class TestDominance:
    def test_dominating_neighbours_beat_the_model_at_its_batch(self):
        arch = Architecture.from_hf_config(LLAMA_31_8B)
        base, kept, scored = dominating_neighbours(arch, "b200", Deployment(tp=8))
        assert scored >= len(kept) > 0
        dep = Deployment(tp=8, concurrency=base.batch)
        for n in kept:
            again = predict(n.arch, "b200", dep)  # the same numbers as a fresh prediction
            assert again.output_tokens_per_s_per_gpu == n.prediction.output_tokens_per_s_per_gpu
            assert again.fits
            assert again.output_tokens_per_s_per_gpu > base.output_tokens_per_s_per_gpu
            assert again.output_tokens_per_s_per_user > base.output_tokens_per_s_per_user
        front = params_front(kept)
        totals = [n.arch.param_counts().total for n in front]
        speeds = [n.prediction.output_tokens_per_s_per_gpu for n in front]
        assert totals == sorted(totals, reverse=True) and speeds == sorted(speeds)  # more params, slower
        assert max(speeds) == max(n.prediction.output_tokens_per_s_per_gpu for n in kept)

    def test_nothing_dominates_the_fastest_neighbour(self):
        # the fastest dominating shape, advised on in turn at the same load, leaves none of the same neighbours ahead
        arch = Architecture.from_hf_config(LLAMA_31_8B)
        dep = Deployment(tp=8)
        base, kept, _ = dominating_neighbours(arch, "b200", dep)
        best = kept[0]
        _, kept2, _ = dominating_neighbours(best.arch, "b200", dep.replace(concurrency=base.batch))
        beat = {(n.arch.hidden, n.arch.layers, n.arch.kv_heads, n.arch.ffn) for n in kept2}
        assert not beat & {(n.arch.hidden, n.arch.layers, n.arch.kv_heads, n.arch.ffn) for n in kept}


def test_advise_report_json_and_plot(tmp_path):
    arch = Architecture.from_hf_config(QWEN3_30B_A3B, name="qwen3-30b-a3b")
    adv = advise(arch, "b200", Deployment(tp=8, ep=8))
    d = adv.to_dict()
    assert d["params_total"] == arch.param_counts().total
    assert {m["dimension"] for m in d["misalignments"]} == {"vocab"}
    assert d["neighbours_scored"] == adv.scored and len(d["dominating"]) == len(adv.neighbours)
    for n in d["dominating"]:
        assert abs(n["params_change"]) <= 0.10 and n["throughput_gain"] > 0 and n["interactivity_gain"] > 0
    text = format_advisory(adv)
    assert "vocab=151936 (18992 per GPU, 8-way split) is not a multiple of 128" in text
    html = plot_advisory(adv, tmp_path / "plot.html")
    page = html.read_text()  # plotly writes the figure as JSON ("/" escaped as \u002f)
    assert f'"name":"qwen3-30b-a3b (batch {adv.prediction.batch})"' in page
    assert '"name":"qwen3-30b-a3b over concurrency"' in page and "output tokens\\u002fs per user" in page
    with pytest.raises(ValueError, match=".html or .png"):
        plot_advisory(adv, tmp_path / "plot.svg")


def test_advise_and_export_import_without_torch():
    import subprocess
    import sys

    code = ("import sys, co_design.advise, co_design.export, co_design.perf.neighbours; "
            "print(' '.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split())
    assert not {"torch", "numpy", "transformers"} & loaded
