"""NVIDIA's published per-kernel silicon measurements, as ``calibrate_gpu.py`` runs (issue #10 item 7).

``benchmarks/calibrate_gpu.py`` measures GEMMs, attention and all-reduce on the CUDA GPU at hand. No
GPU has been lent to this project yet, but NVIDIA publishes the same kind of measurements for its own
GPUs: the perf database of AIConfigurator (github.com/ai-dynamo/aiconfigurator, Apache-2.0), in the
``aiconfigurator-core`` wheel under ``aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/``
(Parquet tables, latency in milliseconds, one row per measured kernel call). This script copies a
subset of those rows into the measurement files ``calibrate_gpu.py --from-json`` reads, so the
calibration fit and its predicted-vs-measured report run from a clone on any machine:

* GEMMs (``gemm_perf``, TensorRT-LLM 1.3.0rc20, ``kernel_source`` ``torch_flow``): bf16, fp8
  (per-tensor scales) and nvfp4 (Blackwell), M in :data:`GEMM_M` (with the 128 -> 129 and
  256 -> 257 tile-row crossings), N and K in :data:`GEMM_NK`.
* All-reduce (``nccl_perf``, NCCL, ``all_reduce``, fp16, 2-8 GPUs): message sizes from 1 MiB up, the
  NCCL regime ``calibrate_gpu.py`` fits (two synchronization steps); AIConfigurator's ``message_size``
  counts 2-byte elements, so bytes are twice it. TensorRT-LLM's own custom
  all-reduce (``custom_allreduce_perf``, every size from 256 B) goes in as cases with
  ``"algorithm": "auto"``: the model's one-shot / two-shot choice, reported, not fitted.
* Attention (TensorRT-LLM 1.3.0rc20): prefill (``context_attention_perf``) and decode
  (``generation_attention_perf``) in bf16 with a bf16 KV cache, no window, head_dim 128, as many
  KV heads as query heads (the case ``calibrate_gpu.attention_work`` counts), heads in
  :data:`ATTENTION_HEADS`.

* Prefill attention for the serving model's kernel law (``context_attention_perf``, TensorRT-LLM 1.3.0rc20,
  ``torch_flow``): head_dim 128, no window, bf16 attention over a bf16 KV cache and FP8 attention over an FP8
  one (the FP8 context FMHA an FP8 KV cache runs), every batch, head and KV-head count measured, prompts from
  :data:`PREFILL_MIN_ISL` tokens whose query tiles fill the GPU's SMs at least once (``batch x heads x
  ceil(isl / 128) >= SMs``), to ``prefill_attention_<gpu>.json``, read by
  ``benchmarks/fit_prefill_attention.py``.
* Decode attention for the same law's decode half (``generation_attention_perf``, TensorRT-LLM 1.3.0rc20,
  ``torch_flow``): head_dim 128, no window, bf16 attention over a bf16 or an FP8 KV cache, grouped-query calls
  (:data:`DECODE_GROUPS` query heads per KV head: the grouped kernel a GQA model runs; one KV head per query head
  is another kernel), every batch, head count and cached length measured, to ``decode_attention_<gpu>.json``, read
  by ``benchmarks/fit_decode_attention.py``.
* Decode MLA attention for the law's MLA half (``generation_mla_perf`` in ``mla/trtllm/1.3.0rc20``, the absorbed,
  MQA-like decode kernel over the shared latent cache): DeepSeek-V3's MLA (kv_lora_rank 512, qk_rope_head_dim 64:
  the shape AIConfigurator's MLA collector times; its module table names ``deepseek-ai/DeepSeek-V3``), bf16
  attention over a bf16 or an FP8 latent cache, 1-128 query heads on the GPU (128 / TP), every batch and cached
  length measured, to ``decode_mla_<gpu>.json``, read by ``benchmarks/fit_decode_attention.py``.
* Prefill MLA attention (``context_mla_perf``, the same directory): the causal prompt kernel of the same MLA, every
  query head over its own expanded key (qk_nope 128 + rope 64) and value (128), bf16 attention over a bf16 or an FP8
  latent cache, 1-128 query heads on the GPU, prompts from :data:`PREFILL_MIN_ISL` tokens whose query tiles fill the
  SMs at least once, to ``prefill_mla_<gpu>.json``, read by ``benchmarks/fit_prefill_attention.py``.

* MoE layers (``moe_perf``, TensorRT-LLM 1.3.0rc20, the paths of :data:`MOE_KERNELS`, balanced routing): the
  expert shapes of the MoE models in ``published_serving.json`` (:data:`MOE_SHAPES`), bf16 / fp8 (per-tensor) /
  ``fp8_block`` (FP8 with one scale per 128 values, the format of the DeepSeek-V3/R1 and Qwen3 FP8 checkpoints;
  Hopper and Blackwell) / nvfp4,
  :data:`MOE_TOKENS` tokens into the layer on one GPU, every MoE TP x EP split of 1-8 GPUs. One call is the
  whole fused MoE op on one rank (permute, both grouped GEMMs, finalize), read here as ``num_tokens`` tokens
  entering the layer on that GPU, which computes the experts it holds (AIConfigurator's collector builds the
  rank's MoE module from a TP x EP mapping and times it on one GPU). They go to ``moe_<gpu>.json``, read by
  ``benchmarks/validate_moe.py`` (not a ``calibrate_gpu.py`` case).
* The same package's SGLang 0.5.14 and vLLM 0.24.0 MoE tables (:data:`RUNTIME_MOE`): their block-FP8 layers of
  :data:`MOE_SHAPES` at :data:`RUNTIME_MOE_TOKENS` tokens, each with the kernel the runtime ran, to
  ``runtime_moe_<gpu>.json``: ``validate_moe.py`` compares how each runtime takes a TP split against an EP split.

The hardware-specific part needs pandas and pyarrow, which the project does not depend on; run it in
a scratch virtualenv (the Parquet files are in the wheel; no AIConfigurator code runs)::

    python3 -m venv /tmp/pq && /tmp/pq/bin/pip install pandas pyarrow
    pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic && unzip -q /tmp/aic/*.whl -d /tmp/aic/core
    /tmp/pq/bin/python benchmarks/published_kernels.py /tmp/aic/core/aiconfigurator_core/systems/data

It writes ``benchmarks/data/kernels/<gpu>.json`` (one per catalog GPU AIConfigurator measured). Then,
in the project's environment::

    python benchmarks/calibrate_gpu.py --from-json benchmarks/data/kernels/b200.json \\
        --out benchmarks/results/calibration_published
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "data" / "kernels"
FORMAT = "co-design calibrate_gpu v1"  # calibrate_gpu.FORMAT (not imported: this runs outside the project's venv)
PACKAGE = "aiconfigurator-core 0.12.0"
REPOSITORY = "https://github.com/ai-dynamo/aiconfigurator"
# AIConfigurator system directory -> catalog GPU
SYSTEMS = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
           "gb300": "gb300"}
TRTLLM = "1.3.0rc20"  # the TensorRT-LLM collection every one of these systems has for GEMM and attention
GEMM_M = (1, 16, 64, 128, 129, 256, 257, 512, 1024, 2048, 4096, 8192, 16384)
GEMM_NK = (1024, 2048, 4096, 7168, 8192, 16384)
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "nvfp4": "nvfp4"}
NCCL_MIN_BYTES = 1 << 20  # NCCL all-reduce from 1 MiB: the two-step regime calibrate_gpu fits
ELEMENT_BYTES = {"half": 2, "bfloat16": 2}  # AIConfigurator's message_size counts elements of the table's dtype
MOE_SHAPES = {(4096, 1536, 8, 128): "Qwen3-235B-A22B", (2048, 768, 8, 128): "Qwen3-30B-A3B",
              (7168, 2048, 8, 256): "DeepSeek-R1", (5120, 8192, 1, 128): "Llama-4-Maverick-17B-128E",
              (5120, 8192, 1, 16): "Llama-4-Scout-17B-16E", (4096, 14336, 2, 8): "Mixtral-8x7B"}
MOE_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
MOE_DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "nvfp4": "nvfp4"}
# the MoE path TensorRT-LLM runs for each format: CUTLASS, and for block FP8 also DeepGEMM, the only path
# AIConfigurator measured it on for Blackwell (Hopper's block-FP8 MoE is CUTLASS)
MOE_KERNELS = {"bf16": ("moe_torch_flow_cutlass",), "fp8": ("moe_torch_flow_cutlass",),
               "fp8_block": ("moe_torch_flow_cutlass", "deepgemm"), "nvfp4": ("moe_torch_flow_cutlass",)}
MOE_FORMAT = "co-design published MoE v1"
# the other runtimes' MoE databases in the same package: their block-FP8 MoE layers at few tokens, to compare how
# each runtime's kernels take a TP split against an EP split (validate_moe.py's runtime table)
RUNTIME_MOE = {"sglang": ("SGLang", "0.5.14"), "vllm": ("vLLM", "0.24.0")}
RUNTIME_MOE_TOKENS = (1, 4, 16, 64)
RUNTIME_MOE_FORMAT = "co-design published runtime MoE v1"
ATTENTION_HEADS = (8, 32)
PREFILL_FORMAT = "co-design published prefill attention v1"
PREFILL_COLUMNS = ("precision", "batch", "isl", "heads", "kv_heads", "time_s")
PREFILL_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}  # attention and KV-cache dtype, the same
PREFILL_MIN_ISL = 256  # two query tiles of 128 rows: shorter prompts are one partial tile
SYSTEM_SMS = {"h100_sxm": 132, "h200_sxm": 132, "b200_sxm": 148, "b300_sxm": 160, "gb200": 148, "gb300": 160}
PREFILL_BATCH = (1, 4)
DECODE_BATCH = (1, 16, 64, 256)
DECODE_FORMAT = "co-design published decode attention v1"
DECODE_COLUMNS = ("kv_cache", "batch", "heads", "kv_heads", "kv_len", "time_s")
DECODE_GROUPS = range(2, 17)  # query heads per KV head of the calls kept
DECODE_KV = (1024, 4096, 16384)
MLA_FORMAT = "co-design published decode MLA v1"
MLA_COLUMNS = ("kv_cache", "batch", "heads", "kv_len", "time_s")
PREFILL_MLA_FORMAT = "co-design published prefill MLA v1"
PREFILL_MLA_COLUMNS = ("kv_cache", "batch", "isl", "heads", "time_s")


def _ms_to_s(latency_ms: float) -> float:
    return float(latency_ms) * 1e-3


def gemm_cases(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Measurement dicts (calibrate_gpu's JSON form) for the GEMM rows on the subset grid."""
    out = []
    for r in rows:
        prec = GEMM_DTYPES.get(r["gemm_dtype"])
        if (prec is None or r["kernel_source"] != "torch_flow" or r["m"] not in GEMM_M or r["n"] not in GEMM_NK
                or r["k"] not in GEMM_NK):
            continue
        out.append({"kind": "gemm", "params": {"precision": prec, "m": int(r["m"]), "n": int(r["n"]), "k": int(r["k"])},
                    "time_s": _ms_to_s(r["latency"]), "status": "ok"})
    return sorted(out, key=lambda c: (list(GEMM_DTYPES.values()).index(c["params"]["precision"]), c["params"]["k"],
                                      c["params"]["n"], c["params"]["m"]))


