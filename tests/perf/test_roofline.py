"""The roofline function, precisions, tile/wave quantization and a one-layer table done on paper."""

import math

import numpy as np
import pytest

from co_design.arch import MLA, Architecture
from co_design.hardware import get_gpu
from co_design.perf import Deployment, Runtime
from co_design.perf.ops import (attended_pairs, busiest_rank_experts, busiest_rank_load, expected_experts_touched,
                                expected_max_normal, ranks_per_token, step_ops)
from co_design.perf.roofline import bytes_per_element, gemm, math_precision, roofline, tile_wave

IDEAL = Runtime(compute_efficiency=1.0, bandwidth_efficiency=1.0, grouped_gemm_efficiency=1.0,
                grouped_gemm_bandwidth_efficiency=1.0, iteration_overhead_s=0.0,
                request_overhead_s=0.0, moe_expert_load_cv=0.0)


def test_roofline_is_max_plus_overhead():
    assert roofline(2.0, 1.0, 0.5) == (2.5, "compute")
    assert roofline(1.0, 3.0) == (3.0, "memory")


def test_bytes_per_element():
    assert bytes_per_element("nvfp4") == 0.5625  # 4 bits + one 8-bit scale per 16 elements
    assert bytes_per_element("fp8") == 1.0 and bytes_per_element("bf16") == 2.0
    with pytest.raises(ValueError, match="fp16"):
        bytes_per_element("fp16")


def test_math_precision_rule():
    b200, h100 = get_gpu("b200"), get_gpu("h100")
    assert math_precision("nvfp4", "bf16", b200) == "bf16"  # W4A16 at bf16 rate
    assert math_precision("nvfp4", "nvfp4", b200) == "nvfp4"  # W4A4 at fp4 rate
    assert math_precision("nvfp4", "fp8", b200) == "fp8"  # W4A8 at fp8 rate
    with pytest.raises(ValueError, match="GPU 'h100' has no nvfp4 tensor-core rate"):  # refused, never run as fp8
        math_precision("nvfp4", "nvfp4", h100)


def test_tile_wave_counts():
    # 300 x 300 output in 128 x 128 tiles: 3 x 3 = 9 tiles, one wave on 148 SMs
    tiles, waves, t_eff, w_eff = tile_wave(300, 300, 128, 128, 148)
    assert (tiles, waves) == (9, 1)
    assert t_eff == pytest.approx(300 * 300 / (9 * 128 * 128))
    assert w_eff == pytest.approx(9 / 148)
    assert tile_wave(128, 128 * 148, 128, 128, 148)[1] == 1
    assert tile_wave(128, 128 * 148 + 1, 128, 128, 148)[1] == 2
    assert tile_wave(256, 256 * 74, 256, 256, 148, sms_per_tile=2)[1] == 1  # 2-SM tiles: 74 per wave


@pytest.mark.parametrize("name", ["b200", "b300", "h100"])
def test_wave_step_exactly_at_one_tile_past_a_full_wave(name):
    g = get_gpu(name).replace(gemm_tiles=((128, 128, 1),), stream_k=False)
    k = 16384  # long K: compute-bound
    full = 128 * g.sms
    t = [gemm(g, 128, n, k, weights="bf16", activations="bf16", split_k=False) for n in (full - 128, full, full + 1)]
    assert t[0].compute_s == pytest.approx(t[1].compute_s)  # still one wave
    assert t[2].compute_s == pytest.approx(2 * t[1].compute_s)  # one tile over: a second wave
    assert t[2].wave_efficiency == pytest.approx((g.sms + 1) / (2 * g.sms))
    one_wave = 2 * 128 * 128 * k / (g.peak_flops_per_s["bf16"] * g.gemm_efficiency / g.sms)
    assert t[1].compute_s == pytest.approx(one_wave)


def test_tile_padding_on_m():
    g = get_gpu("b200").replace(gemm_tiles=((128, 128, 1),), stream_k=False)
    a = gemm(g, 128, 128 * 100, 8192, weights="bf16", activations="bf16", split_k=False)
    b = gemm(g, 129, 128 * 100, 8192, weights="bf16", activations="bf16", split_k=False)
    assert b.compute_s == pytest.approx(2 * a.compute_s)  # 129 rows pay two row tiles: 200 tiles, 2 waves
    assert b.tile_efficiency == pytest.approx(129 / 256)


def test_gemm_bytes_by_precision():
    g = get_gpu("b200").replace(gemm_tiles=((128, 128, 1),), stream_k=False)
    m, n, k = 16, 4096, 4096
    c = gemm(g, m, n, k, weights="nvfp4", activations="fp8", split_k=False)
    assert c.flops == 2 * m * n * k
    assert c.bytes == pytest.approx(n * k * 0.5625 + m * k * 1.0 + m * n * 2.0)
    # 32 tiles of 128x128 leave most of 148 SMs idle; split-K fills them and turns the GEMM memory-bound
    s = gemm(g, m, n, k, weights="nvfp4", activations="fp8")
    assert s.tile[2] > 1 and s.bound == "memory" and s.time_s < c.time_s


