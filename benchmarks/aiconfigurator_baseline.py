"""NVIDIA AIConfigurator (AIC) predictions for the published serving rows, as a baseline for co_design.perf.

What it does
------------
For every row of ``published_serving.json`` (TensorRT-LLM perf-overview max-throughput rows and MLPerf
Inference v5.0 rows) it asks AIConfigurator 0.12 for the best aggregated (in-flight batching) serving
point at the row's GPU, parallelism, precision and ISL/OSL, and writes AIC's output tokens/s per GPU
next to the measured one:

* AIC's own agg sweep (``aiconfigurator.sdk.sweep.sweep_agg``, driven through ``sdk.task_v2.Task``) is
  run at ONE fixed parallel mapping at a time. It sweeps batch size (AIC's schedule 1..1024) x the
  prefill token budget (``ctx_tokens``), drops points whose weights or KV cache do not fit, and keeps
  points meeting the TTFT/TPOT limits (none for the offline rows, the MLPerf Server limits for those).
  The best tokens/s/gpu is kept. AIC has no "max throughput at fixed parallelism" command; this is it.
* Backend ``trtllm``, perf database 1.3.0rc20: the only TensorRT-LLM database version bundled for
  h100_sxm/h200_sxm/b200_sxm/gb200 in AIC 0.12 (closest available to the TensorRT-LLM 1.0 era rows).
* MoE rows: the perf-overview page gives only "TPn" and runs ``trtllm-bench --ep $ep_size`` with
  ``enable_attention_dp`` in its llm_options, EP size not stated. All four mappings of n GPUs are swept
  (attention TP or attention-DP, MoE TP or EP); the best is the headline, the pure-TP one is kept too,
  and every mapping's result is stored: the rows now state attention-DP (``parallelism.attention_dp``,
  see ``benchmarks/data/README.md``), so ``validate_perf.aic_rate`` compares AIC on its attention-DP ones.
* MLPerf rows have no parallelism, ISL or OSL: replica sizes 1/2/4/8 GPUs are swept (replicas scale
  per GPU), OSL is the run's own output tokens/sample (or the MLCommons reference tokens_per_sample)
  and ISL is an assumption with a sensitivity range (see ``MLPERF_WORKLOADS``).

Setup (a separate virtualenv: AIC pins numpy/pandas versions our project venv must not get)::

    python3.11 -m venv /tmp/aicvenv
    /tmp/aicvenv/bin/pip install aiconfigurator==0.12.0 scipy     # CPU only, no torch needed

Run (from the repository root; about 5-15 min on 1 CPU core, sequential, cached as it goes)::

    /tmp/aicvenv/bin/python benchmarks/aiconfigurator_baseline.py
    /tmp/aicvenv/bin/python benchmarks/aiconfigurator_baseline.py --rows serve-1,serve-2   # a few rows

Outputs: ``benchmarks/results/aiconfigurator_published.json`` and ``aiconfigurator_summary.md``.
Each AIC sweep is cached in ``--cache`` (JSON lines, keyed by the sweep's full spec), so a rerun or a
crash loses nothing. This script only calls AIC; no AIC code is copied here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import math
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT / "benchmarks" / "data" / "published_serving.json"
DEFAULT_OUT_JSON = REPO_ROOT / "benchmarks" / "results" / "aiconfigurator_published.json"
DEFAULT_OUT_MD = REPO_ROOT / "benchmarks" / "results" / "aiconfigurator_summary.md"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "aiconfigurator_baseline_cache.jsonl"

AIC_BACKEND = "trtllm"
AIC_DB_VERSION = "1.3.0rc20"  # aiconfigurator_core/systems/query_versions.yaml: trtllm "current"
AIC_BATCH_CAP = 1024  # AIC's own agg batch schedule ends at 1024 (sdk/sweep.py _DEFAULT_AGG_BATCH_SCHEDULE)
EXTENDED_BATCHES = (1280, 1536, 1792, 2048)  # variant: trtllm-bench may run larger batches than 1024
# perf-overview page: "In many cases, we also use ... --kv_cache_free_gpu_mem_fraction 0.95"
KV_FREE_GPU_MEMORY_FRACTION = 0.95
UNCONSTRAINED_MS = 1.0e9  # TTFT/TPOT limit used for offline (max-load) rows

HARDWARE_TO_SYSTEM = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm", "GB200": "gb200"}

# Row model name -> AIC model. "hf:" = a config AIC bundles and supports by id; "bundled_local:" = a
# config AIC bundles but does not list as a default model (loaded as a local directory); "arch" = no
# AIC config, a LlamaForCausalLM config.json is written from the row's own `arch` block.
MODEL_SOURCES: dict[str, tuple[str, str]] = {
    "Llama-3.1-8B": ("hf", "meta-llama/Meta-Llama-3.1-8B"),
    # Llama 3.3 70B has the Llama 3.1 70B architecture (same config.json shapes and vocab).
    "Llama-3.3-70B": ("hf", "meta-llama/Meta-Llama-3.1-70B"),
    "Llama-3.1-405B": ("hf", "meta-llama/Meta-Llama-3.1-405B"),
    "Llama-4-Scout-17B-16E": ("hf", "meta-llama/Llama-4-Scout-17B-16E-Instruct"),
    "Llama-4-Maverick-17B-128E": ("hf", "meta-llama/Llama-4-Maverick-17B-128E-Instruct"),
    "Qwen3-235B-A22B": ("hf", "Qwen/Qwen3-235B-A22B"),
    "Qwen3-30B-A3B": ("hf", "Qwen/Qwen3-30B-A3B"),
    "Mixtral-8x7B": ("bundled_local", "mistralai/Mixtral-8x7B-v0.1"),
    "Llama-2-70B": ("arch", "LlamaForCausalLM"),
}

# MLPerf Inference v5.0 workloads: the rows carry no ISL/OSL. OSL = the run's own output tokens per
# sample when the row has it (tokens/s / samples/s), else the reference tokens_per_sample of the
# MLCommons reference implementation READMEs (mlcommons/inference: language/llama2-70b/README.md
# "Tokens per sample: 294.45"; language/llama3.1-405b/README.md "tokens_per_sample: 684.68";
# language/mixtral-8x7b/README.md "tokens_per_sample: 144.84"). Mean input lengths are not stated in
# those READMEs: ISL values below are ASSUMPTIONS (llama2-70b: OpenOrca prompts filtered to
# input+output <= 1024 tokens, README `--seqlen_limit=1024`), each with a sensitivity set.
MLPERF_WORKLOADS: dict[str, dict[str, Any]] = {
    "Llama-2-70B": {
        "dataset": "OpenOrca (24,576 samples, seqlen_limit 1024)",
        "reference_osl": 294.45,
        "isl": 512,
        "isl_sensitivity": (256, 1024),
        "isl_basis": "assumption (not in the MLCommons README); prompts+outputs capped at 1024 tokens",
    },
    "Mixtral-8x7B": {
        "dataset": "OpenOrca + GSM8K + MBXP (15,000 samples)",
        "reference_osl": 144.84,
        "isl": 256,
        "isl_sensitivity": (128, 512),
        "isl_basis": "assumption (not in the MLCommons README)",
    },
    "Llama-3.1-405B": {
        "dataset": "long-context mix (8,313 samples)",
        "reference_osl": 684.68,
        "isl": 9400,
        "isl_sensitivity": (4096, 16384),
        "isl_basis": "assumption (recollection of the MLCommons v5.0 LLM blog, unverified here)",
    },
}
MLPERF_REPLICA_GPUS = (1, 2, 4, 8)


# --------------------------------------------------------------------------------------------------
# AIC calls


def _quiet_aic() -> None:
    """AIC logs every database fallback at WARNING; keep the console for our own progress lines."""
    warnings.filterwarnings("ignore")
    for name in ("aiconfigurator", "aiconfigurator_core"):
        logging.getLogger(name).setLevel(logging.ERROR)


def aic_version() -> str:
    from importlib.metadata import version

    return version("aiconfigurator")


def _model_path(model: str, arch: dict[str, Any], workdir: Path) -> str:
    """AIC model path for a row's model: a bundled HF id or a local directory holding config.json."""
    kind, ref = MODEL_SOURCES[model]
    if kind == "hf":
        return ref
    local = workdir / model
    local.mkdir(parents=True, exist_ok=True)
    if kind == "bundled_local":
        from importlib.resources import files

        src = files("aiconfigurator_core") / "model_configs" / f"{ref.replace('/', '--')}_config.json"
        (local / "config.json").write_text(src.read_text())
        return str(local)
    # kind == "arch": a Llama-architecture config.json from the row's arch block (Llama 2 70B).
    config = {
        "architectures": [ref],
        "model_type": "llama",
        "hidden_size": arch["hidden"],
        "intermediate_size": arch["ffn"],
        "num_hidden_layers": arch["layers"],
        "num_attention_heads": arch["heads"],
        "num_key_value_heads": arch["kv_heads"],
        "head_dim": arch["head_dim"],
        "vocab_size": arch["vocab"],
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float16",
    }
    (local / "config.json").write_text(json.dumps(config, indent=1))
    return str(local)


