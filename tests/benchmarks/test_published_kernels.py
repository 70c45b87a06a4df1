"""benchmarks/published_kernels.py: AIConfigurator's rows become calibrate_gpu cases (units, filters, the
runtime all-reduce marked "auto"), and the committed files in benchmarks/data/kernels load as calibrate_gpu
runs for catalog GPUs, with their source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import calibrate_gpu as cg  # benchmarks/ is on pytest's pythonpath (pyproject.toml)
import published_kernels as pk

from co_design.hardware import get_gpu

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "kernels"


def _gemm(**kw):
    row = {"gemm_dtype": "bfloat16", "kernel_source": "torch_flow", "m": 128, "n": 4096, "k": 4096, "latency": 0.02}
    return {**row, **kw}


def test_gemm_rows_become_seconds_on_the_grid_only() -> None:
    rows = [_gemm(), _gemm(gemm_dtype="fp8", m=129), _gemm(gemm_dtype="nvfp4", m=1),
            _gemm(gemm_dtype="fp8_block"),  # block-scaled fp8: another kernel, not on this grid
            _gemm(kernel_source="deepgemm"), _gemm(m=130), _gemm(n=4224)]
    cases = pk.gemm_cases(rows)
    assert [(c["params"]["precision"], c["params"]["m"]) for c in cases] == [("bf16", 128), ("fp8", 129), ("nvfp4", 1)]
    assert cases[0]["time_s"] == pytest.approx(20e-6)  # 0.02 ms
    assert all(cg.Measurement.from_json(c).ok for c in cases)


def test_all_reduce_rows_nccl_from_a_mebibyte_and_the_runtimes_own_as_auto_in_bytes() -> None:
    nccl = [{"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": 8, "message_size": 1 << 19, "latency": 0.03},
            {"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": 8, "message_size": 1 << 18, "latency": 0.02},
            {"op_name": "all_reduce", "nccl_dtype": "int8", "num_gpus": 8, "message_size": 1 << 20, "latency": 0.02},
            {"op_name": "all_gather", "nccl_dtype": "half", "num_gpus": 8, "message_size": 1 << 20, "latency": 0.02}]
    custom = [{"op_name": "all_reduce", "allreduce_dtype": "bfloat16", "num_gpus": 8, "message_size": 16384,
               "latency": 0.0061}]
    cases = [cg.Measurement.from_json(c) for c in pk.all_reduce_cases(nccl, custom)]
    # message_size counts 2-byte elements: 512 Ki elements are the first MiB
    assert [(m.group, m.params["bytes"]) for m in cases] == [("all_reduce", 1 << 20), ("all_reduce auto", 32768)]
    assert cases[1].seconds == pytest.approx(6.1e-6)


def test_attention_rows_keep_bf16_mha_and_count_the_new_token_in_the_cache() -> None:
    base = {"num_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "window_size": 0, "attn_dtype": "bfloat16",
            "kv_cache_dtype": "bfloat16", "kernel_source": "torch_flow", "latency": 0.05}
    ctx = [{**base, "batch_size": 1, "isl": 4096}, {**base, "batch_size": 1, "isl": 4096, "num_key_value_heads": 8},
           {**base, "batch_size": 1, "isl": 4096, "kv_cache_dtype": "fp8"}, {**base, "batch_size": 1, "isl": 512}]
    gen = [{**base, "batch_size": 16, "isl": 1, "step": 4095}, {**base, "batch_size": 16, "isl": 1, "step": 4096}]
    cases = [cg.Measurement.from_json(c) for c in pk.attention_cases(ctx, gen)]
    assert [(m.group, m.params["q_len"], m.params["kv_len"]) for m in cases] == [
        ("attention prefill", 4096, 4096), ("attention decode", 1, 4096)]
    assert cases[0].params["causal"] and not cases[1].params["causal"]


def test_a_repeated_shape_keeps_its_median_time() -> None:
    cases = pk.gemm_cases([_gemm(latency=t) for t in (0.01, 0.03, 0.02)])
    assert [c["time_s"] for c in pk._dedupe(cases)] == [pytest.approx(20e-6)]


def test_the_file_text_is_the_document() -> None:
    doc = pk.document("h100", "NVIDIA H100 80GB HBM3", pk.gemm_cases([_gemm(), _gemm(m=1)]), {"gemm": "x/gemm_perf.parquet"})
    assert json.loads(pk.dumps(doc)) == doc
    assert pk.dumps(doc).count("\n") == 9  # {, format, gpu, device, "measurements": [, two cases, ], } and the last newline


def test_moe_rows_keep_the_validated_shapes_balanced_on_at_most_eight_gpus() -> None:
    row = {"hidden_size": 4096, "inter_size": 1536, "topk": 8, "num_experts": 128, "moe_dtype": "fp8",
           "moe_tp_size": 2, "moe_ep_size": 4, "distribution": "balanced", "kernel_source": "moe_torch_flow_cutlass",
           "num_tokens": 64, "latency": 0.1}
    block = {**row, "moe_dtype": "fp8_block", "kernel_source": "deepgemm", "latency": 0.2}
    rows = [row, {**row, "distribution": "power_law_1.2"}, {**row, "moe_ep_size": 8}, {**row, "num_tokens": 65},
            {**row, "inter_size": 1024}, {**row, "kernel_source": "deepgemm"}, {**row, "moe_dtype": "w4a16_mxfp4"},
            block, {**block, "kernel_source": "moe_torch_flow_nongated"}]
    cases = pk.moe_cases(rows)
    # per-tensor FP8 on the CUTLASS path only; block FP8 also on DeepGEMM (Blackwell's path for it)
    case = {"model": "Qwen3-235B-A22B", "precision": "fp8", "tokens": 64, "hidden": 4096, "expert_ffn": 1536,
            "top_k": 8, "experts": 128, "moe_tp": 2, "moe_ep": 4, "time_s": pytest.approx(1e-4)}
    assert cases == [case, {**case, "precision": "fp8_block", "time_s": pytest.approx(2e-4)}]


def test_runtime_moe_rows_keep_block_fp8_of_the_validated_shapes_at_few_tokens_with_their_kernel() -> None:
    row = {"hidden_size": 7168, "inter_size": 2048, "topk": 8, "num_experts": 256, "moe_dtype": "fp8_block",
           "moe_tp_size": 8, "moe_ep_size": 1, "distribution": "balanced", "kernel_source": "sglang_fused_moe_triton",
           "num_tokens": 4, "latency": 0.05}
    rows = [row, {**row, "moe_dtype": "fp8"}, {**row, "distribution": "power_law_1.01"}, {**row, "num_tokens": 256},
            {**row, "moe_ep_size": 2}, {**row, "num_experts": 384}, {**row, "moe_tp_size": 1, "moe_ep_size": 8,
                                                                     "kernel_source": "other_kernel", "latency": 0.1}]
    cases = pk.runtime_moe_cases(rows, "SGLang", "0.5.14")
    case = {"runtime": "SGLang", "version": "0.5.14", "kernel": "sglang_fused_moe_triton", "model": "DeepSeek-R1",
            "precision": "fp8_block", "tokens": 4, "hidden": 7168, "expert_ffn": 2048, "top_k": 8, "experts": 256,
            "moe_tp": 8, "moe_ep": 1, "time_s": pytest.approx(5e-5)}
    # sorted by GPUs, then EP: TP8 (EP1) before EP8 at one GPU count
    assert cases == [case, {**case, "kernel": "other_kernel", "moe_tp": 1, "moe_ep": 8, "time_s": pytest.approx(1e-4)}]


def _context(**kw):
    row = {"attn_dtype": "fp8", "kv_cache_dtype": "fp8", "head_dim": 128, "window_size": 0, "kernel_source": "torch_flow",
           "isl": 1024, "batch_size": 2, "num_heads": 16, "num_key_value_heads": 4, "latency": 0.05}
    return {**row, **kw}


def test_prefill_attention_rows_keep_matching_dtypes_at_head_dim_128_filling_the_sms() -> None:
    rows = [_context(), _context(attn_dtype="bfloat16", kv_cache_dtype="bfloat16", latency=0.08),
            _context(latency=0.07), _context(latency=0.06),  # repeats: the median time stays
            _context(attn_dtype="bfloat16"),  # bf16 attention over an fp8 cache: not a kernel the model runs
            _context(head_dim=64), _context(window_size=128), _context(kernel_source="torch_flow_flashinfer"),
            _context(isl=128),  # one query tile
            _context(batch_size=1, num_heads=8, isl=1024),  # 64 query tiles: under one wave of 132 SMs
            _context(batch_size=1, num_heads=17, isl=1024)]  # 136 tiles
    got = pk.prefill_attention_rows(rows, sms=132)
    assert got == [["bf16", 2, 1024, 16, 4, pytest.approx(80e-6)], ["fp8", 1, 1024, 17, 4, pytest.approx(50e-6)],
                   ["fp8", 2, 1024, 16, 4, pytest.approx(60e-6)]]
    doc = {"format": pk.PREFILL_FORMAT, "gpu": "h100", "columns": list(pk.PREFILL_COLUMNS), "rows": got}
    assert json.loads(pk.dumps_rows(doc)) == doc and pk.dumps_rows(doc).count("\n") == 10


def _generation(**kw):
    row = {"attn_dtype": "bfloat16", "kv_cache_dtype": "fp8", "head_dim": 128, "window_size": 0,
           "kernel_source": "torch_flow", "isl": 1, "step": 1023, "batch_size": 8, "num_heads": 32,
           "num_key_value_heads": 8, "latency": 0.05}
    return {**row, **kw}


def test_decode_attention_rows_keep_grouped_query_calls_at_head_dim_128() -> None:
    rows = [_generation(), _generation(kv_cache_dtype="bfloat16", latency=0.08),
            _generation(latency=0.07), _generation(latency=0.06),  # repeats: the median time stays
            _generation(num_heads=128, num_key_value_heads=8, latency=0.02),  # 16 query heads per KV head: kept
            _generation(num_heads=8),  # one query head per KV head: the MHA kernel, another law
            _generation(num_heads=136),  # 17 per KV head
            _generation(num_heads=12),  # 1.5 per KV head
            _generation(kv_cache_dtype="nvfp4"), _generation(attn_dtype="fp8"), _generation(head_dim=64),
            _generation(window_size=128), _generation(kernel_source="torch_flow_flashinfer")]
    got = pk.decode_attention_rows(rows)
    assert got == [["bf16", 8, 32, 8, 1024, pytest.approx(80e-6)], ["fp8", 8, 32, 8, 1024, pytest.approx(60e-6)],
                   ["fp8", 8, 128, 8, 1024, pytest.approx(20e-6)]]
    doc = {"format": pk.DECODE_FORMAT, "gpu": "h100", "columns": list(pk.DECODE_COLUMNS), "rows": got}
    assert json.loads(pk.dumps_rows(doc)) == doc


def _mla(**kw):
    row = {"mla_dtype": "bfloat16", "kv_cache_dtype": "fp8", "kernel_source": "default", "isl": 1, "step": 1023,
           "batch_size": 8, "num_heads": 16, "tp_size": 8, "latency": 0.05}
    return {**row, **kw}


def test_decode_mla_rows_keep_bf16_attention_over_bf16_or_fp8_latent_caches() -> None:
    rows = [_mla(), _mla(kv_cache_dtype="bfloat16", latency=0.08), _mla(latency=0.07), _mla(latency=0.06),
            _mla(num_heads=128, tp_size=1, latency=0.02), _mla(step=4095, latency=0.1),
            _mla(mla_dtype="fp8"), _mla(kv_cache_dtype="nvfp4"), _mla(kernel_source="flashinfer")]
    got = pk.decode_mla_rows(rows)
    # heads on the GPU and cached tokens (isl + step); a repeated call keeps its median time
    assert got == [["bf16", 8, 16, 1024, pytest.approx(80e-6)], ["fp8", 8, 16, 1024, pytest.approx(60e-6)],
                   ["fp8", 8, 16, 4096, pytest.approx(100e-6)], ["fp8", 8, 128, 1024, pytest.approx(20e-6)]]
    doc = {"format": pk.MLA_FORMAT, "gpu": "h100", "columns": list(pk.MLA_COLUMNS), "rows": got}
    assert json.loads(pk.dumps_rows(doc)) == doc


def test_prefill_mla_rows_keep_prompts_whose_query_tiles_fill_the_gpu() -> None:
    rows = [_mla(isl=1024, step=0), _mla(isl=1024, step=0, latency=0.3), _mla(isl=1024, step=0, latency=0.2),
            _mla(isl=1024, step=0, kv_cache_dtype="bfloat16", latency=0.4),
            _mla(isl=128, step=0),  # one partial query tile
            _mla(isl=256, step=0, batch_size=1, num_heads=16),  # 1 x 16 x 2 = 32 query tiles < 132 SMs
            _mla(isl=256, step=0, batch_size=8, num_heads=16, latency=0.05),  # 8 x 16 x 2 = 256 tiles
            _mla(isl=1024, step=0, mla_dtype="fp8"), _mla(isl=1024, step=0, kernel_source="flashinfer")]
    got = pk.prefill_mla_rows(rows, sms=132)
    assert got == [["bf16", 8, 1024, 16, pytest.approx(400e-6)], ["fp8", 8, 256, 16, pytest.approx(50e-6)],
                   ["fp8", 8, 1024, 16, pytest.approx(200e-6)]]
    doc = json.loads((DATA / "prefill_mla_h200.json").read_text())
    assert doc["format"] == pk.PREFILL_MLA_FORMAT and doc["columns"] == list(pk.PREFILL_MLA_COLUMNS)
    assert doc["source"]["table"].endswith("mla/trtllm/1.3.0rc20/context_mla_perf.parquet")
    assert {r[0] for r in doc["rows"]} == {"bf16", "fp8"} and all(r[2] >= pk.PREFILL_MIN_ISL for r in doc["rows"])


@pytest.mark.parametrize("path", sorted(p for p in DATA.glob("*.json")
                                        if not p.name.startswith(("moe_", "runtime_moe_", "prefill_attention_",
                                                                 "decode_attention_", "decode_mla_",
                                                                 "prefill_mla_"))),
                         ids=lambda p: p.stem)
def test_committed_files_are_calibrate_gpu_runs_with_their_source(path: Path) -> None:
    name, meta, ms = cg.load_measurements(path)
    assert name == path.stem and get_gpu(name).name == name
    assert meta["source"]["repository"] == pk.REPOSITORY and meta["source"]["license"] == "Apache-2.0"
    assert all(t.startswith("aiconfigurator_core/systems/data/") for t in meta["source"]["tables"].values())
    groups = {m.group for m in ms}
    assert {"gemm bf16", "gemm fp8", "attention prefill", "attention decode", "all_reduce", "all_reduce auto"} <= groups
    assert ("gemm nvfp4" in groups) == ("nvfp4" in get_gpu(name).peak_flops_per_s)
    assert all(m.ok for m in ms)
    keys = [json.dumps([m.kind, m.params], sort_keys=True) for m in ms]
    assert len(keys) == len(set(keys))  # one time per case


def test_the_sm_counts_of_the_prefill_filter_are_the_catalogs() -> None:
    # published_kernels.py runs outside the project's environment, so it keeps its own SM counts: they must agree
    assert {pk.SYSTEMS[s]: n for s, n in pk.SYSTEM_SMS.items()} == {g: get_gpu(g).sms for g in pk.SYSTEMS.values()}