def test_expected_experts_touched():
    assert expected_experts_touched(128, 8, 1) == pytest.approx(8)
    assert expected_experts_touched(4, 1, 2) == pytest.approx(4 * (1 - 0.75**2))
    assert expected_experts_touched(128, 8, 2048) == pytest.approx(128, rel=1e-6)


def test_attended_pairs():
    assert attended_pairs(4, None) == 10  # 1+2+3+4
    assert attended_pairs(5, 2) == 1 + 2 + 2 + 2 + 2


def test_one_layer_prefill_table_on_paper():
    # one dense layer, MHA, hidden 1024, 8 heads of 128, ffn 4096 (SwiGLU), vocab 1024, bf16 everywhere
    arch = Architecture(hidden=1024, layers=1, heads=8, ffn=4096, vocab=1024, name="paper")
    dep = Deployment(weights="bf16", activations="bf16", kv_cache="bf16", runtime=IDEAL)
    L = 512  # one prompt of 512 tokens
    ops = {o.name: o for o in step_ops(arch, get_gpu("b200"), dep, decode=0, context=0, prefill_tokens=L,
                                       prefill_len=L, phase="prefill")}
    assert ops["qkv_proj"].shape == (512, 3 * 1024, 1024)
    assert ops["qkv_proj"].flops == 2 * 512 * 3072 * 1024
    assert ops["qkv_proj"].bytes == 2 * (3072 * 1024 + 512 * 1024 + 512 * 3072)
    assert ops["o_proj"].flops == 2 * 512 * 1024 * 1024
    assert ops["gate_up_proj"].flops == 2 * 512 * (2 * 4096) * 1024
    assert ops["down_proj"].flops == 2 * 512 * 1024 * 4096
    # causal attention: QK^T and PV, 2 FLOPs per MAC, 8 heads x 128 dims, L(L+1)/2 pairs
    assert ops["attention_prefill"].flops == pytest.approx(2 * 8 * (128 + 128) * L * (L + 1) / 2)
    # lm_head on the one sequence that finishes its prompt
    assert ops["lm_head"].flops == 2 * 1 * 1024 * 1024
    assert "attention_decode" not in ops and "attn_all_reduce" not in ops
    total_gemm_flops = sum(o.flops for o in ops.values() if o.kind == "gemm")
    assert total_gemm_flops == 2 * 512 * (3072 * 1024 + 1024 * 1024 + 3 * 4096 * 1024) + 2 * 1024 * 1024


def test_decode_kv_read_bytes_on_paper():
    arch = Architecture(hidden=1024, layers=2, heads=8, kv_heads=2, ffn=4096, vocab=1024)
    dep = Deployment(weights="fp8", activations="fp8", kv_cache="fp8", runtime=IDEAL)
    ops = {o.name: o for o in step_ops(arch, get_gpu("h100"), dep, decode=4, context=1000, prefill_tokens=0,
                                       prefill_len=1)}
    att = ops["attention_decode"]
    kv = 4 * 1000 * (2 * 2 * 128) * 1.0  # sequences x cached tokens x (K+V of 2 heads x 128) x 1 B
    q_o = 4 * 8 * 256 * 2.0
    new_kv = 4 * (2 * 2 * 128) * (2.0 + 1.0)  # each sequence's new K and V: read in bf16, written to the fp8 cache
    assert att.bytes == pytest.approx(2 * (kv + q_o + new_kv))  # two layers
    assert att.bound == "memory"


@pytest.mark.parametrize("mla", [False, True], ids=["gqa", "mla"])
def test_prompt_and_decode_attention_kernels_each_take_their_own_fraction(mla):
    # a step with a prompt chunk beside decode tokens: halving one kernel's fraction doubles that kernel's time
    # past its launch overhead (both its FLOP and its HBM rate halve) and leaves every other op as it was
    from co_design.arch import MLA

    extra = dict(mla=MLA(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)) if mla else \
        dict(kv_heads=2)
    arch = Architecture(hidden=2048, layers=2, heads=16, ffn=4096, vocab=32000, **extra)
    gpu = get_gpu("b200")

    def table(**fractions):
        rt = Runtime(**{**IDEAL.to_dict(), "attention_efficiency": 0.8, "decode_attention_efficiency": 0.8,
                        **fractions})
        dep = Deployment(weights="fp8", activations="fp8", kv_cache="fp8", runtime=rt)
        return {o.name: o for o in step_ops(arch, gpu, dep, decode=16, context=4096, prefill_tokens=2048,
                                            prefill_len=2048)}

    base = table()
    launch = 2 * (gpu.kernel_overhead_s + IDEAL.kernel_gap_s)  # two layers, one kernel each
    for field, kernel in (("attention_efficiency", "attention_prefill"),
                          ("decode_attention_efficiency", "attention_decode")):
        slow = table(**{field: 0.4})
        assert slow[kernel].time_s - launch == pytest.approx(2 * (base[kernel].time_s - launch), rel=1e-12), field
        assert {k: o.time_s for k, o in slow.items() if k != kernel} == \
            {k: o.time_s for k, o in base.items() if k != kernel}, field
    with pytest.raises(ValueError, match="decode_attention_efficiency must be in"):
        Runtime(decode_attention_efficiency=0.0)


