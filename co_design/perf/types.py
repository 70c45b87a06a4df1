"""The performance model's data: what is deployed, what is asked, what comes back."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from co_design.perf.roofline import BYTES_PER_ELEMENT, Precision

__all__ = ["Deployment", "Runtime", "SLO", "OpCost", "MemoryBreakdown", "Prediction", "Advice"]


def _int_field(owner: str, name: str, value: Any, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{owner}.{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{owner}.{name} must be >= {minimum}, got {value}")


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """Serving-runtime settings (TensorRT-LLM defaults) that bound the batch and add overheads.

    * ``max_batch``: requests scheduled per iteration per replica (trtllm-bench's
      ``max_batch_size`` tops out in the low thousands; 2048 here).
    * ``max_num_tokens``: token budget of one iteration (decode tokens plus
      context chunk) per replica; 8192 is TensorRT-LLM's default
      (``max_num_tokens`` in BuildConfig / LLM API). Larger steps run as chunks.
    * ``kv_cache_memory_fraction``: share of the memory left after weights,
      activations and the reserve that the KV cache may take (TensorRT-LLM
      ``KvCacheConfig.free_gpu_memory_fraction`` default 0.9).
    * ``reserve_bytes``: CUDA context, library workspaces, CUDA graphs, per GPU.
    * ``iteration_overhead_s``: host-side scheduling time per iteration not hidden
      behind GPU work (calibrated, see benchmarks/results/validation.md).
    * ``request_overhead_s``: host time per request in flight per iteration
      (scheduling, sampling, detokenization bookkeeping) not hidden behind GPU
      work (calibrated).
    * ``moe_load_imbalance``: tokens on the busiest expert-parallel rank over the
      mean (1.0 = perfect balance).
    * ``kernel_efficiency``: fraction of the GPU's microbenchmark efficiencies
      (``gemm_efficiency``, ``memory_efficiency``, ``attention_efficiency``) that
      the runtime's kernels reach inside a serving step, where shapes are small
      and kernels short (calibrated).
    * ``bandwidth_efficiency``: the same for the memory side (HBM streaming);
      ``None`` = ``kernel_efficiency``.
    * ``grouped_gemm_efficiency``: fraction of the dense-GEMM efficiency that the
      runtime's grouped MoE expert kernels reach (calibrated).

    The four calibrated defaults were fitted to published TensorRT-LLM
    measurements (benchmarks/validate_perf.py, benchmarks/results/validation.md);
    set them to 1 / 0 for an idealized runtime.
    """

    max_batch: int = 2048
    max_num_tokens: int = 8192
    kv_cache_memory_fraction: float = 0.9
    reserve_bytes: float = 3.0 * 2**30
    iteration_overhead_s: float = 0.5e-3
    request_overhead_s: float = 7.5e-6
    moe_load_imbalance: float = 1.0
    kernel_efficiency: float = 0.65
    bandwidth_efficiency: float | None = None
    grouped_gemm_efficiency: float = 0.4

    def __post_init__(self) -> None:
        _int_field("Runtime", "max_batch", self.max_batch)
        _int_field("Runtime", "max_num_tokens", self.max_num_tokens)
        if not 0 < self.kv_cache_memory_fraction <= 1:
            raise ValueError(f"Runtime.kv_cache_memory_fraction must be in (0, 1], got {self.kv_cache_memory_fraction}")
        if self.reserve_bytes < 0 or self.iteration_overhead_s < 0 or self.request_overhead_s < 0:
            raise ValueError("Runtime.reserve_bytes, iteration_overhead_s and request_overhead_s must be >= 0")
        if self.bandwidth_efficiency is not None and not 0 < self.bandwidth_efficiency <= 1:
            raise ValueError(f"Runtime.bandwidth_efficiency must be in (0, 1] or None, got {self.bandwidth_efficiency}")
        if not 0 < self.kernel_efficiency <= 1:
            raise ValueError(f"Runtime.kernel_efficiency must be in (0, 1], got {self.kernel_efficiency}")
        if not 0 < self.grouped_gemm_efficiency <= 1:
            raise ValueError(f"Runtime.grouped_gemm_efficiency must be in (0, 1], got {self.grouped_gemm_efficiency}")
        if self.moe_load_imbalance < 1:
            raise ValueError(f"Runtime.moe_load_imbalance must be >= 1 (busiest rank over mean), got {self.moe_load_imbalance}")


@dataclass(frozen=True, kw_only=True)
class Deployment:
    """How a model is served (TensorRT-LLM conventions).

    * ``gpus``: GPUs of the whole deployment; ``None`` = ``tp * pp`` (one replica).
      ``gpus / (tp * pp)`` replicas serve independent requests.
    * ``tp``: tensor-parallel size of a replica. With ``attention_dp`` the
      attention runs data-parallel across these ``tp`` ranks (each rank its own
      requests, full attention weights) while the FFN/MoE stays TP/EP ("DEP" with
      ``ep > 1``; "ADP" without expert parallelism, e.g. a dense model).
    * ``ep``: expert-parallel size inside the ``tp`` ranks (``tp % ep == 0``;
      each expert split ``tp / ep`` ways).
    * ``pp``: pipeline stages (layers split evenly; the slowest stage sets the pace).
    * ``helix``: KV-parallel degree for decode attention (Helix): the KV cache is
      split along the sequence over ``helix`` ranks, heads over ``tp / helix``;
      the output projection and the FFN use all ``tp`` ranks.
    * ``weights`` / ``activations`` / ``kv_cache``: storage format per tensor class
      (embeddings, lm_head, router and norms stay bf16).
    * ``isl`` / ``osl``: input / output tokens per request.
    * ``concurrency``: requests in flight in the whole deployment (as
      trtllm-bench counts them); ``None`` asks :func:`max_throughput` to choose.
    """

    gpus: int | None = None
    tp: int = 1
    ep: int = 1
    pp: int = 1
    attention_dp: bool = False
    helix: int = 1
    weights: Precision = "nvfp4"
    activations: Precision = "nvfp4"
    kv_cache: Precision = "fp8"
    isl: int = 1024
    osl: int = 1024
    concurrency: int | None = None
    runtime: Runtime = field(default_factory=Runtime)

    def __post_init__(self) -> None:
        for name in ("tp", "ep", "pp", "helix", "isl", "osl"):
            _int_field("Deployment", name, getattr(self, name))
        if self.gpus is None:
            object.__setattr__(self, "gpus", self.tp * self.pp)
        _int_field("Deployment", "gpus", self.gpus)
        if self.concurrency is not None:
            _int_field("Deployment", "concurrency", self.concurrency)
        for name in ("weights", "activations", "kv_cache"):
            if getattr(self, name) not in BYTES_PER_ELEMENT:
                raise ValueError(f"Deployment.{name}={getattr(self, name)!r}; use one of {sorted(BYTES_PER_ELEMENT)}")
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
    max_ttft_s: float | None = None
    max_tpot_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("min_tokens_per_s_per_user", "max_ttft_s", "max_tpot_s"):
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
        return True


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
    bound: str  # "compute" | "memory" | "communication"
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
    ttft_s: float
    tpot_s: float
    batch: int  # requests in flight, whole deployment
    fits: bool
    bound: str  # what dominates the decode iteration: "compute" | "memory" | "communication"
    memory: MemoryBreakdown
    ops: list[OpCost]
    deployment: Deployment
    gpu: str
    notes: tuple[str, ...] = ()

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
