"""NVIDIA AIConfigurator (AIC) decode TPOT at concurrency 1 for the published concurrency-1 latency rows.

What it does
------------
For every row at concurrency 1 with a published TPOT and no speculative decoding
(``validate_perf.c1_tpot_rows``) of the dev set (``published_low_concurrency.json``) and the test set
(``published_latency.json``), it asks AIConfigurator 0.12 for the time per output token (TPOT) and the
time to first token (TTFT) of one request at the row's GPU, parallel mapping, precision and ISL/OSL, and
writes AIC's figures next to the measured ones (error = AIC / measured - 1; the target is 15 %, the
project's ``validate_perf.TPOT_TARGET``):

* AIC's own agg sweep (``aiconfigurator.sdk.sweep.sweep_agg`` through ``sdk.task_v2.Task``, as
  ``aiconfigurator_baseline.py`` drives it) runs at ONE parallel mapping, the row's: attention TP with
  MoE ``tp // ep`` x EP (AIC requires moe_tp * moe_ep == tp * attention_dp), or attention DP when the row
  says so; dense models ``[tp, 1, 1, 1, 1]``. No TTFT/TPOT limit. The point at batch 1 is read off
  (AIC's ``bs``, per attention-DP rank); when AIC evaluates several prefill budgets (``ctx_tokens``) at
  batch 1, the one AIC ranks first (highest tokens/s/gpu) is taken and the row says so.
* Headline: backend ``trtllm``, database 1.3.0rc20 (the TensorRT-LLM database AIC 0.12 ships for
  these GPUs). AIC 0.12 also ships SGLang 0.5.14 and vLLM 0.24.0 databases for the same GPUs, so each
  row is also run on the database of its own runtime (TensorRT-LLM and NIM rows: trtllm) as a variant.
* Quantization: FP4 weights -> AIC GEMM/MoE mode ``nvfp4``; FP8 with ``precision.fp8_scaling ==
  "block"`` -> ``fp8_block``; other FP8 -> per-tensor ``fp8``; 16-bit -> ``bfloat16``; KV cache as
  ``aiconfigurator_baseline._kv_cache`` reads the row (16-bit when stated, else FP8).

Setup (a separate virtualenv, as for ``aiconfigurator_baseline.py``)::

    python3.11 -m venv /tmp/aicvenv
    /tmp/aicvenv/bin/pip install aiconfigurator==0.12.0 scipy     # CPU only, no torch needed

Run (from the repository root; about 40 s on 1 CPU core for 44 AIC sweeps, each cached in ``--cache``)::

    /tmp/aicvenv/bin/python benchmarks/aiconfigurator_latency.py
    /tmp/aicvenv/bin/python benchmarks/aiconfigurator_latency.py --rows lat-tx004,lc-007   # a few rows

Outputs: ``benchmarks/results/aiconfigurator_latency.json`` (per row: measured and AIC TPOT/TTFT in ms,
mapping, assumptions, or why AIC could not model it) and ``aiconfigurator_latency.md`` (within-15 %
counts per set and per runtime, tables, caveats). This script only calls AIC; no AIC code is copied here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # validate_perf imports co_design, which the AIC venv does not install
    sys.path.insert(0, str(REPO_ROOT))
if str(Path(__file__).resolve().parent) not in sys.path:  # benchmarks/ (already there when run as a script)
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiconfigurator_baseline as base  # noqa: E402  (benchmarks/ is on sys.path)
import validate_perf as vp  # noqa: E402

DATASETS = {
    "dev": REPO_ROOT / "benchmarks" / "data" / "published_low_concurrency.json",
    "test": REPO_ROOT / "benchmarks" / "data" / "published_latency.json",
}
DEFAULT_OUT_JSON = REPO_ROOT / "benchmarks" / "results" / "aiconfigurator_latency.json"
DEFAULT_OUT_MD = REPO_ROOT / "benchmarks" / "results" / "aiconfigurator_latency.md"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "aiconfigurator_latency_cache.jsonl"

HEADLINE_DB = (base.AIC_BACKEND, base.AIC_DB_VERSION)
# Row runtime -> AIC backend database (aiconfigurator_core/systems/query_versions.yaml "current" for
# h100_sxm/h200_sxm/b200_sxm/b300_sxm). NIM: its backend is not stated on the page; NIM's FP8 TP2
# Llama profiles are TensorRT-LLM engines, so trtllm (an assumption, stated per row).
RUNTIME_DB: dict[str, tuple[str, str]] = {
    "TensorRT-LLM": HEADLINE_DB,
    "NIM": HEADLINE_DB,
    "SGLang": ("sglang", "0.5.14"),
    "vLLM": ("vllm", "0.24.0"),
}
# aiconfigurator_core/systems/*.yaml; the rows' H100 are taken as SXM (80 GB HBM3).
SYSTEMS = {**base.HARDWARE_TO_SYSTEM, "B300": "b300_sxm", "GB300": "gb300"}
# Row model -> AIC model id: the baseline's, plus configs AIC 0.12 bundles and lists as default models
# (aiconfigurator.sdk.common.get_default_models()). DeepSeek-R1-0528 has DeepSeek-R1's config.json.
MODEL_SOURCES: dict[str, tuple[str, str]] = {
    **base.MODEL_SOURCES,
    "DeepSeek-R1": ("hf", "deepseek-ai/DeepSeek-R1"),
    "DeepSeek-R1-0528": ("hf", "deepseek-ai/DeepSeek-R1"),
    "Qwen3-8B": ("hf", "Qwen/Qwen3-8B"),
    "Qwen3-235B-A22B": ("hf", "Qwen/Qwen3-235B-A22B"),  # the Instruct-2507 rows have the same shapes
    "MiniMax-M2.5": ("hf", "MiniMaxAI/MiniMax-M2.5"),
}
NOT_IN_AIC = {
    "GLM-4.6": "AIC 0.12 has no GLM-4.x model: no bundled config and no Glm4MoeForCausalLM architecture "
               "(its GLM configs are GLM-5.x, GlmMoeDsaForCausalLM with DeepSeek-V3.2 sparse attention)",
}


# --------------------------------------------------------------------------------------------------
# Row -> AIC spec (pure)


def runtime_of(row: dict[str, Any]) -> str:
    """The row's runtime family (one of ``validate_perf.RUNTIMES``) from its ``framework`` text."""
    name = vp.runtime_family(row)
    if name is not None:
        return name
    raise ValueError(f"row {row['id']}: framework {row['framework']!r} names none of {vp.RUNTIMES}")