def _prompt_attention_rate(arch, gpu, kv, length):
    """FLOP/s of ``arch``'s prompt attention kernel for one compute-bound prompt of ``length`` tokens over a ``kv``
    cache on ``gpu`` (FP8 weights and activations, an idealized runtime with the kernel's own fraction at 1):
    time = FLOPs / rate + one launch."""
    rt = Runtime(**{**IDEAL.to_dict(), "attention_efficiency": 1.0})
    dep = Deployment(weights="fp8", activations="fp8", kv_cache=kv, runtime=rt)
    att = {o.name: o for o in step_ops(arch, gpu, dep, decode=0, context=0, prefill_tokens=length,
                                       prefill_len=length, phase="prefill")}["attention_prefill"]
    assert att.bound == "compute"
    return att.flops / (att.time_s - gpu.kernel_overhead_s - IDEAL.kernel_gap_s)


def test_prefill_attention_follows_the_gpus_published_kernel_law():
    """The prompt attention kernel runs at the GPU's ``prefill_attention`` law for its precision: a long prompt near
    the law's fraction of that precision's peak, a short one lower by the per-query-tile overhead; the FP8 context
    FMHA (an FP8 KV cache) at the law's fp8 entry, not at twice the bf16 rate; a GPU without an entry at its flat
    ``attention_efficiency``. Compute-bound prompts, so time = FLOPs / rate (+ one launch per layer)."""
    from co_design.perf.ops import prefill_attention_tile_efficiency

    arch = Architecture(hidden=4096, layers=1, heads=32, kv_heads=8, ffn=14336, vocab=32000)
    gpu = get_gpu("h100")

    def rate(g, kv, length):
        return _prompt_attention_rate(arch, g, kv, length)

    for kv, prec in (("bf16", "bf16"), ("fp8", "fp8")):
        frac, overhead = gpu.prefill_attention[prec]
        for length in (1024, 8192):
            expect = gpu.peak(prec) * frac * prefill_attention_tile_efficiency(length, None, overhead)
            assert rate(gpu, kv, length) == pytest.approx(expect, rel=1e-9), (kv, length)
    # on paper: 1024 tokens are 8 query tiles over 1024 * 1025 / 2 / 128^2 = 32.03 tiles of pairs
    assert prefill_attention_tile_efficiency(1024, None, 5.5) == pytest.approx(32.03125 / (32.03125 + 8 * 6.0))
    assert prefill_attention_tile_efficiency(1024, None, 0.0) < 1.0  # the masked half of each diagonal tile
    assert rate(gpu, "fp8", 1024) < 0.5 * rate(gpu, "fp8", 8192)
    # FP8 FMHA reaches 1.0-1.5x the bf16 kernel's rate on published timings, not the 2x of the peaks
    assert 1.0 < rate(gpu, "fp8", 8192) / rate(gpu, "bf16", 8192) < 1.5
    flat = gpu.replace(prefill_attention={})
    for length in (4096, 8192):
        assert rate(flat, "fp8", length) == pytest.approx(gpu.peak("fp8") * gpu.attention_efficiency, rel=1e-9)


def test_mla_prefill_follows_the_gpus_published_mla_prompt_law():
    """An MLA model's prompt kernel runs at the GPU's ``prefill_mla`` law (192 + 128 head dims per pair), not the
    grouped-query one; a GPU without an MLA entry takes ``prefill_attention``'s."""
    from co_design.perf.ops import prefill_attention_tile_efficiency

    arch = Architecture(hidden=7168, layers=1, heads=128, kv_heads=128, ffn=18432, vocab=129280,
                        mla=MLA(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                                q_lora_rank=1536))
    gpu = get_gpu("h200")

    def rate(g, kv, length):
        return _prompt_attention_rate(arch, g, kv, length)

    for kv in ("bf16", "fp8"):
        for length in (1024, 8192):
            frac, overhead = gpu.prefill_mla[kv]
            expect = gpu.peak(kv) * frac * prefill_attention_tile_efficiency(length, None, overhead)
            assert rate(gpu, kv, length) == pytest.approx(expect, rel=1e-9), (kv, length)
            frac, overhead = gpu.prefill_attention[kv]
            expect = gpu.peak(kv) * frac * prefill_attention_tile_efficiency(length, None, overhead)
            assert rate(gpu.replace(prefill_mla={}), kv, length) == pytest.approx(expect, rel=1e-9), (kv, length)


