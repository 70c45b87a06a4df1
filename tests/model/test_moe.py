"""MoE layer: dispatch equals a per-token loop, gating semantics, balancing loss by hand, gradients
(checked against finite differences and closed forms), experts protocol."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from co_design.model import GroupedExperts, MoE, load_balancing_loss


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _moe(gated=True, shared=0, experts=5, k=2, hidden=16, ffn=8, norm_topk_prob=None) -> MoE:
    moe = MoE(hidden, experts=experts, experts_per_token=k, expert_ffn=ffn, shared_experts=shared, shared_ffn=4,
              gated=gated, norm_topk_prob=norm_topk_prob)
    for p in moe.parameters():
        nn.init.normal_(p, std=0.3)  # a router far from uniform, so routing varies by token
    return moe


def _expert(moe: MoE, e: int, xn: torch.Tensor) -> torch.Tensor:
    """Expert e's FFN on one token (h,) -> (h,)."""
    ex = moe.experts
    up = ex.w_up[e] @ xn
    h = F.silu(ex.w_gate[e] @ xn) * up if ex.gated else F.gelu(up)
    return ex.w_down[e] @ h


def _naive(moe: MoE, x: torch.Tensor, renormalize: bool | None = None) -> torch.Tensor:
    """Per-token, per-choice loop: softmax, top-k, gates, sum of gated expert MLPs.

    The gates are the kept softmax probabilities, renormalized to sum to 1 when ``renormalize``
    (None: the layer's resolved ``norm_topk_prob``), else used as they are (Switch gating for k=1).
    """
    renormalize = moe.norm_topk_prob if renormalize is None else renormalize
    out = torch.zeros_like(x)
    for n in range(x.shape[0]):
        probs = torch.softmax(x[n] @ moe.router.weight.T, dim=-1)
        p, idx = probs.topk(moe.top_k)
        if renormalize:
            p = p / p.sum()
        for w, e in zip(p, idx):
            out[n] += w * _expert(moe, e, x[n])
        if moe.shared is not None:
            out[n] += moe.shared(x[n])
    return out