def all_reduce_cases(nccl_rows: Iterable[Mapping[str, Any]], custom_rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """NCCL all-reduce (fp16, from :data:`NCCL_MIN_BYTES`) as two-shot cases, and TensorRT-LLM's custom
    all-reduce (bf16, every size) as ``"algorithm": "auto"`` cases. ``message_size`` counts elements per GPU
    (AIConfigurator's collectors divide nccl-tests' bytes by the element size, and size the custom all-reduce's
    tensor in elements); ``bytes`` here is bytes per GPU."""
    out = []
    for r in nccl_rows:
        nbytes = int(r["message_size"]) * ELEMENT_BYTES.get(r["nccl_dtype"], 0)
        if r["op_name"] == "all_reduce" and r["nccl_dtype"] == "half" and nbytes >= NCCL_MIN_BYTES:
            out.append({"kind": "all_reduce", "params": {"bytes": nbytes, "gpus": int(r["num_gpus"])},
                        "time_s": _ms_to_s(r["latency"]), "status": "ok"})
    for r in custom_rows:
        if r["op_name"] == "all_reduce" and r["allreduce_dtype"] == "bfloat16":
            nbytes = int(r["message_size"]) * ELEMENT_BYTES["bfloat16"]
            out.append({"kind": "all_reduce", "params": {"bytes": nbytes, "gpus": int(r["num_gpus"]),
                                                         "algorithm": "auto"},
                        "time_s": _ms_to_s(r["latency"]), "status": "ok"})
    return sorted(out, key=lambda c: ("algorithm" in c["params"], c["params"]["gpus"], c["params"]["bytes"]))


def _mha_bf16(r: Mapping[str, Any]) -> bool:
    return (r["num_heads"] == r["num_key_value_heads"] and r["num_heads"] in ATTENTION_HEADS and r["head_dim"] == 128
            and r["window_size"] == 0 and r["attn_dtype"] == "bfloat16" and r["kv_cache_dtype"] == "bfloat16"
            and r["kernel_source"] == "torch_flow")


def attention_cases(context_rows: Iterable[Mapping[str, Any]], generation_rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Causal prefill of ``isl`` tokens and one-token decode over ``step + 1`` cached tokens (the new
    token's own included), MHA bf16 rows only (see the module docstring)."""
    out = []
    for r in context_rows:
        if _mha_bf16(r) and r["batch_size"] in PREFILL_BATCH and r["isl"] >= 1024:
            out.append({"kind": "attention", "params": {
                "phase": "prefill", "batch": int(r["batch_size"]), "heads": int(r["num_heads"]), "head_dim": 128,
                "q_len": int(r["isl"]), "kv_len": int(r["isl"]), "causal": True},
                "time_s": _ms_to_s(r["latency"]), "status": "ok"})
    for r in generation_rows:
        if _mha_bf16(r) and r["batch_size"] in DECODE_BATCH and r["step"] + 1 in DECODE_KV:
            out.append({"kind": "attention", "params": {
                "phase": "decode", "batch": int(r["batch_size"]), "heads": int(r["num_heads"]), "head_dim": 128,
                "q_len": 1, "kv_len": int(r["step"]) + 1, "causal": False},
                "time_s": _ms_to_s(r["latency"]), "status": "ok"})
    return sorted(out, key=lambda c: (c["params"]["phase"] != "prefill", c["params"]["heads"], c["params"]["batch"],
                                      c["params"]["kv_len"]))


def _median_rows(by: Mapping[tuple, list[float]]) -> list[list[Any]]:
    """``[*key, median seconds]`` per call key (its first field a :data:`PREFILL_DTYPES` format), sorted by format
    in that order and then by the rest of the key: a repeated call keeps its median time."""
    order = list(PREFILL_DTYPES.values())
    return [[*k, sorted(t)[len(t) // 2]] for k, t in sorted(by.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1:]))]


def prefill_attention_rows(rows: Iterable[Mapping[str, Any]], sms: int) -> list[list[Any]]:
    """Rows (:data:`PREFILL_COLUMNS`) of the prefill-attention calls the kernel law is fitted on (module
    docstring), sorted; a repeated call keeps its median time."""
    by: dict[tuple, list[float]] = {}
    for r in rows:
        prec = PREFILL_DTYPES.get(r["attn_dtype"])
        isl, batch, heads = int(r["isl"]), int(r["batch_size"]), int(r["num_heads"])
        if (prec is None or r["kv_cache_dtype"] != r["attn_dtype"] or r["head_dim"] != 128 or r["window_size"] != 0
                or r["kernel_source"] != "torch_flow" or isl < PREFILL_MIN_ISL or batch * heads * -(-isl // 128) < sms):
            continue
        by.setdefault((prec, batch, isl, heads, int(r["num_key_value_heads"])), []).append(_ms_to_s(r["latency"]))
    return _median_rows(by)


def decode_attention_rows(rows: Iterable[Mapping[str, Any]]) -> list[list[Any]]:
    """Rows (:data:`DECODE_COLUMNS`) of the decode-attention calls the kernel law is fitted on (module docstring),
    sorted; ``kv_len`` is the cached tokens each sequence attends to (AIConfigurator's ``isl + step``); a repeated
    call keeps its median time."""
    by: dict[tuple, list[float]] = {}
    for r in rows:
        kv = PREFILL_DTYPES.get(r["kv_cache_dtype"])
        heads, kv_heads = int(r["num_heads"]), int(r["num_key_value_heads"])
        if (kv is None or r["attn_dtype"] != "bfloat16" or r["head_dim"] != 128 or r["window_size"] != 0
                or r["kernel_source"] != "torch_flow" or heads % kv_heads or heads // kv_heads not in DECODE_GROUPS):
            continue
        key = (kv, int(r["batch_size"]), heads, kv_heads, int(r["isl"]) + int(r["step"]))
        by.setdefault(key, []).append(_ms_to_s(r["latency"]))
    return _median_rows(by)


def decode_mla_rows(rows: Iterable[Mapping[str, Any]]) -> list[list[Any]]:
    """Rows (:data:`MLA_COLUMNS`) of the decode MLA calls (module docstring), sorted; ``heads`` are the query heads
    on the GPU, ``kv_len`` the cached tokens each sequence attends to (``isl + step``); a repeated call keeps its
    median time."""
    by: dict[tuple, list[float]] = {}
    for r in rows:
        kv = PREFILL_DTYPES.get(r["kv_cache_dtype"])
        if kv is None or r["mla_dtype"] != "bfloat16" or r["kernel_source"] != "default":
            continue
        key = (kv, int(r["batch_size"]), int(r["num_heads"]), int(r["isl"]) + int(r["step"]))
        by.setdefault(key, []).append(_ms_to_s(r["latency"]))
    return _median_rows(by)


def moe_cases(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """MoE-layer rows of :data:`MOE_SHAPES` (balanced routing, :data:`MOE_KERNELS` paths, TP x EP <= 8) as dicts:
    model, precision, tokens into the layer, the shape, ``moe_tp`` / ``moe_ep`` and ``time_s``."""
    out = []
    for r in rows:
        model = MOE_SHAPES.get((r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"]))
        prec = MOE_DTYPES.get(r["moe_dtype"])
        tp, ep = int(r["moe_tp_size"]), int(r["moe_ep_size"])
        if (model is None or prec is None or r["distribution"] != "balanced" or r["kernel_source"] not in MOE_KERNELS[prec]
                or r["num_tokens"] not in MOE_TOKENS or tp * ep > 8):
            continue
        out.append({"model": model, "precision": prec, "tokens": int(r["num_tokens"]), "hidden": int(r["hidden_size"]),
                    "expert_ffn": int(r["inter_size"]), "top_k": int(r["topk"]), "experts": int(r["num_experts"]),
                    "moe_tp": tp, "moe_ep": ep, "time_s": _ms_to_s(r["latency"])})
    key = lambda c: (c["model"], c["precision"], c["moe_tp"] * c["moe_ep"], c["moe_ep"], c["tokens"])
    return sorted(out, key=key)


def runtime_moe_cases(rows: Iterable[Mapping[str, Any]], runtime: str, version: str) -> list[dict[str, Any]]:
    """Block-FP8 MoE-layer rows of another runtime's table (:data:`MOE_SHAPES`, balanced routing, tokens in
    :data:`RUNTIME_MOE_TOKENS`, TP x EP <= 8) as dicts like :func:`moe_cases`' plus ``runtime``, ``version``
    and the ``kernel`` the runtime ran (AIConfigurator's ``kernel_source``)."""
    out = []
    for r in rows:
        model = MOE_SHAPES.get((r["hidden_size"], r["inter_size"], r["topk"], r["num_experts"]))
        tp, ep = int(r["moe_tp_size"]), int(r["moe_ep_size"])
        if (model is None or r["moe_dtype"] != "fp8_block" or r["distribution"] != "balanced"
                or r["num_tokens"] not in RUNTIME_MOE_TOKENS or tp * ep > 8):
            continue
        out.append({"runtime": runtime, "version": version, "kernel": str(r["kernel_source"]), "model": model,
                    "precision": "fp8_block", "tokens": int(r["num_tokens"]), "hidden": int(r["hidden_size"]),
                    "expert_ffn": int(r["inter_size"]), "top_k": int(r["topk"]), "experts": int(r["num_experts"]),
                    "moe_tp": tp, "moe_ep": ep, "time_s": _ms_to_s(r["latency"])})
    key = lambda c: (c["runtime"], c["model"], c["moe_tp"] * c["moe_ep"], c["moe_ep"], c["tokens"], c["kernel"])
    return sorted(out, key=key)


def document(gpu: str, device: str, cases: list[dict[str, Any]], sources: Mapping[str, str]) -> dict[str, Any]:
    """A ``calibrate_gpu.py --from-json`` file: the catalog GPU, where the numbers come from, the cases."""
    meta = {"name": f"{device} (published: AIConfigurator perf database)", "torch": "n/a (TensorRT-LLM kernels)",
            "cuda": "n/a", "capability": "n/a", "date": datetime.date.today().isoformat(), "quick": False,
            "source": {"package": PACKAGE, "repository": REPOSITORY, "license": "Apache-2.0",
                       "tables": dict(sources), "latency_unit": "ms in the source; seconds here"}}
    return {"format": FORMAT, "gpu": gpu, "device": meta, "measurements": cases}


def dumps(doc: Mapping[str, Any]) -> str:
    """JSON text of a measurement document with one case per line (readable diffs, no deep indent)."""
    parts = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "measurements"]
    parts.append(' "measurements": [\n' + ",\n".join("  " + json.dumps(c) for c in doc["measurements"]) + "\n ]")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _dedupe(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One case per everything but its time: a repeated case keeps its median time (the upper middle one of an
    even count)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for c in cases:
        by.setdefault(json.dumps({k: v for k, v in c.items() if k != "time_s"}, sort_keys=True), []).append(c)
    out = []
    for group in by.values():
        times = sorted(c["time_s"] for c in group)
        out.append({**group[0], "time_s": times[len(times) // 2]})
    return out


def extract(data_dir: Path, system: str) -> dict[str, Any] | None:  # pragma: no cover - needs pandas/pyarrow
    """The measurement document of one AIConfigurator system directory (None without GEMM data)."""
    import pandas as pd

    base = data_dir / system

    def table(rel: str) -> tuple[list[dict[str, Any]], str | None]:
        path = base / rel
        if not path.exists():
            return [], None
        return pd.read_parquet(path).to_dict("records"), f"aiconfigurator_core/systems/data/{system}/{rel}"

    def newest(sub: str, name: str) -> str | None:
        versions = sorted(p.parent.name for p in (base / sub).glob(f"*/{name}"))
        key = lambda v: [int(x) if x.isdigit() else x for x in v.replace("rc", ".").replace("post", ".").split(".")]
        return f"{sub}/{max(versions, key=key)}/{name}" if versions else None

    gemm, src_gemm = table(f"gemm/trtllm/{TRTLLM}/gemm_perf.parquet")
    if not gemm:
        return None
    sources = {"gemm": src_gemm}
    nccl_rel = newest("comm/nccl", "nccl_perf.parquet")
    nccl, src = table(nccl_rel) if nccl_rel else ([], None)
    if src:
        sources["all_reduce (NCCL)"] = src
    custom, src = table(f"comm/trtllm/{TRTLLM}/custom_allreduce_perf.parquet")
    if src:
        sources["all_reduce (TensorRT-LLM custom)"] = src
    ctx, src = table(f"attention/trtllm/{TRTLLM}/context_attention_perf.parquet")
    if src:
        sources["attention prefill"] = src
    gen, src = table(f"attention/trtllm/{TRTLLM}/generation_attention_perf.parquet")
    if src:
        sources["attention decode"] = src
    cases = _dedupe(gemm_cases(gemm)) + _dedupe(attention_cases(ctx, gen)) + _dedupe(all_reduce_cases(nccl, custom))
    device = str(gemm[0]["device"])
    return document(SYSTEMS[system], device, cases, sources)


def extract_moe(data_dir: Path, system: str) -> dict[str, Any] | None:  # pragma: no cover - needs pandas/pyarrow
    """The MoE document of one AIConfigurator system directory (None without a TensorRT-LLM MoE table)."""
    import pandas as pd

    rel = f"moe/trtllm/{TRTLLM}/moe_perf.parquet"
    path = data_dir / system / rel
    if not path.exists():
        return None
    rows = pd.read_parquet(path).to_dict("records")
    cases = _dedupe(moe_cases(rows))
    return {"format": MOE_FORMAT, "gpu": SYSTEMS[system], "device": str(rows[0]["device"]),
            "source": {"package": PACKAGE, "repository": REPOSITORY, "license": "Apache-2.0",
                       "table": f"aiconfigurator_core/systems/data/{system}/{rel}",
                       "latency_unit": "ms in the source; seconds here"},
            "measurements": cases}


def extract_runtime_moe(data_dir: Path, system: str) -> dict[str, Any] | None:  # pragma: no cover - needs pandas
    """The other runtimes' block-FP8 MoE document of one system directory (None where neither has a table)."""
    import pandas as pd

    cases, tables, device = [], {}, None
    for key, (runtime, version) in RUNTIME_MOE.items():
        rel = f"moe/{key}/{version}/moe_perf.parquet"
        path = data_dir / system / rel
        if not path.exists():
            continue
        rows = pd.read_parquet(path).to_dict("records")
        cases += _dedupe(runtime_moe_cases(rows, runtime, version))
        tables[f"{runtime} {version}"] = f"aiconfigurator_core/systems/data/{system}/{rel}"
        device = device or str(rows[0]["device"])
    if not cases:
        return None
    return {"format": RUNTIME_MOE_FORMAT, "gpu": SYSTEMS[system], "device": device,
            "source": {"package": PACKAGE, "repository": REPOSITORY, "license": "Apache-2.0", "tables": tables,
                       "latency_unit": "ms in the source; seconds here"},
            "measurements": cases}


def prefill_mla_rows(rows: Iterable[Mapping[str, Any]], sms: int) -> list[list[Any]]:
    """Rows (:data:`PREFILL_MLA_COLUMNS`) of the prefill MLA calls (module docstring), sorted; ``heads`` are the
    query heads on the GPU; a repeated call keeps its median time."""
    by: dict[tuple, list[float]] = {}
    for r in rows:
        kv = PREFILL_DTYPES.get(r["kv_cache_dtype"])
        isl, batch, heads = int(r["isl"]), int(r["batch_size"]), int(r["num_heads"])
        if (kv is None or r["mla_dtype"] != "bfloat16" or r["kernel_source"] != "default" or int(r["step"]) != 0
                or isl < PREFILL_MIN_ISL or batch * heads * -(-isl // 128) < sms):
            continue
        by.setdefault((kv, batch, isl, heads), []).append(_ms_to_s(r["latency"]))
    return _median_rows(by)


def _extract_attention(data_dir: Path, system: str, table: str, fmt: str, columns: tuple[str, ...],
                       select: Any, op: str = "attention") -> dict[str, Any] | None:  # pragma: no cover - pandas
    """The ``fmt`` document of one AIConfigurator system directory's TensorRT-LLM ``op`` (``attention``, ``mla``)
    ``table`` (None without it): ``select(rows)`` gives its ``columns`` rows."""
    import pandas as pd

    rel = f"{op}/trtllm/{TRTLLM}/{table}.parquet"
    path = data_dir / system / rel
    if not path.exists():
        return None
    rows = pd.read_parquet(path).to_dict("records")
    return {"format": fmt, "gpu": SYSTEMS[system], "device": str(rows[0]["device"]),
            "source": {"package": PACKAGE, "repository": REPOSITORY, "license": "Apache-2.0",
                       "table": f"aiconfigurator_core/systems/data/{system}/{rel}",
                       "latency_unit": "ms in the source; seconds here"},
            "columns": list(columns), "rows": select(rows)}


def extract_prefill_attention(data_dir: Path, system: str) -> dict[str, Any] | None:  # pragma: no cover - pandas
    """The prefill-attention document of one AIConfigurator system directory (None without the table)."""
    return _extract_attention(data_dir, system, "context_attention_perf", PREFILL_FORMAT, PREFILL_COLUMNS,
                              lambda rows: prefill_attention_rows(rows, SYSTEM_SMS[system]))


def extract_decode_attention(data_dir: Path, system: str) -> dict[str, Any] | None:  # pragma: no cover - pandas
    """The decode-attention document of one AIConfigurator system directory (None without the table)."""
    return _extract_attention(data_dir, system, "generation_attention_perf", DECODE_FORMAT, DECODE_COLUMNS,
                              decode_attention_rows)


def extract_decode_mla(data_dir: Path, system: str) -> dict[str, Any] | None:  # pragma: no cover - pandas
    """The decode-MLA document of one AIConfigurator system directory (None without the table)."""
    return _extract_attention(data_dir, system, "generation_mla_perf", MLA_FORMAT, MLA_COLUMNS, decode_mla_rows,
                              op="mla")


def extract_prefill_mla(data_dir: Path, system: str) -> dict[str, Any] | None:  # pragma: no cover - pandas
    """The prefill-MLA document of one AIConfigurator system directory (None without the table)."""
    return _extract_attention(data_dir, system, "context_mla_perf", PREFILL_MLA_FORMAT, PREFILL_MLA_COLUMNS,
                              lambda rows: prefill_mla_rows(rows, SYSTEM_SMS[system]), op="mla")


def dumps_rows(doc: Mapping[str, Any]) -> str:
    """JSON text of a document with a ``rows`` table, one row per line."""
    parts = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "rows"]
    parts.append(' "rows": [\n' + ",\n".join("  " + json.dumps(r) for r in doc["rows"]) + "\n ]")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _write(path: Path, doc: Mapping[str, Any], system: str, what: str) -> None:  # pragma: no cover - main's
    """Write ``doc`` to ``path`` (:func:`dumps`) and say what went where."""
    path.write_text(dumps_rows(doc) if "rows" in doc else dumps(doc))
    print(f"{system} -> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: {what}")


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - needs pandas/pyarrow
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data_dir", type=Path, help="aiconfigurator_core/systems/data of an unpacked aiconfigurator-core wheel")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT.relative_to(ROOT)})")
    args = ap.parse_args(argv)
    if not args.data_dir.is_dir():
        print(f"published_kernels: {args.data_dir} is not a directory (see the module docstring)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for system, gpu in SYSTEMS.items():
        doc = extract(args.data_dir, system)
        if doc is None:
            print(f"{system}: no TensorRT-LLM {TRTLLM} GEMM table; skipped")
            continue
        kinds: dict[str, int] = {}
        for c in doc["measurements"]:
            kinds[c["kind"]] = kinds.get(c["kind"], 0) + 1
        _write(args.out / f"{gpu}.json", doc, system, str(kinds))
        moe = extract_moe(args.data_dir, system)
        if moe is not None:
            _write(args.out / f"moe_{gpu}.json", moe, system, f"{len(moe['measurements'])} MoE layers")
        for extract_calls, stem, what in ((extract_prefill_attention, "prefill_attention", "prefill attention"),
                                          (extract_decode_attention, "decode_attention", "decode attention"),
                                          (extract_decode_mla, "decode_mla", "decode MLA"),
                                          (extract_prefill_mla, "prefill_mla", "prefill MLA")):
            calls = extract_calls(args.data_dir, system)
            if calls is not None:
                _write(args.out / f"{stem}_{gpu}.json", calls, system, f"{len(calls['rows'])} {what} calls")
        other = extract_runtime_moe(args.data_dir, system)
        if other is not None:
            _write(args.out / f"runtime_moe_{gpu}.json", other, system, f"{len(other['measurements'])} block-FP8 "
                   f"MoE layers of {', '.join(other['source']['tables'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
