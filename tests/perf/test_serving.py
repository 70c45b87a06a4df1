"""predict / max_throughput / pareto / shape_advice: trends, memory, parallelism and bad input."""

import dataclasses
import math

import pytest

from co_design.arch import MLA, Architecture
from co_design.hardware import get_gpu, list_gpus
from co_design.perf import (SLO, Deployment, Prediction, Runtime, max_throughput, parallelisms, pareto, predict,
                            shape_advice)
from co_design.perf.memory import activation_bytes_per_gpu, kv_bytes_per_request, weights_bytes_per_gpu
from co_design.perf.ops import step_ops, step_time
from co_design.perf.queueing import iteration_queue_wait, poisson_quantile, prompt_counts

SMALL = Architecture(hidden=2048, layers=4, heads=16, kv_heads=4, ffn=8192, vocab=32000, name="small")
MOE = Architecture(hidden=2048, layers=4, heads=16, kv_heads=4, ffn=768, vocab=32000, experts=64,
                   experts_per_token=4, expert_ffn=768, name="moe")
BIG = Architecture(hidden=16384, layers=126, heads=128, kv_heads=8, ffn=53248, vocab=128256, name="405b")


@pytest.mark.parametrize("gpu", list_gpus()[:6])
def test_decode_at_batch_1_is_memory_bound_everywhere(gpu):
    p = predict(SMALL, gpu, Deployment(weights="bf16", activations="bf16", isl=128, osl=1024, concurrency=1))
    assert p.fits and p.bound == "memory"
    decode = [o for o in p.ops if o.phase == "decode" and o.kind == "gemm"]
    assert decode and all(o.bound == "memory" for o in decode)


def test_prediction_fields_and_units():
    p = predict(SMALL, "b200", Deployment(isl=1000, osl=1000, concurrency=16))
    assert isinstance(p, Prediction) and p.batch == 16 and p.gpu == "b200"
    assert p.output_tokens_per_s_per_user == pytest.approx(1 / p.tpot_s)
    assert p.output_tokens_per_s_per_gpu == pytest.approx(16 / p.tpot_s)
    assert p.ttft_s > 0 and p.memory_per_gpu_bytes == p.memory.total_bytes
    d = p.to_dict()
    for key in ("output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "ttft_ms", "tpot_ms", "batch",
                "memory_per_gpu_gb", "fits", "bound", "ops"):
        assert key in d
    assert d["tpot_ms"] == pytest.approx(p.tpot_s * 1e3)


def test_throughput_grows_with_batch_and_interactivity_falls():
    d = Deployment(isl=512, osl=512, weights="fp8", activations="fp8")  # Hopper: no nvfp4
    p1, p64 = (predict(SMALL, "h200", d.replace(concurrency=c)) for c in (1, 64))
    assert p64.output_tokens_per_s_per_gpu > 10 * p1.output_tokens_per_s_per_gpu
    assert p64.output_tokens_per_s_per_user < p1.output_tokens_per_s_per_user


def test_blackwell_fp4_beats_hopper_fp8():
    b = max_throughput(BIG, "b200", Deployment(tp=8, isl=1000, osl=1000))
    h = max_throughput(BIG, "h200", Deployment(tp=8, weights="fp8", activations="fp8", isl=1000, osl=1000))
    assert b.output_tokens_per_s_per_gpu > h.output_tokens_per_s_per_gpu


def test_unfit_model_reported_not_raised():
    p = predict(BIG, "h100", Deployment(weights="bf16", activations="bf16", concurrency=1))
    assert p.fits is False
    m = p.memory
    assert m.weights_bytes > m.capacity_bytes  # 810 GB of bf16 weights on one 80 GB GPU
    assert m.total_bytes == pytest.approx(m.weights_bytes + m.kv_cache_bytes + m.activation_bytes + m.reserve_bytes)
    assert any("does not fit" in n for n in p.notes)
    assert max_throughput(BIG, "h100", Deployment(weights="bf16", activations="bf16")).fits is False


def test_weights_memory_on_paper():
    # bf16, tp=1: every parameter at 2 bytes
    d = Deployment(weights="bf16", activations="bf16")
    assert weights_bytes_per_gpu(SMALL, d) == pytest.approx(2 * SMALL.param_counts().total)
    d4 = Deployment(tp=4, gpus=4, weights="nvfp4")
    assert weights_bytes_per_gpu(SMALL, d4) < weights_bytes_per_gpu(SMALL, d) / 4


def test_kv_cache_and_max_batch():
    d = Deployment(kv_cache="fp8", isl=1000, osl=1000)
    # 4 layers x 2 (K,V) x 4 heads x 128 x 1 byte x 2000 tokens
    assert kv_bytes_per_request(SMALL, d, 2000) == 4 * 2 * 4 * 128 * 2000
    p = max_throughput(SMALL, "b200", d)
    assert p.fits and p.batch <= d.runtime.max_batch
    assert p.memory.kv_cache_bytes <= p.memory.kv_cache_capacity_bytes
    tight = max_throughput(SMALL, "b200", d.replace(runtime=Runtime(max_batch=8)))
    assert tight.batch == 8


def test_max_throughput_respects_slo():
    d = Deployment(isl=1000, osl=1000)
    free = max_throughput(SMALL, "b200", d)
    slo = SLO(min_tokens_per_s_per_user=2 * free.output_tokens_per_s_per_user)
    bound = max_throughput(SMALL, "b200", d, slo=slo)
    assert bound.output_tokens_per_s_per_user >= slo.min_tokens_per_s_per_user
    assert bound.output_tokens_per_s_per_gpu <= free.output_tokens_per_s_per_gpu


def test_pareto_front_is_non_dominated_and_covers_parallelism():
    front = pareto(MOE, "b200", Deployment(gpus=8, isl=1000, osl=1000))
    assert len(front) >= 3
    users = [p.output_tokens_per_s_per_user for p in front]
    gpus = [p.output_tokens_per_s_per_gpu for p in front]
    assert users == sorted(users) and gpus == sorted(gpus, reverse=True)
    assert all(p.fits and p.deployment.gpus == 8 for p in front)
    slo = SLO(min_tokens_per_s_per_user=200)
    assert all(p.output_tokens_per_s_per_user >= 200 for p in pareto(MOE, "b200", Deployment(gpus=8), slo=slo))


def test_tp_shard_misalignment_is_visible():
    # ffn 8192 + 4*96: ffn/tp = 2144 per GPU at tp=4, not a multiple of 128
    odd = SMALL.replace(ffn=8192 + 384)
    d = Deployment(tp=4, isl=1024, osl=1024, concurrency=256)
    p = predict(odd, "b200", d)
    down = next(o for o in p.ops if o.name == "down_proj" and o.phase == "decode")
    up = next(o for o in p.ops if o.name == "gate_up_proj" and o.phase == "decode")
    assert down.shape[2] == 2144 and up.shape[1] == 2 * 2144
    assert up.tile_efficiency < 1.0
    advice = shape_advice(odd, "b200", d, min_gain=-math.inf)  # every misalignment, whatever its gain
    ffn = [a for a in advice if a.dimension == "ffn"]
    assert ffn and ffn[0].per_gpu_value == 2144 and ffn[0].aligned_value % (128 * 4) == 0
    assert "ffn" in ffn[0].message
    # the gain is the model's own: output tok/s/GPU of the aligned shape at the same batch over the odd one's
    aligned = predict(odd.replace(ffn=ffn[0].aligned_value), "b200", d)
    assert ffn[0].gain == pytest.approx(aligned.output_tokens_per_s_per_gpu / p.output_tokens_per_s_per_gpu - 1)
    assert not [a for a in shape_advice(SMALL, "b200", d, min_gain=-math.inf) if a.dimension == "ffn"]  # 2048 aligned


MID = Architecture(hidden=4128, head_dim=128, layers=4, heads=32, kv_heads=8, ffn=14336, vocab=128256, name="mid")
PREFILL_HEAVY = Deployment(isl=8192, osl=128, concurrency=64)


def _gain(arch, changed, dep=PREFILL_HEAVY):
    """Relative change in output tokens/s per GPU, from two predictions (the advice's definition)."""
    return (predict(changed, "b200", dep).output_tokens_per_s_per_gpu
            / predict(arch, "b200", dep).output_tokens_per_s_per_gpu - 1.0)