def _spec_key(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def task_input(spec: dict[str, Any], model_path: str) -> dict[str, Any]:
    """AIC's Task input for one agg sweep at the spec's ONE parallel mapping ``[tp, pp, attention_dp, moe_tp,
    moe_ep]``: its system, backend database (default :data:`AIC_BACKEND` :data:`AIC_DB_VERSION`), ISL/OSL,
    TTFT/TPOT limits in ms (default none), KV-cache memory fraction and quantization modes."""
    tp, pp, dp, moe_tp, moe_ep = spec["parallel"]
    return {
        "serving_mode": "agg",
        "model_path": model_path,
        "system_name": spec["system"],
        "backend_name": spec.get("backend", AIC_BACKEND),
        "backend_version": spec.get("version", AIC_DB_VERSION),
        "isl": spec["isl"],
        "osl": spec["osl"],
        "ttft": spec.get("ttft_ms", UNCONSTRAINED_MS),
        "tpot": spec.get("tpot_ms", UNCONSTRAINED_MS),
        "pareto_sweep": False,  # evaluate only our TPOT limit, not AIC's TPOT grid
        "total_gpus": spec["gpus"],
        "agg_num_gpu_candidates": [spec["gpus"]],
        "agg_tp_candidates": [tp],
        "agg_pp_candidates": [pp],
        "agg_dp_candidates": [dp],
        "agg_moe_tp_candidates": [moe_tp],
        "agg_moe_ep_candidates": [moe_ep],
        "free_gpu_memory_fraction": spec.get("kv_frac", KV_FREE_GPU_MEMORY_FRACTION),
        "gemm_quant_mode": spec["quant"],
        "moe_quant_mode": spec["quant"],
        "kvcache_quant_mode": spec["kv_cache"],
    }


def agg_frame(spec: dict[str, Any], model_path: str, extra_batches: tuple[int, ...] = ()) -> Any:
    """Every feasible (batch, ctx_tokens) point of AIC's agg sweep at the spec's one parallel mapping (a pandas
    DataFrame, AIC's columns; ttft/tpot in ms), over AIC's batch schedule plus ``extra_batches``. Raises what AIC
    raises when it cannot model the spec (OOM, no perf data, unsupported quantization, a mapping it rejects)."""
    import aiconfigurator.sdk.sweep as aic_sweep
    from aiconfigurator.sdk.task_v2 import Task

    task = Task.from_yaml(task_input(spec, model_path))
    if not list(task.iter_parallel("agg")):
        tp, pp, dp, moe_tp, moe_ep = spec["parallel"]
        raise ValueError(f"AIC rejects parallel mapping tp={tp} pp={pp} dp={dp} moe_tp={moe_tp} moe_ep={moe_ep}")
    task.validate()
    database = task._load_database(task.system_name, task.backend_name, task.backend_version)
    kwargs = task.sweep_agg_kwargs(database=database)
    kwargs["top_k"] = 0  # keep every feasible (batch, ctx_tokens) point, not AIC's top few
    if not extra_batches:
        return aic_sweep.sweep_agg(**kwargs)
    kwargs["max_batch_size"] = max(extra_batches)
    schedule = aic_sweep._DEFAULT_AGG_BATCH_SCHEDULE
    aic_sweep._DEFAULT_AGG_BATCH_SCHEDULE = list(schedule) + [b for b in extra_batches if b not in schedule]
    try:
        return aic_sweep.sweep_agg(**kwargs)
    finally:
        aic_sweep._DEFAULT_AGG_BATCH_SCHEDULE = schedule


def run_sweep(spec: dict[str, Any], model_path: str) -> dict[str, Any]:
    """One AIC agg sweep (batch x ctx_tokens) at one fixed parallel mapping.

    Returns the best feasible point with batch <= AIC_BATCH_CAP (``best``) and with the extended
    schedule up to max(EXTENDED_BATCHES) (``best_extended``), or ``error`` when AIC cannot model it.
    """
    t0 = time.perf_counter()
    try:
        frame = agg_frame(spec, model_path, EXTENDED_BATCHES)
    except Exception as exc:  # AIC raises many types (OOM, no perf data, unsupported quant, ...)
        return {"error": f"{type(exc).__name__}: {str(exc)[:400]}", "seconds": time.perf_counter() - t0}

    def pick(df: Any) -> dict[str, Any] | None:
        if len(df) == 0:
            return None
        best = df.sort_values("tokens/s/gpu", ascending=False).iloc[0]
        return {
            "output_tokens_per_s_per_gpu": float(best["tokens/s/gpu"]),
            "output_tokens_per_s_per_user": float(best["tokens/s/user"]),
            "batch": int(best["bs"]),  # per attention-DP rank when attention DP is on
            "global_batch": int(best["global_bs"]),
            "concurrency": float(best["concurrency"]),
            "ctx_tokens": int(best["ctx_tokens"]),
            "ttft_ms": float(best["ttft"]),
            "tpot_ms": float(best["tpot"]),
            "memory_per_gpu_gb": float(best["memory"]),
            "gemm": str(best["gemm"]),
            "moe": str(best["moe"]),
            "kv_cache": str(best["kvcache"]),
            "fmha": str(best["fmha"]),
        }

    return {
        "best": pick(frame[frame["bs"] <= AIC_BATCH_CAP]),
        "best_extended": pick(frame),
        "feasible_points": int(len(frame)),
        "seconds": time.perf_counter() - t0,
    }


class SweepCache:
    """JSON-lines cache of sweep results keyed by the sweep spec (survives crashes and reruns); ``run`` makes a
    missing result (default :func:`run_sweep`)."""

    def __init__(self, path: Path, run: Callable[[dict[str, Any], str], dict[str, Any]] | None = None) -> None:
        self.path = path
        self.run = run or run_sweep
        self.entries: dict[str, dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    item = json.loads(line)
                    self.entries[item["key"]] = item["result"]

    def get_or_run(self, spec: dict[str, Any], model_path: str) -> dict[str, Any]:
        key = _spec_key(spec)
        if key not in self.entries:
            result = self.run(spec, model_path)
            self.entries[key] = result
            with self.path.open("a") as fh:
                fh.write(json.dumps({"key": key, "spec": spec, "result": result}) + "\n")
        return self.entries[key]


# --------------------------------------------------------------------------------------------------
# Rows -> sweeps


def measured_per_gpu(row: dict[str, Any]) -> float:
    """Measured output tokens/s per GPU, following the row's metric_basis (derived field preferred)."""
    m = row["metrics"]
    basis = row["metric_basis"]
    if "output_tokens_per_s_per_gpu_derived" in m:  # perf-overview: TOTAL per TP group / num_gpus
        if not basis.startswith("TOTAL per TP group"):
            raise ValueError(f"row {row['id']}: unexpected metric_basis {basis!r}")
        per_gpu, total = float(m["output_tokens_per_s_per_gpu_derived"]), m.get("output_tokens_per_s_total")
    elif "tokens_per_s_per_gpu_derived" in m:  # MLPerf: system output tokens/s / num_gpus
        if not basis.startswith("tokens/s for the whole system"):
            raise ValueError(f"row {row['id']}: unexpected metric_basis {basis!r}")
        per_gpu, total = float(m["tokens_per_s_per_gpu_derived"]), m.get("tokens_per_s_system")
    else:
        raise ValueError(f"row {row['id']}: no per-GPU metric in {sorted(m)}; basis {basis!r}")
    if total is not None and abs(total / row["num_gpus"] - per_gpu) > 0.01 * per_gpu:
        raise ValueError(f"row {row['id']}: derived per-GPU {per_gpu} != total {total} / num_gpus {row['num_gpus']}")
    return per_gpu


def _quant(row: dict[str, Any]) -> tuple[str, str]:
    """(AIC GEMM/MoE quant mode, reason) from the row's weight precision; Blackwell MLPerf -> FP4."""
    weights = str(row["precision"].get("weights") or "").lower()
    if weights.startswith("fp4"):
        return "nvfp4", "weights FP4 (NVFP4, ModelOpt checkpoint)"
    if weights.startswith("fp8"):
        return "fp8", "weights FP8 (per-tensor, ModelOpt checkpoint)"
    if row["hardware"] in ("B200", "GB200"):
        return "nvfp4", "precision not in row; NVIDIA Blackwell MLPerf v5.0 LLM submissions used FP4 (row notes)"
    return "fp8", "precision not in row; Hopper submissions are FP8"


def _kv_cache(row: dict[str, Any]) -> str:
    kv = str(row["precision"].get("kv_cache") or "").lower()
    if kv.startswith("bf16") or kv.startswith("fp16"):
        return "bfloat16"
    return "fp8"  # "not stated"/null -> FP8 KV (ModelOpt FP8/FP4 checkpoints ship an FP8 KV cache)


def _moe_mappings(gpus: int) -> dict[str, tuple[int, int, int, int, int]]:
    """(tp, pp, attention_dp, moe_tp, moe_ep) mappings of one n-GPU MoE instance."""
    if gpus == 1:
        return {"tp1": (1, 1, 1, 1, 1)}
    return {
        f"attn_tp{gpus}_moe_tp{gpus}": (gpus, 1, 1, gpus, 1),
        f"attn_tp{gpus}_moe_ep{gpus}": (gpus, 1, 1, 1, gpus),
        f"attn_dp{gpus}_moe_ep{gpus}": (1, 1, gpus, 1, gpus),
        f"attn_dp{gpus}_moe_tp{gpus}": (1, 1, gpus, gpus, 1),
    }


def _is_moe(row: dict[str, Any]) -> bool:
    return row.get("arch", {}).get("family") == "moe" or "n_experts" in row.get("arch", {})


def row_plan(row: dict[str, Any]) -> dict[str, Any]:
    """The sweeps (specs) that answer one row, plus the assumptions taken."""
    system = HARDWARE_TO_SYSTEM.get(row["hardware"])
    if system is None:
        return {"reason": f"hardware {row['hardware']!r} has no AIC system mapping"}
    if row["model"] not in MODEL_SOURCES:
        return {"reason": f"model {row['model']!r} has no AIC model config"}
    quant, quant_reason = _quant(row)
    kv = _kv_cache(row)
    constraints = row.get("latency_constraints_ms") or {}
    ttft = float(constraints.get("ttft_p99", UNCONSTRAINED_MS))
    tpot = float(constraints.get("tpot_p99", UNCONSTRAINED_MS))
    base = {"model": row["model"], "aic_model": MODEL_SOURCES[row["model"]][1], "system": system, "quant": quant, "kv_cache": kv, "ttft_ms": ttft, "tpot_ms": tpot,
            "db": f"{AIC_BACKEND}-{AIC_DB_VERSION}", "kv_frac": KV_FREE_GPU_MEMORY_FRACTION,
            "batches": f"aic<= {AIC_BATCH_CAP} + {list(EXTENDED_BATCHES)}"}
    kv_stated = str(row["precision"].get("kv_cache") or "not stated").lower() != "not stated"
    assumptions = [quant_reason, f"KV cache {kv}" + ("" if kv_stated else " (not stated in row)")]

    par = row.get("parallelism")
    if par:  # perf-overview: fixed TP (PP) per the row
        tp, pp = int(par["tp"]), int(par.get("pp") or 1)
        gpus = tp * pp
        if gpus != row["num_gpus"]:
            return {"reason": f"tp*pp={gpus} != num_gpus={row['num_gpus']}"}
        isl, osl = int(row["isl"]), int(row["osl"])
        if _is_moe(row):
            mappings = {k: v for k, v in _moe_mappings(tp).items()} if pp == 1 else {}
            if pp != 1:
                return {"reason": "MoE with PP>1 not swept"}
            if tp > 1:
                assumptions.append("EP size / attention-DP not stated (page: trtllm-bench --ep $ep_size, "
                                   "enable_attention_dp in llm_options): all 4 mappings swept, best kept")
        else:
            mappings = {f"tp{tp}_pp{pp}": (tp, pp, 1, 1, 1)}
        specs = {name: {**base, "isl": isl, "osl": osl, "gpus": gpus, "parallel": list(p)}
                 for name, p in mappings.items()}
        return {"specs": {"primary": specs}, "assumptions": assumptions, "isl": isl, "osl": osl}

    # MLPerf: no parallelism / ISL / OSL published.
    workload = MLPERF_WORKLOADS.get(row["model"])
    if workload is None:
        return {"reason": f"no MLPerf workload lengths known for {row['model']!r}"}
    derived_osl = row["metrics"].get("output_tokens_per_sample_derived")
    osl = int(round(derived_osl if derived_osl else workload["reference_osl"]))
    assumptions.append(
        f"OSL {osl} = " + ("the run's output tokens/sample (tokens/s / samples/s)" if derived_osl
                           else f"MLCommons reference tokens_per_sample {workload['reference_osl']}"))
    assumptions.append(f"ISL {workload['isl']} ({workload['isl_basis']}); dataset {workload['dataset']}; "
                       f"sensitivity ISL {list(workload['isl_sensitivity'])}")
    assumptions.append("parallelism not published: replicas of 1/2/4/8 GPUs swept (pp=1), best per GPU kept"
                       + ("; MoE: attention TP/DP x MoE TP/EP" if _is_moe(row) else ""))
    assumptions.append("real datasets have variable lengths; AIC models a fixed ISL/OSL")
    if constraints:
        assumptions.append(f"MLPerf limits TTFT p99 <= {ttft:g} ms, TPOT p99 <= {tpot:g} ms applied to AIC's "
                           "modelled (steady-state, no queueing) TTFT/TPOT")

    def specs_for(isl: int) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for gpus in MLPERF_REPLICA_GPUS:
            mappings = _moe_mappings(gpus) if _is_moe(row) else {f"tp{gpus}": (gpus, 1, 1, 1, 1)}
            for name, p in mappings.items():
                out[name] = {**base, "isl": isl, "osl": osl, "gpus": gpus, "parallel": list(p)}
        return out

    plan_specs = {"primary": specs_for(workload["isl"])}
    for isl in workload["isl_sensitivity"]:
        plan_specs[f"isl{isl}"] = specs_for(isl)
    return {"specs": plan_specs, "assumptions": assumptions, "isl": workload["isl"], "osl": osl}


def _best_of(results: dict[str, dict[str, Any]], field: str) -> tuple[str | None, dict[str, Any] | None]:
    best_name, best = None, None
    for name, res in results.items():
        point = res.get(field)
        if point and (best is None or point["output_tokens_per_s_per_gpu"] > best["output_tokens_per_s_per_gpu"]):
            best_name, best = name, point
    return best_name, best


def evaluate_row(row: dict[str, Any], cache: SweepCache, workdir: Path) -> dict[str, Any]:
    measured = measured_per_gpu(row)
    out: dict[str, Any] = {
        "id": row["id"],
        "source": "mlperf-v5.0" if row["source_type"].startswith("MLPerf") else "trtllm-perf-overview",
        "model": row["model"],
        "family": "moe" if _is_moe(row) else "dense",
        "hardware": row["hardware"],
        "num_gpus": row["num_gpus"],
        "isl": row["isl"],
        "osl": row["osl"],
        "scenario": row.get("scenario") or "offline max-load (trtllm-bench throughput)",
        "measured_output_tokens_per_s_per_gpu": measured,
        "aic_output_tokens_per_s_per_gpu": None,
        "aic_batch": None,
        "aic_config": None,
        "reason": None,
    }
    plan = row_plan(row)
    if "reason" in plan:
        out["reason"] = plan["reason"]
        return out
    model_path = _model_path(row["model"], row.get("arch", {}), workdir)
    variants: dict[str, Any] = {}
    primary_results: dict[str, dict[str, Any]] = {}
    for variant, specs in plan["specs"].items():
        results = {name: cache.get_or_run(spec, model_path) for name, spec in specs.items()}
        if variant == "primary":
            primary_results = results
        name, best = _best_of(results, "best")
        variants[variant] = {"mapping": name, "output_tokens_per_s_per_gpu": best and best["output_tokens_per_s_per_gpu"],
                             "global_batch": best and best["global_batch"]}
    name, best = _best_of(primary_results, "best")
    ext_name, ext = _best_of(primary_results, "best_extended")
    mappings = {
        k: {"parallel_tp_pp_attndp_moetp_moeep": plan["specs"]["primary"][k]["parallel"],
            "gpus": plan["specs"]["primary"][k]["gpus"],
            "output_tokens_per_s_per_gpu": (v.get("best") or {}).get("output_tokens_per_s_per_gpu"),
            "global_batch": (v.get("best") or {}).get("global_batch"),
            "error": v.get("error")}
        for k, v in primary_results.items()
    }
    tp_only = [m for k, m in mappings.items() if "moe_ep" not in k and "attn_dp" not in k]
    out["aic_config"] = {
        "model_path": MODEL_SOURCES[row["model"]][1] if MODEL_SOURCES[row["model"]][0] != "arch" else "config.json from row arch",
        "system": plan["specs"]["primary"][next(iter(plan["specs"]["primary"]))]["system"],
        "backend": f"{AIC_BACKEND} {AIC_DB_VERSION}",
        "isl": plan["isl"],
        "osl": plan["osl"],
        "quant": {k: plan["specs"]["primary"][next(iter(plan["specs"]["primary"]))][k] for k in ("quant", "kv_cache")},
        "swept": f"mappings {list(mappings)} x AIC batch schedule 1..{AIC_BATCH_CAP} x ctx_tokens; "
                 f"KV free-memory fraction {KV_FREE_GPU_MEMORY_FRACTION}",
        "chosen_mapping": name,
        "chosen_point": best,
        "mappings": mappings,
        "pure_tp_output_tokens_per_s_per_gpu": tp_only[0]["output_tokens_per_s_per_gpu"] if len(tp_only) == 1 and len(mappings) > 1 else None,
        "extended_batch_to_2048": {"mapping": ext_name, "output_tokens_per_s_per_gpu": ext and ext["output_tokens_per_s_per_gpu"],
                                   "global_batch": ext and ext["global_batch"]},
        "variants": {k: v for k, v in variants.items() if k != "primary"},
        "assumptions": plan["assumptions"],
    }
    if best is None:
        errors = sorted({str(v.get("error")) for v in primary_results.values() if v.get("error")})
        out["reason"] = "; ".join(errors) if errors else "no feasible point (memory or latency limits)"
        return out
    out["aic_output_tokens_per_s_per_gpu"] = round(best["output_tokens_per_s_per_gpu"], 3)
    out["aic_batch"] = best["global_batch"]  # requests in flight in the whole n-GPU instance
    return out


# --------------------------------------------------------------------------------------------------
# Summary


def _stats(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    """MdAPE, median signed error and Spearman rank correlation of (measured, predicted) pairs."""
    from scipy.stats import spearmanr

    if not pairs:
        return {"n": 0}
    ape = [abs(p - m) / m for m, p in pairs]
    signed = [(p - m) / m for m, p in pairs]
    rho = float(spearmanr([m for m, _ in pairs], [p for _, p in pairs]).statistic) if len(pairs) > 2 else math.nan
    return {
        "n": len(pairs),
        "mdape_pct": 100 * statistics.median(ape),
        "median_signed_error_pct": 100 * statistics.median(signed),
        "within_25pct": sum(a <= 0.25 for a in ape),
        "spearman": rho,
    }


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in results if r["aic_output_tokens_per_s_per_gpu"] is not None]
    pair = lambda rs: [(r["measured_output_tokens_per_s_per_gpu"], r["aic_output_tokens_per_s_per_gpu"]) for r in rs]
    groups: dict[str, Any] = {"all": _stats(pair(ok))}
    for source in ("trtllm-perf-overview", "mlperf-v5.0"):
        groups[f"source={source}"] = _stats(pair([r for r in ok if r["source"] == source]))
    for kind in ("dense", "moe"):
        groups[f"{kind} (perf-overview)"] = _stats(pair([r for r in ok if r["source"] == "trtllm-perf-overview" and r["family"] == kind]))
    for hw in ("H100", "H200", "B200", "GB200"):
        groups[f"gpu={hw} (perf-overview)"] = _stats(pair([r for r in ok if r["hardware"] == hw and r["source"] == "trtllm-perf-overview"]))
    for model in sorted({r["model"] for r in ok if r["source"] == "trtllm-perf-overview"}):
        groups[f"model={model} (perf-overview)"] = _stats(pair([r for r in ok if r["model"] == model and r["source"] == "trtllm-perf-overview"]))
    # Variants on the perf-overview rows.
    po = [r for r in ok if r["source"] == "trtllm-perf-overview"]
    ext = [(r["measured_output_tokens_per_s_per_gpu"], r["aic_config"]["extended_batch_to_2048"]["output_tokens_per_s_per_gpu"])
           for r in po if r["aic_config"]["extended_batch_to_2048"]["output_tokens_per_s_per_gpu"]]
    groups["variant: batch up to 2048 (perf-overview)"] = _stats(ext)
    # Multi-GPU MoE rows read literally as "TPn" (attention TP, MoE TP); other rows keep their value.
    tp_only = []
    for r in po:
        multi = len(r["aic_config"]["mappings"]) > 1
        value = r["aic_config"]["pure_tp_output_tokens_per_s_per_gpu"] if multi else r["aic_output_tokens_per_s_per_gpu"]
        if value:
            tp_only.append((r["measured_output_tokens_per_s_per_gpu"], value))
    groups["variant: MoE pure TP only (perf-overview)"] = _stats(tp_only)
    moe_multi = [r for r in po if len(r["aic_config"]["mappings"]) > 1]
    groups["MoE multi-GPU rows, best mapping (perf-overview)"] = _stats(pair(moe_multi))
    groups["MoE multi-GPU rows, pure TP (perf-overview)"] = _stats(
        [(r["measured_output_tokens_per_s_per_gpu"], r["aic_config"]["pure_tp_output_tokens_per_s_per_gpu"])
         for r in moe_multi if r["aic_config"]["pure_tp_output_tokens_per_s_per_gpu"]])
    return {"rows_total": len(results), "rows_supported": len(ok), "groups": groups}


def write_markdown(path: Path, header: dict[str, Any], summary: dict[str, Any], results: list[dict[str, Any]]) -> str:
    lines = [
        "# NVIDIA AIConfigurator vs published serving measurements",
        "",
        f"AIConfigurator {header['aiconfigurator_version']}, database {header['database']}, {header['date_utc']}.",
        f"Command: `{header['command']}`",
        "",
        f"Rows supported: {summary['rows_supported']} / {summary['rows_total']}.",
        "Metric: output tokens/s per GPU. MdAPE = median |AIC - measured| / measured; signed = median (AIC - measured) / measured.",
        "Headline AIC value = best feasible point over AIC's batch schedule (1..1024 per attention rank) x prefill token budget,",
        "over the swept parallel mappings (MoE multi-GPU rows: attention TP/DP x MoE TP/EP; MLPerf rows: 1/2/4/8-GPU replicas).",
        "Variants: `batch up to 2048` extends the batch schedule; `MoE pure TP only` reads MoE \"TPn\" rows literally.",
        "",
        "| group | n | MdAPE % | median signed % | within 25 % | Spearman |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, s in summary["groups"].items():
        if s.get("n"):
            lines.append(f"| {name} | {s['n']} | {s['mdape_pct']:.1f} | {s['median_signed_error_pct']:+.1f} | "
                         f"{s['within_25pct']} | {s['spearman']:.3f} |")
    lines += ["", "## Rows AIC could not model", ""]
    unsupported = [r for r in results if r["aic_output_tokens_per_s_per_gpu"] is None]
    for r in unsupported:
        lines.append(f"- {r['id']} {r['model']} {r['hardware']} x{r['num_gpus']} {r['isl']}/{r['osl']}: {r['reason']}")
    if not unsupported:
        lines.append("None: every row's model and GPU is in AIC 0.12's SILICON database.")
    lines += ["", "## MLPerf rows", "",
              "| id | model | GPU | scenario | measured | AIC | mapping | batch | ISL sensitivity |", "|---|---|---|---|---:|---:|---|---:|---|"]
    for r in results:
        if r["source"] == "mlperf-v5.0":
            cfg = r["aic_config"] or {}
            sens = ", ".join(f"{k}: {v['output_tokens_per_s_per_gpu']:.0f}" if v["output_tokens_per_s_per_gpu"] else f"{k}: -"
                             for k, v in (cfg.get("variants") or {}).items())
            aic = f"{r['aic_output_tokens_per_s_per_gpu']:.0f}" if r["aic_output_tokens_per_s_per_gpu"] else "-"
            lines.append(f"| {r['id']} | {r['model']} | {r['hardware']} x{r['num_gpus']} | {r['scenario']} | "
                         f"{r['measured_output_tokens_per_s_per_gpu']:.0f} | {aic} | {cfg.get('chosen_mapping')} | {r['aic_batch']} | {sens} |")
    lines += ["", "## Caveats", ""] + [f"- {c}" for c in header["caveats"]]
    lines += ["", "## Perf-overview rows (output tokens/s per GPU)", "",
              "| id | model | GPU | ISL/OSL | measured | AIC | error % | AIC mapping | global batch | AIC pure TP |",
              "|---|---|---|---|---:|---:|---:|---|---:|---:|"]
    for r in results:
        if r["source"] == "trtllm-perf-overview" and r["aic_output_tokens_per_s_per_gpu"]:
            m, a = r["measured_output_tokens_per_s_per_gpu"], r["aic_output_tokens_per_s_per_gpu"]
            tp = r["aic_config"]["pure_tp_output_tokens_per_s_per_gpu"]
            lines.append(f"| {r['id']} | {r['model']} | {r['hardware']} x{r['num_gpus']} | {r['isl']}/{r['osl']} | {m:.0f} | "
                         f"{a:.0f} | {100 * (a / m - 1):+.0f} | {r['aic_config']['chosen_mapping']} | {r['aic_batch']} | "
                         + (f"{tp:.0f}" if tp else "") + " |")
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


CAVEATS = [
    f"AIC 0.12 bundles TensorRT-LLM kernel databases only for version {AIC_DB_VERSION} on these GPUs; the "
    "rows are TensorRT-LLM 1.0-era (perf-overview) and MLPerf v5.0 builds, so kernel speed differs by release.",
    "AIC models a steady in-flight-batching step at a fixed batch; trtllm-bench's offline run also pays "
    "ramp-up/drain and scheduler effects, and its max batch / max_num_tokens were not published.",
    "MoE perf-overview rows: EP size and attention-DP were not stated; the headline takes the best of 4 "
    "mappings (an upper envelope); the pure-TP variant is reported separately.",
    "MLPerf rows: ISL is an assumption (sensitivity shown); parallelism swept; variable-length datasets "
    "and Server-scenario Poisson arrivals/p99 limits are not modelled by AIC (its TTFT/TPOT are steady-state).",
    "Llama 3.3 70B uses AIC's Llama 3.1 70B config (same shapes); Llama 2 70B uses a config.json written "
    "from the row's arch block; Mixtral 8x7B uses AIC's bundled (non-default) config as a local model.",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="published_serving.json")
    parser.add_argument("--out-json", type=Path, default=DEFAULT_OUT_JSON)
    parser.add_argument("--out-md", type=Path, default=DEFAULT_OUT_MD)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="JSON-lines sweep cache")
    parser.add_argument("--rows", default="", help="comma-separated row ids (default: all rows)")
    args = parser.parse_args(argv)

    _quiet_aic()
    rows = json.loads(args.data.read_text())
    if args.rows:
        wanted = set(args.rows.split(","))
        rows = [r for r in rows if r["id"] in wanted]
        missing = wanted - {r["id"] for r in rows}
        if missing:
            parser.error(f"--rows: unknown ids {sorted(missing)}")
    cache = SweepCache(args.cache)
    results = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aic_models_") as tmp:
        for i, row in enumerate(rows, 1):
            res = evaluate_row(row, cache, Path(tmp))
            results.append(res)
            aic = res["aic_output_tokens_per_s_per_gpu"]
            print(f"[{i}/{len(rows)} {time.perf_counter() - t0:6.0f}s] {res['id']:>10} {res['model']:<26} "
                  f"{res['hardware']:>5}x{res['num_gpus']:<2} {str(res['isl']):>5}/{str(res['osl']):<5} "
                  f"measured {res['measured_output_tokens_per_s_per_gpu']:9.1f}  AIC "
                  + (f"{aic:9.1f} bs {res['aic_batch']} {res['aic_config']['chosen_mapping']}" if aic else f"None ({res['reason'][:90]})"),
                  flush=True)

    header = {
        "aiconfigurator_version": aic_version(),
        "database": f"{AIC_BACKEND} {AIC_DB_VERSION} (SILICON mode)",
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "/tmp/aicvenv/bin/python benchmarks/aiconfigurator_baseline.py" + (f" --rows {args.rows}" if args.rows else ""),
        "data": str(args.data),
        "metric": "output tokens/s per GPU; measured per the row's metric_basis (derived per-GPU field, "
                  "checked = total / num_gpus)",
        "aic_batch": "requests in flight in the whole n-GPU instance (AIC global_bs = per-rank batch x attention-DP)",
        "headline": "best over swept mappings with AIC's batch schedule 1..1024 per attention rank; variants in aic_config",
        "runtime_s_this_invocation": round(time.perf_counter() - t0, 1),
        "aic_sweep_seconds_total": round(sum(v.get("seconds", 0.0) for v in cache.entries.values()), 1),
        "sweeps_cached": len(cache.entries),
        "caveats": CAVEATS,
    }
    summary = summarize(results)
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps({"header": header, "summary": summary, "rows": results}, indent=1) + "\n")
    print(write_markdown(args.out_md, header, summary, results))
    print(f"wrote {args.out_json} and {args.out_md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