def aic_quant(row: dict[str, Any]) -> tuple[str, str]:
    """(AIC GEMM/MoE quant mode, why) from the row's weights (``validate_perf.precision_of``)."""
    weights = vp.precision_of(row)[0]
    if weights == "nvfp4":
        return "nvfp4", "weights FP4 -> AIC nvfp4 (W4A4 NVFP4) for GEMM and MoE"
    if weights == "fp8":
        if row["precision"].get("fp8_scaling") == "block":
            return "fp8_block", "weights FP8 block-scaled -> AIC fp8_block for GEMM and MoE"
        return "fp8", "weights FP8, scaling not stated -> AIC per-tensor fp8 for GEMM and MoE"
    return "bfloat16", "weights 16-bit -> AIC bfloat16"


def aic_parallel(row: dict[str, Any], moe: bool) -> tuple[list[int], list[str]]:
    """AIC ``[tp, pp, attention_dp, moe_tp, moe_ep]`` of the row's stated mapping, and the assumptions.

    AIC requires moe_tp * moe_ep == tp * attention_dp (task_v2), so attention TP n with EP e is
    ``[n, pp, 1, n // e, e]`` and attention DP n is ``[1, pp, n, n // e, e]``."""
    tp, ep, attention_dp = vp.mapping_of(row)
    pp = int((row.get("parallelism") or {}).get("pp") or 1)
    if tp is None:
        raise ValueError(f"row {row['id']}: no TP stated")
    tp = int(tp)
    notes = []
    if not moe:
        if attention_dp:
            notes.append("attention DP of a dense model read as TP")
        return [tp, pp, 1, 1, 1], notes
    if ep is None:
        ep = 1
        notes.append("EP not stated: EP 1 (MoE TP = attention TP)")
    ep = int(ep)
    if tp % ep:
        raise ValueError(f"row {row['id']}: EP {ep} does not divide TP {tp}")
    if attention_dp:
        return [1, pp, tp, tp // ep, ep], notes
    if attention_dp is None:
        notes.append("attention DP not stated: attention TP")
    return [tp, pp, 1, tp // ep, ep], notes


def row_spec(row: dict[str, Any], db: tuple[str, str] = HEADLINE_DB) -> dict[str, Any]:
    """``{"spec", "assumptions"}`` of the AIC sweep answering the row on database ``db``, or ``{"reason"}``."""
    if row["model"] in NOT_IN_AIC:
        return {"reason": NOT_IN_AIC[row["model"]]}
    if row["model"] not in MODEL_SOURCES:
        return {"reason": f"model {row['model']!r} has no AIC model config (known: {sorted(MODEL_SOURCES)})"}
    system = SYSTEMS.get(row["hardware"])
    if system is None:
        return {"reason": f"hardware {row['hardware']!r} has no AIC system (known: {sorted(SYSTEMS)})"}
    try:
        parallel, notes = aic_parallel(row, base._is_moe(row))
    except ValueError as exc:
        return {"reason": str(exc)}
    gpus = parallel[0] * parallel[1] * parallel[2]
    if gpus != row["num_gpus"]:
        return {"reason": f"mapping {parallel} uses {gpus} GPUs, the row {row['num_gpus']}"}
    quant, quant_note = aic_quant(row)
    kv = base._kv_cache(row)
    kv_stated = str(row["precision"].get("kv_cache") or "not stated").lower() != "not stated"
    spec = {
        "kind": "c1-tpot", "model": row["model"], "aic_model": MODEL_SOURCES[row["model"]][1], "system": system,
        "backend": db[0], "version": db[1], "isl": int(row["isl"]), "osl": int(row["osl"]), "gpus": gpus,
        "parallel": parallel, "quant": quant, "kv_cache": kv, "kv_frac": base.KV_FREE_GPU_MEMORY_FRACTION,
    }
    assumptions = [quant_note, f"KV cache {kv}" + ("" if kv_stated else " (not stated in the row)"), *notes]
    if row["hardware"] == "H100":
        assumptions.append("H100 taken as SXM (AIC h100_sxm)")
    return {"spec": spec, "assumptions": assumptions}


def measured_basis(row: dict[str, Any]) -> str:
    """Which published figure ``validate_perf.latency_target`` read as the row's TPOT."""
    m = row["metrics"]
    return "tpot_ms" if m.get("tpot_ms") else "itl_ms" if m.get("itl_ms") else "1000 / output tokens/s per user"


def pick_c1_point(points: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str]:
    """AIC's batch-1 point (``bs`` == 1, per attention-DP rank) and a note; the highest tokens/s/gpu
    (AIC's own ranking) when several prefill budgets (``ctx_tokens``) were evaluated at batch 1."""
    ones = [p for p in points if p["bs"] == 1]
    if not ones:
        return None, "AIC has no feasible point at batch 1"
    best = max(ones, key=lambda p: p["tokens/s/gpu"])
    notes = []
    if len(ones) > 1:
        notes.append(f"{len(ones)} ctx_tokens values at batch 1 ({sorted(p['ctx_tokens'] for p in ones)}); "
                     f"took AIC's first by tokens/s/gpu (ctx_tokens {best['ctx_tokens']})")
    if best["global_bs"] != 1:
        notes.append(f"attention DP: AIC's batch 1 per rank is global batch {best['global_bs']}")
    return best, "; ".join(notes)


# --------------------------------------------------------------------------------------------------
# AIC calls


POINT_FIELDS = {"bs": int, "global_bs": int, "ctx_tokens": int, "ttft": float, "tpot": float, "tokens/s/gpu": float,
                "tokens/s/user": float, "memory": float, "gemm": str, "moe": str, "kvcache": str, "fmha": str,
                "comm": str, "parallel": str}


def run_c1_sweep(spec: dict[str, Any], model_path: str) -> dict[str, Any]:
    """One AIC agg sweep (AIC's batch schedule x ctx_tokens, every feasible point) at the spec's mapping;
    returns its batch-1 points (``points``, AIC's column names, ttft/tpot in ms) or ``error``."""
    t0 = time.perf_counter()
    try:
        frame = base.agg_frame(spec, model_path)
    except Exception as exc:  # AIC raises many types (OOM, no perf data, unsupported quant, ...)
        return {"error": f"{type(exc).__name__}: {str(exc)[:400]}", "seconds": time.perf_counter() - t0}
    ones = frame[frame["bs"] == 1]
    points = [{k: cast(row[k]) for k, cast in POINT_FIELDS.items()} for _, row in ones.iterrows()]
    return {"points": points, "feasible_points": int(len(frame)), "seconds": time.perf_counter() - t0}


def _model_path(model: str, arch: dict[str, Any], workdir: Path) -> str:
    kind, ref = MODEL_SOURCES[model]
    return ref if kind == "hf" else base._model_path(model, arch, workdir)


# --------------------------------------------------------------------------------------------------
# Rows


def aic_answer(row: dict[str, Any], db: tuple[str, str], cache: base.SweepCache, workdir: Path) -> dict[str, Any]:
    """AIC's batch-1 TPOT/TTFT for the row on database ``db``: ``{"tpot_ms", "ttft_ms", ...}`` or ``{"reason"}``."""
    plan = row_spec(row, db)
    if "reason" in plan:
        return {"reason": plan["reason"]}
    result = cache.get_or_run(plan["spec"], _model_path(row["model"], row.get("arch", {}), workdir))
    if "error" in result:
        return {"reason": f"AIC: {result['error']}", "spec": plan["spec"], "assumptions": plan["assumptions"]}
    point, note = pick_c1_point(result["points"])
    if point is None:
        return {"reason": note, "spec": plan["spec"], "assumptions": plan["assumptions"]}
    return {"database": f"{db[0]} {db[1]}", "tpot_ms": point["tpot"], "ttft_ms": point["ttft"],
            "spec": plan["spec"], "assumptions": plan["assumptions"] + ([note] if note else []),
            "point": point, "feasible_points": result["feasible_points"]}


def evaluate_row(row: dict[str, Any], set_name: str, cache: base.SweepCache, workdir: Path) -> dict[str, Any]:
    runtime = runtime_of(row)
    tpot = vp.latency_target(row)[1]
    out: dict[str, Any] = {
        "id": row["id"], "set": set_name, "model": row["model"], "gpus": f"{row['hardware']} x{row['num_gpus']}",
        "mapping": (row.get("parallelism") or {}).get("notation"), "runtime": runtime, "framework": row["framework"],
        "isl": row["isl"], "osl": row["osl"], "measured_tpot_ms": tpot, "measured_tpot_basis": measured_basis(row),
        "measured_ttft_ms": row["metrics"].get("ttft_ms"),
        "aic_tpot_ms": None, "error": None, "aic_ttft_ms": None, "ttft_error": None, "reason": None,
    }
    head = aic_answer(row, HEADLINE_DB, cache, workdir)
    out["aic"] = head
    if "reason" in head:
        out["reason"] = head["reason"]
    else:
        out.update(aic_tpot_ms=head["tpot_ms"], error=head["tpot_ms"] / tpot - 1, aic_ttft_ms=head["ttft_ms"],
                   aic_parallel=head["spec"]["parallel"], assumptions=head["assumptions"])
        if out["measured_ttft_ms"]:
            out["ttft_error"] = head["ttft_ms"] / out["measured_ttft_ms"] - 1
    db = RUNTIME_DB[runtime]
    variant = head if db == HEADLINE_DB else aic_answer(row, db, cache, workdir)
    out["runtime_db"] = {"database": f"{db[0]} {db[1]}", "tpot_ms": variant.get("tpot_ms"),
                         "ttft_ms": variant.get("ttft_ms"), "reason": variant.get("reason"),
                         "error": variant["tpot_ms"] / tpot - 1 if variant.get("tpot_ms") else None}
    if runtime == "NIM":
        out.setdefault("assumptions", []).append("NIM backend not stated: its runtime database taken as trtllm")
    return out


# --------------------------------------------------------------------------------------------------
# Summary


def error_stats(errors: list[float]) -> dict[str, Any]:
    """Count within ``validate_perf.TPOT_TARGET`` and median signed / absolute error of (AIC / measured - 1)."""
    if not errors:
        return {"n": 0, "within": 0, "median_signed": None, "median_abs": None}
    return {"n": len(errors), "within": sum(abs(e) <= vp.TPOT_TARGET for e in errors),
            "median_signed": statistics.median(errors), "median_abs": statistics.median(abs(e) for e in errors)}


def _line(label: str, errors: list[float], total: int) -> str:
    s = error_stats(errors)
    if not s["n"]:
        return f"{label}: no row modelled of {total}"
    return (f"{label}: {vp.within_target(errors)} (of {total} rows, {total - s['n']} not modelled); "
            f"median signed {100 * s['median_signed']:+.1f} %, median |error| {100 * s['median_abs']:.1f} %")


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per set and per runtime: error_stats of the headline (trtllm) TPOT and of the runtime-database variant."""
    def group(rs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"rows": len(rs), "tpot": error_stats([r["error"] for r in rs if r["error"] is not None]),
                "tpot_runtime_db": error_stats([r["runtime_db"]["error"] for r in rs if r["runtime_db"]["error"] is not None]),
                "ttft": error_stats([r["ttft_error"] for r in rs if r["ttft_error"] is not None])}
    sets = {s: group([r for r in results if r["set"] == s]) for s in DATASETS}
    runtimes = {rt: {s: group([r for r in results if r["runtime"] == rt and s in ("all", r["set"])])
                     for s in (*DATASETS, "all")}
                for rt in sorted({r["runtime"] for r in results})}
    return {"sets": sets, "runtimes": runtimes}


def summary_lines(results: list[dict[str, Any]], rows_of: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The headline lines: AIC (trtllm) TPOT at concurrency 1 per set, then the runtime-database variant."""
    lines = []
    for s, rs in rows_of.items():
        if rs:
            lines.append(_line(f"{s}: AIC TPOT at concurrency 1", [r["error"] for r in rs if r["error"] is not None], len(rs)))
    for s, rs in rows_of.items():
        if rs:
            lines.append(_line(f"{s}: AIC TPOT at concurrency 1, row's runtime database",
                               [r["runtime_db"]["error"] for r in rs if r["runtime_db"]["error"] is not None], len(rs)))
    return lines


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.0f}"


def write_markdown(path: Path, header: dict[str, Any], results: list[dict[str, Any]]) -> str:
    rows_of = {s: [r for r in results if r["set"] == s] for s in DATASETS}
    lines = [
        "# NVIDIA AIConfigurator: decode TPOT at concurrency 1 vs the published rows",
        "",
        f"AIConfigurator {header['aiconfigurator_version']}; headline database {header['database']}; "
        f"variant: the row's runtime database ({header['runtime_databases']}); {header['date_utc']}.",
        f"Command: `{header['command']}`",
        "",
        f"Rows: concurrency 1, published TPOT, no speculative decoding (validate_perf.c1_tpot_rows). "
        f"Error = AIC TPOT / measured TPOT - 1; target |error| <= {100 * vp.TPOT_TARGET:.0f} %. "
        "AIC figure = AIC's agg sweep at the row's mapping, the point at batch 1, no latency limits.",
        "",
        *[f"- {line}" for line in summary_lines(results, rows_of)],
    ]
    table_head = ["| id | model | GPU | mapping (AIC tp,pp,dp,moe_tp,moe_ep) | runtime | ISL/OSL | measured TPOT ms | "
                  "AIC TPOT ms | error % | AIC runtime-DB TPOT ms | error % | measured TTFT ms | AIC TTFT ms |",
                  "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for s, rs in rows_of.items():
        if not rs:
            continue
        lines += ["", f"## {s} set ({DATASETS[s].name})", "", *table_head]
        for r in rs:
            v = r["runtime_db"]
            lines.append(f"| {r['id']} | {r['model']} | {r['gpus']} | {r['mapping']} ({r.get('aic_parallel', '-')}) | "
                         f"{r['runtime']} | {r['isl']}/{r['osl']} | {_ms(r['measured_tpot_ms'])} | {_ms(r['aic_tpot_ms'])} | "
                         f"{_pct(r['error'])} | {_ms(v['tpot_ms'])} ({v['database']}) | {_pct(v['error'])} | "
                         f"{_ms(r['measured_ttft_ms'])} | {_ms(r['aic_ttft_ms'])} |")
    lines += ["", "## Per runtime", ""]
    for rt in sorted({r["runtime"] for r in results}):
        rs = [r for r in results if r["runtime"] == rt]
        frameworks = sorted({r["framework"].split("(")[0].strip() for r in rs})
        lines += [f"### {rt} ({len(rs)} rows: {'; '.join(frameworks)})", ""]
        sets = [s for s in DATASETS if any(r["set"] == s for r in rs)]
        for s in sets + (["all"] if len(sets) > 1 else []):
            sub = [r for r in rs if s in ("all", r["set"])]
            if sub:
                lines.append("- " + _line(f"{s}: AIC TPOT ({header['database']})",
                                          [r["error"] for r in sub if r["error"] is not None], len(sub)))
                if RUNTIME_DB[rt] != HEADLINE_DB:
                    lines.append("- " + _line(f"{s}: AIC TPOT ({' '.join(RUNTIME_DB[rt])})",
                                              [r["runtime_db"]["error"] for r in sub if r["runtime_db"]["error"] is not None],
                                              len(sub)))
        lines.append("")
    ttft = [r["ttft_error"] for r in results if r["ttft_error"] is not None]
    if ttft:
        s = error_stats(ttft)
        lines += ["## TTFT (not the target; steady single request in AIC vs a served request)", "",
                  f"AIC TTFT / measured TTFT - 1 over {s['n']} rows with both: median {100 * s['median_signed']:+.0f} %, "
                  f"median |error| {100 * s['median_abs']:.0f} %.", ""]
    lines += ["## Rows AIC could not model", ""]
    missing = [f"- {r['id']} {r['model']} {r['gpus']}: {r['reason']}" for r in results if r["reason"]]
    missing += [f"- {r['id']} {r['model']} {r['gpus']}, {r['runtime_db']['database']} database only: {r['runtime_db']['reason']}"
                for r in results if r["runtime_db"]["reason"] and not r["reason"]]
    lines += missing or ["None."]
    lines += ["", "## Assumptions per row", ""]
    lines += [f"- {r['id']}: {'; '.join(r.get('assumptions', []))}; measured TPOT = {r['measured_tpot_basis']}"
              for r in results if not r["reason"]]
    lines += ["", "## Caveats", "", *[f"- {c}" for c in header["caveats"]]]
    text = "\n".join(lines) + "\n"
    path.write_text(text)
    return text


CAVEATS = [
    f"The headline AIC database is TensorRT-LLM {base.AIC_DB_VERSION} kernels (SILICON mode); the SGLang, vLLM "
    "and NIM rows ran other kernels and schedulers, and the TensorRT-LLM rows older releases (0.21.0rc2, or a "
    "main branch). The runtime-database variant uses AIC's SGLang 0.5.14 / vLLM 0.24.0 tables, still not the "
    "rows' versions (SGLang 0.5.6-0.5.12, vLLM 0.11.0).",
    "AIC's TPOT is a modelled steady decode step of one request (no client, HTTP, detokenization or "
    "scheduler gaps); the published TPOT is a benchmark client's mean (itl_ms or 1000 / tokens/s per user "
    "where the row has no tpot_ms).",
    "FP4 DeepSeek-R1 rows: AIC prices every GEMM, attention projections included, as NVFP4 (the brief's "
    "mapping); NVIDIA's DeepSeek-R1 FP4 checkpoints keep attention in BF16 (lat-015's recipe says so), which "
    "AIC models only for checkpoints it bundles (e.g. nvidia/DeepSeek-V3.1-NVFP4).",
    "No row runs speculative decoding (MTP); AIC is run without it. CUDA graphs, overlap scheduling and "
    "kernel choices of each runtime are as AIC's database measured them, not as the rows ran.",
    "ISL/OSL are the row's fixed lengths; AIC's TTFT includes no queueing.",
]


def load_rows(wanted: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """(set, row) of every concurrency-1 TPOT row of both sets, restricted to ``wanted`` ids when given."""
    out = []
    for set_name, path in DATASETS.items():
        for row in vp.c1_tpot_rows(json.loads(path.read_text())):
            if not wanted or row["id"] in wanted:
                out.append((set_name, row))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="", help="comma-separated row ids (default: every c=1 TPOT row)")
    parser.add_argument("--out-json", type=Path, default=DEFAULT_OUT_JSON)
    parser.add_argument("--out-md", type=Path, default=DEFAULT_OUT_MD)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="JSON-lines sweep cache")
    args = parser.parse_args(argv)

    base._quiet_aic()
    wanted = set(filter(None, args.rows.split(",")))
    rows = load_rows(wanted)
    missing = wanted - {r["id"] for _, r in rows}
    if missing:
        parser.error(f"--rows: {sorted(missing)} are not concurrency-1 TPOT rows of {[p.name for p in DATASETS.values()]}")
    cache = base.SweepCache(args.cache, run_c1_sweep)
    results = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aic_models_") as tmp:
        for i, (set_name, row) in enumerate(rows, 1):
            r = evaluate_row(row, set_name, cache, Path(tmp))
            results.append(r)
            aic = f"{r['aic_tpot_ms']:7.2f} ms ({_pct(r['error'])} %)" if r["aic_tpot_ms"] else f"None ({r['reason'][:80]})"
            print(f"[{i}/{len(rows)} {time.perf_counter() - t0:5.0f}s] {set_name:4} {r['id']:>10} {r['model']:<18} "
                  f"{r['gpus']:>7} {r['runtime']:<12} measured {r['measured_tpot_ms']:6.2f} ms  AIC {aic}", flush=True)

    header = {
        "aiconfigurator_version": base.aic_version(),
        "database": f"{HEADLINE_DB[0]} {HEADLINE_DB[1]}",
        "runtime_databases": ", ".join(f"{rt}: {' '.join(db)}" for rt, db in RUNTIME_DB.items()),
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(["/tmp/aicvenv/bin/python", "benchmarks/aiconfigurator_latency.py", *(argv or sys.argv[1:])]),
        "metric": "TPOT (ms per output token after the first) and TTFT (ms) of one request; error = AIC / measured - 1",
        "target": f"|error| <= {vp.TPOT_TARGET}",
        "runtime_s_this_invocation": round(time.perf_counter() - t0, 1),
        "caveats": CAVEATS,
    }
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps({"header": header, "summary": summarize(results), "rows": results}, indent=1) + "\n")
    print(write_markdown(args.out_md, header, results))
    print(f"wrote {args.out_json} and {args.out_md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