def test_shape_advice_advises_only_gains_of_at_least_one_percent():
    # hidden 4128 (= 32*129): its neighbours 4096 and 4224; only ffn, vocab, head_dim are aligned here
    down, up = _gain(MID, MID.replace(hidden=4096)), _gain(MID, MID.replace(hidden=4224))
    assert down >= 0.01 and up < 0  # the premise: shrinking gains over 1 %, rounding up loses
    advice = shape_advice(MID, "b200", PREFILL_HEAVY)
    assert [(a.dimension, a.value, a.aligned_value) for a in advice] == [("hidden", 4128, 4096)]
    assert advice[0].gain == pytest.approx(down, rel=1e-9)
    assert f"hidden=4096: {down:+.1%}" in advice[0].message and "4224" not in advice[0].message


def test_shape_advice_drops_losses_and_negligible_gains():
    # head_dim 96: the only aligned neighbour is 128 (0 is no head), which adds work: a loss
    hd = MID.replace(hidden=4096, head_dim=96)
    loss = _gain(hd, hd.replace(head_dim=128))
    assert loss < -0.01
    assert shape_advice(hd, "b200", PREFILL_HEAVY) == []
    listed = shape_advice(hd, "b200", PREFILL_HEAVY, min_gain=-math.inf)  # the diagnostic still lists it
    assert [(a.dimension, a.aligned_value) for a in listed] == [("head_dim", 128)]
    assert listed[0].gain == pytest.approx(loss, rel=1e-9)
    # ffn 14400 (= 128*112.5): shrinking to 14336 gains, but under 1 %
    ffn = MID.replace(hidden=4096, ffn=14400)
    small = _gain(ffn, ffn.replace(ffn=14336))
    assert 0 < small < 0.01
    assert shape_advice(ffn, "b200", PREFILL_HEAVY) == []
    assert shape_advice(ffn, "b200", PREFILL_HEAVY, min_gain=small / 2)[0].gain == pytest.approx(small, rel=1e-9)


def test_pareto_report_counts_concurrency_once():
    from co_design.perf.report import format_pareto

    # 4 single-GPU replicas, 8 requests in flight in all: 2 per replica
    dep = Deployment(gpus=4, isl=1000, osl=1000)
    front = pareto(SMALL, "b200", dep, deployments=[dep], concurrencies=[8])
    assert len(front) == 1 and front[0].batch == 8
    row = format_pareto(SMALL, "b200", front).splitlines()[-1].split()
    assert row[:3] == ["TP1", "x4", "8"]  # deployment label, then the concurrency: 8, not 8 x 4 replicas


def test_dense_layouts_are_never_labelled_ep_or_dep():
    # attention-DP on a dense model (no experts to split) is ADP; DEP needs ep > 1
    assert [d.label for d in parallelisms(SMALL, 4)] == ["TP1 x4", "TP2 x2", "TP2 ADP x2", "TP4", "TP4 ADP"]
    moe = [d.label for d in parallelisms(MOE, 4)]
    assert "TP4 EP4 DEP" in moe and "TP2 EP2 DEP x2" in moe and "TP4 ADP" in moe  # MoE, ep = 1: no EP either
    assert [p.deployment.label for p in pareto(SMALL, "b200", Deployment(gpus=4), concurrencies=[64])
            if "EP" in p.deployment.label] == []


def test_moe_decode_reads_touched_experts_only():
    d = Deployment(weights="bf16", activations="bf16", isl=16, osl=1024)  # prompt share ~0.016 token/step
    one = predict(MOE, "b200", d.replace(concurrency=1))
    many = predict(MOE, "b200", d.replace(concurrency=512))
    g1 = next(o for o in one.ops if o.name == "experts_gate_up" and o.phase == "decode")
    gm = next(o for o in many.ops if o.name == "experts_gate_up" and o.phase == "decode")
    assert g1.groups == 4  # one token touches top-k experts
    assert gm.groups == 64  # a big batch touches them all
    assert gm.bytes > 10 * g1.bytes


def test_attention_dp_and_ep_change_communication():
    base = Deployment(tp=4, gpus=4, isl=1000, osl=1000, concurrency=256)
    tp = {o.name for o in predict(MOE, "b200", base).ops}
    dep = {o.name for o in predict(MOE, "b200", base.replace(ep=4, attention_dp=True)).ops}
    assert "attn_all_reduce" in tp and "attn_all_reduce" not in dep
    # TensorRT-LLM 1.0: on an 8-GPU HGX node attention-DP MoE all-gathers the tokens and reduce-scatters the
    # outputs; the deduplicated all-to-all needs multi-node NVLink (NVL72) and ep > top_k
    assert {"ffn_all_gather", "ffn_reduce_scatter"} <= dep and "moe_dispatch_all_to_all" not in dep
    nvl = {o.name for o in predict(MOE, "gb200", base.replace(tp=8, gpus=8, ep=8, attention_dp=True)).ops}
    assert {"moe_dispatch_all_to_all", "moe_combine_all_to_all"} <= nvl and "ffn_all_gather" not in nvl
    top_k_ge_ep = {o.name for o in predict(MOE, "gb200", base.replace(ep=4, attention_dp=True)).ops}  # top-4, EP 4
    assert "moe_dispatch_all_to_all" not in top_k_ge_ep and "ffn_all_gather" in top_k_ge_ep


def test_helix_splits_kv_per_gpu():
    arch = Architecture(hidden=4096, layers=4, heads=32, kv_heads=4, ffn=14336, vocab=32000)
    plain = Deployment(tp=8, isl=100_000, osl=1000)
    helix = plain.replace(helix=2)
    assert kv_bytes_per_request(arch, helix, 101_000) == pytest.approx(kv_bytes_per_request(arch, plain, 101_000) / 2)
    names = {o.name for o in predict(arch, "gb200", helix.replace(concurrency=8)).ops}
    assert "helix_all_to_all" in names


def test_mla_and_sliding_window():
    mla = Architecture(hidden=2048, layers=2, heads=16, ffn=4096, vocab=32000,
                       mla=MLA(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128))
    d = Deployment(isl=4096, osl=512)
    assert kv_bytes_per_request(mla, d, 1000) == 2 * (512 + 64) * 1000
    p = predict(mla, "b200", d.replace(concurrency=8))
    assert any(o.name == "mla_q_absorb" for o in p.ops)
    win = SMALL.replace(sliding_window=1024)
    assert kv_bytes_per_request(win, d, 8192) == kv_bytes_per_request(SMALL, d, 1024)


@pytest.mark.parametrize("kw, word", [
    (dict(tp=3, gpus=3), "tp=3"),
    (dict(tp=8, gpus=8, ep=3), "ep=3"),
    (dict(tp=4, gpus=4, helix=3), "helix=3"),
    (dict(tp=4, gpus=6), "gpus=6"),
    (dict(tp=0), "tp"),
    (dict(weights="int4"), "int4"),
])
def test_nonsense_deployments_raise_naming_the_value(kw, word):
    with pytest.raises(ValueError, match=word):
        predict(SMALL, "b200", Deployment(concurrency=1, **kw))


def test_nonsense_against_the_architecture():
    with pytest.raises(ValueError, match="ep=2"):
        predict(SMALL, "b200", Deployment(tp=2, ep=2, concurrency=1))  # dense model
    with pytest.raises(ValueError, match="ep=8"):
        predict(MOE.replace(experts=60), "b200", Deployment(tp=8, ep=8, concurrency=1))
    with pytest.raises(ValueError, match="concurrency"):
        predict(SMALL, "b200", Deployment())
    with pytest.raises(ValueError, match="unknown GPU"):
        predict(SMALL, "b2OO", Deployment(concurrency=1))
    with pytest.raises(ValueError):
        Architecture(hidden=2048, layers=2, heads=16, ffn=4096, vocab=10, experts=4, experts_per_token=5)


def test_gpu_object_accepted_and_overrides_matter():
    g = get_gpu("b200")
    fast = g.replace(hbm_bytes_per_s=2 * g.hbm_bytes_per_s)
    d = Deployment(isl=128, osl=1024, concurrency=1)
    assert predict(SMALL, fast, d).tpot_s < predict(SMALL, g, d).tpot_s


