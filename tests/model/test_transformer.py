"""The proxy Transformer: parameter counts agree with Architecture, shapes, causality, windows, training."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from co_design.arch import MLA, Architecture
from co_design.model import MLAttention, Transformer, sliding_window_mask

BASE = dict(hidden=32, layers=2, heads=4, ffn=48, vocab=61)
MOE = dict(BASE, layers=4, kv_heads=2, experts=6, experts_per_token=2, expert_ffn=16, shared_experts=2, shared_expert_ffn=8, dense_layers=1, moe_every=2)
MLA_Q = MLA(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, q_lora_rank=12)
MLA_NO_Q = MLA(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6)

ARCHS = {
    "dense": Architecture(**BASE),
    "plain_gelu": Architecture(**BASE, gated_ffn=False),
    "tied": Architecture(**BASE, tied_embeddings=True),
    "gqa": Architecture(**BASE, kv_heads=2),
    "mqa_head_dim": Architecture(**BASE, kv_heads=1, head_dim=12),
    "attention_bias": Architecture(**BASE, kv_heads=2, attention_bias=True),
    "moe_shared_dense_first_every2": Architecture(**MOE),
    "moe_plain_tied": Architecture(**dict(MOE, shared_experts=0), gated_ffn=False, tied_embeddings=True),
    "mla_q_lora": Architecture(**BASE, mla=MLA_Q),
    "mla_no_q_lora": Architecture(**BASE, mla=MLA_NO_Q),
    "mla_moe": Architecture(**dict(MOE, mla=MLA_Q)),
    "mla_ignores_attention_bias": Architecture(**BASE, mla=MLA_NO_Q, attention_bias=True),
    "sliding": Architecture(**BASE, sliding_window=4, full_attention_every=2),
}


def _tokens(arch: Architecture, B: int = 2, T: int = 12, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, arch.vocab, (B, T), generator=g)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_parameter_count_matches_architecture(name):
    arch = ARCHS[name]
    model = Transformer(arch, max_seq_len=32)
    counts = arch.param_counts()
    assert model.num_parameters() == counts.total
    # per component, so a compensating error cannot hide
    attn = sum(p.numel() for b in model.layers for p in b.attn.parameters())
    assert attn == counts.attention
    norms = sum(p.numel() for n, p in model.named_parameters() if n.endswith(("attn_norm.weight", "ffn_norm.weight")) or n == "norm.weight")
    assert norms == counts.norms
    moe = [b.ffn for b in model.layers if b.is_moe]
    assert len(moe) == arch.moe_layers
    assert sum(p.numel() for m in moe for p in m.experts.parameters()) == counts.experts
    assert sum(p.numel() for m in moe for p in m.router.parameters()) == counts.router
    assert sum(p.numel() for m in moe if m.shared is not None for p in m.shared.parameters()) == counts.shared_experts
    dense = sum(p.numel() for b in model.layers if not b.is_moe for p in b.ffn.parameters())
    assert dense == counts.dense_ffn


def test_moe_layer_placement_follows_architecture():
    arch = ARCHS["moe_shared_dense_first_every2"]  # dense_layers=1, moe_every=2 over 4 layers
    model = Transformer(arch, max_seq_len=16)
    assert [b.is_moe for b in model.layers] == [False, False, True, False]
    assert [arch.layer_is_moe(i) for i in range(4)] == [False, False, True, False]


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_forward_shape_and_aux_loss(name):
    arch = ARCHS[name]
    model = Transformer(arch, max_seq_len=32)
    logits = model(_tokens(arch, B=3, T=10))
    assert logits.shape == (3, 10, arch.vocab)
    assert torch.isfinite(logits).all()
    assert model.aux_loss.dim() == 0
    if arch.is_moe:
        # one balancing loss per MoE layer, each >= ~1 (1 at perfect balance)
        assert model.aux_loss.item() >= 0.9 * arch.moe_layers
        assert model.aux_loss.requires_grad
    else:
        assert model.aux_loss.item() == 0.0


def test_module_names_follow_contract():
    names = dict(Transformer(ARCHS["moe_shared_dense_first_every2"], max_seq_len=16).named_modules())
    for n in ["embed", "norm", "lm_head", "layers.0.attn_norm", "layers.0.ffn_norm",
              *(f"layers.0.attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "o_proj")),
              *(f"layers.0.ffn.{p}" for p in ("gate_proj", "up_proj", "down_proj")),
              "layers.2.ffn.router", "layers.2.ffn.experts", "layers.2.ffn.shared", "layers.2.ffn.shared.down_proj"]:
        assert n in names, n
    assert isinstance(names["layers.2.ffn.router"], torch.nn.Linear)
    assert type(names["layers.2.ffn.experts"])._co_design_experts is True


def test_tied_embeddings_share_the_table():
    arch = ARCHS["tied"]
    model = Transformer(arch, max_seq_len=16)
    assert model.lm_head is None
    tokens = _tokens(arch)
    hidden = {}
    model.norm.register_forward_hook(lambda m, i, o: hidden.setdefault("x", o))
    logits = model(tokens)
    torch.testing.assert_close(logits, hidden["x"] @ model.embed.weight.T)
    logits.sum().backward()
    assert model.embed.weight.grad is not None


def test_state_dict_has_no_rope_tables_and_round_trips():
    arch = ARCHS["gqa"]
    a, b = Transformer(arch, max_seq_len=16), Transformer(arch, max_seq_len=16)
    sd = a.state_dict()
    assert not any("rope" in k for k in sd)
    b.load_state_dict(sd)
    tokens = _tokens(arch)
    torch.testing.assert_close(a(tokens), b(tokens))


@pytest.mark.parametrize("name", ["dense", "gqa", "attention_bias", "moe_shared_dense_first_every2", "mla_q_lora", "mla_moe", "sliding"])
def test_causal_future_tokens_do_not_change_past_logits(name):
    arch = ARCHS[name]
    model = Transformer(arch, max_seq_len=32).eval()
    tokens = _tokens(arch, T=12)
    changed = tokens.clone()
    t = 7
    changed[:, t] = (changed[:, t] + 1) % arch.vocab
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-5)
    assert (a[:, t] - b[:, t]).abs().max() > 1e-4  # the changed position itself does react


def test_sliding_window_mask_by_hand():
    expected = torch.tensor(
        [[1, 0, 0, 0, 0],
         [1, 1, 0, 0, 0],
         [0, 1, 1, 0, 0],
         [0, 0, 1, 1, 0],
         [0, 0, 0, 1, 1]], dtype=torch.bool)
    assert torch.equal(sliding_window_mask(5, 2), expected)


@pytest.mark.parametrize("layers", [1, 2])
def test_token_beyond_window_has_no_influence(layers):
    window = 3
    arch = Architecture(**dict(BASE, layers=layers), sliding_window=window)  # every layer local
    assert all(arch.layer_window(i) == window for i in range(layers))
    model = Transformer(arch, max_seq_len=32).eval()
    tokens = _tokens(arch, T=12)
    changed = tokens.clone()
    changed[:, 0] = (changed[:, 0] + 1) % arch.vocab
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    reach = layers * (window - 1)  # receptive field grows by window-1 per layer
    diff = (a - b).abs().amax(dim=(0, 2))  # (T,)
    assert diff[reach] > 1e-4, "the last position inside the receptive field must still see token 0"
    assert diff[reach + 1 :].max() <= 1e-5, diff


def test_full_attention_layers_see_everything():
    window = 2
    arch = Architecture(**dict(BASE, layers=2), sliding_window=window, full_attention_every=2)  # layer 1 is global
    model = Transformer(arch, max_seq_len=32).eval()
    assert [b.window for b in model.layers] == [window, None]
    tokens = _tokens(arch, T=12)
    changed = tokens.clone()
    changed[:, 0] = (changed[:, 0] + 1) % arch.vocab
    with torch.no_grad():
        diff = (model(tokens) - model(changed)).abs().amax(dim=(0, 2))
    assert diff[-1] > 1e-4


def test_window_mask_is_cached_once_per_window_across_lengths():
    arch = Architecture(**BASE, sliding_window=4)
    model = Transformer(arch, max_seq_len=32)
    tokens = _tokens(arch, T=10)
    model(tokens)
    mask = model._window_mask(10, 4, tokens.device)
    model(tokens)
    assert model._window_mask(10, 4, tokens.device).data_ptr() == mask.data_ptr()  # not rebuilt
    for T in (7, 12, 9, 5, 12):  # varying lengths (e.g. eval batches) keep one mask per window
        assert torch.equal(model._window_mask(T, 4, tokens.device), sliding_window_mask(T, 4))
        assert len(model._masks) == 1
    assert model._window_mask(4, 4, tokens.device) is None  # T <= window: plain causal


def test_mla_matches_explicit_attention():
    """MLA's SDPA path equals attention written out with explicit softmax."""
    arch = ARCHS["mla_q_lora"]
    attn = MLAttention(arch)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.2)
    B, T = 2, 6
    x = torch.randn(B, T, arch.hidden)
    from co_design.model import RotaryEmbedding, apply_rotary

    cos, sin = RotaryEmbedding(4, max_seq_len=T)(T)
    m = arch.mla
    q = attn.q_b_proj(attn.q_a_norm(attn.q_a_proj(x))).view(B, T, arch.heads, -1)
    latent, k_rope = attn.kv_a_proj(x).split([m.kv_lora_rank, m.qk_rope_head_dim], -1)
    kv = attn.kv_b_proj(attn.kv_a_norm(latent)).view(B, T, arch.heads, -1)
    out = torch.zeros(B, T, arch.heads, m.v_head_dim)
    for h in range(arch.heads):
        qn, qr = q[:, :, h, : m.qk_nope_head_dim], q[:, :, h, m.qk_nope_head_dim :]
        kn, v = kv[:, :, h, : m.qk_nope_head_dim], kv[:, :, h, m.qk_nope_head_dim :]
        qr = apply_rotary(qr.unsqueeze(1), cos, sin).squeeze(1)
        kr = apply_rotary(k_rope.unsqueeze(1), cos, sin).squeeze(1)
        scores = (qn @ kn.transpose(1, 2) + qr @ kr.transpose(1, 2)) / m.qk_head_dim**0.5  # (B, T, T)
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        out[:, :, h] = scores.softmax(-1) @ v
    expected = attn.o_proj(out.reshape(B, T, -1))
    torch.testing.assert_close(attn(x, cos, sin), expected, rtol=1e-5, atol=1e-5)


