"""Fused 3-D expert weights (transformers 5 layout) and the coverage report."""

from __future__ import annotations

import warnings

import pytest
import torch
import transformers as T  # the test extra
from torch import nn

from co_design.quant import QuantConfig, dequantize_model, fake_quantize_nvfp4, quantization_coverage, quantize_model

COMMON = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              vocab_size=128, num_experts_per_tok=2)


def _experts(family: str, impl: str = "eager") -> nn.Module:
    torch.manual_seed(0)
    if family == "mixtral":  # (E, 2F, H) and (E, H, F), read with F.linear: reduction dim last
        cfg = T.MixtralConfig(intermediate_size=32, num_local_experts=4, **COMMON)
        mod = T.models.mixtral.modeling_mixtral.MixtralExperts(cfg)
    else:  # gpt-oss: (E, H, 2F) and (E, F, H), read as x @ w: reduction dim 1
        cfg = T.GptOssConfig(intermediate_size=32, num_local_experts=4, **COMMON)
        mod = T.models.gpt_oss.modeling_gpt_oss.GptOssExperts(cfg)
    cfg._experts_implementation = impl
    for p in mod.parameters():
        nn.init.normal_(p, std=0.1)
    return mod


def _route(n: int = 12) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 64, generator=g)
    idx = torch.stack([torch.randperm(4, generator=g)[:2] for _ in range(n)])  # (n, 2) distinct experts
    return x, idx, torch.full((n, 2), 0.5)


def _per_expert_reference(w: torch.Tensor, dim: int) -> torch.Tensor:
    """Each expert matrix on its own (own global scale), blocks of 16 along ``dim`` (1 or 2 of (E, a, b))."""
    mats = [w[e] if dim == 2 else w[e].T for e in range(w.shape[0])]
    q = torch.stack([fake_quantize_nvfp4(m) for m in mats])
    return q if dim == 2 else q.transpose(1, 2)


@pytest.mark.parametrize("family,dim", [("mixtral", 2), ("gpt_oss", 1)])
def test_weights_are_blocked_along_the_reduction_dim(family, dim):
    mod = _experts(family)
    ref = _experts(family)
    names = ["gate_up_proj", "down_proj"]
    with torch.no_grad():
        for n in names:
            getattr(ref, n).copy_(_per_expert_reference(getattr(mod, n), dim))
    wrong = _experts(family)
    with torch.no_grad():
        for n in names:
            getattr(wrong, n).copy_(_per_expert_reference(getattr(mod, n), 3 - dim))
    keys = set(mod.state_dict())
    swapped = quantize_model(nn.ModuleDict({"experts": mod}), QuantConfig(activations=False))
    assert swapped == ["experts"] and mod._co_design_fused_spec.reduction_dims == {n: dim for n in names}
    assert set(mod.state_dict()) == keys  # parameter names unchanged
    x, idx, w = _route()
    out = mod(x, idx, w)
    torch.testing.assert_close(out, ref(x, idx, w), rtol=1e-6, atol=1e-6)
    assert not torch.allclose(out, wrong(x, idx, w), atol=1e-4)  # blocks along the other dim differ
    dequantize_model(nn.ModuleDict({"experts": mod}))
    assert type(mod).__name__ == type(ref).__name__ and set(mod.state_dict()) == keys


@pytest.mark.parametrize("family", ["mixtral", "gpt_oss"])
@pytest.mark.parametrize("impl", ["eager", "grouped_mm", "batched_mm"])
def test_activations_are_quantized_in_every_experts_implementation(family, impl):
    x, idx, w = _route()
    weight_only, w4a4 = _experts(family, impl), _experts(family, impl)
    quantize_model(nn.ModuleDict({"e": weight_only}), QuantConfig(activations=False))
    quantize_model(nn.ModuleDict({"e": w4a4}), QuantConfig())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "could not trace" warning: both matmuls were seen
        y = w4a4(x, idx, w)
    assert not torch.allclose(y, weight_only(x, idx, w), atol=1e-4)
    y.sum().backward()  # straight-through: the Parameters get gradients
    assert w4a4.gate_up_proj.grad.abs().sum() > 0 and w4a4.down_proj.grad.abs().sum() > 0


def test_undeclared_layout_is_skipped_and_named():
    class Experts(nn.Module):  # 3-D weights without is_transposed: square, so the layout cannot be read
        def __init__(self) -> None:
            super().__init__()
            self.gate_up_proj = nn.Parameter(torch.randn(4, 32, 32))
            self.down_proj = nn.Parameter(torch.randn(4, 32, 16))

    model = nn.ModuleDict({"experts": Experts(), "mlp": nn.Linear(32, 32)})
    with pytest.warns(UserWarning, match="not quantizing 'experts': Experts holds 3-D expert weights .* set its "
                                         "is_transposed attribute"):
        swapped = quantize_model(model)
    assert swapped == ["mlp"] and list(swapped.skipped) == ["experts"]
    assert swapped.coverage.kinds == {"experts": (0, 4 * 32 * 32 + 4 * 32 * 16), "ffn": (32 * 32, 32 * 32)}
    model.experts.is_transposed = False  # declared: quantized
    assert quantize_model(model) == ["experts"]


def test_coverage_report_by_hand():
    model = nn.ModuleDict({
        "embed_tokens": nn.Embedding(10, 32),
        "attn": nn.ModuleDict({"q_proj": nn.Linear(32, 32, bias=False), "o_proj": nn.Linear(24, 32, bias=False)}),
        "mlp": nn.Sequential(nn.Linear(32, 64), nn.Linear(64, 32)),
        "norm": nn.LayerNorm(32),
        "lm_head": nn.Linear(32, 10, bias=False),
    })
    with pytest.warns(UserWarning, match=r"not quantizing 'attn.o_proj': in_features=24 is not a multiple of 16"):
        report = quantize_model(model).coverage
    assert report.format == "nvfp4"
    assert report.kinds == {"embeddings": (0, 320), "attention": (1024, 1024 + 768), "ffn": (4096, 4096),
                            "lm_head": (0, 320)}
    assert report.kept == {"lm_head": 320, "router": 0, "embeddings": 320, "other": 0, "norms": 64, "biases": 96}
    assert report.fraction() == pytest.approx(5120 / 5888)
    assert report.fraction(("attention",)) == pytest.approx(1024 / 1792)
    assert report.skipped == {"attn.o_proj": "in_features=24 is not a multiple of 16 (NVFP4 block size)"}
    assert report.metrics()["co_design/quant/coverage"] == pytest.approx(5120 / 5888)
    lines = report.lines()
    assert lines[0] == ("nvfp4 fake-quantization covers 87.0% of attention+FFN+expert weights (5,120 of 5,888 "
                        "elements); 78.4% of all weight matrices")
    assert lines[1] == "  attention   57.1%  (1,024 of 1,792)"
    assert "  kept in high precision: lm_head 320, embeddings 320, norms 64, biases/vectors 96" in lines
    assert quantization_coverage(model) == report.__class__(report.format, report.kinds, report.kept)