def test_pipeline_parallel_splits_layers_and_weights():
    d1 = Deployment(weights="bf16", activations="bf16", isl=512, osl=512, concurrency=32)
    d2 = d1.replace(pp=2)
    assert d2.gpus == 2
    assert weights_bytes_per_gpu(BIG, d2) < 0.6 * weights_bytes_per_gpu(BIG, d1)
    p = predict(SMALL, "h100", d2)
    assert any(o.name == "pp_send_recv" for o in p.ops)


def test_runtime_validation_and_ideal_runtime_is_faster():
    for name in ("compute_efficiency", "bandwidth_efficiency", "grouped_gemm_efficiency",
                 "grouped_gemm_bandwidth_efficiency", "collective_efficiency"):
        with pytest.raises(ValueError, match=name):
            Runtime(**{name: 1.5})
    with pytest.raises(ValueError, match="moe_expert_load_cv"):
        Runtime(moe_expert_load_cv=-0.1)
    d = Deployment(isl=512, osl=512, concurrency=64)
    ideal = d.replace(runtime=Runtime(compute_efficiency=1.0, bandwidth_efficiency=1.0, grouped_gemm_efficiency=1.0,
                                      grouped_gemm_bandwidth_efficiency=1.0, request_overhead_s=0.0,
                                      iteration_overhead_s=0.0))
    assert predict(SMALL, "b200", ideal).tpot_s < predict(SMALL, "b200", d).tpot_s


def test_routing_skew_slows_expert_parallel_moe():
    d = Deployment(tp=4, ep=4, attention_dp=True, isl=512, osl=512, concurrency=1024)
    uniform = d.replace(runtime=Runtime(moe_expert_load_cv=0.0))
    assert predict(MOE, "b200", d).tpot_s > predict(MOE, "b200", uniform).tpot_s


def test_efficiencies_are_separate():
    # bandwidth_efficiency moves a memory-bound batch-1 decode and not a compute-bound prompt-heavy step;
    # compute_efficiency the other way round
    llama8b = Architecture(hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256)
    d = Deployment(weights="bf16", activations="bf16", isl=128, osl=128, concurrency=1)
    base = predict(llama8b, "h100", d).tpot_s
    slow_bw = predict(llama8b, "h100", d.replace(runtime=Runtime(bandwidth_efficiency=0.3))).tpot_s
    slow_fl = predict(llama8b, "h100", d.replace(runtime=Runtime(compute_efficiency=0.3))).tpot_s
    assert slow_bw > 1.5 * base
    assert slow_fl < 1.05 * base
    # a prompt-heavy step is compute-bound: the other way round
    pf = dict(decode=0, context=0, prefill_tokens=4096, prefill_len=4096)
    step = lambda rt: sum(step_time(llama8b, get_gpu("h100"), d.replace(runtime=rt), **pf).values())  # noqa: E731
    assert step(Runtime(compute_efficiency=0.3)) > 1.5 * step(Runtime())
    assert step(Runtime(bandwidth_efficiency=0.3)) < 1.25 * step(Runtime())


def test_grouped_gemm_bandwidth_efficiency_slows_expert_weight_reads_only():
    # a small-batch MoE decode streams expert weights: the grouped-GEMM bandwidth factor slows its expert GEMMs
    # and nothing else; a dense model has no grouped GEMM and does not move
    d = Deployment(weights="fp8", activations="fp8", isl=128, osl=128, concurrency=4)
    slow = Runtime(grouped_gemm_bandwidth_efficiency=0.25)
    full = Runtime(grouped_gemm_bandwidth_efficiency=1.0)
    ops = {rt: {o.name: o.time_s for o in predict(MOE, "h100", d.replace(runtime=rt)).ops if o.phase == "decode"}
           for rt in (slow, full)}
    assert ops[slow]["experts_gate_up"] > 2 * ops[full]["experts_gate_up"]
    assert ops[slow]["experts_down"] > 2 * ops[full]["experts_down"]
    assert all(ops[slow][n] == pytest.approx(ops[full][n]) for n in ops[full] if not n.startswith("experts_"))
    assert predict(SMALL, "h100", d.replace(runtime=slow)).tpot_s == pytest.approx(
        predict(SMALL, "h100", d.replace(runtime=full)).tpot_s)


def test_report_text():
    from co_design.perf.report import format_report

    p = predict(SMALL, "b200", Deployment(concurrency=4))
    text = format_report(SMALL, p, shape_advice(SMALL.replace(ffn=8000), "b200", Deployment(concurrency=4),
                                                min_gain=-math.inf))
    assert "attention_decode" in text and "Memory per GPU" in text and "ffn=8000" in text


def test_concurrency_not_a_multiple_of_replicas_is_not_rounded_up():
    # 8 single-GPU replicas; 1 request in flight keeps one GPU busy: total = 1/TPOT, per GPU = 1/TPOT/8
    one = predict(SMALL, "b200", Deployment(gpus=1, concurrency=1))
    p = predict(SMALL, "b200", Deployment(gpus=8, concurrency=1))
    assert p.batch == 1 and p.deployment.concurrency == 1
    assert p.tpot_s == pytest.approx(one.tpot_s)
    assert p.output_tokens_per_s == pytest.approx(1 / one.tpot_s)
    assert p.output_tokens_per_s_per_gpu == pytest.approx(1 / one.tpot_s / 8)
    # 9 requests: one replica holds 2, seven hold 1
    two = predict(SMALL, "b200", Deployment(gpus=1, concurrency=2))
    p9 = predict(SMALL, "b200", Deployment(gpus=8, concurrency=9))
    assert p9.batch == 9 and p9.tpot_s == pytest.approx(two.tpot_s)
    assert p9.output_tokens_per_s == pytest.approx(2 / two.tpot_s + 7 / one.tpot_s)
    # a multiple of the replicas is unchanged
    p16 = predict(SMALL, "b200", Deployment(gpus=8, concurrency=16))
    assert p16.output_tokens_per_s_per_gpu == pytest.approx(two.output_tokens_per_s_per_gpu)


def test_ttft_under_attention_dp_puts_the_prompt_on_one_rank():
    # DEP4: one new prompt runs on one attention rank, so its attention work per GPU equals
    # that of a single-GPU attention (a_tp = 1) with the whole prompt -- not a quarter of it.
    from co_design.perf.ops import step_ops

    d = Deployment(tp=4, ep=4, attention_dp=True, isl=2048, osl=128, concurrency=4)
    kw = dict(decode=0.0, context=2048, prefill_tokens=2048, prefill_len=2048)
    one = {o.name: o for o in step_ops(MOE, get_gpu("b200"), d, phase="prefill", prompt_ranks=1, **kw)}
    spread = {o.name: o for o in step_ops(MOE, get_gpu("b200"), d, phase="prefill", **kw)}
    pairs = 2048 * 2049 / 2
    per_layer = 2 * MOE.heads * (2 * MOE.head_dim) * pairs  # all heads, whole prompt, on the busiest GPU
    assert one["attention_prefill"].flops == pytest.approx(per_layer * MOE.layers)
    assert spread["attention_prefill"].flops == pytest.approx(per_layer * MOE.layers / 4)
    assert one["qkv_proj"].shape[0] == 2048 and spread["qkv_proj"].shape[0] == 512
    p = predict(MOE, "b200", d)
    ops = [o for o in p.ops if o.phase == "prefill" and o.name == "attention_prefill"]
    assert ops and ops[0].flops == pytest.approx(per_layer * MOE.layers)