def test_rope_rotates_pairs_by_position():
    from co_design.model import RotaryEmbedding, apply_rotary

    rope = RotaryEmbedding(4, max_seq_len=8, theta=100.0)
    cos, sin = rope(3)
    x = torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(1, 1, 3, 4)  # channel 0 pairs with channel 2
    y = apply_rotary(x, cos, sin)[0, 0]  # (T, 4)
    # channel pair (0, 2) turns at frequency 1, pair (1, 3) at 100**-0.5
    torch.testing.assert_close(y[:, 0], torch.cos(torch.arange(3.0)))
    torch.testing.assert_close(y[:, 2], torch.sin(torch.arange(3.0)))
    # relative-position property: <R_m q, R_n k> depends on m - n only
    q, k = torch.randn(4), torch.randn(4)
    cos8, sin8 = rope(8)
    rq = apply_rotary(q.expand(1, 1, 8, 4), cos8, sin8)[0, 0]
    rk = apply_rotary(k.expand(1, 1, 8, 4), cos8, sin8)[0, 0]
    torch.testing.assert_close(rq[5] @ rk[3], rq[4] @ rk[2])


@pytest.mark.parametrize("name", ["dense", "moe_shared_dense_first_every2", "mla_moe"])
def test_training_steps_reduce_loss_on_a_repeated_batch(name):
    arch = ARCHS[name]
    model = Transformer(arch, max_seq_len=32)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    tokens = _tokens(arch, B=4, T=16)
    losses = []
    for _ in range(8):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, arch.vocab), tokens[:, 1:].reshape(-1)) + 0.01 * model.aux_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.3, losses