@pytest.mark.parametrize("grouped_mm", [True, False], ids=["grouped_mm", "padded_bmm"])
@pytest.mark.parametrize("gated,shared", [(True, 0), (True, 2), (False, 1)])
def test_dispatch_equals_per_token_loop(grouped_mm, gated, shared):
    moe = _moe(gated=gated, shared=shared)
    moe.experts.use_grouped_mm = grouped_mm
    x = torch.randn(2, 7, 16)
    y = moe(x)
    assert y.shape == x.shape
    torch.testing.assert_close(y.view(-1, 16), _naive(moe, x.view(-1, 16)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "k,norm_topk_prob,renormalized",
    [(1, None, False), (2, None, True), (3, None, True), (1, False, False), (2, False, False), (2, True, True)],
)
def test_gates_follow_norm_topk_prob(k, norm_topk_prob, renormalized):
    # the default renormalizes only for k > 1 (Mixtral/Qwen3-MoE); k = 1 keeps the raw probability (Switch)
    moe = _moe(k=k, norm_topk_prob=norm_topk_prob)
    assert moe.norm_topk_prob is renormalized
    x = torch.randn(2, 7, 16)
    torch.testing.assert_close(moe(x).view(-1, 16), _naive(moe, x.view(-1, 16), renormalize=renormalized),
                               rtol=1e-5, atol=1e-5)


def test_top1_switch_gate_scales_the_expert_output_by_its_probability():
    moe = _moe(k=1)
    x = torch.randn(5, 16)
    with torch.no_grad():
        p, idx = torch.softmax(moe.router(x), -1).max(-1)
        want = torch.stack([p[n] * _expert(moe, idx[n], x[n]) for n in range(5)])
        assert (p < 1 - 1e-3).all()  # the gate really is below 1 here
        torch.testing.assert_close(moe(x), want, rtol=1e-5, atol=1e-6)


def test_norm_topk_prob_with_top1_warns_once_at_construction():
    with pytest.warns(UserWarning, match="learns only from the balancing loss") as record:
        moe = MoE(16, experts=4, experts_per_token=1, expert_ffn=8, norm_topk_prob=True)
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        moe(torch.randn(3, 16))  # nothing more at forward
        for k, norm in [(1, None), (1, False), (2, None), (2, True), (2, False)]:
            MoE(16, experts=4, experts_per_token=k, expert_ffn=8, norm_topk_prob=norm)


def _lm_loss(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """A language-model-like loss with no balancing term, so only the gates carry router gradient."""
    return moe(x).square().sum()


@pytest.mark.parametrize("k,norm_topk_prob", [(1, None), (1, False), (2, None), (2, False)])
def test_router_gradient_of_lm_loss_matches_finite_difference(k, norm_topk_prob):
    """In float64 the router weight's autograd gradient g of the LM loss has the size a central finite
    difference gives: along the unit direction d = g / |g| the derivative is g . d = |g|.

    A perturbation eps * d with |d|_F = 1 moves each logit of token n by at most eps * |x_n|, so no
    token's top-k set can change while eps < gap_n / (2 |x_n|), gap_n being the logit gap between
    the k-th and (k+1)-th expert; eps is chosen below that bound (and routing is checked at the
    perturbed points). With routing fixed the loss is smooth in the router weight, so the central
    difference errs by O(eps^2) (truncation) + O(ulp(L) / eps) (rounding): about 1e-10 and 1e-11
    relative at eps = 1e-5, far inside rtol = 1e-6.
    """
    moe = _moe(k=k, norm_topk_prob=norm_topk_prob).double()
    x = torch.randn(24, 16, dtype=torch.float64)
    _lm_loss(moe, x).backward()
    w = moe.router.weight
    g = w.grad.clone()
    loss = _lm_loss(moe, x).item()

    logits = (x @ w.detach().T).sort(dim=-1, descending=True).values  # (N, E)
    bound = ((logits[:, k - 1] - logits[:, k]) / (2 * x.norm(dim=-1))).min().item()
    eps = min(1e-5, bound / 2)
    assert eps > 1e-8, f"a near-tie in routing leaves no room for a finite difference (eps bound {bound:g})"

    def route(weight):
        return torch.softmax(x @ weight.T, dim=-1).topk(k, dim=-1).indices.sort(dim=-1).values

    d = g / g.norm()
    w0 = w.detach().clone()
    losses = []
    with torch.no_grad():
        for sign in (1.0, -1.0):
            w.copy_(w0 + sign * eps * d)
            assert torch.equal(route(w), route(w0)), "routing changed at the perturbed point"
            losses.append(_lm_loss(moe, x).item())
        w.copy_(w0)
    fd = (losses[0] - losses[1]) / (2 * eps)
    assert fd == pytest.approx(g.norm().item(), rel=1e-6)
    # a real gradient, not rounding: a 1% relative change of the router weight along d moves the loss
    # by > 0.1% (|g| |W| / L > 0.1; it is O(1) here, and ~1e-17 when k = 1 renormalizes, see below)
    assert g.norm().item() * w0.norm().item() / loss > 0.1


def test_norm_topk_prob_with_top1_leaves_router_without_lm_gradient():
    """Hugging Face ``norm_topk_prob=True`` with k = 1: the gate p / p is 1 for every router weight,
    so the LM loss's router gradient is zero; autograd computes g / p - g * p / p^2, which cancels
    to a few float64 ulps, i.e. ~1e-16 of the expert gradients (bound 1e-12)."""
    with pytest.warns(UserWarning, match="balancing loss"):
        moe = _moe(k=1, norm_topk_prob=True).double()
    x = torch.randn(24, 16, dtype=torch.float64)
    y = moe(x)
    with torch.no_grad():
        idx = torch.softmax(moe.router(x), -1).argmax(-1)
        torch.testing.assert_close(y, torch.stack([_expert(moe, idx[n], x[n]) for n in range(24)]))  # gate 1
    y.square().sum().backward()
    expert_scale = max(p.grad.abs().max().item() for p in moe.experts.parameters())
    assert expert_scale > 1e-3
    assert moe.router.weight.grad.abs().max().item() <= 1e-12 * expert_scale


def test_both_dispatch_paths_give_the_same_gradients():
    x = torch.randn(3, 9, 16)
    grads = []
    for grouped_mm in (True, False):
        moe = _moe(shared=1)
        torch.manual_seed(1)
        for p in moe.parameters():
            nn.init.normal_(p, std=0.3)
        moe.experts.use_grouped_mm = grouped_mm
        xi = x.clone().requires_grad_()
        (moe(xi).square().sum() + moe.aux_loss).backward()
        grads.append([xi.grad] + [p.grad for p in moe.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_balancing_loss_by_hand():
    # two tokens, three experts, top-1: f = (1/2, 1/2, 0), P = (0.4, 0.4, 0.2) -> 3 * (0.2 + 0.2) = 1.2
    probs = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3]])
    idx = probs.topk(1, dim=-1).indices
    torch.testing.assert_close(load_balancing_loss(probs, idx, 3), torch.tensor(1.2))


def test_uniform_router_gives_loss_one_and_collapse_gives_num_experts():
    moe = _moe(experts=4, k=2)
    nn.init.zeros_(moe.router.weight)  # uniform probabilities 1/E: loss = E * sum_e f_e / E = 1
    moe(torch.randn(2, 5, 16))
    assert moe.aux_loss.item() == pytest.approx(1.0, abs=1e-6)
    # every token sends all its router mass to expert 0 (top-1): f_0 = P_0 = 1 -> loss = E
    moe1 = _moe(experts=4, k=1)
    with torch.no_grad():
        moe1.router.weight.zero_()
        moe1.router.weight[0, 0] = 1e4
    x = torch.randn(2, 5, 16)
    x[..., 0] = x[..., 0].abs() + 1.0
    moe1(x)
    assert moe1.aux_loss.item() == pytest.approx(4.0, rel=1e-4)


def test_balancing_loss_gradient_reaches_router():
    moe = _moe()
    moe(torch.randn(2, 5, 16))
    moe.aux_loss.backward()
    assert moe.router.weight.grad is not None and moe.router.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("grouped_mm", [True, False], ids=["grouped_mm", "padded_bmm"])
def test_gradients_reach_exactly_the_experts_used(grouped_mm):
    moe = _moe(experts=8, k=1)  # 3 tokens, top-1 (Switch gate p): at most 3 of 8 experts used
    moe.experts.use_grouped_mm = grouped_mm
    x = torch.randn(1, 3, 16)
    loss = moe(x).square().sum()
    loss.backward()
    xs = x.view(-1, 16)
    with torch.no_grad():
        probs = torch.softmax(moe.router(xs), -1)  # (3, 8): the layer's own router call
        p, idx = probs.max(-1)
        used = idx.unique()
        y = torch.stack([_expert(moe, idx[n], xs[n]) for n in range(3)])  # (3, h): ungated expert outputs
    for name in ("w_gate", "w_up", "w_down"):
        norms = getattr(moe.experts, name).grad.flatten(1).abs().sum(1)  # (E,)
        assert (norms[used] > 0).all(), name
        unused = torch.ones(8, dtype=torch.bool)
        unused[used] = False
        assert (norms[unused] == 0).all(), name
    # L = sum_n p_n^2 |y_n|^2 and dp_n/dz_n = p_n (e_{i_n} - probs_n) give the router gradient
    # sum_n 2 p_n^2 |y_n|^2 (e_{i_n} - probs_n) x_n^T: non-zero by construction (0 < p_n < 1),
    # not by rounding as when the top-1 gate was renormalized to 1
    assert (p < 1 - 1e-3).all()
    dz = 2 * (p**2 * y.square().sum(-1))[:, None] * (F.one_hot(idx, 8) - probs)  # (3, E)
    want = dz.T @ xs  # (E, h)
    torch.testing.assert_close(moe.router.weight.grad, want, rtol=1e-4, atol=1e-5 * want.abs().max().item())
    assert want.norm() * moe.router.weight.norm() > 0.1 * loss.detach()


class _Recorder(nn.Module):
    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []
        self.scale = scale

    def forward(self, x):
        self.shapes.append(tuple(x.shape))
        return x * self.scale


@pytest.mark.parametrize("grouped_mm", [True, False], ids=["grouped_mm", "padded_bmm"])
def test_experts_protocol_quant_hooks_see_every_weight_and_input(grouped_mm):
    E, h, f = 4, 16, 8
    ex = GroupedExperts(E, h, f, gated=True)
    ex.use_grouped_mm = grouped_mm
    assert type(ex)._co_design_experts is True
    assert isinstance(ex.weight_quant, nn.Identity) and isinstance(ex.input_quant, nn.Identity)
    shapes = {n: tuple(p.shape) for n, p in ex.named_parameters()}
    assert shapes == {"w_gate": (E, f, h), "w_up": (E, f, h), "w_down": (E, h, f)}  # (E, out, in)
    ex.weight_quant, ex.input_quant = _Recorder(), _Recorder()
    counts = torch.tensor([2, 0, 3, 1])
    x = torch.randn(6, h)
    ex(x, counts)
    assert sorted(ex.weight_quant.shapes) == sorted([(E, f, h), (E, f, h), (E, h, f)])
    assert ex.input_quant.shapes[0] == (6, h) and ex.input_quant.shapes[1][-1] == f
    # with token_index the N distinct tokens are quantized once, then gathered
    ex.input_quant = _Recorder()
    ex(torch.randn(3, h), counts, torch.tensor([0, 1, 2, 0, 1, 2]))
    assert ex.input_quant.shapes[0] == (3, h)
    # quantizers really sit on the path: zeroing the weights zeroes the output
    ex.weight_quant = _Recorder(scale=0.0)
    assert ex(x, counts).abs().max() == 0
    assert not list(ex.weight_quant.parameters())
    assert set(ex.state_dict()) == {"w_gate", "w_up", "w_down"}


def test_experts_reject_inconsistent_counts():
    ex = GroupedExperts(2, 16, 8)
    with pytest.raises(ValueError, match="counts"):
        ex(torch.randn(5, 16), torch.tensor([2, 2]))


def test_moe_autocast_bfloat16_matches_fp32():
    moe = _moe(shared=1)
    x = torch.randn(2, 6, 16)
    ref = moe(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = moe(x)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), ref, rtol=0.05, atol=0.05 * ref.abs().max().item())


def test_grouped_mm_probe_is_not_fooled_by_no_grad_or_autocast():
    from co_design.model import moe as moe_mod

    if not moe_mod._HAS_GROUPED_MM:
        pytest.skip("this torch has no torch.nn.functional.grouped_mm; the padded-bmm path is used")
    moe_mod._grouped_mm_runs.cache_clear()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        _moe()(torch.randn(1, 4, 16))  # the first call, which probes, runs without grad
    assert moe_mod._grouped_mm_runs("cpu", torch.bfloat16)
    assert moe_mod._grouped_mm_runs("cpu", torch.float32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_bfloat16_dispatch_matches_padded_path():
    moe = _moe(shared=1, hidden=64, ffn=32, experts=8).cuda()
    x = torch.randn(4, 33, 64, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y_fast = moe(x)
        moe.experts.use_grouped_mm = False
        y_ref = moe(x)
    torch.testing.assert_close(y_fast.float(), y_ref.float(), rtol=2e-2, atol=2e-2)