def test_helix_output_projection_runs_tp_over_all_ranks_and_all_to_all_bytes():
    from co_design.perf.ops import step_ops

    arch = Architecture(hidden=4096, layers=1, heads=32, kv_heads=4, ffn=14336, vocab=32000)
    d = Deployment(tp=8, helix=2, isl=100_000, osl=1000, concurrency=8)
    ops = {o.name: o for o in step_ops(arch, get_gpu("gb200"), d, decode=8, context=100_000, prefill_tokens=0,
                                       prefill_len=100_000)}
    # o_proj: K = 32 heads * 128 / 8 ranks = 512 (not / (tp/helix) = 1024); all-reduce over all 8 ranks
    assert ops["o_proj"].shape == (8, 4096, 512)
    assert ops["qkv_proj"].shape == (8, (32 // 4) * 128 + 2 * 128, 4096)  # heads over tp/helix = 4
    # Helix all-to-all: 8 sequences x 8 heads x (128 bf16 values + 2 fp32 stats) = 8 * 8 * 264 bytes
    assert ops["helix_all_to_all"].bytes == pytest.approx(8 * 8 * (128 * 2 + 8))
    w_plain = weights_bytes_per_gpu(arch, d.replace(helix=1))
    w_helix = weights_bytes_per_gpu(arch, d)
    # Helix holds q for 8 heads (TP8: 4), one KV head either way (TP8 replicates 1 of 4), o_proj for 4
    assert w_helix - w_plain == pytest.approx(4096 * 4 * 128 * 0.5625)


def test_pipeline_send_crosses_nvlink_domain_when_the_replica_spans_two():
    # H100: 8 GPUs per NVLink domain. TP8 PP2 = 16 GPUs: the stage boundary goes over scale-out (50 GB/s)
    from co_design.perf.ops import step_ops

    g = get_gpu("h100")
    kw = dict(decode=64, context=1000, prefill_tokens=0, prefill_len=1000)
    nbytes = 64 * BIG.hidden * 2.0
    for tp, link in ((8, g.scaleout_bytes_per_s), (4, g.nvlink_bytes_per_s)):
        d = Deployment(tp=tp, pp=2, weights="fp8", activations="fp8")
        op = next(o for o in step_ops(BIG, g, d, **kw) if o.name == "pp_send_recv")
        eff = g.collective_efficiency * d.runtime.collective_efficiency
        latency = g.collective_latency_s + d.runtime.collective_overhead_s
        assert op.time_s == pytest.approx(latency + nbytes / (link * eff))


def test_kernel_gap_and_collective_overhead_are_paid_once_per_kernel_and_per_collective():
    # every kernel row of the step pays kernel_gap_s once (count = instances); every collective,
    # collective_overhead_s once; fused rows (norms riding an all-reduce) pay neither
    g = get_gpu("h100")
    d = Deployment(tp=2, weights="fp8", activations="fp8", runtime=Runtime(kernel_gap_s=0.0, collective_overhead_s=0.0))
    kw = dict(decode=1, context=1000, prefill_tokens=0, prefill_len=1000)
    gap, coll = 4e-6, 7e-6
    base = {o.name: o for o in step_ops(BIG, g, d, **kw)}
    slow = {o.name: o for o in step_ops(BIG, g, d.replace(runtime=Runtime(kernel_gap_s=gap,
                                                                           collective_overhead_s=coll)), **kw)}
    assert base.keys() == slow.keys()
    for name, o in base.items():
        extra = slow[name].time_s - o.time_s
        if o.kind == "communication":
            assert extra == pytest.approx(coll * o.count), name
        elif name in ("attn_norm", "ffn_norm", "final_norm"):  # fused into the TP all-reduce before them
            assert extra == pytest.approx(0.0, abs=1e-12), name
        else:
            assert extra == pytest.approx(gap * o.count), name
    with pytest.raises(ValueError, match="kernel_gap_s"):
        Runtime(kernel_gap_s=-1e-6)
    with pytest.raises(ValueError, match="collective_overhead_s"):
        Runtime(collective_overhead_s=-1e-6)


def test_concurrency_beyond_runtime_max_batch_waits():
    d = Deployment(isl=64, osl=64, concurrency=40, runtime=Runtime(max_batch=32))
    assert any("40 requests per replica exceed the 32 it runs at once" in n for n in predict(SMALL, "b200", d).notes)
    assert not any("max_batch" in n for n in predict(SMALL, "b200", d.replace(concurrency=32)).notes)


# ------------------------------------------------------------------ TTFT: chunked prefill iterations
@pytest.mark.parametrize("tp, attention_dp, concurrency, prompt, iterations", [
    # C = max_num_tokens (1024) minus the decode tokens of the *other* requests on the prompt's scheduler
    # (under attention-DP, (concurrency - 1) / tp of them); a prompt of P tokens takes ceil(P / C) iterations,
    # worked out here by hand:
    (1, False, 1, 1023, 1),  # alone, C = 1024: P < C
    (1, False, 1, 1024, 1),  # P = C: one iteration (the new request is not yet decoding)
    (1, False, 1, 1025, 2),  # P = C + 1
    (1, False, 1, 2048, 2),  # P = 2C
    (1, False, 1, 2049, 3),  # P = 2C + 1
    (1, False, 5, 1020, 1),  # 4 others decode beside it: C = 1020, P = C
    (1, False, 5, 1021, 2),  # P = C + 1
    (2, True, 5, 1022, 1),  # attention-DP over 2 ranks: 4 others, 2 of their decode tokens per rank: C = 1022
    (2, True, 5, 1023, 2),  # P = C + 1
])
def test_ttft_takes_ceil_prompt_over_budget_iterations(tp, attention_dp, concurrency, prompt, iterations):
    from co_design.perf.ops import step_time

    beside = (concurrency - 1) / (tp if attention_dp else 1)  # decode tokens on the prompt's scheduler
    assert iterations == math.ceil(prompt / (1024 - beside))  # the table above, by the rule
    rt = Runtime(max_num_tokens=1024)
    d = Deployment(tp=tp, attention_dp=attention_dp, isl=prompt, osl=64, concurrency=concurrency, runtime=rt)
    p = predict(SMALL, "b200", d)
    prefill = {o.name: o for o in p.ops if o.phase == "prefill"}
    assert prefill["lm_head"].count == iterations  # one per prefill iteration
    # the iterations carry full chunks of C prompt tokens and one with the rest, as a runtime fills its budget,
    # beside the other requests' decode tokens (whole replica; under attention-DP the chunk sits on one rank,
    # the decode tokens spread over tp); the table's row has the first chunk's shape
    others = concurrency - 1
    budget = 1024 - beside
    chunks = [budget] * (iterations - 1) + [prompt - (iterations - 1) * budget]
    assert prefill["qkv_proj"].shape[0] == math.ceil(chunks[0] + others / (tp if attention_dp else 1))
    # TTFT = the iterations (outside a CUDA graph) + the host's per-iteration and per-request time for each + the
    # request's time off the GPU
    steps = [sum(step_time(SMALL, get_gpu("b200"), d, decode=others, context=prompt + 32, prefill_tokens=chunk,
                           prefill_len=prompt, prompt_ranks=1, eager=True).values()) for chunk in chunks]
    host = rt.iteration_overhead_s + rt.request_overhead_s * concurrency / (tp if attention_dp else 1)
    assert p.ttft_s == pytest.approx(sum(steps) + iterations * host + rt.first_token_overhead_s)


@pytest.mark.parametrize("tp, attention_dp, concurrency, prompt, expected", [
    # one rank, 4 prompts of 3000 tokens, 8192 per iteration: 12000 tokens in 2 iterations (8192, 3808); prompts
    # 0 and 1 end in the first (at 3000 and 6000 tokens), 2 and 3 in the second: on average a request waits
    # through 1 full iteration and half of the last
    (1, False, 4, 3000, [(8192, 1.0), (3808, 0.5)]),
    # 8 prompts of 1000 tokens fit one iteration of 8000: every request waits for all of them
    (1, False, 8, 1000, [(8000, 1.0)]),
    # attention-DP over 2 ranks: the busiest holds ceil(5 / 2) = 3 prompts of 3000 (9000 tokens: 8192 + 808), the
    # replica's iteration carries 5 / 3 ranks' worth; prompts 0 and 1 end in the first, prompt 2 in the second
    (2, True, 5, 3000, [(8192, 1.0), (808, 1 / 3)]),
])
def test_burst_ttft_is_the_mean_wait_through_the_waves_iterations(tp, attention_dp, concurrency, prompt, expected):
    rt = Runtime()
    d = Deployment(tp=tp, attention_dp=attention_dp, isl=prompt, osl=64, concurrency=concurrency, arrivals="burst")
    p = predict(SMALL, "b200", d)
    ranks = tp if attention_dp else 1
    spread = concurrency / math.ceil(concurrency / ranks)  # ranks holding prompts, each as many as the busiest
    gpu = get_gpu("b200")
    steps = [weight * sum(step_time(SMALL, gpu, d, decode=0.0, context=prompt + 32, prefill_tokens=tokens * spread,
                                    prefill_len=prompt, prompt_ranks=spread, eager=True).values())
             for tokens, weight in expected]
    waits = sum(weight for _, weight in expected)  # iterations one request waits through, on average
    host = rt.iteration_overhead_s + rt.request_overhead_s * concurrency / ranks
    assert p.ttft_s == pytest.approx(sum(steps) + waits * host + rt.first_token_overhead_s)
    prefill = {o.name: o for o in p.ops if o.phase == "prefill"}
    assert prefill["lm_head"].count == pytest.approx(waits)  # the op table counts the same iterations
    assert p.deployment.arrivals == "burst"


def test_burst_arrivals_change_ttft_under_load_only():
    steady = Deployment(weights="fp8", activations="fp8", isl=2048, osl=256, concurrency=1)
    burst = steady.replace(arrivals="burst")
    one = predict(SMALL, "h100", steady), predict(SMALL, "h100", burst)
    assert one[0].ttft_s == one[1].ttft_s  # one request: nothing to wait for
    last = None
    for c in (8, 32, 128):  # (at 2 the host's kernel launches of this 4-layer model outweigh a second prompt)
        a, b = predict(SMALL, "h100", steady.replace(concurrency=c)), predict(SMALL, "h100", burst.replace(concurrency=c))
        assert (a.tpot_s, a.output_tokens_per_s_per_gpu) == (b.tpot_s, b.output_tokens_per_s_per_gpu)
        assert b.ttft_s > a.ttft_s
        assert last is None or b.ttft_s > 1.5 * last  # the wave's prefill grows with the requests in it
        last = b.ttft_s
    # steady arrivals: the prompt meets the others decoding, at most a few per cent slower
    assert predict(SMALL, "h100", steady.replace(concurrency=128)).ttft_s < 1.5 * one[0].ttft_s
    with pytest.raises(ValueError, match=r"Deployment.arrivals='bursty'; use one of \['steady', 'burst', 'poisson'\]"):
        Deployment(arrivals="bursty")


def test_a_ttft_slo_binds_earlier_under_burst_arrivals():
    d = Deployment(weights="fp8", activations="fp8", isl=4096, osl=512)
    slo = SLO(max_ttft_s=0.5)
    steady = max_throughput(SMALL, "h100", d, slo=slo)
    burst = max_throughput(SMALL, "h100", d.replace(arrivals="burst"), slo=slo)
    assert steady.ttft_s <= 0.5 and burst.ttft_s <= 0.5
    # a wave of prompts must prefill within the limit: far fewer requests in flight than when they spread out
    assert burst.batch < steady.batch / 4
    assert burst.output_tokens_per_s_per_gpu < steady.output_tokens_per_s_per_gpu


@pytest.mark.parametrize("runtime, arrivals", [(Runtime(), "steady"), (Runtime(max_batch=6), "steady"),
                                               (Runtime(max_batch=6), "burst")])
def test_requests_beyond_what_a_replica_holds_wait_for_a_slot(runtime, arrivals):
    from co_design.perf.memory import max_batch

    d = Deployment(weights="fp8", activations="fp8", isl=32768, osl=512, arrivals=arrivals, runtime=runtime)
    cap = max_batch(SMALL, get_gpu("h100"), d)  # the KV cache's limit, or Runtime.max_batch when smaller
    assert cap == 6 if runtime.max_batch == 6 else 1 < cap < runtime.max_batch  # the KV cache binds first
    held = predict(SMALL, "h100", d.replace(concurrency=cap))
    for c in (cap + 1, 3 * cap):
        p = predict(SMALL, "h100", d.replace(concurrency=c))
        assert p.fits and p.batch == cap and p.deployment.concurrency == c
        assert (p.tpot_s, p.output_tokens_per_s_per_gpu) == (held.tpot_s, held.output_tokens_per_s_per_gpu)
        # Little's law: c requests in the loop, cap served at a time for S = TTFT + (OSL - 1) TPOT each
        service = held.ttft_s + (d.osl - 1) * held.tpot_s
        assert p.ttft_s == pytest.approx(held.ttft_s + service * (c / cap - 1))
        assert any(f"{c - cap} wait for a slot" in n for n in p.notes)
    assert not any("wait for a slot" in n for n in held.notes)


def test_queued_replicas_add_their_running_batches():
    from co_design.perf.memory import max_batch

    d = Deployment(gpus=2, weights="fp8", activations="fp8", isl=1024, osl=256, runtime=Runtime(max_batch=4))
    assert max_batch(SMALL, get_gpu("h100"), d) == 4
    p = predict(SMALL, "h100", d.replace(concurrency=11))  # replicas hold 6 and 5: each runs 4
    four = predict(SMALL, "h100", d.replace(concurrency=8))
    assert p.batch == 8 and p.output_tokens_per_s_per_gpu == pytest.approx(four.output_tokens_per_s_per_gpu)
    assert p.ttft_s > four.ttft_s
    from co_design.perf.report import format_report

    text = format_report(SMALL, p)
    assert "requests in flight (batch)" in text and "requests waiting for a slot" in text
    assert [ln.split()[-1] for ln in text.splitlines() if ln.startswith("requests waiting")] == ["3"]
    assert "requests waiting" not in format_report(SMALL, four)
def test_fused_runtime_pays_no_launch_for_fused_work():
    d1 = Deployment(weights="fp8", activations="fp8", concurrency=8, runtime=Runtime(bandwidth_efficiency=1.0))
    gpu = get_gpu("h100")
    kw = dict(decode=8, context=1000, prefill_tokens=0, prefill_len=1000)
    tp1 = {o.name: o for o in step_ops(SMALL, gpu, d1, **kw)}
    tp2 = {o.name: o for o in step_ops(SMALL, gpu, d1.replace(tp=2), **kw)}
    bw = gpu.hbm_bytes_per_s * gpu.memory_efficiency
    layers = SMALL.layers
    # TP1: the norm is its own kernel; TP2: it rides the all-reduce (same bytes, no launch)
    launch = gpu.kernel_overhead_s + d1.runtime.kernel_gap_s  # seconds per kernel in a serving step
    assert tp1["attn_norm"].time_s == pytest.approx(tp1["attn_norm"].bytes / bw + layers * launch)
    assert tp2["attn_norm"].time_s == pytest.approx(tp2["attn_norm"].bytes / bw)
    assert tp2["ffn_norm"].time_s == pytest.approx(tp2["ffn_norm"].bytes / bw)
    # decode-only steps: RoPE and the KV write live inside the attention kernel
    assert "rope_kv_write" not in tp1
    with_prompt = {o.name for o in step_ops(SMALL, gpu, d1, decode=8, context=1000, prefill_tokens=512,
                                            prefill_len=512)}
    assert "rope_kv_write" in with_prompt


def test_prompts_ride_in_their_own_iterations():
    # ISL 256 / OSL 1024 at 64 requests: 16 prompt tokens per iteration on average, i.e. one whole prompt
    # every 16 iterations; TPOT mixes 15 decode-only steps with one that carries a 256-token prompt
    rt = Runtime(iteration_overhead_s=0.0, request_overhead_s=0.0)
    d = Deployment(isl=256, osl=1024, concurrency=64, runtime=rt)
    gpu = get_gpu("b200")
    p = predict(MOE, gpu, d)
    dec = sum(step_time(MOE, gpu, d, decode=64, context=256 + 512, prefill_tokens=0, prefill_len=256).values())
    mix = sum(step_time(MOE, gpu, d, decode=64, context=256 + 512, prefill_tokens=256, prefill_len=256).values())
    f = 16 / 256
    assert p.tpot_s == pytest.approx((1 - f) * dec + f * mix)
    # the old even spread (16 prompt tokens in every step) charges a decode step for experts it does not touch
    even = sum(step_time(MOE, gpu, d, decode=64, context=256 + 512, prefill_tokens=16, prefill_len=256).values())
    assert dec < even


def test_unsupported_head_dim_runs_padded_and_says_so():
    odd = Architecture(hidden=2560, layers=4, heads=32, kv_heads=8, head_dim=80, ffn=8192, vocab=32000)
    even = odd.replace(head_dim=96)
    d = Deployment(weights="fp8", activations="fp8", isl=4096, osl=256, concurrency=8)
    p_odd, p_even = predict(odd, "h100", d), predict(even, "h100", d)
    assert any("head_dim 80" in n and "padded to 96" in n for n in p_odd.notes)
    assert not any("head_dim" in n for n in p_even.notes)
    flops = lambda p: sum(o.flops for o in p.ops if o.name == "attention_prefill")  # noqa: E731
    # the math runs at 96 either way; the padded model pays it without having the width
    assert flops(p_odd) == pytest.approx(flops(p_even))


def test_attention_dp_moe_buffers_hold_every_ranks_tokens():
    # MOE: hidden 2048, 64 experts of 768, top-4. TP4 EP4: each expert whole on its rank (768 wide)
    tp = Deployment(tp=4, ep=4, isl=1000, osl=1000)
    moe_row = (4 * 2048 + 2 * (768 * 2 * 4)) * 2.0  # bytes per token of the MoE buffers (bf16)
    logits = 2048 * (32000 // 4) * 4.0  # min(max_batch, max_num_tokens) fp32 logits of a vocab shard
    assert activation_bytes_per_gpu(MOE, tp) == 8192 * moe_row + logits
    # attention-DP: the MoE of each rank receives all four ranks' tokens (TensorRT-LLM all-gather), and each
    # rank's head produces whole-vocabulary logits for its own sequences
    assert activation_bytes_per_gpu(MOE, tp.replace(attention_dp=True)) == 4 * 8192 * moe_row + 4 * logits


@pytest.mark.parametrize("attention_dp, ways", [(False, 4), (True, 1)])
def test_attention_dp_keeps_embedding_and_head_whole_on_every_rank(attention_dp, ways):
    # TensorRT-LLM under enable_attention_dp: embed_tokens and lm_head unsplit on each rank (each rank's own
    # sequences; no all-reduce over ranks of different sizes). The vocabulary's share of a GPU's weights:
    d = Deployment(tp=4, ep=4, attention_dp=attention_dp, isl=1000, osl=1000, concurrency=256)
    more = MOE.replace(vocab=MOE.vocab + 4096)
    assert weights_bytes_per_gpu(more, d) - weights_bytes_per_gpu(MOE, d) == 2 * 4096 * MOE.hidden * 2.0 / ways
    kw = dict(decode=256, context=1500, prefill_tokens=0, prefill_len=1000)
    ops = {o.name: o for o in step_ops(MOE, get_gpu("b200"), d, **kw)}
    assert ops["lm_head"].shape[:2] == (256 // (4 // ways), MOE.vocab // ways)  # sequences x vocab rows
    assert ("logits_all_gather" in ops) == (not attention_dp)


@pytest.mark.parametrize("attention_dp, ways", [(False, 4), (True, 1)])
def test_attention_dp_runs_the_dense_ffn_and_shared_experts_data_parallel(attention_dp, ways):
    # TensorRT-LLM under enable_attention_dp builds the dense MLP layers and the shared experts with tp size 1
    # (DeepseekV3 _compute_mlp_tp_size / _compute_shared_expert_tp_size, Llama4 overridden_tp_size=1): whole on
    # every rank over the rank's own tokens, with no collective; only the routed experts see every rank's tokens
    arch = MOE.replace(shared_experts=1, shared_expert_ffn=1024, dense_layers=1)
    d = Deployment(tp=4, ep=4, attention_dp=attention_dp, weights="bf16", activations="bf16", isl=1000, osl=1000,
                   concurrency=256)
    # weights: 512 more dense-FFN (or shared-expert) columns add 3 x 512 x hidden per layer holding them, / ways
    h, wb = arch.hidden, 2.0
    wider_ffn = arch.replace(ffn=arch.ffn + 512)
    assert weights_bytes_per_gpu(wider_ffn, d) - weights_bytes_per_gpu(arch, d) == 3 * 512 * h * wb / ways
    wider_shared = arch.replace(shared_expert_ffn=1024 + 512)
    assert weights_bytes_per_gpu(wider_shared, d) - weights_bytes_per_gpu(arch, d) == 3 * 3 * 512 * h * wb / ways
    kw = dict(decode=256, context=1500, prefill_tokens=0, prefill_len=1000)
    ops = {o.name: o for o in step_ops(arch, get_gpu("b200"), d, **kw)}
    own = 256 // (4 // ways)  # tokens through them on a GPU: its own 64 under attention-DP, all 256 under TP
    assert ops["gate_up_proj"].shape == (own, 2 * arch.ffn // ways, h)
    assert ops["shared_down"].shape == (own, h, 1024 // ways)
    dense_comm = {o.name for o in step_ops(arch.replace(experts=0, experts_per_token=0, shared_experts=0,
                                                        dense_layers=0), get_gpu("b200"), d.replace(ep=1), **kw)
                  if o.kind == "communication"}
    assert dense_comm == ({"attn_all_reduce", "ffn_all_reduce", "logits_all_gather"} if not attention_dp else set())
    # the MoE layers still gather every rank's tokens for the routed experts and scatter the outputs back
    moe_comm = {o.name for o in ops.values() if o.kind == "communication"}
    assert ({"ffn_all_gather", "ffn_reduce_scatter"} <= moe_comm) == attention_dp


def test_block_scaled_fp8_quantizes_each_dense_gemm_input_that_no_kernel_before_it_writes():
    gpu = get_gpu("h100")
    kw = dict(decode=8, context=1000, prefill_tokens=0, prefill_len=1000)
    tensor = Deployment(weights="fp8", activations="fp8", concurrency=8)
    block = tensor.replace(fp8_scaling="block")
    t_ops = {o.name: o for o in step_ops(MOE.replace(shared_experts=1), gpu, tensor, **kw)}
    b_ops = {o.name: o for o in step_ops(MOE.replace(shared_experts=1), gpu, block, **kw)}
    added = sorted(set(b_ops) - set(t_ops))
    # inputs from a norm or from attention; the down projections take the SwiGLU kernel's FP8 output and the
    # fused MoE quantizes in its permute
    assert added == ["o_proj_act_quant", "qkv_proj_act_quant", "shared_gate_up_act_quant"]
    assert all(b_ops[n].time_s == t_ops[n].time_s for n in t_ops)  # the other ops are unchanged
    # one kernel per layer each: bf16 in, fp8 out plus one fp32 scale per 128 values
    q = b_ops["o_proj_act_quant"]
    launch = gpu.kernel_overhead_s + block.runtime.kernel_gap_s
    assert q.count == MOE.layers
    assert q.bytes == pytest.approx(MOE.layers * 8 * MOE.heads * MOE.head_dim * (2 + 1 + 4 / 128))
    assert q.time_s == pytest.approx(q.bytes / (gpu.hbm_bytes_per_s * gpu.memory_efficiency) + MOE.layers * launch)
    # a dense FFN quantizes the gate/up input; MLA its fused qkv_a, q_b and o_proj inputs
    dense = {o.name for o in step_ops(SMALL, gpu, block, **kw)} - {o.name for o in step_ops(SMALL, gpu, tensor, **kw)}
    assert dense == {"qkv_proj_act_quant", "o_proj_act_quant", "gate_up_proj_act_quant"}
    mla = Architecture(hidden=2048, layers=2, heads=16, ffn=4096, vocab=32000,
                       mla=MLA(q_lora_rank=512, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                               v_head_dim=128))
    prompt = dict(decode=8, context=1000, prefill_tokens=512, prefill_len=512)
    m = {o.name for o in step_ops(mla, gpu, block, **prompt)} - {o.name for o in step_ops(mla, gpu, tensor, **prompt)}
    assert m == {"qkv_a_proj_act_quant", "q_b_proj_act_quant", "kv_b_proj_act_quant", "o_proj_act_quant",
                 "gate_up_proj_act_quant"}
    assert predict(MOE, gpu, block).tpot_s > predict(MOE, gpu, tensor).tpot_s


def test_block_scaling_needs_fp8_activations():
    with pytest.raises(ValueError, match="activations='fp8'"):
        Deployment(weights="fp8", activations="nvfp4", fp8_scaling="block")
    with pytest.raises(ValueError, match="fp8_scaling='row'"):
        Deployment(weights="fp8", activations="fp8", fp8_scaling="row")


@pytest.mark.parametrize("scaling", ["tensor", "block"])
def test_shared_experts_run_beside_the_routed_ones_paying_their_bytes_but_not_their_launches(scaling):
    # TensorRT-LLM (maybe_execute_in_parallel on an auxiliary stream) and SGLang (dual-stream MoE) run the
    # shared experts beside the longer routed chain: at batch 1, where launches dominate, they add only the
    # time their weights take to stream
    gpu = get_gpu("h100")
    d = Deployment(weights="fp8", activations="fp8", fp8_scaling=scaling, concurrency=1)
    kw = dict(decode=1, context=1000, prefill_tokens=0, prefill_len=1000)
    plain = MOE.replace(shared_experts=0)
    shared = MOE.replace(shared_experts=1)
    ops = {o.name: o for o in step_ops(shared, gpu, d, **kw)}
    bw = gpu.hbm_bytes_per_s * gpu.memory_efficiency * d.runtime.bandwidth_efficiency
    side = [n for n in ops if n.startswith("shared_")]
    assert sorted(side) == sorted(["shared_gate_up", "shared_activation", "shared_down"]
                                  + (["shared_gate_up_act_quant"] if scaling == "block" else []))
    for n in side:  # memory-bound at one token: bytes at the HBM rate, no per-kernel overhead
        assert ops[n].time_s == pytest.approx(ops[n].bytes / bw)
    added = sum(step_time(shared, gpu, d, **kw).values()) - sum(step_time(plain, gpu, d, **kw).values())
    assert added == pytest.approx(sum(ops[n].time_s for n in side))
    launch = gpu.kernel_overhead_s + d.runtime.kernel_gap_s
    assert added < len(side) * MOE.layers * launch  # less than their launches alone would have cost


def test_a_prompt_iteration_outside_a_cuda_graph_waits_on_each_kernel_launch():
    """The iterations carrying a new prompt run eagerly: every kernel takes at least Runtime.eager_launch_s (bound
    "host" where the launch is longer), fused work launches nothing, and decode iterations (captured in a graph)
    do not change; the request's time off the GPU adds to TTFT once."""
    gpu = get_gpu("b200")
    base = Runtime(eager_launch_s=0.0, first_token_overhead_s=0.0)
    slow = dataclasses.replace(base, eager_launch_s=1e-3)
    kw = dict(decode=0.0, context=128.0, prefill_tokens=16.0, prefill_len=16.0, prompt_ranks=1)
    d0 = Deployment(tp=2, isl=16, osl=64, concurrency=1, runtime=base)
    d1 = d0.replace(runtime=slow)
    graph = {o.name: o for o in step_ops(SMALL, gpu, d1, **kw)}
    eager = {o.name: o for o in step_ops(SMALL, gpu, d1, eager=True, **kw)}
    assert graph.keys() == eager.keys()
    fused = {"attn_norm", "ffn_norm", "final_norm"}  # under TP each rides the all-reduce before it
    for name, o in eager.items():
        g = graph[name]
        if name in fused:  # no launch of its own
            assert o.time_s == g.time_s and o.bound == g.bound
        else:  # 16 tokens of a small model: every kernel is far shorter than a 1 ms launch
            assert g.time_s < 1e-3 * o.count and o.time_s == pytest.approx(1e-3 * o.count) and o.bound == "host"
    p0, p1 = predict(SMALL, gpu, d0), predict(SMALL, gpu, d1)
    assert p1.tpot_s == p0.tpot_s and p1.output_tokens_per_s_per_gpu == p0.output_tokens_per_s_per_gpu
    launches = sum(o.count for o in eager.values() if o.name not in fused)
    assert p1.ttft_s - p0.ttft_s == pytest.approx(launches * 1e-3 - sum(graph[n].time_s for n in eager
                                                                         if n not in fused))
    away = predict(SMALL, gpu, d0.replace(runtime=dataclasses.replace(base, first_token_overhead_s=0.05)))
    assert away.ttft_s == pytest.approx(p0.ttft_s + 0.05) and away.tpot_s == p0.tpot_s


def test_mla_reads_its_compressed_projections_in_one_gemm_and_normalizes_both_latents():
    """W_DQ, W_DKV and W_KR read the same hidden state, so the runtimes run them as one GEMM (TensorRT-LLM's
    Fuse_A_GEMM, SGLang's fused_qkv_a_proj_with_mqa); the query and KV latents each get an RMSNorm, the KV one on
    a side stream (its bytes count, its launch overlaps). Without a query LoRA (DeepSeek-V2-Lite) the query
    projection is sharded over the TP ranks and kv_a_proj is not, so they stay two GEMMs."""
    gpu = get_gpu("b200")
    m = MLA(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    mla = Architecture(hidden=7168, layers=2, heads=128, ffn=18432, vocab=32000, mla=m)
    d = Deployment(tp=8, weights="fp8", activations="fp8", isl=1024, osl=1024, concurrency=1)
    ops = {o.name: o for o in step_ops(mla, gpu, d, decode=1, context=1024, prefill_tokens=0, prefill_len=1024)}
    assert "q_a_proj" not in ops and "kv_a_proj" not in ops
    assert ops["qkv_a_proj"].shape == (1, 1536 + 512 + 64, 7168) and ops["qkv_a_proj"].count == 2
    launch = gpu.kernel_overhead_s + d.runtime.kernel_gap_s
    bw = gpu.hbm_bytes_per_s * gpu.memory_efficiency * d.runtime.bandwidth_efficiency
    q_norm, kv_norm = ops["q_a_norm"], ops["kv_a_norm"]
    assert q_norm.bytes == 2 * 1536 * 2 * 2 and kv_norm.bytes == 2 * 512 * 2 * 2  # bf16 in and out, 2 layers
    assert q_norm.time_s == pytest.approx(q_norm.bytes / bw + 2 * launch)
    assert kv_norm.time_s == pytest.approx(kv_norm.bytes / bw)  # side stream: no launch on the chain
    lite = mla.replace(mla=dataclasses.replace(m, q_lora_rank=0))  # DeepSeek-V2-Lite: no query LoRA
    ops = {o.name for o in step_ops(lite, gpu, d, decode=1, context=1024, prefill_tokens=0, prefill_len=1024)}
    assert {"q_proj", "kv_a_proj", "kv_a_norm"} <= ops and not {"qkv_a_proj", "q_a_norm"} & ops


@pytest.mark.parametrize("pp", [1, 2])
def test_poisson_arrivals_add_the_wait_of_the_iteration_level_prompt_queue(pp):
    steady = Deployment(weights="fp8", activations="fp8", isl=2048, osl=128, pp=pp, concurrency=64)
    poisson = steady.replace(arrivals="poisson")
    a, p = predict(SMALL, "h100", steady), predict(SMALL, "h100", poisson)
    assert (a.tpot_s, a.output_tokens_per_s_per_gpu) == (p.tpot_s, p.output_tokens_per_s_per_gpu)
    assert a.ttft_p99_s == a.ttft_s  # steady: every request waits alike
    # the queue by hand: 64 / (OSL x TPOT) prompts per second; a round of the pp micro-batches of 64 / pp
    # requests carries up to `room` prompt tokens each, taking pp stage steps plus the host's time
    rt, gpu = Runtime(), get_gpu("h100")
    mb = 64 / pp
    room = rt.max_num_tokens - mb
    host = rt.iteration_overhead_s + rt.request_overhead_s * 64

    def round_s(tokens):
        return pp * sum(step_time(SMALL, gpu, poisson, decode=mb, context=2048 + 64, prefill_tokens=tokens,
                                  prefill_len=2048).values()) + host

    rate = 64 / (128 * p.tpot_s)
    rho = rate * 2048 / (pp * room) * round_s(room)
    assert 0.1 < rho < 0.9  # a load where the queue matters
    wait, wait99 = iteration_queue_wait(rate, 2048, pp * room, round_s(0), round_s(room), 0.99)
    assert p.ttft_s == pytest.approx(a.ttft_s + wait)
    assert p.ttft_p99_s == pytest.approx(a.ttft_s + wait99)
    # it waits at least for the iteration in progress (half a decode-only round) and the M/D/1 queue ahead
    service = 2048 / (pp * room) * round_s(room)
    assert wait > round_s(0) / 2 + rho * service / (2 * (1 - rho))
    # a request's TPOT: the decode-only round plus the prompts admitted while it decodes, Poisson with mean b
    assert a.tpot_p99_s == a.tpot_s  # steady: every request decodes beside the same mix
    assert p.tpot_p99_s == pytest.approx(round_s(0) + (p.tpot_s - round_s(0)) * poisson_quantile(64, 0.99) / 64)
    assert p.tpot_p99_s > p.tpot_s
    (busy,) = [float(n.split("busy ")[1].split("%")[0]) for n in p.notes if n.startswith("Poisson arrivals:")]
    assert abs(busy - 100 * rho) <= 0.5 + 1e-9  # the note's whole per cent, whichever way it rounds
    assert p.to_dict()["ttft_p99_ms"] == p.ttft_p99_s * 1e3 and p.to_dict()["tpot_p99_ms"] == p.tpot_p99_s * 1e3


def test_poisson_prompts_run_on_the_attention_dp_ranks_the_router_picks():
    # under attention-DP a prompt runs on its request's rank. Steady arrivals (and the fixed-length benchmark
    # runs they stand for) keep the ranks in step, spreading the prompt work evenly; Poisson arrivals come a few
    # at a time, the router spreads each iteration's prompts over the ranks, and the busiest rank's attention
    # paces the whole step
    steady = Deployment(tp=4, ep=4, attention_dp=True, weights="fp8", activations="fp8", isl=512, osl=256,
                        concurrency=256)
    poisson = steady.replace(arrivals="poisson")
    gpu, rt = get_gpu("h100"), Runtime()
    a, p = predict(MOE, gpu, steady), predict(MOE, gpu, poisson)
    # short prompts (at most half a rank's room): a Poisson count of whole prompts per iteration, ceil(n / ranks)
    # on the busiest rank (prompt_counts), the step costed at each count, not at the mean count
    room = math.floor(rt.max_num_tokens - 256 / 4)
    rows = prompt_counts(256 / 256, 4, room // 512)  # one prompt per iteration on average
    assert [n for _, n, _ in rows[:3]] == [0, 1, 2] and rows[2][2] == 1.0  # the router spreads them
    host = rt.iteration_overhead_s + rt.request_overhead_s * 256 / 4

    def step(tokens, ranks=None):
        return sum(step_time(MOE, gpu, poisson, decode=256, context=512 + 128, prefill_tokens=tokens, prefill_len=512,
                             prompt_ranks=ranks).values())

    by_hand = sum(share * step(n * 512, n / busiest if n else None) for share, n, busiest in rows)
    assert p.tpot_s == pytest.approx(by_hand + host, rel=1e-12)
    # the step at the mean count of those with some (1.58 prompts) is not the mean step
    some = sum(share * n for share, n, _ in rows[1:]) / (1 - rows[0][0])
    at_mean = rows[0][0] * step(0) + (1 - rows[0][0]) * step(some * 512, some / rows[2][2])
    assert abs(at_mean + host - p.tpot_s) > 1e-3 * p.tpot_s
    assert p.tpot_s > a.tpot_s  # the busiest rank's prompts, not a quarter of all of them
    assert any(n.startswith("Poisson arrivals: prompts keep each attention-DP rank busy") for n in p.notes)
    # without attention-DP nothing changes but the queue: the prompt work spreads over the TP ranks anyway
    tp = steady.replace(attention_dp=False)
    assert predict(MOE, gpu, tp.replace(arrivals="poisson")).tpot_s == predict(MOE, gpu, tp).tpot_s
    # long prompts keep a rank busy with a full chunk for ISL / chunk iterations, and busy ranks cluster
    # (busy_ranks): TPOT and the queue grow further beyond the even spread's
    long = dict(isl=8192, osl=256, concurrency=64)
    a, p = predict(MOE, gpu, steady.replace(**long)), predict(MOE, gpu, poisson.replace(**long))
    assert p.tpot_s > 1.1 * a.tpot_s and p.ttft_s > a.ttft_s


def test_op_table_sums_the_weighted_iterations_one_row_per_op():
    # a Poisson prediction under attention-DP weighs a dozen iteration kinds: its op table keeps one row per
    # (op, phase), and the decode rows add up to the iteration TPOT is made of (less the host's time)
    rt = Runtime()
    for isl, concurrency in ((512, 256), (8192, 64)):
        d = Deployment(tp=4, ep=4, attention_dp=True, weights="fp8", activations="fp8", isl=isl, osl=256,
                       concurrency=concurrency, arrivals="poisson")
        p = predict(MOE, "h100", d)
        keys = [(o.name, o.phase) for o in p.ops]
        assert len(keys) == len(set(keys))
        host = rt.iteration_overhead_s + rt.request_overhead_s * concurrency / 4
        decode = sum(o.time_s for o in p.ops if o.phase == "decode")
        assert decode + host == pytest.approx(p.tpot_s, rel=1e-12)
        assert {o.phase for o in p.ops} == {"decode", "prefill"}


def test_poisson_arrivals_pass_by_batches_whose_prompts_outrun_the_prefill():
    d = Deployment(weights="fp8", activations="fp8", isl=8192, osl=16, arrivals="poisson")
    unstable = predict(SMALL, "h100", d.replace(concurrency=2048))
    assert unstable.ttft_s == math.inf and unstable.ttft_p99_s == math.inf
    assert any("grow without bound" in n for n in unstable.notes)
    best = max_throughput(SMALL, "h100", d)
    steady = max_throughput(SMALL, "h100", d.replace(arrivals="steady"))
    assert math.isfinite(best.ttft_s) and best.batch < steady.batch
    assert best.output_tokens_per_s_per_gpu < steady.output_tokens_per_s_per_gpu
    assert all(math.isfinite(q.ttft_p99_s) for q in pareto(SMALL, "h100", d, deployments=[d]))
    # a p99 bound picks a smaller batch still, and holds at it
    bound = max_throughput(SMALL, "h100", d, slo=SLO(max_ttft_p99_s=best.ttft_p99_s / 2))
    assert bound.ttft_p99_s <= best.ttft_p99_s / 2 and bound.batch < best.batch
    # and a p99 TPOT bound, on the spread of the requests' TPOTs
    bound = max_throughput(SMALL, "h100", d, slo=SLO(max_tpot_p99_s=best.tpot_p99_s * 0.9))
    assert bound.tpot_p99_s <= best.tpot_p99_s * 0.9 and bound.batch < best.batch


def test_burst_p99_ttft_is_the_wait_of_the_wave_s_99th_prompt():
    rt, gpu = Runtime(), get_gpu("b200")
    d = Deployment(isl=1024, osl=64, concurrency=100, arrivals="burst")
    p = predict(SMALL, "b200", d)
    per_iteration = rt.max_num_tokens // 1024  # whole prompts per iteration
    k = math.ceil(100 / per_iteration)  # iterations of the wave; the last holds 100 - (k - 1) x per_iteration
    # prompt 99 of 100 (the 99th percentile) has its first token in the last iteration: it waits through them all
    assert math.ceil(99 / per_iteration) == k
    step = lambda tokens: sum(step_time(SMALL, gpu, d, decode=0.0, context=1024 + 32, prefill_tokens=tokens,  # noqa: E731
                                        prefill_len=1024, prompt_ranks=1.0, eager=True).values())
    host = rt.iteration_overhead_s + rt.request_overhead_s * 100
    last = (100 - (k - 1) * per_iteration) * 1024
    expected = (k - 1) * step(rt.max_num_tokens) + step(last) + k * host + rt.first_token_overhead_s
    assert p.ttft_p99_s == pytest.approx(expected)
    assert p.ttft_s < p.ttft_p99_s
    one = predict(SMALL, "b200", d.replace(concurrency=1))
    assert one.ttft_p99_s == one.ttft_s


def test_activations_default_to_the_weights_format():
    assert Deployment().activations == "nvfp4"
    assert Deployment(weights="fp8").activations == "fp8"  # W8A8, not FP8 weights under NVFP4 activations
    assert Deployment(weights="bf16", activations="bf16").activations == "bf16"
    assert Deployment(weights="nvfp4", activations="fp8").activations == "fp8"