@pytest.mark.parametrize("name", ["dense", "gqa", "moe_shared_dense_first_every2", "mla_moe", "sliding", "plain_gelu"])
def test_autocast_bfloat16_on_cpu(name):
    arch = ARCHS[name]
    model = Transformer(arch, max_seq_len=32)
    tokens = _tokens(arch, T=12)
    with torch.no_grad():
        ref = model(tokens)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(tokens)
        loss = F.cross_entropy(logits.float().reshape(-1, arch.vocab), tokens.reshape(-1)) + 0.01 * model.aux_loss
    assert logits.dtype == torch.bfloat16
    assert (logits.float() - ref).abs().max() < 0.05 * ref.abs().max() + 1e-2
    loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n


def test_bad_inputs_name_the_problem():
    arch = ARCHS["dense"]
    model = Transformer(arch, max_seq_len=8)
    with pytest.raises(ValueError, match="max_seq_len=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="batch, seq_len"):
        model(torch.zeros(9, dtype=torch.long))
    with pytest.raises(ValueError, match="head_dim"):
        Transformer(Architecture(**BASE, head_dim=5))
    with pytest.raises(TypeError, match="Architecture"):
        Transformer({"hidden": 32})  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [None, 3])
def test_gqa_matches_explicit_attention(window):
    """GQA through SDPA equals explicit softmax attention where query head h reads kv head h // (H/Hkv)."""
    from co_design.model import Attention, RotaryEmbedding, apply_rotary

    arch = ARCHS["attention_bias"]  # heads 4, kv_heads 2, biases on q/k/v
    attn = Attention(arch)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.2)
    B, T, H, D = 2, 7, arch.heads, arch.head_dim
    x = torch.randn(B, T, arch.hidden)
    cos, sin = RotaryEmbedding(D, max_seq_len=T)(T)
    q = apply_rotary(attn.q_proj(x).view(B, T, H, D).transpose(1, 2), cos, sin)
    k = apply_rotary(attn.k_proj(x).view(B, T, arch.kv_heads, D).transpose(1, 2), cos, sin)
    v = attn.v_proj(x).view(B, T, arch.kv_heads, D).transpose(1, 2)
    group = H // arch.kv_heads
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    if window is not None:
        allowed &= ~torch.ones(T, T, dtype=torch.bool).tril(-window)
    out = torch.zeros(B, H, T, D)
    for h in range(H):
        scores = q[:, h] @ k[:, h // group].transpose(1, 2) / D**0.5  # (B, T, T)
        out[:, h] = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ v[:, h // group]
    expected = attn.o_proj(out.transpose(1, 2).reshape(B, T, H * D))
    mask = None if window is None else sliding_window_mask(T, window)
    torch.testing.assert_close(attn(x, cos, sin, mask), expected, rtol=1e-5, atol=1e-5)