@pytest.mark.parametrize("heads, bound", [(16, "memory"), (128, "compute")])
def test_mla_decode_follows_the_gpus_published_mla_kernel_law(heads, bound):
    """The absorbed MLA decode kernel takes the longer of its FLOPs at the law's fraction of the bf16 peak and its
    bytes at its fraction of the HBM bandwidth, plus ``cta_s`` per wave of CTAs (one per sequence): 16 heads on a
    GPU (DeepSeek-V3 at TP8) stream the latent cache, 128 (attention-DP) do 8x the math over the same bytes and
    are bound by it. On paper, with the H100's FP8-cache law."""
    from co_design.arch import MLA
    from co_design.perf.ops import decode_mla_time_s

    gpu = get_gpu("h100")
    compute, frac, io_frac, cta_s = gpu.decode_mla["fp8"]
    arch = Architecture(hidden=7168, layers=1, heads=heads, kv_heads=heads, ffn=18432, vocab=32000,
                        mla=MLA(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                                v_head_dim=128))
    dep = Deployment(weights="fp8", activations="fp8", kv_cache="fp8", runtime=IDEAL)
    a = {o.name: o for o in step_ops(arch, gpu, dep, decode=300, context=4096, prefill_tokens=0,
                                     prefill_len=0)}["attention_decode"]
    # per sequence and cached token: 2 x heads x (512 + 64 + 512) FLOPs over 576 one-byte latent values
    assert a.flops == pytest.approx(2 * heads * 1088 * 4096 * 300)
    # the latent cache, and the rest: the new token's latent (bf16 in, FP8 cached), q in and o out (bf16, per head)
    cache, io = 300 * 576 * 4096, 300 * (576 * (2 + 1) + 2 * heads * 1088)
    assert a.bytes == pytest.approx(cache + io)
    expect = max(a.flops / (compute * gpu.peak_flops_per_s["bf16"]),
                 (cache / frac + io / io_frac) / gpu.hbm_bytes_per_s)
    launch = gpu.kernel_overhead_s + IDEAL.kernel_gap_s
    assert a.bound == bound and a.time_s == pytest.approx(launch + expect + 3 * cta_s, rel=1e-12)  # 300 CTAs: 3 waves
    assert decode_mla_time_s(a.flops, cache, io, 300, gpu.peak_flops_per_s["bf16"], gpu.hbm_bytes_per_s, gpu.sms,
                             compute, frac, io_frac, cta_s) == (pytest.approx(expect + 3 * cta_s, rel=1e-12), bound)
    # an NVFP4 latent cache takes the FP8 law (the narrowest wider format with one) over fewer bytes: never slower
    b200 = get_gpu("b200")
    assert b200.decode_mla_law("nvfp4") == b200.decode_mla["fp8"]
    t = {kv: {o.name: o for o in step_ops(arch, b200, dep.replace(kv_cache=kv), decode=300, context=4096,
                                          prefill_tokens=0, prefill_len=0)}["attention_decode"].time_s
         for kv in ("bf16", "fp8", "nvfp4")}
    assert t["nvfp4"] <= t["fp8"] <= t["bf16"], t


