"""The predicted best serving configuration of an exported shape, as TensorRT-LLM options.

``max_throughput`` picks the operating point (the batch of most output tokens/s per GPU that
fits, under an SLO if given). TensorRT-LLM takes the parallel layout on the command line
(``trtllm-serve MODEL --tp_size N --ep_size N --pp_size N --config FILE``; ``trtllm-bench
--model MODEL throughput --tp N --ep N --pp N --concurrency C --config FILE``) and the rest
in the YAML file ``--config`` (alias ``--extra_llm_api_options``) reads: ``max_batch_size``,
``max_num_tokens``, ``enable_attention_dp``, ``kv_cache_config: {dtype, free_gpu_memory_fraction}``,
``cuda_graph_config``. Sources:
https://nvidia.github.io/TensorRT-LLM/commands/trtllm-bench.html ,
https://nvidia.github.io/TensorRT-LLM/examples/deepseek_r1_reasoning_parser.html (a trtllm-serve
config.yml with ``enable_attention_dp``, ``kv_cache_config.dtype: fp8`` and tp/ep on the command line).

``max_batch_size`` is per scheduler: one per replica, or one per attention rank with attention
DP (each rank schedules its own requests), as :class:`co_design.perf.Runtime` counts it.
Imports no torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from co_design.arch import Architecture
    from co_design.perf import Prediction

__all__ = ["serving_options", "serving_yaml", "predicted_figures", "commands", "TRTLLM_URLS"]

TRTLLM_URLS = ("https://nvidia.github.io/TensorRT-LLM/commands/trtllm-bench.html",
               "https://nvidia.github.io/TensorRT-LLM/examples/deepseek_r1_reasoning_parser.html")
_KV_DTYPES = {"fp8": "fp8", "nvfp4": "nvfp4", "bf16": "auto", "fp16": "auto"}


def _schedulers(pred: "Prediction") -> int:
    d = pred.deployment
    return d.replicas * (d.tp if d.attention_dp else 1)


def serving_options(arch: "Architecture", pred: "Prediction") -> dict[str, Any]:
    """The ``--config`` YAML mapping for the operating point ``pred``."""
    d, rt = pred.deployment, pred.deployment.runtime
    per_scheduler = max(1, math.ceil(pred.batch / _schedulers(pred)))
    opts: dict[str, Any] = {
        "max_batch_size": per_scheduler,
        "max_num_tokens": rt.max_num_tokens,
        "max_seq_len": d.isl + d.osl,
        "enable_attention_dp": d.attention_dp,
        "kv_cache_config": {"dtype": _KV_DTYPES.get(d.kv_cache, "auto"),
                            "free_gpu_memory_fraction": rt.kv_cache_memory_fraction},
        "cuda_graph_config": {"enable_padding": True, "max_batch_size": per_scheduler},
    }
    return opts


def predicted_figures(arch: "Architecture", pred: "Prediction") -> dict[str, Any]:
    """What the performance model expects at this operating point (``predicted.json``)."""
    d = pred.deployment
    pc = arch.param_counts()
    return {
        "model": arch.name,
        "gpu": pred.gpu,
        "gpus": d.gpus,
        "layout": d.label,
        "tp": d.tp, "ep": d.ep, "pp": d.pp, "attention_dp": d.attention_dp,
        "weights": d.weights, "activations": d.activations, "kv_cache": d.kv_cache,
        "isl": d.isl, "osl": d.osl,
        "concurrency": pred.batch,
        "params_total": pc.total, "params_active": pc.active,
        "output_tokens_per_s_per_gpu": pred.output_tokens_per_s_per_gpu,
        "output_tokens_per_s_per_user": pred.output_tokens_per_s_per_user,
        "output_tokens_per_s": pred.output_tokens_per_s,
        "ttft_ms": pred.ttft_s * 1e3,
        "tpot_ms": pred.tpot_s * 1e3,
        "memory_per_gpu_gb": pred.memory_per_gpu_bytes / 1e9,
        "fits": pred.fits,
    }


def commands(pred: "Prediction", *, model: str = "MODEL_DIR", config: str = "extra_llm_api_options.yaml") -> dict[str, str]:
    d = pred.deployment
    par = f"--tp_size {d.tp} --ep_size {d.ep} --pp_size {d.pp}"
    return {
        "trtllm-serve": f"trtllm-serve {model} {par} --config {config}",
        "trtllm-bench": (f"trtllm-bench --model {model} throughput --tp {d.tp} --ep {d.ep} --pp {d.pp} "
                         f"--concurrency {math.ceil(pred.batch / d.replicas)} --dataset DATASET --config {config}"),
    }


def serving_yaml(arch: "Architecture", pred: "Prediction") -> str:
    """The YAML file with the predicted figures and the commands in a comment header."""
    f = predicted_figures(arch, pred)
    cmd = commands(pred)
    head = [
        f"TensorRT-LLM options for {arch.name} on {f['gpu']} x{f['gpus']} ({f['layout']}), written by co-design export.",
        f"Predicted at concurrency {f['concurrency']} (ISL {f['isl']}, OSL {f['osl']}; weights {f['weights']}, "
        f"KV cache {f['kv_cache']}):",
        f"  output tokens/s per GPU {f['output_tokens_per_s_per_gpu']:,.1f}; per user "
        f"{f['output_tokens_per_s_per_user']:,.1f}; TTFT {f['ttft_ms']:,.1f} ms; TPOT {f['tpot_ms']:,.2f} ms",
        "Parallelism goes on the command line:",
        f"  {cmd['trtllm-serve']}",
        f"  {cmd['trtllm-bench']}",
        *[f"Format: {u}" for u in TRTLLM_URLS],
    ]
    return "".join(f"# {x}\n" for x in head) + yaml.safe_dump(serving_options(arch, pred), sort_keys=False)
