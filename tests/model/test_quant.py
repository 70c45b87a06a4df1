"""quantize_model on our Transformer: which modules it swaps, and that QAT trains and reverses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from co_design import quant
from co_design.arch import MLA, Architecture
from co_design.model import Transformer

# every matmul input width a multiple of 16 (NVFP4 block), so nothing is skipped for shape
ARCH = Architecture(hidden=32, layers=3, heads=4, kv_heads=2, ffn=48, vocab=50, experts=4, experts_per_token=2,
                    expert_ffn=16, shared_experts=1, dense_layers=1)
MLA_ARCH = Architecture(hidden=32, layers=1, heads=2, ffn=48, vocab=50,
                        mla=MLA(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=16, q_lora_rank=16))


def _expected(model: Transformer) -> list[str]:
    names = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and name != "lm_head" and not name.endswith("router"):
            names.append(name)
        elif getattr(type(module), "_co_design_experts", False):
            names.append(name)
    return names


@pytest.mark.parametrize("arch", [ARCH, MLA_ARCH], ids=["gqa_moe", "mla"])
def test_quantize_model_swaps_all_but_lm_head_embed_router(arch):
    torch.manual_seed(0)
    model = Transformer(arch, max_seq_len=16)
    keys = set(model.state_dict())
    tokens = torch.randint(0, arch.vocab, (2, 8))
    with torch.no_grad():
        ref = model(tokens)
    swapped = quant.quantize_model(model, quant.QuantConfig())
    assert sorted(swapped) == sorted(_expected(model))
    assert not any(n == "lm_head" or "embed" in n or "router" in n for n in swapped)
    if arch.is_moe:
        assert "layers.1.ffn.experts" in swapped and "layers.1.ffn.shared.down_proj" in swapped
        assert "layers.1.ffn.router" not in swapped
        assert not isinstance(model.layers[1].ffn.experts.weight_quant, nn.Identity)
    assert set(model.state_dict()) == keys
    assert model.num_parameters() == arch.param_counts().total
    logits = model(tokens)
    assert torch.isfinite(logits).all() and not torch.equal(logits, ref)  # fake-quant changes the numbers
    (F.cross_entropy(logits.reshape(-1, arch.vocab), tokens.reshape(-1)) + 0.01 * model.aux_loss).backward()
    assert all(p.grad is not None for p in model.parameters())
    quant.dequantize_model(model)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens), ref)


def test_qat_training_reduces_loss():
    torch.manual_seed(0)
    model = Transformer(ARCH, max_seq_len=16)
    quant.quantize_model(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = torch.randint(0, ARCH.vocab, (4, 12))
    losses = []
    for _ in range(8):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, ARCH.vocab), tokens[:, 1:].reshape(-1)) + 0.01 * model.aux_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.3, losses


@pytest.mark.parametrize("grouped_mm", [True, False], ids=["grouped_mm", "padded_bmm"])
def test_quantizing_tokens_before_the_gather_is_exact(grouped_mm):
    """Experts quantize the N distinct tokens, then gather the N*k routed rows: same as quantizing the rows."""
    from co_design.model import GroupedExperts

    torch.manual_seed(0)
    ex = GroupedExperts(4, 32, 16)
    ex.use_grouped_mm = grouped_mm
    quant.quantize_model(nn.Sequential(ex))
    x = torch.randn(5, 32) * torch.logspace(-2, 1, 5)[:, None]  # rows of very different scale
    index = torch.tensor([0, 3, 1, 4, 2, 0, 1, 2, 3, 4])  # every token routed twice
    counts = torch.tensor([3, 2, 4, 1])
    torch.testing.assert_close(ex(x, counts, index), ex(x[index], counts), rtol=0, atol=0)