def test_decode_attention_follows_the_gpus_published_kernel_law():
    """The decode attention kernel streams its bytes at the GPU's ``decode_attention`` fraction of the peak HBM
    bandwidth for the KV-cache format, pays ``cta_s`` per wave of CTAs, one per sequence and KV head (MLA: one
    per sequence), and its stream's ramp, in full once the SMs stream ``ramp_bytes`` each, in proportion below;
    a format without an entry streams at ``memory_efficiency`` with no per-CTA cost. Memory-bound decode, so
    time = the law (+ one launch per layer)."""
    from co_design.arch import MLA
    from co_design.perf.ops import decode_attention_time_s

    gpu = get_gpu("h100")
    launch = gpu.kernel_overhead_s + IDEAL.kernel_gap_s

    def op(arch, g, kv, batch, context):
        dep = Deployment(weights="fp8", activations="fp8", kv_cache=kv, runtime=IDEAL)
        att = {o.name: o for o in step_ops(arch, g, dep, decode=batch, context=context, prefill_tokens=0,
                                           prefill_len=0)}["attention_decode"]
        assert att.bound == "memory"
        return att

    gqa = Architecture(hidden=4096, layers=1, heads=32, kv_heads=8, ffn=14336, vocab=32000)
    for kv in ("bf16", "fp8"):
        frac, cta_s, ramp_s, ramp_bytes = gpu.decode_attention[kv]
        assert ramp_s > 0 and ramp_bytes > 0
        for batch, context in ((64, 4096), (2048, 16), (1, 100_000), (1, 512)):
            a = op(gqa, gpu, kv, batch, context)
            waves = math.ceil(batch * 8 / gpu.sms)
            ramp = ramp_s * min(1.0, a.bytes / (gpu.sms * ramp_bytes))
            assert a.time_s == pytest.approx(launch + a.bytes / (gpu.hbm_bytes_per_s * frac) + waves * cta_s + ramp,
                                             rel=1e-12), (kv, batch)
            assert a.time_s == pytest.approx(launch + decode_attention_time_s(
                a.bytes, batch * 8, gpu.hbm_bytes_per_s, gpu.sms, frac, cta_s, ramp_s, ramp_bytes), rel=1e-12)
        # a long stream pays the whole ramp, a short one a share of it
        assert op(gqa, gpu, kv, 64, 4096).bytes > gpu.sms * ramp_bytes > op(gqa, gpu, kv, 1, 512).bytes
    # many sequences over short caches: the CTAs' fixed cost, not the bytes, sets the time
    short = op(gqa, gpu, "bf16", 2048, 16)
    assert short.time_s > 1.5 * (launch + short.bytes / (gpu.hbm_bytes_per_s * gpu.decode_attention["bf16"][0]))
    # MLA decode on a GPU without an MLA law reads one shared latent per sequence: one CTA per sequence
    mla = Architecture(hidden=2048, layers=1, heads=16, kv_heads=16, ffn=8192, vocab=32000,
                       mla=MLA(q_lora_rank=0, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                               v_head_dim=128))
    m = op(mla, gpu.replace(decode_mla={}), "fp8", 300, 2048)
    frac, cta_s, ramp_s, ramp_bytes = gpu.decode_attention["fp8"]
    assert m.time_s == pytest.approx(launch + m.bytes / (gpu.hbm_bytes_per_s * frac) + 3 * cta_s
                                     + ramp_s * min(1.0, m.bytes / (gpu.sms * ramp_bytes)), rel=1e-12)
    # no entry for the format: the narrowest wider format's law (NVFP4 KV on B200: FP8's), else the flat stream at
    # memory_efficiency, no per-CTA cost
    b200 = get_gpu("b200")
    assert b200.decode_attention_law("nvfp4") == b200.decode_attention["fp8"]
    # a law given without its ramp has none
    assert gpu.replace(decode_attention={"bf16": (0.5, 1e-6)}).decode_attention_law("fp8") == (0.5, 1e-6, 0.0, 0.0)
    a = op(gqa, b200, "nvfp4", 64, 4096)
    frac, cta_s, ramp_s, ramp_bytes = b200.decode_attention["fp8"]
    assert a.time_s == pytest.approx(launch + a.bytes / (b200.hbm_bytes_per_s * frac) + 4 * cta_s
                                     + ramp_s * min(1.0, a.bytes / (b200.sms * ramp_bytes)), rel=1e-12)
    flat = gpu.replace(decode_attention={})
    assert flat.decode_attention_law("fp8") is None
    a = op(gqa, flat, "fp8", 64, 4096)
    assert a.time_s == pytest.approx(launch + a.bytes / (gpu.hbm_bytes_per_s * gpu.memory_efficiency), rel=1e-12)


def test_expected_experts_touched_rejects_nonsense():
    with pytest.raises(ValueError, match="top_k=9"):
        expected_experts_touched(8, 9, 4)
    with pytest.raises(ValueError, match="top_k=0"):
        expected_experts_touched(8, 0, 4)


