"""μP against the standard parametrization: the base-width identity, the optimizer's groups, and a
coordinate check (the logits' change after a few Adam steps must not grow with width under μP)."""

from __future__ import annotations

import math

import pytest
import torch

from co_design.arch import Architecture
from co_design.model import MuP, Transformer, optimizer_groups


def _arch(head_dim: int, *, moe: bool = False) -> Architecture:
    h = 4 * head_dim
    kw = dict(experts=4, experts_per_token=2, expert_ffn=2 * h) if moe else {}
    return Architecture(name="x", hidden=h, layers=2, heads=4, kv_heads=2, head_dim=head_dim, ffn=3 * h, vocab=64, **kw)


def _logit_change(head_dim: int, mup: MuP | None, *, moe: bool, steps: int = 3, lr: float = 1e-2) -> float:
    """RMS change of the logits after ``steps`` AdamW steps on one fixed batch (float64)."""
    torch.manual_seed(0)
    arch = _arch(head_dim, moe=moe)
    model = Transformer(arch, max_seq_len=32, mup=mup).double()
    opt = torch.optim.AdamW(optimizer_groups(model, lr=lr, weight_decay=0.0, mup=mup, hidden=arch.hidden), lr=lr)
    x = torch.randint(0, 64, (4, 33), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(x[:, :-1])
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return float((model(x[:, :-1]) - before).pow(2).mean().sqrt())


@pytest.mark.parametrize("moe", [False, True])
@pytest.mark.slow
def test_coordinate_check_mup_keeps_updates_width_independent(moe):
    # Widths 64..512 (8x). Observed: standard 0.37 -> 1.9-2.5 (x5-7), μP 0.32-0.37 (within 1.2x).
    widths = (16, 32, 64, 128)
    mup = [_logit_change(d, MuP(base_hidden=64, base_head_dim=16), moe=moe) for d in widths]
    standard = [_logit_change(d, None, moe=moe) for d in widths]
    assert max(mup) / min(mup) < 1.5, mup
    assert standard[-1] / standard[0] > 4, standard


@pytest.mark.parametrize("moe", [False, True])
def test_mup_equals_standard_at_the_base_shape(moe):
    arch = _arch(16, moe=moe)
    torch.manual_seed(3)
    sp = Transformer(arch, max_seq_len=16)
    torch.manual_seed(3)
    mp = Transformer(arch, max_seq_len=16, mup=MuP(base_hidden=arch.hidden, base_head_dim=16))
    for (n, a), (_, b) in zip(sp.named_parameters(), mp.named_parameters()):
        assert torch.equal(a, b), n
    x = torch.randint(0, 64, (2, 16))
    torch.testing.assert_close(sp(x), mp(x))
    lr_sp = {g["name"]: g["lr"] for g in optimizer_groups(sp, lr=1e-3, weight_decay=0.1, mup=None, hidden=arch.hidden)}
    lr_mp = {g["name"]: g["lr"] for g in optimizer_groups(mp, lr=1e-3, weight_decay=0.1, mup=mp.mup, hidden=arch.hidden)}
    assert lr_sp == lr_mp


def test_mup_scales_init_lr_and_outputs_by_width():
    mup = MuP(base_hidden=64, base_head_dim=16)
    arch = _arch(64, moe=True)  # hidden 256: width_mult 4
    torch.manual_seed(0)
    model = Transformer(arch, max_seq_len=16, mup=mup)
    assert model.output_mult == pytest.approx(0.25)
    assert model.layers[0].attn.scale == pytest.approx(4 / 64)  # sqrt(16)/64 instead of 1/8
    assert model.layers[0].ffn.router_mult == pytest.approx(0.25)
    q = model.layers[0].attn.q_proj.weight
    assert float(q.detach().std()) == pytest.approx(0.02 / 2, rel=0.05)  # 0.02 / sqrt(4)
    assert float(model.embed.weight.detach().std()) == pytest.approx(0.02, rel=0.05)
    groups = optimizer_groups(model, lr=1e-3, weight_decay=0.1, mup=mup, hidden=arch.hidden)
    by_param = {id(p): g for g in groups for p in g["params"]}
    named = dict(model.named_parameters())
    assert by_param[id(named["layers.0.attn.q_proj.weight"])]["lr"] == pytest.approx(2.5e-4)
    assert by_param[id(named["layers.0.ffn.experts.w_up"])]["lr"] == pytest.approx(2.5e-4)
    for name in ("embed.weight", "lm_head.weight", "layers.0.ffn.router.weight", "norm.weight"):
        assert by_param[id(named[name])]["lr"] == pytest.approx(1e-3), name
    assert by_param[id(named["embed.weight"])]["weight_decay"] == 0.0
    assert by_param[id(named["norm.weight"])]["weight_decay"] == 0.0
    assert by_param[id(named["lm_head.weight"])]["weight_decay"] == 0.1
    assert sum(len(g["params"]) for g in groups) == len(named)


@pytest.mark.parametrize("field", ["base_hidden", "base_head_dim"])
def test_mup_rejects_non_positive_widths(field):
    with pytest.raises(ValueError, match=field):
        MuP(**{field: 0})
    assert math.isclose(MuP().attention_scale(16), 0.25)
