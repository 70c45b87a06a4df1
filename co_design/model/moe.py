"""Mixture-of-experts FFN: top-k softmax router, grouped experts, optional shared experts.

Gating: the chosen experts' outputs are weighted by their router probabilities, renormalized over
the top k when ``norm_topk_prob`` says so (Hugging Face's config field of that name; by default
only for k > 1). Top-1 routing keeps the raw probability p of the chosen expert as in Switch
Transformer (Fedus et al. 2021): renormalizing would make the gate p / p = 1 and leave the router
no gradient from the language-model loss, only from the balancing loss.

Dispatch has no Python loop over tokens or experts. Token-expert assignments are sorted by expert
so each expert's tokens are contiguous rows, then every expert matrix runs as one grouped GEMM:

* ``torch.nn.functional.grouped_mm`` (jagged groups given by offsets) where this torch build
  runs it for the device and dtype (probed once, :func:`_grouped_mm_runs`): no padding, so no
  wasted FLOPs when routing is unbalanced. Measured on CPU, 2 threads, forward+backward of one
  expert matrix (8 experts, 4096 assignments, 1024 -> 512): fp32 grouped 0.088 s, padded bmm
  0.083 s (7% padding), one dense mm of the same size 0.073 s; bf16 0.037 / 0.047 / 0.034 s.
* otherwise a padded ``torch.bmm`` over per-expert buckets of capacity max(tokens per expert)
  (no token is dropped; the padding rows are zeros and cost FLOPs only).

Gathering a weight copy per assignment (``w[expert_of_assignment]``) was rejected: it moves
``k * tokens * hidden * ffn`` elements, far more than the GEMMs' work at proxy sizes.
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from co_design.model.layers import MLP

__all__ = ["GroupedExperts", "MoE", "load_balancing_loss"]

_HAS_GROUPED_MM = hasattr(F, "grouped_mm")


@functools.lru_cache(maxsize=None)
def _grouped_mm_runs(device: str, dtype: torch.dtype) -> bool:
    """Whether this torch build runs grouped_mm forward+backward on ``device``/``dtype`` (probed once).

    Kernel coverage differs between torch versions (CPU support arrived after CUDA's), so a tiny
    call decides rather than a version table; any failure selects the padded-bmm path.
    """
    if not _HAS_GROUPED_MM:
        return False
    try:
        with torch.inference_mode(False), torch.enable_grad(), torch.autocast(torch.device(device).type, enabled=False):
            return _probe_grouped_mm(device, dtype)
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _probe_grouped_mm(device: str, dtype: torch.dtype) -> bool:
    """One tiny grouped_mm forward+backward (2 groups of a 16x16 weight)."""
    x = torch.randn(6, 16, device=device, dtype=dtype, requires_grad=True)  # (M, K)
    w = torch.randn(2, 16, 16, device=device, dtype=dtype, requires_grad=True)  # (E, N, K)
    offs = torch.tensor([2, 6], device=device, dtype=torch.int32)
    F.grouped_mm(x, w.transpose(1, 2), offs=offs).square().sum().backward()
    return x.grad is not None and w.grad is not None


def load_balancing_loss(probs: Tensor, expert_index: Tensor, num_experts: int) -> Tensor:
    """Switch/GShard auxiliary loss ``E * sum_e f_e * P_e`` (Fedus et al. 2021, eq. 4), 0-dim fp32.

    ``probs`` (N, E): router softmax per token; ``expert_index`` (N, k): the chosen experts.
    ``f_e`` is the fraction of the N*k assignments sent to expert e (no gradient) and ``P_e`` the
    mean router probability of e (carries the gradient). Equals 1.0 when routing is balanced or
    the router is uniform, and up to ``E`` when everything collapses onto one expert.
    """
    counts = torch.bincount(expert_index.flatten(), minlength=num_experts)  # (E,)
    f = counts.float() / expert_index.numel()  # (E,)
    p = probs.float().mean(dim=0)  # (E,)
    return num_experts * (f * p).sum()


def _compute_dtype(x: Tensor, w: Tensor) -> torch.dtype:
    """The dtype autocast would give a matmul of x and w (grouped_mm is not autocast-aware)."""
    if torch.is_autocast_enabled(x.device.type):
        return torch.get_autocast_dtype(x.device.type)
    return torch.promote_types(x.dtype, w.dtype)


class GroupedExperts(nn.Module):
    """``num_experts`` FFNs of width ``ffn`` stored as 3-D weights, run as grouped GEMMs.

    Implements the co-design experts protocol: ``w_gate`` (gated only), ``w_up`` of shape
    (E, ffn, hidden) and ``w_down`` of shape (E, hidden, ffn) -- (E, out_features, in_features);
    ``weight_quant`` is applied to each of the three stacked weights and ``input_quant`` to the
    input of each expert matmul (the routed tokens for gate/up, the hidden activation for down),
    one call per stacked tensor. Both are parameter-free ``nn.Identity`` until
    :func:`co_design.quant.quantize_model` swaps them.

    ``forward(x, counts, token_index)`` quantizes the N distinct tokens once and then gathers the
    ``M = N * k`` routed rows: the same values as quantizing the gathered rows (quantization is
    per row block and every token is routed, so the tensor amax is the same) at 1/k of the cost,
    and what a deployed kernel does (one activation scale shared by the experts).
    """

    _co_design_experts = True

    def __init__(self, num_experts: int, hidden: int, ffn: int, *, gated: bool = True) -> None:
        super().__init__()
        self.num_experts, self.hidden, self.ffn, self.gated = num_experts, hidden, ffn, gated
        self.w_gate = nn.Parameter(torch.empty(num_experts, ffn, hidden)) if gated else None
        self.w_up = nn.Parameter(torch.empty(num_experts, ffn, hidden))
        self.w_down = nn.Parameter(torch.empty(num_experts, hidden, ffn))
        self.weight_quant: nn.Module = nn.Identity()
        self.input_quant: nn.Module = nn.Identity()
        self.use_grouped_mm = True  # False forces the padded-bmm path (tests compare the two)
        for w in (self.w_gate, self.w_up, self.w_down):
            if w is not None:
                nn.init.normal_(w, std=0.02)

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, hidden={self.hidden}, ffn={self.ffn}, gated={self.gated}"

    def forward(self, x: Tensor, counts: Tensor, token_index: Tensor | None = None) -> Tensor:
        """Run the experts on rows grouped by expert; returns (M, hidden) in that grouped order.

        x (N, hidden); token_index (M,): row of x feeding each grouped row (None: x itself is
        the M grouped rows); counts (E,): ``counts[e]`` consecutive grouped rows go to expert e.
        """
        rows = x.shape[0] if token_index is None else token_index.shape[0]
        if counts.device.type == "cpu" and rows != int(counts.sum()):  # checked where it costs no device sync
            raise ValueError(f"experts got {rows} rows but counts sum to {int(counts.sum())}")
        dtype = _compute_dtype(x, self.w_up)
        w_up = self.weight_quant(self.w_up).to(dtype)  # (E, F, h)
        w_gate = self.weight_quant(self.w_gate).to(dtype) if self.w_gate is not None else None  # (E, F, h)
        w_down = self.weight_quant(self.w_down).to(dtype)  # (E, h, F)
        x = self.input_quant(x).to(dtype)  # (N, h)
        if token_index is not None:
            x = x[token_index]  # (M, h): grouped by expert
        if self._grouped_mm_ok(x):
            offs = counts.cumsum(0).to(torch.int32)  # (E,): end row of each expert's group
            up = F.grouped_mm(x, w_up.transpose(1, 2), offs=offs)  # (M, F)
            h = F.silu(F.grouped_mm(x, w_gate.transpose(1, 2), offs=offs)) * up if w_gate is not None else F.gelu(up)
            return F.grouped_mm(self.input_quant(h), w_down.transpose(1, 2), offs=offs)  # (M, h)
        return self._padded_bmm(x, counts, w_gate, w_up, w_down)

    def _grouped_mm_ok(self, x: Tensor) -> bool:
        if not (self.use_grouped_mm and _HAS_GROUPED_MM):
            return False
        if x.device.type == "cpu":
            return x.dtype in (torch.float32, torch.bfloat16) and _grouped_mm_runs("cpu", x.dtype)
        # CUDA grouped GEMM kernels: bf16 with 16-byte aligned rows (8 bf16 elements).
        return (
            x.device.type == "cuda"
            and x.dtype == torch.bfloat16
            and self.hidden % 8 == 0
            and self.ffn % 8 == 0
            and _grouped_mm_runs(str(x.device), x.dtype)
        )

    def _padded_bmm(self, x: Tensor, counts: Tensor, w_gate: Tensor | None, w_up: Tensor, w_down: Tensor) -> Tensor:
        E, M = self.num_experts, x.shape[0]
        capacity = int(counts.max()) if M else 0  # C: rows per bucket, no token dropped
        starts = counts.cumsum(0) - counts  # (E,): first row of each expert's group
        expert_of_row = torch.repeat_interleave(torch.arange(E, device=x.device), counts, output_size=M)  # (M,)
        slot = expert_of_row * capacity + (torch.arange(M, device=x.device) - starts[expert_of_row])  # (M,)
        # gather index into [x; 0]: padding slots read the zero row M
        src = torch.full((E * capacity,), M, dtype=torch.long, device=x.device).index_copy_(
            0, slot, torch.arange(M, device=x.device)
        )  # (E*C,)
        buf = torch.cat((x, x.new_zeros(1, x.shape[1])))[src].view(E, capacity, -1)  # (E, C, h)
        up = torch.bmm(buf, w_up.transpose(1, 2))  # (E, C, F)
        h = F.silu(torch.bmm(buf, w_gate.transpose(1, 2))) * up if w_gate is not None else F.gelu(up)  # (E, C, F)
        out = torch.bmm(self.input_quant(h), w_down.transpose(1, 2))  # (E, C, h)
        return out.reshape(E * capacity, -1)[slot]  # (M, h)


class MoE(nn.Module):
    """Top-k routed experts plus optional always-on shared experts.

    ``router`` (nn.Linear hidden -> E, no bias): softmax over all experts (in fp32, or fp64 for
    fp64 inputs), keep the top k probabilities and mix the chosen experts' outputs with them as
    gates. ``norm_topk_prob`` is named after the Hugging Face config field and means the same:

    * True: renormalize the kept k probabilities to sum to 1 (Mixtral/Qwen3-MoE). With k = 1 the
      gate is then exactly 1 and the router learns only from the balancing loss (a warning says so).
    * False: keep the raw softmax probabilities (Switch Transformer's top-1 gate ``p * E_i(x)``,
      DeepSeek-V2-style top-k without renormalization), so the gates sum to less than 1.
    * None (default): renormalize only when k > 1. For k = 1 that is Switch gating, the only
      choice that lets the language-model loss reach the router.

    The resolved choice is the bool attribute ``norm_topk_prob``. ``shared``: the
    ``shared_experts`` always-on experts of width ``shared_ffn`` fused into one MLP of width
    ``shared_experts * shared_ffn`` (same parameters and output as their sum), or None. After each
    forward ``aux_loss`` holds the unscaled load-balancing loss (:func:`load_balancing_loss`; the
    trainer multiplies by its coefficient, e.g. 0.01 as in Switch Transformer).
    ``router_mult`` multiplies the router logits (1.0; μP sets ``1/width_mult``).
    """

    def __init__(
        self,
        hidden: int,
        *,
        experts: int,
        experts_per_token: int,
        expert_ffn: int,
        shared_experts: int = 0,
        shared_ffn: int | None = None,
        gated: bool = True,
        norm_topk_prob: bool | None = None,
    ) -> None:
        super().__init__()
        if not 1 <= experts_per_token <= experts:
            raise ValueError(f"experts_per_token={experts_per_token} must be between 1 and experts={experts}")
        self.num_experts, self.top_k = experts, experts_per_token
        self.norm_topk_prob = experts_per_token > 1 if norm_topk_prob is None else bool(norm_topk_prob)
        if norm_topk_prob and experts_per_token == 1:
            warnings.warn(
                "MoE(norm_topk_prob=True, experts_per_token=1): the renormalized gate is always 1, so the "
                "router gets no gradient from the language-model loss and learns only from the balancing "
                "loss; use norm_topk_prob=None or False for Switch-Transformer gating",
                UserWarning,
                stacklevel=2,
            )
        self.router = nn.Linear(hidden, experts, bias=False)
        self.router_mult = 1.0
        self.experts = GroupedExperts(experts, hidden, expert_ffn, gated=gated)
        self.shared = MLP(hidden, shared_experts * (shared_ffn or expert_ffn), gated=gated) if shared_experts else None
        self.aux_loss: Tensor = torch.zeros(())

    def extra_repr(self) -> str:
        return f"num_experts={self.num_experts}, top_k={self.top_k}, norm_topk_prob={self.norm_topk_prob}"

    def forward(self, x: Tensor) -> Tensor:  # (B, T, h) -> (B, T, h)
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, h)
        N, k = x.shape[0], self.top_k
        logits = self.router(x)  # (N, E)
        if self.router_mult != 1.0:
            logits = logits * self.router_mult
        probs = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)  # (N, E) >= fp32
        top_p, top_i = probs.topk(k, dim=-1)  # (N, k), (N, k)
        if self.norm_topk_prob:
            top_p = top_p / top_p.sum(dim=-1, keepdim=True)  # (N, k): renormalized
        self.aux_loss = load_balancing_loss(probs, top_i, self.num_experts)

        flat_expert = top_i.flatten()  # (N*k,): assignment a = token a//k, choice a%k
        order = flat_expert.argsort(stable=True)  # (N*k,): assignments grouped by expert
        counts = torch.bincount(flat_expert, minlength=self.num_experts)  # (E,)
        y_sorted = self.experts(x, counts, order // k)  # (N*k, h): grouped by expert
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)  # (N*k,): undo the sort
        y = y_sorted[inverse].view(N, k, -1)  # (N, k, h)
        y = torch.bmm(top_p.to(y.dtype).unsqueeze(1), y).squeeze(1)  # (N, h): weighted sum over k
        if self.shared is not None:
            y = y + self.shared(x)  # (N, h)
        return y.view(shape)