def _simulated_routing(experts: int, top_k: int, tokens: int, ep: int, steps: int = 20000):
    """Monte-Carlo ground truth under uniform routing: per step, each token picks top_k distinct experts;
    returns the mean over steps of (max over ranks of distinct experts hit, distinct ranks per token)."""
    rng = np.random.default_rng(0)
    picks = np.argsort(rng.random((steps, tokens, experts)), axis=2)[:, :, :top_k]  # top_k distinct experts
    hit = np.zeros((steps, experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(steps, -1), True, axis=1)
    busiest = hit.reshape(steps, ep, experts // ep).sum(axis=2).max(axis=1).mean()
    ranks = np.array([[len(set(p // (experts // ep))) for p in step] for step in picks[:500]]).mean()
    return busiest, ranks


def test_busiest_rank_experts_and_dedup_match_simulation():
    for experts, k, tokens, ep in ((64, 4, 8, 4), (128, 8, 16, 8), (16, 2, 3, 2)):
        busiest, ranks = _simulated_routing(experts, k, tokens, ep)
        assert busiest_rank_experts(experts, k, tokens, ep) == pytest.approx(busiest, rel=0.02)
        assert ranks_per_token(experts, k, ep) == pytest.approx(ranks, rel=0.03)
        # the busiest rank runs more experts than the mean rank (what the old model charged)
        assert busiest_rank_experts(experts, k, tokens, ep) > expected_experts_touched(experts, k, tokens) / ep
    assert ranks_per_token(256, 8, 1) == 1.0


def test_expected_max_normal_and_busiest_rank_load():
    rng = np.random.default_rng(1)
    for n in (2, 4, 8, 32):
        assert expected_max_normal(n) == pytest.approx(rng.standard_normal((200000, n)).max(axis=1).mean(), abs=0.01)
    assert expected_max_normal(1) == 0.0
    # uniform routing, large batch: the busiest rank carries the mean plus the binomial spread
    mean = 4096 * 8 / 8
    assert busiest_rank_load(128, 8, 4096, 8, 0.0) == pytest.approx(
        mean * (1 + expected_max_normal(8) * math.sqrt((1 - 1 / 8) / mean)))
    # the published DeepSeek-R1 statistic the default comes from: 256 experts over EP 32, 1024 assignments per
    # rank, per-expert CV 1.28 -> per-rank CV about 0.45 (0.48 measured), busiest about 1.9x the mean
    ratio = busiest_rank_load(256, 8, 4096, 32, 1.28) / 1024
    assert 1.8 < ratio < 2.1
    assert busiest_rank_load(64, 4, 100, 1, 1.28) == 400  # one rank holds everything


def test_experts_on_busiest_rank_in_the_op_table():
    # 64 experts, top-4, EP4 (16 experts per GPU); 8 tokens in the step (decode only), uniform routing
    arch = Architecture(hidden=1024, layers=1, heads=8, ffn=512, vocab=1024, experts=64, experts_per_token=4,
                        expert_ffn=512)
    dep = Deployment(tp=4, ep=4, weights="bf16", activations="bf16", runtime=IDEAL)
    ops = {o.name: o for o in step_ops(arch, get_gpu("b200"), dep, decode=8, context=100, prefill_tokens=0,
                                       prefill_len=1)}
    touched = round(busiest_rank_experts(64, 4, 8, 4))
    up = ops["experts_gate_up"]
    assert up.groups == touched
    rows = math.ceil(busiest_rank_load(64, 4, 8, 4, 0.0) / touched)
    assert up.shape == (rows, 2 * 512, 1024)
    # weights read: `touched` experts x (gate+up) 1024 x 512 bf16; inputs and outputs of the padded rows; plus
    # at most a few fp32 split-K partials of the few rows
    base = touched * (1024 * 1024 * 2 + rows * 1024 * 2 + rows * 1024 * 2)
    assert base <= up.bytes <= base + touched * rows * 1024 * 8 * 16


def test_even_routing_gives_every_rank_its_exact_share():
    # a synthetic balanced benchmark: 4096 tokens x top-8 over EP8 is 4096 assignments per rank over all 16 of
    # its experts, 256 tokens each, two whole 128-row tiles; random routing loads the busiest rank a little more,
    # which at this tile boundary costs a third tile per expert
    arch = Architecture(hidden=4096, layers=1, heads=32, ffn=1536, vocab=1024, experts=128, experts_per_token=8,
                        expert_ffn=1536)
    dep = Deployment(tp=8, ep=8, weights="bf16", activations="bf16", runtime=Runtime(moe_expert_load_cv=0.0))
    kw = dict(decode=4096, context=100, prefill_tokens=0, prefill_len=1)
    even = {o.name: o for o in step_ops(arch, get_gpu("h200"), dep, even_routing=True, **kw)}
    rand = {o.name: o for o in step_ops(arch, get_gpu("h200"), dep, **kw)}
    assert even["experts_gate_up"].groups == 16 and even["experts_gate_up"].shape == (256, 2 * 1536, 4096)
    load = busiest_rank_load(128, 8, 4096, 8, 0.0)
    assert load > 4096 and rand["experts_gate_up"].shape[0] == math.ceil(load / 16) > 256
    assert rand["experts_gate_up"].time_s > even["experts_gate_up"].time_s
    # one token, top-8 on EP8: one expert per rank evenly; the busiest of random routing's ranks runs more
    one = dict(decode=1, context=100, prefill_tokens=0, prefill_len=1)
    assert {o.name: o for o in step_ops(arch, get_gpu("h200"), dep, even_routing=True, **one)}["experts_down"].groups == 1
    assert {o.name: o for o in step_ops(arch, get_gpu("h200"), dep, **one)}["experts_down"].groups == \
        round(busiest_rank_experts(128, 8, 1, 8)) > 1


def test_nvfp4_on_hopper_is_refused_not_emulated():
    # H100 has no FP4 tensor cores: the op table refuses W4A4 instead of running it as fp8 math
    # on 4.5-bit weights (a kernel that does not exist); B200 runs it at 0.5625 B per element
    arch = Architecture(hidden=1024, layers=1, heads=8, ffn=4096, vocab=1024)
    dep = Deployment(weights="nvfp4", activations="nvfp4", runtime=IDEAL)
    kw = dict(decode=0, context=0, prefill_tokens=64, prefill_len=64, phase="prefill")
    with pytest.raises(ValueError, match="h100"):
        step_ops(arch, get_gpu("h100"), dep, **kw)
    b200 = {o.name: o for o in step_ops(arch, get_gpu("b200"), dep, **kw)}
    assert b200["qkv_proj"].precision == "nvfp4"
    # weights 3072 x 1024, inputs 64 x 1024 at 0.5625 B; outputs 64 x 3072 bf16
    assert b200["qkv_proj"].bytes == pytest.approx(3072 * 1024 * 0.5625 + 64 * 1024 * 0.5625 + 64 * 3072 * 2.0)


def test_mla_decode_is_absorbed_only_the_latent_cache_read_grows_with_context():
    # DeepSeek-V2 (arXiv 2405.04434, sec. 2.1.2) weight absorption, as FlashMLA / TensorRT-LLM / SGLang run
    # decode: W_UK folds into the query, W_UV into the output; kv_b_proj never runs over the cached latents
    from co_design.arch import MLA

    L, H, R, ROPE, NOPE, V = 2, 16, 512, 64, 128, 128  # layers, heads, kv_lora, rope, nope, v_head
    arch = Architecture(hidden=2048, layers=L, heads=H, ffn=4096, vocab=32000,
                        mla=MLA(kv_lora_rank=R, qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V))
    dep = Deployment(weights="fp8", activations="fp8", kv_cache="fp8", runtime=IDEAL)
    B = 8  # decoding sequences

    def table(context):
        return {o.name: o for o in step_ops(arch, get_gpu("b200"), dep, decode=B, context=context,
                                            prefill_tokens=0, prefill_len=1)}

    short, long = table(1024), table(8192)
    assert "kv_b_proj" not in short and "kv_b_proj" not in long
    # everything but the attention over the cache is the same at 1k and 8k cached tokens
    assert set(short) == set(long)
    for name in set(short) - {"attention_decode"}:
        assert (short[name].time_s, short[name].flops, short[name].bytes) == (
            long[name].time_s, long[name].flops, long[name].bytes), name
    for ctx, att in ((1024, short["attention_decode"]), (8192, long["attention_decode"])):
        # per layer and sequence: the latent cache, ctx x (kv_lora + rope) x 1 B (fp8), read once for all
        # heads (MQA-like); the query in latent space (kv_lora + rope per head) and the output (kv_lora
        # per head) in bf16
        # plus the new token's latent, read in bf16 and written to the fp8 cache
        assert att.bytes == pytest.approx(L * B * (ctx * (R + ROPE) * 1 + H * ((R + ROPE) + R) * 2
                                                   + (R + ROPE) * (2 + 1)))
        # scores over kv_lora + rope, weighted sum over kv_lora: 2 FLOPs per multiply-add, per head and token
        assert att.flops == pytest.approx(L * B * ctx * H * 2 * ((R + ROPE) + R))
    grow = long["attention_decode"].bytes - short["attention_decode"].bytes
    assert grow == pytest.approx(L * B * (8192 - 1024) * (R + ROPE))  # only the extra latent tokens
    # the absorbed projections are still paid per decode token: q_nope . W_UK (NOPE -> R) and
    # latent . W_UV (R -> V) per head, bf16 per-head weights read once per step
    qa, vu = short["mla_q_absorb"], short["mla_v_up"]
    assert (qa.shape, qa.groups, vu.shape, vu.groups) == ((B, R, NOPE), H, (B, V, R), H)
    assert qa.flops == L * H * 2 * B * NOPE * R and vu.flops == L * H * 2 * B * R * V
    # weights, inputs and outputs once (bf16), plus fp32 partials (8 B per output per split) if K is split
    for op, n, k in ((qa, R, NOPE), (vu, V, R)):
        base = L * H * (k * n * 2 + B * k * 2 + B * n * 2)
        assert (op.bytes - base) / (L * H * B * n * 8.0) in (0, 2, 4, 8, 16), op.name
    # prefill may run un-absorbed: kv_b_proj expands the prompt's own latents (P tokens), not a cache
    pf = {o.name: o for o in step_ops(arch, get_gpu("b200"), dep, decode=0, context=0, prefill_tokens=256,
                                      prefill_len=256, phase="prefill")}
    assert pf["kv_b_proj"].shape == (256, H * (NOPE + V), R) and "mla_q_absorb" not in pf


def test_stream_k_smooths_the_wave_tail():
    # 150 tiles of 128x128 (10 x 15) on 148 SMs, compute-bound: data-parallel pays a second, nearly empty wave;
    # stream-K spreads the 150 x 128 k-tiles evenly: ceil(150 * 128 / 148) = 130 per SM instead of 256
    g = get_gpu("b200").replace(gemm_tiles=((128, 128, 1),))
    m, n, k = 1280, 1920, 8192
    dp = gemm(g.replace(stream_k=False), m, n, k, weights="bf16", activations="bf16", split_k=False)
    sk = gemm(g, m, n, k, weights="bf16", activations="bf16", split_k=False)
    k_iters = 8192 // 64  # 128-byte k-tiles of bf16
    assert sk.tile[2] == 0 and dp.tile[2] == 1 and sk.bound == "compute"
    assert sk.compute_s == pytest.approx(dp.compute_s / 2 * math.ceil(150 * k_iters / 148) / k_iters)
    # the fix-up moves one fp32 partial tile per SM, written and read
    assert sk.bytes == pytest.approx(dp.bytes + 148 * 128 * 128 * 8.0)


def test_tile_rates_pick_the_faster_tile():
    # Hopper: a 64-row tile at rate 0.8 beats a 128-row tile half empty (1 / 0.8 < 2); Blackwell's 64-row
    # MMA at half rate only ties the half-empty 128-row tile
    h = get_gpu("h100").replace(stream_k=False, gemm_tiles=((64, 128, 1, 0.8), (64, 256, 1, 0.8), (128, 128, 1, 1.0),
                                                        (128, 256, 1, 1.0)))
    m, n, k = 64, 132 * 128, 16384
    g = gemm(h, m, n, k, weights="bf16", activations="bf16", split_k=False)
    assert g.tile[:2] in ((64, 128), (64, 256))  # memory-bound here, but the autotuner still takes the faster tile
    per_sm = h.peak_flops_per_s["bf16"] * h.gemm_efficiency / h.sms
    tiles = 132 * 128 // g.tile[1]
    waves = math.ceil(tiles / 132)
    assert g.compute_s == pytest.approx(waves * 2 * 64 * g.tile[1] * k / (per_sm * 0.8))
    only_big = h.replace(gemm_tiles=((128, 128, 1, 1.0),))
    assert gemm(only_big, m, n, k, weights="bf16", activations="bf16", split_k=False).compute_s > 1.2 * g.compute_s


def test_gemm_tiles_accept_three_or_four_numbers():
    g = get_gpu("b200").replace(gemm_tiles=((128, 128, 1), (64, 128, 1, 0.5)))
    assert g.gemm_tiles == ((128, 128, 1, 1.0), (64, 128, 1, 0.5))
    with pytest.raises(ValueError, match="rate in"):
        get_gpu("b200").replace(gemm_tiles=((64, 128, 1, 1.5),))


def test_swap_ab_tiles_serve_small_batches_and_tile_latency_adds():
    # a 16-token GEMM: the swap-AB 16-row tile wastes nothing; without it a 64-row tile pads 4x
    b = get_gpu("b200").replace(stream_k=False)
    small = gemm(b, 16, 8192, 8192, weights="nvfp4", activations="nvfp4", split_k=False)
    no_swap = gemm(b.replace(gemm_tiles=tuple(t for t in b.gemm_tiles if t[0] >= 64)), 16, 8192, 8192,
                   weights="nvfp4", activations="nvfp4", split_k=False)
    assert small.tile[0] == 16 and small.tile_efficiency == 1.0 and no_swap.tile_efficiency <= 0.25
    assert small.compute_s < no_swap.compute_s
    # tile latency: waves x tile_overhead_s on top of the roofline, the bound unchanged
    lat = gemm(b, 16, 8192, 8192, weights="nvfp4", activations="nvfp4", split_k=False, tile_overhead_s=2e-6)
    assert lat.bound == small.bound == "memory"
    waves = math.ceil(8192 // lat.tile[1] / 148)
    assert lat.time_s == pytest.approx(small.time_s + waves * 2e-6)


def test_block_fp8_experts_pay_for_the_tiles_of_idle_local_experts():
    # DeepSeek-R1's expert shape, one token, top-8, on 8 GPUs: TP8 keeps all 256 experts on every rank (8 get the
    # token, 248 idle), EP8 keeps 32 (1 gets it, 31 idle). The block-scaled FP8 grouped GEMM launches
    # ceil(n / 128) tiles per idle expert: gate_up n = 2 * 2048 / tp, down n = 7168
    arch = Architecture(hidden=7168, layers=1, heads=56, ffn=2048, vocab=1024, experts=256, experts_per_token=8,
                        expert_ffn=2048)
    gpu, idle_s = get_gpu("h200"), 0.5e-6
    kw = dict(decode=1, context=100, prefill_tokens=0, prefill_len=1, even_routing=True)

    def moe(tp, ep, scaling, seconds):
        dep = Deployment(tp=tp, ep=ep, weights="fp8", activations="fp8", fp8_scaling=scaling,
                         runtime=Runtime(idle_expert_tile_s=seconds, expert_tile_overhead_s=0.0))
        ops = {o.name: o for o in step_ops(arch, gpu, dep, **kw)}
        return ops["experts_gate_up"].time_s, ops["experts_down"].time_s

    for tp, ep, idle, up_tiles in ((8, 1, 248, 4), (8, 8, 31, 32)):
        up0, down0 = moe(tp, ep, "block", 0.0)
        up1, down1 = moe(tp, ep, "block", idle_s)
        assert up1 - up0 == pytest.approx(idle * up_tiles * idle_s / gpu.sms)
        assert down1 - down0 == pytest.approx(idle * 56 * idle_s / gpu.sms)
        # per-tensor FP8 runs a grouped GEMM over the experts that have rows only: no change
        assert moe(tp, ep, "tensor", idle_s) == moe(tp, ep, "tensor", 0.0)
    # the default (0) is the runtimes whose kernels skip idle experts: TP8 and EP8 then cost about the same (without
    # the per-tile latency of the tiles that do run, which TP8's eight experts have more of)
    tp8, ep8 = sum(moe(8, 1, "block", 0.0)), sum(moe(8, 8, "block", 0.0))
    assert tp8 == pytest.approx(ep8, rel=0.1)
    assert sum(moe(8, 1, "block", idle_s)) > 2 * sum(moe(8, 8, "block", idle_s))
    with pytest.raises(ValueError, match="idle_expert_tile_s"):
        Runtime(idle_expert_tile_s=-1e-6)
