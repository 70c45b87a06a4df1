"""The performance model's data: what is deployed, what is asked, what comes back."""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from co_design.perf.roofline import BYTES_PER_ELEMENT, Precision
from co_design.precision import FP8_SCALINGS, FP8Scaling

__all__ = ["Deployment", "Runtime", "SLO", "OpCost", "MemoryBreakdown", "Prediction", "Advice", "Arrivals", "ARRIVALS"]

Arrivals = Literal["steady", "burst", "poisson"]  # how requests reach the server (Deployment.arrivals)
ARRIVALS: tuple[str, ...] = get_args(Arrivals)


def _int_field(owner: str, name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}.{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """Serving-runtime settings (TensorRT-LLM defaults) that bound the batch and add overheads.

    Limits (TensorRT-LLM's own defaults, not fitted):

    * ``max_batch``: requests scheduled per iteration per scheduler (trtllm-bench's
      ``max_batch_size`` tops out in the low thousands; 2048 here).
    * ``max_num_tokens``: token budget of one iteration (decode tokens plus
      context chunk) per scheduler; 8192 is TensorRT-LLM's default
      (``max_num_tokens`` in BuildConfig / LLM API). Larger steps run as chunks.
    * ``kv_cache_memory_fraction``: share of the memory left after weights,
      activations and the reserve that the KV cache may take (TensorRT-LLM
      ``KvCacheConfig.free_gpu_memory_fraction`` default 0.9).
    * ``reserve_bytes``: CUDA context, library workspaces, CUDA graphs, per GPU.
      Stated, not fitted: fitted with the quantities below, it rose to 6-16 GiB
      across folds and did not hold out (close-pair concordance 81 % held out
      either way; leave-one-model-out error 8.0 % -> 15.5 %), so it traded
      memory against the rate factors instead of measuring memory.

    Efficiencies and overheads, each a separate physical quantity, fitted on the
    training folds of the published serving rows: max-throughput rows and, weighing
    as much, low-concurrency decode-latency rows (``benchmarks/validate_perf.py``;
    values and their spread across folds in ``benchmarks/results/validation.md``).
    Set the fractions to 1 and the overheads to 0 for an idealized runtime:

    * ``compute_efficiency``: fraction of the GPU's microbenchmark FLOP rate
      (``gemm_efficiency_at(precision)``, ``attention_efficiency``) its kernels reach
      inside a serving step (short kernels, small shapes), for bf16 and fp8 math.
    * ``nvfp4_compute_efficiency``: the same for block-scaled FP4 GEMMs (twice the
      fp8 peak, scale factors to load; measured separately because it differs).
    * ``bandwidth_efficiency``: fraction of the GPU's microbenchmark HBM bandwidth
      (``memory_efficiency``) reached when streaming weights, KV cache and
      activations.
    * ``grouped_gemm_efficiency``: further fraction of the FLOP rate reached by
      grouped MoE expert GEMMs.
    * ``attention_efficiency``: further fraction of both rates reached by the fused
      prompt attention kernel inside a serving step, on top of ``compute_efficiency``,
      ``bandwidth_efficiency`` and the GPU's ``prefill_attention`` law (the kernel's
      own rate by precision and prompt length, fitted on NVIDIA's published
      isolated-kernel timings; a GPU without one: its flat ``attention_efficiency``).
      What the law leaves out: chunks of long prompts reading their earlier chunks'
      KV from the paged cache, and prompts of mixed lengths in one call.
    * ``decode_attention_efficiency``: the same for the decode attention kernel
      (one query token per sequence over its paged KV cache), on top of the GPU's
      ``decode_attention`` law (the kernel's streaming fraction of the HBM
      bandwidth, its cost per wave of CTAs, one per sequence and KV head, and its
      stream's ramp, fitted
      on NVIDIA's published isolated-kernel timings; a KV-cache format without
      one takes the narrowest wider format's, ``GPU.decode_attention_law``; a GPU
      without any: ``memory_efficiency`` of the bandwidth, no per-CTA cost). It
      scales the whole kernel. A separate kernel with a separate fraction: fitted as one, the
      prompt's compute-bound share and the decode's bandwidth-bound share pulled a
      single value between them.
    * ``expert_tile_overhead_s``: seconds each output tile of a grouped expert GEMM
      costs an SM beyond its main loop (per-group problem setup, pipeline fill,
      epilogue) that the grouped kernel does not hide; fine-grained experts with
      few tokens each pay it on little work.
    * ``idle_expert_tile_s``: seconds of one SM each output tile costs that a
      block-scaled FP8 grouped expert GEMM launches for a local expert that got
      no tokens. Those kernels size their grid over every expert the rank holds
      (TensorRT-LLM's FP8 block-scale grouped GEMM: grid z = the number of local
      experts, one 128-column tile per block of the output), so an idle expert's
      tiles still start, read their expert's row count and exit; spread over the
      SMs, they cost ``tiles x idle_expert_tile_s / sms``. Splitting experts by
      TP keeps every expert on every rank, so at few tokens most are idle: it
      is why TensorRT-LLM's TP-sliced block-FP8 experts are slower than expert
      parallelism at low concurrency. Default 0: SGLang's and vLLM's block-FP8
      MoE kernels tile only the experts with rows (they run faster at TP8 than
      at EP8 at one token). TensorRT-LLM on Hopper: 0.2e-6
      (``recipes/runtimes/tensorrt_llm_hopper.json``), fitted by
      ``benchmarks/validate_moe.py`` on NVIDIA's published MoE-layer
      measurements, not on serving rows.
    * ``collective_efficiency``: fraction of the GPU's collective bus bandwidth
      (``collective_efficiency`` of the GPU) reached by the runtime's collectives.
    * ``kernel_gap_s``: seconds each kernel of a serving step costs beyond the
      GPU's isolated-kernel overhead (``kernel_overhead_s``, a microbenchmark
      figure): the wait on the previous kernel's tail and the dependency hand-off
      inside a CUDA graph. Negligible beside long kernels; at batch 1 a step runs
      hundreds of microsecond-scale kernels, so it sets small-batch latency.
    * ``collective_overhead_s``: seconds each synchronization step of a collective
      costs beyond the GPU's link latency (``collective_latency_s``): the runtime's
      flag barriers and the norm fused into an all-reduce. A one-shot all-reduce
      (small messages), an all-gather, an all-to-all or a send has one step; a
      two-shot all-reduce (large messages) has two (see :mod:`co_design.perf.comm`).
    * ``iteration_overhead_s``: host-side scheduling time per iteration not hidden
      behind GPU work. Host time adds to the GPU's: an overlap scheduler's form, the
      longer of the two, fitted worse (``benchmarks/README.md``, latency at concurrency 1).
    * ``request_overhead_s``: host time per request in flight per iteration
      (scheduling, sampling, detokenization bookkeeping) not hidden behind GPU work.

    Time to first token (fitted after the quantities above, on the concurrency-1 TTFT of the
    low-concurrency dev rows; ``benchmarks/validate_perf.py --ttft``, held-out figures in
    ``benchmarks/results/ttft.md``):

    * ``eager_launch_s``: host seconds per kernel of an iteration that runs outside a CUDA
      graph. Runtimes capture graphs for decode-only batches (TensorRT-LLM's PyTorch backend
      ``cuda_graph_config``, SGLang ``--cuda-graph-max-bs``), so the iterations that carry a
      new prompt launch every kernel from Python; a kernel shorter than its launch waits on
      the host. Short prompts are host-bound, long ones GPU-bound.
    * ``first_token_overhead_s``: seconds of a request's TTFT off the GPU timeline: the HTTP
      request, tokenization, admission to the scheduler and the first token's way back.

    Grouped-GEMM bandwidth (from a published microbenchmark, not fitted):

    * ``grouped_gemm_bandwidth_efficiency``: further fraction of the HBM bandwidth
      (on top of ``bandwidth_efficiency``) that grouped MoE expert GEMMs reach when
      they stream expert weights: many small per-expert matrices, each with its own
      tile schedule and prologue, keep HBM less busy than one large GEMM. Default
      0.69 = 0.634 / 0.92: a CUTLASS FP8 grouped GEMM (FBGEMM's F8F8BF16 rowwise
      kernel) moves 3043 GB/s, 63.4 % of H200's 4.8 TB/s, on Qwen2-57B-A14B's TP4
      expert shapes at batch 256 (sgl-project/sglang
      ``benchmark/kernels/fbgemm/README.md``), and a plain stream reaches 0.92 of
      peak (the GPU's ``memory_efficiency``). Used for every GPU (no Blackwell
      figure was found).

    Routing statistics (from a published measurement, not fitted):

    * ``moe_expert_load_cv``: coefficient of variation of tokens per expert across
      the experts of a layer under real routing (0 = uniform routing). Default
      1.28 = 164.1 / 128, the per-expert-slot standard deviation over the mean for
      DeepSeek-R1 on 32 GB200 GPUs without EPLB, averaged over layers and
      iterations (TensorRT-LLM tech blog 4, "Scaling Expert Parallelism in
      TensorRT-LLM (Part 1)", Table 1). Sets the busiest expert-parallel rank's
      load (see :func:`co_design.perf.ops.busiest_rank_load`).
    """

    max_batch: int = 2048
    max_num_tokens: int = 8192
    kv_cache_memory_fraction: float = 0.9
    reserve_bytes: float = 3.0 * 2**30
    compute_efficiency: float = 1.0
    nvfp4_compute_efficiency: float = 0.7
    bandwidth_efficiency: float = 1.0
    grouped_gemm_efficiency: float = 0.3
    grouped_gemm_bandwidth_efficiency: float = 0.69
    attention_efficiency: float = 0.4
    decode_attention_efficiency: float = 1.0
    expert_tile_overhead_s: float = 1e-6
    idle_expert_tile_s: float = 0.0
    collective_efficiency: float = 0.8
    kernel_gap_s: float = 2e-6
    collective_overhead_s: float = 15e-6
    iteration_overhead_s: float = 1e-3
    request_overhead_s: float = 15e-6
    eager_launch_s: float = 100e-6
    first_token_overhead_s: float = 30e-3
    moe_expert_load_cv: float = 1.28

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "runtime") -> "Runtime":
        """A Runtime from a mapping of its field names (missing ones keep their defaults); ValueError names a key
        the Runtime does not have, and ``where`` (e.g. a file) says where it came from."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: a runtime is a mapping of Runtime fields, got {type(data).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ValueError(f"{where}: unknown Runtime field(s) {', '.join(map(repr, unknown))}; known: "
                             f"{', '.join(known)}")
        try:
            return cls(**data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None

    @classmethod
    def load(cls, path: "str | os.PathLike[str]") -> "Runtime":
        """A Runtime from a JSON file: an object of Runtime fields, or one whose ``"runtime"`` key holds them (as
        ``co-design anchor --out`` writes it, beside the measurement it was anchored on)."""
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise ValueError(f"cannot read runtime file {str(path)!r}: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"runtime file {str(path)!r} is not JSON: {exc}") from None
        if isinstance(data, dict) and isinstance(data.get("runtime"), dict):
            data = data["runtime"]
        return cls.from_dict(data, where=f"runtime file {str(path)!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __post_init__(self) -> None:
        _int_field("Runtime", "max_batch", self.max_batch)
        _int_field("Runtime", "max_num_tokens", self.max_num_tokens)
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name not in ("max_batch", "max_num_tokens") and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
                raise ValueError(f"Runtime.{f.name} must be a number, got {v!r}")
        if not 0 < self.kv_cache_memory_fraction <= 1:
            raise ValueError(f"Runtime.kv_cache_memory_fraction must be in (0, 1], got {self.kv_cache_memory_fraction}")
        for name in ("reserve_bytes", "iteration_overhead_s", "request_overhead_s", "moe_expert_load_cv",
                     "expert_tile_overhead_s", "idle_expert_tile_s", "kernel_gap_s", "collective_overhead_s", "eager_launch_s",
                     "first_token_overhead_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"Runtime.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("compute_efficiency", "nvfp4_compute_efficiency", "bandwidth_efficiency", "grouped_gemm_efficiency",
                     "grouped_gemm_bandwidth_efficiency", "attention_efficiency", "decode_attention_efficiency",
                     "collective_efficiency"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"Runtime.{name} must be in (0, 1] (a fraction of the GPU's measured rate), "
                                 f"got {getattr(self, name)}")


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """How a model is served (TensorRT-LLM conventions).

    * ``gpus``: GPUs of the whole deployment; ``None`` = ``tp * pp`` (one replica).
      ``gpus / (tp * pp)`` replicas serve independent requests.
    * ``tp``: tensor-parallel size of a replica. With ``attention_dp`` the
      attention runs data-parallel across these ``tp`` ranks (each rank its own
      requests, full attention weights), and so do the dense FFN layers and the
      shared experts (whole on every rank, as TensorRT-LLM builds them), while the
      routed experts stay TP/EP over every rank's tokens ("DEP" with ``ep > 1``;
      "ADP" without expert parallelism).
    * ``ep``: expert-parallel size inside the ``tp`` ranks (``tp % ep == 0``;
      each expert split ``tp / ep`` ways).
    * ``pp``: pipeline stages (layers split evenly; the slowest stage sets the pace).
    * ``helix``: KV-parallel degree for decode attention (Helix): the KV cache is
      split along the sequence over ``helix`` ranks, heads over ``tp / helix``;
      the output projection and the FFN use all ``tp`` ranks.
    * ``weights`` / ``activations`` / ``kv_cache``: storage format per tensor class
      (embeddings, lm_head, router and norms stay bf16). ``activations`` left at None
      takes the weights' format (W8A8, W4A4): ``Deployment(weights="fp8")`` is an FP8
      deployment, not FP8 weights under NVFP4 activations.
    * ``fp8_scaling``: how FP8 activations are scaled. ``"tensor"``: one static
      scale per tensor (TensorRT Model Optimizer FP8), so the kernel before each
      GEMM writes FP8 itself (the all-reduce + RMSNorm, the attention output, the
      SwiGLU). ``"block"``: one scale per 128 activations of a token, found at run
      time, beside 128x128 weight blocks (the FP8 checkpoints of DeepSeek-V3/R1,
      Qwen3 and MiniMax-M2): each dense FP8 GEMM whose input comes from a norm or
      from attention runs a per-token-group quantization kernel first
      (TensorRT-LLM ``fp8_quantize_1x128`` on Hopper and
      ``per_token_quant_and_transform`` before DeepGEMM on Blackwell, SGLang and
      vLLM ``per_token_group_quant_fp8``); the fused MoE quantizes inside its permute
      and the SwiGLU kernel before the down projection. ``"block"`` needs FP8
      activations.
    * ``isl`` / ``osl``: input / output tokens per request.
    * ``concurrency``: requests in flight in the whole deployment (as
      trtllm-bench counts them); ``None`` asks :func:`max_throughput` to choose.
      More than the replicas hold at once (KV cache at ISL+OSL, ``Runtime.max_batch``)
      wait for a slot: :func:`predict` counts the wait in TTFT.
    * ``arrivals``: how requests reach a replica; it sets TTFT under load (TPOT and
      throughput are the steady state either way). ``"steady"``: spread in time
      (production traffic): a new prompt meets the other requests decoding and its
      TTFT is its own prefill beside their decode tokens (queueing behind other
      prompts is not modelled). ``"burst"``: the replica's requests arrive together
      and stay in step, as a fixed-concurrency benchmark sends them (``bench_serving
      --max-concurrency N --request-rate inf``, AIPerf or LLMPerf at fixed
      concurrency, lengths equal or nearly so, ``ignore_eos``): the wave's prompts
      are prefilled together in arrival order, ``max_num_tokens`` per iteration (per
      attention-DP rank), and a request's first token waits for the chunks of the
      prompts ahead of it; TTFT is the mean over the wave. The same at concurrency 1.
      ``"poisson"``: requests arrive at random times (a Poisson process at the rate
      the replica completes them, as MLPerf Server and Interactive send them): as
      steady, plus the wait of a queue admitted at iteration ends: the iteration in
      progress, the prompts that arrived before and the later ones that share its last
      iteration (:func:`co_design.perf.queueing.iteration_queue_wait`);
      ``Prediction.ttft_p99_s`` is its 99th percentile. The requests' TPOTs spread too:
      each decodes beside the prompts admitted meanwhile, a Poisson count of mean ``B``
      (``Prediction.tpot_p99_s``, the 99th percentile of the requests' mean TPOTs). A
      batch whose prompts arrive faster than the replica prefills them has no steady
      state (TTFT ``inf``): :func:`max_throughput` and :func:`pareto` pass it by.
    """

    gpus: int | None = None
    tp: int = 1
    ep: int = 1
    pp: int = 1
    attention_dp: bool = False
    helix: int = 1
    weights: Precision = "nvfp4"
    activations: Precision | None = None  # None: the weights' format
    kv_cache: Precision = "fp8"
    fp8_scaling: FP8Scaling = "tensor"
    isl: int = 1024
    osl: int = 1024
    concurrency: int | None = None
    arrivals: Arrivals = "steady"
    runtime: Runtime = field(default_factory=Runtime)

    def __post_init__(self) -> None:
        for name in ("tp", "ep", "pp", "helix", "isl", "osl"):
            _int_field("Deployment", name, getattr(self, name))
        if self.activations is None:
            object.__setattr__(self, "activations", self.weights)
        if self.gpus is None:
            object.__setattr__(self, "gpus", self.tp * self.pp)
        _int_field("Deployment", "gpus", self.gpus)
        if self.concurrency is not None:
            _int_field("Deployment", "concurrency", self.concurrency)
        for name in ("weights", "activations", "kv_cache"):
            if getattr(self, name) not in BYTES_PER_ELEMENT:
                raise ValueError(f"Deployment.{name}={getattr(self, name)!r}; use one of {sorted(BYTES_PER_ELEMENT)}")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"Deployment.arrivals={self.arrivals!r}; use one of {list(ARRIVALS)}")
        if self.fp8_scaling not in FP8_SCALINGS:
            raise ValueError(f"Deployment.fp8_scaling={self.fp8_scaling!r}; use one of {list(FP8_SCALINGS)}")
        if self.fp8_scaling == "block" and self.activations != "fp8":
            raise ValueError(f"Deployment.fp8_scaling='block' scales FP8 activations, but activations="
                             f"{self.activations!r}; set activations='fp8' or fp8_scaling='tensor'")
        if self.gpus % (self.tp * self.pp):
            raise ValueError(f"Deployment.gpus={self.gpus} must be a multiple of tp*pp={self.tp * self.pp} "
                             "(each replica uses tp*pp GPUs)")
        if self.tp % self.ep:
            raise ValueError(f"Deployment.ep={self.ep} must divide tp={self.tp} (experts split over ep of the tp ranks)")
        if self.tp % self.helix:
            raise ValueError(f"Deployment.helix={self.helix} must divide tp={self.tp} (KV-parallel ranks within the TP group)")
        if self.helix > 1 and self.attention_dp:
            raise ValueError("Deployment.helix > 1 and attention_dp=True are exclusive; choose one for attention")
        if not isinstance(self.runtime, Runtime):
            raise ValueError(f"Deployment.runtime must be a Runtime, got {type(self.runtime).__name__}")

    @property
    def replicas(self) -> int:
        """Independent model copies: gpus / (tp * pp)."""
        return self.gpus // (self.tp * self.pp)

    def replace(self, **changes: Any) -> "Deployment":
        if ("tp" in changes or "pp" in changes) and "gpus" not in changes and self.gpus == self.tp * self.pp:
            changes["gpus"] = None  # keep "one replica" when the caller did not pin gpus
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def label(self) -> str:
        """TensorRT-LLM-style notation, e.g. ``TP8 EP8 DEP``, ``TP4 ADP`` or ``TP4 PP2 x2``.

        ``EP``/``DEP`` (attention-DP with expert parallelism) only when ``ep > 1``:
        attention-DP without it, as on a dense model, is ``ADP``.
        """
        s = f"TP{self.tp}"
        if self.ep > 1:
            s += f" EP{self.ep}"
        if self.pp > 1:
            s += f" PP{self.pp}"
        if self.attention_dp:
            s += " DEP" if self.ep > 1 else " ADP"
        if self.helix > 1:
            s += f" Helix{self.helix}"
        if self.replicas > 1:
            s += f" x{self.replicas}"
        return s


@dataclass(frozen=True, kw_only=True)
class SLO:
    """Service-level objective; every bound given must hold."""

    min_tokens_per_s_per_user: float | None = None
    max_ttft_s: float | None = None  # mean TTFT
    max_tpot_s: float | None = None
    max_ttft_p99_s: float | None = None  # 99th-percentile TTFT (Prediction.ttft_p99_s), as MLPerf Server limits it
    max_tpot_p99_s: float | None = None  # p99 over requests of their TPOT (Prediction.tpot_p99_s), as MLPerf

    def __post_init__(self) -> None:
        for name in ("min_tokens_per_s_per_user", "max_ttft_s", "max_tpot_s", "max_ttft_p99_s", "max_tpot_p99_s"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"SLO.{name} must be > 0 or None, got {v}")

    def met(self, p: "Prediction") -> bool:
        if self.min_tokens_per_s_per_user is not None and p.output_tokens_per_s_per_user < self.min_tokens_per_s_per_user:
            return False
        if self.max_ttft_s is not None and p.ttft_s > self.max_ttft_s:
            return False
        if self.max_tpot_s is not None and p.tpot_s > self.max_tpot_s:
            return False
        if self.max_ttft_p99_s is not None and not p.ttft_p99_s <= self.max_ttft_p99_s:
            return False
        if self.max_tpot_p99_s is not None and not p.tpot_p99_s <= self.max_tpot_p99_s:
            return False
        return True

    @property
    def needs_ttft(self) -> bool:
        """Whether a bound is on TTFT (a prediction must compute it to be checked)."""
        return self.max_ttft_s is not None or self.max_ttft_p99_s is not None


@dataclass(frozen=True)
class OpCost:
    """One op of a step on one GPU, summed over its ``count`` instances (layers x chunks).

    ``shape`` is the per-GPU (M, N, K) of one instance for GEMMs (``groups`` of
    them for grouped expert GEMMs). ``achieved_fraction`` is achieved FLOP/s over
    the dense peak at ``precision`` for compute-bound ops, achieved bytes/s over
    peak HBM (or link) bandwidth otherwise.
    """

    name: str
    phase: str  # "decode": a steady-state in-flight iteration; "prefill": the iteration carrying a new request's prompt
    kind: str  # "gemm" | "attention" | "elementwise" | "communication"
    count: float
    time_s: float
    flops: float
    bytes: float
    bound: str  # "compute" | "memory" | "communication" | "host" (a prompt iteration's kernel that waits on its launch)
    precision: str
    shape: tuple[int, int, int] | None = None
    groups: int = 1
    tile_efficiency: float = 1.0
    wave_efficiency: float = 1.0
    achieved_fraction: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["time_ms"] = self.time_s * 1e3
        d["shape"] = list(self.shape) if self.shape else None
        return d


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-GPU memory, bytes. ``kv_cache_bytes`` is what the batch needs at ISL+OSL per request."""

    weights_bytes: float
    kv_cache_bytes: float
    activation_bytes: float
    reserve_bytes: float
    capacity_bytes: float  # usable HBM
    kv_cache_capacity_bytes: float = 0.0  # what the runtime would give the KV cache
    kv_bytes_per_request: float = 0.0  # per GPU, at ISL+OSL

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.kv_cache_bytes + self.activation_bytes + self.reserve_bytes

    @property
    def fits(self) -> bool:
        return self.weights_bytes + self.activation_bytes + self.reserve_bytes < self.capacity_bytes and (
            self.kv_cache_bytes <= self.kv_cache_capacity_bytes)

    def to_dict(self) -> dict[str, float]:
        d = dataclasses.asdict(self)
        d["total_bytes"] = self.total_bytes
        return d


@dataclass(frozen=True)
class Prediction:
    """Predicted serving performance of one deployment at one batch."""

    output_tokens_per_s_per_gpu: float
    output_tokens_per_s_per_user: float
    ttft_s: float  # mean
    tpot_s: float
    batch: int  # requests in flight, whole deployment
    fits: bool
    bound: str  # what dominates the decode iteration: "compute" | "memory" | "communication"
    memory: MemoryBreakdown
    ops: list[OpCost]
    deployment: Deployment
    gpu: str
    notes: tuple[str, ...] = ()
    ttft_p99_s: float = float("nan")  # 99th percentile over requests (Deployment.arrivals says how they vary)
    tpot_p99_s: float = float("nan")  # 99th percentile over requests of each one's mean TPOT (the same)

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total_bytes

    @property
    def output_tokens_per_s(self) -> float:
        """Whole deployment."""
        return self.output_tokens_per_s_per_gpu * (self.deployment.gpus or 1)

    def to_dict(self, *, ops: bool = True) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "deployment": self.deployment.to_dict(),
            "output_tokens_per_s_per_gpu": self.output_tokens_per_s_per_gpu,
            "output_tokens_per_s_per_user": self.output_tokens_per_s_per_user,
            "output_tokens_per_s": self.output_tokens_per_s,
            "ttft_ms": self.ttft_s * 1e3,
            "ttft_p99_ms": self.ttft_p99_s * 1e3,
            "tpot_p99_ms": self.tpot_p99_s * 1e3,
            "tpot_ms": self.tpot_s * 1e3,
            "batch": self.batch,
            "memory_per_gpu_gb": self.memory_per_gpu_bytes / 1e9,
            "memory_gb": {k.replace("_bytes", ""): v / 1e9 for k, v in self.memory.to_dict().items()},
            "fits": self.fits,
            "bound": self.bound,
            "notes": list(self.notes),
            "ops": [o.to_dict() for o in self.ops] if ops else [],
        }


@dataclass(frozen=True)
class Advice:
    """A dimension (or its per-GPU shard) off a multiple of 128/256 and the model-computed gain.

    ``gain`` is the fractional change in the chosen metric (output tokens/s per
    GPU at the same deployment) when the dimension moves to ``aligned_value``;
    positive is faster.
    """

    dimension: str
    value: int
    per_gpu_value: int
    aligned_value: int
    gain: float
    message: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
