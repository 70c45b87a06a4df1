"""QuantConfig, FakeQuantLinear, quantize_model / dequantize_model, the experts protocol, stats."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from co_design.quant import (
    FakeQuant,
    FakeQuantLinear,
    QuantConfig,
    dequantize_model,
    fake_quantize,
    fake_quantize_nvfp4,
    quantization_stats,
    quantize_model,
)


class ToyExperts(nn.Module):
    """Minimal grouped experts following the protocol: (E, out, in) weights, two quantizer slots."""

    _co_design_experts = True

    def __init__(self, experts: int = 3, hidden: int = 32, ffn: int = 48) -> None:
        super().__init__()
        self.w_in = nn.Parameter(torch.randn(experts, ffn, hidden) / hidden**0.5)  # (E, ffn, hidden)
        self.w_out = nn.Parameter(torch.randn(experts, hidden, ffn) / ffn**0.5)  # (E, hidden, ffn)
        self.weight_quant: nn.Module = nn.Identity()
        self.input_quant: nn.Module = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (E, tokens, hidden) already routed
        h = torch.bmm(self.input_quant(x), self.weight_quant(self.w_in).transpose(1, 2))  # (E, T, ffn)
        return torch.bmm(self.input_quant(F.silu(h)), self.weight_quant(self.w_out).transpose(1, 2))


class ToyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 32)
        self.embed_proj = nn.Linear(32, 32)
        self.block = nn.ModuleDict(
            {"q_proj": nn.Linear(32, 32), "odd": nn.Linear(24, 32, bias=False), "router": nn.Linear(32, 3)}
        )
        self.gate_holder = nn.Module()
        self.gate_holder.gate = nn.Linear(32, 3)
        self.experts = ToyExperts()
        self.lm_head = nn.Linear(32, 10)


def _toy_quantize(config: QuantConfig | None = None) -> tuple[ToyModel, list[str], list[str]]:
    model = ToyModel()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = quantize_model(model, config)
    return model, names, [str(w.message) for w in caught]


# --- QuantConfig -----------------------------------------------------------------------------------


def test_config_defaults_follow_the_contract() -> None:
    c = QuantConfig()
    assert (c.format, c.weights, c.activations, c.mask_grad_beyond_amax) == ("nvfp4", True, True, False)
    assert c.skip == ("lm_head", "*embed*", "*router*", "*.gate")


def test_config_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match=r"format='nvfp5'.*did you mean 'nvfp4'"):
        QuantConfig(format="nvfp5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weights=False, activations=False"):
        QuantConfig(weights=False, activations=False)
    with pytest.raises(TypeError, match=r"skip=\('lm_head',\)"):
        QuantConfig(skip="lm_head")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="activations must be True or False, got 'yes'"):
        QuantConfig(activations="yes")  # type: ignore[arg-type]
    assert QuantConfig(skip=["a", "b"]).skip == ("a", "b")  # type: ignore[arg-type]


# --- FakeQuantLinear ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["nvfp4", "fp8", "bf16"])
def test_fake_quant_linear_forward_is_quantized_matmul(fmt: str) -> None:
    lin = nn.Linear(32, 16)
    fq = FakeQuantLinear.from_linear(lin, QuantConfig(format=fmt))  # type: ignore[arg-type]
    x = torch.randn(2, 5, 32)
    expected = F.linear(fake_quantize(x, fmt), fake_quantize(lin.weight, fmt), lin.bias)  # type: ignore[arg-type]
    assert torch.equal(fq(x), expected)
    assert not torch.equal(fq(x), lin(x))


def test_weight_only_leaves_the_input_alone() -> None:
    lin = nn.Linear(32, 16)
    fq = FakeQuantLinear.from_linear(lin, QuantConfig(activations=False))
    x = torch.randn(4, 32)
    assert torch.equal(fq(x), F.linear(x, fake_quantize_nvfp4(lin.weight), lin.bias))


def test_from_linear_shares_parameters_and_to_linear_gives_them_back() -> None:
    lin = nn.Linear(32, 16).eval()
    fq = FakeQuantLinear.from_linear(lin)
    assert fq.weight is lin.weight and fq.bias is lin.bias and not fq.training
    back = fq.to_linear()
    assert type(back) is nn.Linear and back.weight is lin.weight and back.bias is lin.bias
    assert "format=nvfp4" in repr(fq)


def test_gradients_reach_the_weights_through_the_ste() -> None:
    lin = nn.Linear(32, 16)
    fq = FakeQuantLinear.from_linear(lin)
    x = torch.randn(8, 32, requires_grad=True)
    fq(x).square().sum().backward()
    wq, xq = fake_quantize_nvfp4(lin.weight.detach()), fake_quantize_nvfp4(x.detach())
    grad_out = 2 * F.linear(xq, wq, lin.bias.detach())  # d/dy of sum(y^2)
    torch.testing.assert_close(lin.weight.grad, grad_out.t() @ xq)  # STE: dL/dW = dL/dWq
    torch.testing.assert_close(x.grad, grad_out @ wq)


# --- quantize_model / dequantize_model ---------------------------------------------------------------


def test_quantize_model_on_sequential() -> None:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    assert quantize_model(model) == ["0", "2"]
    assert isinstance(model[0], FakeQuantLinear) and isinstance(model[2], FakeQuantLinear)
    assert quantize_model(model) == []  # idempotent


def test_default_skips_and_warning_for_odd_in_features() -> None:
    model, names, messages = _toy_quantize()
    assert names == ["block.q_proj", "experts"]
    assert isinstance(model.block["q_proj"], FakeQuantLinear)
    for kept in (model.embed_proj, model.block["router"], model.gate_holder.gate, model.lm_head, model.block["odd"]):
        assert type(kept) is nn.Linear
    assert len(messages) == 1 and "'block.odd'" in messages[0] and "in_features=24" in messages[0]


def test_custom_skip_patterns_and_fp8_has_no_block_constraint() -> None:
    model, names, messages = _toy_quantize(QuantConfig(format="fp8", skip=("experts", "block.*")))
    assert names == ["embed_proj", "gate_holder.gate", "lm_head"]
    assert messages == []


def test_experts_protocol() -> None:
    model, _, _ = _toy_quantize()
    experts = model.experts
    assert isinstance(experts.weight_quant, FakeQuant) and isinstance(experts.input_quant, FakeQuant)
    assert list(experts.weight_quant.parameters()) == [] and list(experts.input_quant.parameters()) == []
    x = torch.randn(3, 5, 32)
    w_in_q = torch.stack([fake_quantize_nvfp4(w) for w in experts.w_in])  # each expert its own scale
    h = torch.bmm(fake_quantize_nvfp4(x), w_in_q.transpose(1, 2))
    w_out_q = torch.stack([fake_quantize_nvfp4(w) for w in experts.w_out])
    expected = torch.bmm(fake_quantize_nvfp4(F.silu(h)), w_out_q.transpose(1, 2))
    torch.testing.assert_close(experts(x), expected, rtol=0, atol=0)
    assert dequantize_model(model) == ["block.q_proj", "experts"]
    assert isinstance(experts.weight_quant, nn.Identity) and isinstance(experts.input_quant, nn.Identity)


def test_experts_without_the_quantizer_slots_is_an_error() -> None:
    class Broken(nn.Module):
        _co_design_experts = True

        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(2, 16, 16))

    with pytest.raises(TypeError, match="'moe'.*weight_quant"):
        quantize_model(nn.ModuleDict({"moe": Broken()}))


def test_state_dict_loads_both_ways_and_dequantize_keeps_trained_weights() -> None:
    plain = ToyModel()
    keys = list(plain.state_dict())
    model = ToyModel()
    model.load_state_dict(plain.state_dict())
    with pytest.warns(UserWarning, match="'block.odd'"):
        quantize_model(model)
    assert list(model.state_dict()) == keys
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.experts(torch.randn(3, 4, 32)).sum().backward()
    model.block["q_proj"](torch.randn(4, 32)).sum().backward()
    opt.step()  # the optimizer built after quantize_model holds the same Parameters
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    assert not torch.equal(trained["block.q_proj.weight"], plain.state_dict()["block.q_proj.weight"])
    fresh = ToyModel()
    fresh.load_state_dict(trained)  # QAT checkpoint -> unquantized model
    dequantize_model(model)
    assert type(model.block["q_proj"]) is nn.Linear
    for k, v in model.state_dict().items():
        assert torch.equal(v, trained[k]) and torch.equal(fresh.state_dict()[k], v)
    requant = ToyModel()
    with pytest.warns(UserWarning, match="'block.odd'"):
        quantize_model(requant)
    requant.load_state_dict(plain.state_dict())  # unquantized checkpoint -> QAT model


def test_shared_module_is_replaced_everywhere() -> None:
    shared = nn.Linear(16, 16)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert quantize_model(model) == ["0"]
    assert isinstance(model[0], FakeQuantLinear) and model[0] is model[2]


def test_unswappable_linears_warn_by_name() -> None:
    class Scaled(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return 2 * super().forward(x)

    model = nn.ModuleDict({"scaled": Scaled(16, 16), "mha": nn.MultiheadAttention(16, 2)})
    with pytest.warns(UserWarning) as record:
        assert quantize_model(model) == []
    text = " ".join(str(w.message) for w in record)
    assert "'scaled'" in text and "overrides nn.Linear.forward" in text and "'mha.out_proj'" in text
    with pytest.raises(TypeError, match="root nn.Linear"):
        quantize_model(nn.Linear(16, 16))


def test_skip_applies_to_children_of_a_matching_module() -> None:
    model = nn.ModuleDict({"head": nn.Sequential(nn.Linear(16, 16)), "body": nn.Linear(16, 16)})
    assert quantize_model(model, QuantConfig(skip=("head",))) == ["body"]


def test_skip_patterns_match_inside_a_wrapper() -> None:
    # A LightningModule holds the model under an attribute: "lm_head" must still skip model.lm_head,
    # "*.gate" an HF-style router, and neither may catch gate_proj or a name merely containing lm_head.
    inner = nn.ModuleDict({
        "lm_head": nn.Linear(16, 16), "gate": nn.Linear(16, 16), "gate_proj": nn.Linear(16, 16),
        "lm_head_adapter": nn.Linear(16, 16),
    })
    wrapper = nn.ModuleDict({"model": nn.ModuleDict({"mlp": inner})})
    swapped = quantize_model(wrapper, QuantConfig(skip=("lm_head", "*.gate")))
    assert swapped == ["model.mlp.gate_proj", "model.mlp.lm_head_adapter"]


# --- quantization_stats -------------------------------------------------------------------------------


def test_stats_keys_and_ranges() -> None:
    model, _, _ = _toy_quantize()
    stats = quantization_stats(model)
    assert stats["quantized_modules"] == 2.0
    assert 0.05 < stats["weight_relative_error_mean"] < 0.2  # NVFP4 on Gaussian weights: ~0.1
    assert stats["weight_relative_error_max"] >= stats["weight_relative_error_mean"]
    for key in ("weight_flushed_to_zero_fraction", "weight_saturated_fraction", "weight_clipped_fraction",
                "block_scale_subnormal_fraction", "block_scale_zero_fraction"):
        assert 0.0 <= stats[key] <= 1.0, key
    assert stats["weight_saturated_fraction"] >= 1 / 16 * 0.99  # each block's max maps to 6
    assert quantization_stats(ToyModel()) == {}


def test_stats_hand_computed() -> None:
    lin = nn.Linear(16, 1, bias=False)
    with torch.no_grad():  # E2M1 grid values with amax 6: exactly representable, one at the bound
        lin.weight.copy_(torch.tensor([[6.0, 4.0, 3.0, 2.0, 1.5, 1.0, 0.5, 0.0, -6.0, 0.1, 0, 0, 0, 0, 0, 0]]))
    model = nn.Sequential(lin)
    quantize_model(model)
    stats = quantization_stats(model)
    assert stats["weight_saturated_fraction"] == 2 / 16  # 6 and -6
    assert stats["weight_flushed_to_zero_fraction"] == 1 / 16  # 0.1 -> 0
    expected = 0.1 / float(lin.weight.detach().norm())
    assert stats["weight_relative_error_mean"] == pytest.approx(expected, rel=1e-5)
    assert stats["block_scale_subnormal_fraction"] == 0.0 and stats["weight_clipped_fraction"] == 0.0


def test_hooks_carry_over_and_parametrized_linears_are_skipped() -> None:
    calls: list[str] = []
    model = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 16))
    model[0].register_forward_hook(lambda mod, inp, out: calls.append(type(mod).__name__))
    torch.nn.utils.parametrize.register_parametrization(model[1], "weight", nn.Identity())
    with pytest.warns(UserWarning, match="'1'.*parametrized"):
        assert quantize_model(model) == ["0"]
    model(torch.randn(2, 16))
    dequantize_model(model)
    model(torch.randn(2, 16))
    assert calls == ["FakeQuantLinear", "Linear"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_model_trains_in_its_dtype(dtype: torch.dtype) -> None:
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 16)).to(dtype)
    quantize_model(model)
    x = torch.randn(3, 7, 32, dtype=dtype, requires_grad=True)  # any leading shape
    y = model(x)
    y.float().square().mean().backward()
    assert y.dtype == dtype and y.shape == (3, 7, 16)
    assert model[0].weight.grad.dtype == dtype and torch.isfinite(model[0].weight.grad).all()
    assert x.grad is not None and x.grad.dtype == dtype


def test_weight_only_experts_keep_identity_input_quant() -> None:
    model, names, _ = _toy_quantize(QuantConfig(activations=False))
    assert "experts" in names
    assert isinstance(model.experts.weight_quant, FakeQuant) and isinstance(model.experts.input_quant, nn.Identity)
