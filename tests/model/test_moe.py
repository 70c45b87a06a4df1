"""MoE layer: dispatch equals a per-token loop, balancing loss by hand, gradients, experts protocol."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from co_design.model import GroupedExperts, MoE, load_balancing_loss


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _moe(gated=True, shared=0, experts=5, k=2, hidden=16, ffn=8) -> MoE:
    moe = MoE(hidden, experts=experts, experts_per_token=k, expert_ffn=ffn, shared_experts=shared, shared_ffn=4, gated=gated)
    for p in moe.parameters():
        nn.init.normal_(p, std=0.3)  # a router far from uniform, so routing varies by token
    return moe


def _naive(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """Per-token, per-choice loop: softmax, top-k, renormalize, sum of weighted expert MLPs."""
    ex = moe.experts
    out = torch.zeros_like(x)
    for n in range(x.shape[0]):
        probs = torch.softmax(x[n] @ moe.router.weight.T, dim=-1)
        p, idx = probs.topk(moe.top_k)
        p = p / p.sum()
        for w, e in zip(p, idx):
            up = ex.w_up[e] @ x[n]
            h = F.silu(ex.w_gate[e] @ x[n]) * up if ex.gated else F.gelu(up)
            out[n] += w * (ex.w_down[e] @ h)
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
    moe = _moe(experts=8, k=1)  # 3 tokens, top-1: at most 3 of 8 experts used
    moe.experts.use_grouped_mm = grouped_mm
    x = torch.randn(1, 3, 16)
    moe(x).square().sum().backward()
    with torch.no_grad():
        used = torch.softmax(x.view(-1, 16) @ moe.router.weight.T, -1).argmax(-1).unique()
    for name in ("w_gate", "w_up", "w_down"):
        norms = getattr(moe.experts, name).grad.flatten(1).abs().sum(1)  # (E,)
        assert (norms[used] > 0).all(), name
        unused = torch.ones(8, dtype=torch.bool)
        unused[used] = False
        assert (norms[unused] == 0).all(), name
    assert moe.router.weight.grad.abs().sum() > 0


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
