"""Architecture inference: from our Transformer, an HF-style config, plain layer stacks; contradictions."""

import logging
import warnings
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from co_design.arch import Architecture, ArchitectureError
from co_design.callback import CoDesignCallback, CoDesignWarning, architecture_mismatches, infer_architecture
from co_design.readers.modules import inspect_layers

VOCAB, HIDDEN, SEQ = 32, 32, 8


# ----------------------------------------------------------------- tiny modules
class CausalSelfAttention(nn.Module):  # nanoGPT-like: fused qkv, head count as an attribute
    def __init__(self, d: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):  # (B, T, d)
        B, T, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (t.view(B, T, self.n_head, d // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, Dh)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, d))


class GPTBlock(nn.Module):
    def __init__(self, d: int, n_head: int) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=VOCAB, d=HIDDEN, n_head=2, n_layer=3, tie=True, n_pos=SEQ) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(n_pos, d)
        self.h = nn.ModuleList(GPTBlock(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        if tie:
            self.lm_head.weight = self.wte.weight

    def forward(self, idx):  # (B, T) -> (B, T, V)
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class HFStyle(nn.Module):  # a transformers-like model: a config object and Llama-like layers
    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(
            model_type="llama", hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=64, vocab_size=VOCAB, hidden_act="silu",
        )
        from co_design.model import Transformer

        # the layers, without the Architecture attribute: only the config describes it
        arch = Architecture(hidden=HIDDEN, layers=2, heads=4, kv_heads=2, ffn=64, vocab=VOCAB)
        t = Transformer(arch, max_seq_len=SEQ)
        del t.arch
        self.model = t

    def forward(self, idx):
        return self.model(idx)


class LM(pl.LightningModule):
    """A LightningModule around any token -> logits network, written without co-design in mind."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def _loss(self, batch):
        x, y = batch  # (B, T), (B, T)
        return F.cross_entropy(self.net(x).flatten(0, 1), y.flatten())

    def training_step(self, batch, batch_idx):
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, VOCAB, (16, SEQ + 1), generator=g)
        return torch.utils.data.DataLoader(list(zip(tokens[:, :-1], tokens[:, 1:])), batch_size=4)

    val_dataloader = train_dataloader


def _fit_with(cb, module, tmp_path, steps=2):
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", logger=CSVLogger(tmp_path), enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                         limit_val_batches=1, callbacks=[cb])
    trainer.fit(module)
    return trainer


# ------------------------------------------------------------- three kinds of modules, real Trainer
def test_ours_architecture_attribute(tmp_path):
    from co_design.model import Transformer

    arch = Architecture(hidden=HIDDEN, layers=2, heads=2, ffn=64, vocab=VOCAB)
    cb = CoDesignCallback("b200", warn_alignment=False)
    _fit_with(cb, LM(Transformer(arch, max_seq_len=SEQ)), tmp_path)
    assert cb.architecture == arch
    assert cb.inference.source == "attribute 'net.arch'"
    assert cb.prediction is not None and cb.prediction.output_tokens_per_s_per_gpu > 0


def test_hf_style_config(tmp_path):
    cb = CoDesignCallback("b200", warn_alignment=False)
    _fit_with(cb, LM(HFStyle()), tmp_path)
    a = cb.architecture
    assert cb.inference.source == "HF config 'net.config'"
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab, a.gated_ffn) == (HIDDEN, 2, 4, 2, 64, VOCAB, True)


def test_plain_stack_of_layers(tmp_path, caplog):
    cb = CoDesignCallback("b200", warn_alignment=False)
    with caplog.at_level(logging.INFO):
        _fit_with(cb, LM(TinyGPT(n_head=2, n_layer=3)), tmp_path)
    # a rank-zero info message says what was inferred and from what
    assert "CoDesignCallback: architecture inferred from module layers: hidden=32, layers=3" in caplog.text
    a = cb.architecture
    assert cb.inference.source == "module layers"
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.ffn, a.vocab) == (HIDDEN, 3, 2, 2, 4 * HIDDEN, VOCAB)
    assert a.gated_ffn is False and a.tied_embeddings is True
    text = cb.inference.describe()
    assert "net.wte.num_embeddings" in text and "attribute attn.n_head" in text and "GUESSED" not in text
    # quantized: every block Linear (the tied lm_head is skipped by the default skip patterns)
    assert "net.h.0.attn.c_attn" in cb.quantized_modules and "net.lm_head" not in cb.quantized_modules


# ------------------------------------------------------------- sources in detail (no Trainer)
HF_KEYS = dict(model_type="qwen3", hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
               head_dim=32, intermediate_size=96, vocab_size=77, tie_word_embeddings=True)


class _ToDict:  # like transformers.PretrainedConfig
    def to_dict(self):
        return dict(HF_KEYS)


@pytest.mark.parametrize(
    "config", [dict(HF_KEYS), SimpleNamespace(**HF_KEYS), _ToDict()], ids=["dict", "attrs", "to_dict"]
)
def test_hf_config_forms(config):
    holder = nn.Module()
    holder.backbone = nn.Linear(4, 4)
    holder.backbone.config = config  # found on a submodule too
    inf = infer_architecture(holder)
    a = inf.architecture
    assert inf.source == "HF config 'backbone.config'"
    assert (a.hidden, a.layers, a.heads, a.kv_heads, a.head_dim, a.ffn, a.vocab, a.tied_embeddings) == (
        64, 3, 4, 1, 32, 96, 77, True)


def test_architecture_saved_as_hyperparameter():
    arch = Architecture(hidden=HIDDEN, layers=1, heads=2, ffn=64, vocab=VOCAB)

    class WithHparams(pl.LightningModule):
        def __init__(self, arch: Architecture) -> None:
            super().__init__()
            self.save_hyperparameters()
            self.net = TinyGPT(n_layer=1)

    inf = infer_architecture(WithHparams(arch))
    assert inf.architecture is arch and inf.source == "attribute \"_hparams['arch']\""


# ------------------------------------------------------------- inspection details (no Trainer)
def test_inspection_matches_our_transformer():
    from co_design.model import Transformer

    arch = Architecture(hidden=64, layers=3, heads=4, kv_heads=2, ffn=96, vocab=100, attention_bias=True)
    inferred = inspect_layers(Transformer(arch, max_seq_len=SEQ))
    assert inferred.architecture == arch.replace(name=inferred.architecture.name)
    assert inferred.guessed == ()


@pytest.mark.parametrize("n_pos", [HIDDEN, 4 * VOCAB])  # as many positions as a square Linear's width / more than vocab
def test_position_embedding_is_not_read_as_the_vocabulary(n_pos):
    inf = inspect_layers(TinyGPT(tie=False, n_pos=n_pos))
    assert inf.architecture.vocab == VOCAB and inf.evidence["vocab"] == "wte.num_embeddings"
    assert inf.evidence["tied_embeddings"] == "separate output Linear 'lm_head'"


def test_torch_transformer_encoder():
    layer = nn.TransformerEncoderLayer(HIDDEN, 4, 48, batch_first=True)
    net = nn.Sequential(nn.Embedding(50, HIDDEN), nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                        nn.Linear(HIDDEN, 50))
    a = infer_architecture(net).architecture
    assert (a.vocab, a.hidden, a.layers, a.heads, a.ffn) == (50, HIDDEN, 2, 4, 48)
    assert not a.gated_ffn and not a.tied_embeddings


def test_flat_mlp_stack_guesses_heads_and_says_so():
    net = nn.Sequential(nn.Embedding(50, 32), nn.Linear(32, 80), nn.ReLU(), nn.Linear(80, 32),
                        nn.Linear(32, 80), nn.ReLU(), nn.Linear(80, 32), nn.Linear(32, 50))
    inf = infer_architecture(net)
    assert (inf.architecture.layers, inf.architecture.ffn, inf.architecture.gated_ffn) == (2, 80, False)
    assert "heads" in inf.guessed and "GUESSED" in inf.describe()


def test_gated_ffn_separate_and_fused():
    class Gated(nn.Module):
        def __init__(self, fused):
            super().__init__()
            self.gate_up = nn.Linear(32, 2 * 48) if fused else None
            self.gate, self.up = (None, None) if fused else (nn.Linear(32, 48), nn.Linear(32, 48))
            self.down = nn.Linear(48, 32)

    for fused in (False, True):
        net = nn.Sequential(nn.Embedding(50, 32), nn.ModuleList([Gated(fused), Gated(fused)]), nn.Linear(32, 50))
        a = infer_architecture(net).architecture
        assert (a.layers, a.ffn, a.gated_ffn) == (2, 48, True), fused


def test_moe_as_a_list_of_expert_ffns():
    class Expert(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.w3, self.w2 = nn.Linear(32, 48), nn.Linear(32, 48), nn.Linear(48, 32)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = CausalSelfAttention(32, 4)
            self.router, self.top_k = nn.Linear(32, 6), 2
            self.experts = nn.ModuleList(Expert() for _ in range(6))
            self.shared = nn.Sequential(nn.Linear(32, 64), nn.SiLU(), nn.Linear(64, 32), nn.Linear(32, 64))

    net = nn.Sequential(nn.Embedding(50, 32), nn.Sequential(Layer(), Layer(), Layer()), nn.Linear(32, 50))
    inf = infer_architecture(net)
    a = inf.architecture
    assert (a.layers, a.experts, a.experts_per_token, a.expert_ffn, a.gated_ffn) == (3, 6, 2, 48, True)
    assert (a.shared_experts, a.shared_expert_ffn) == (1, 64)
    assert inf.guessed == () and "experts=6" in inf.describe()


def test_no_linear_layers_is_a_clear_error():
    with pytest.raises(ArchitectureError, match="no nn.Linear"):
        infer_architecture(nn.Sequential(nn.Embedding(10, 8), nn.LayerNorm(8)))


def test_mismatches_name_the_fields():
    net = TinyGPT()
    good = infer_architecture(net).architecture
    assert architecture_mismatches(good, net) == []
    bad = architecture_mismatches(good.replace(vocab=64, layers=5), net)
    assert any(m.startswith("vocab=64 but the module has 32") for m in bad)
    assert any(m.startswith("layers=5 but the module has 3") for m in bad)


# ------------------------------------------------------------- bad input at fit time
def test_contradicting_architecture_warns(tmp_path):
    wrong = Architecture(hidden=64, layers=3, heads=2, ffn=256, vocab=VOCAB)
    cb = CoDesignCallback("b200", architecture=wrong, warn_alignment=False)
    with pytest.warns(CoDesignWarning, match=r"contradicts the module: hidden=64 but the module has 32"):
        _fit_with(cb, LM(TinyGPT()), tmp_path)
    assert cb.architecture == wrong  # predictions still use the architecture passed


def test_full_size_architecture_over_a_reduced_proxy_is_not_a_contradiction(tmp_path):
    full = Architecture(hidden=4096, layers=32, heads=32, ffn=14336, vocab=128256)
    cb = CoDesignCallback("b200", architecture=full, warn_alignment=False, verify_architecture=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoDesignWarning)
        _fit_with(cb, LM(TinyGPT()), tmp_path)
    assert cb.architecture == full and cb.prediction is not None


@pytest.mark.parametrize("architecture", [None, Architecture(hidden=HIDDEN, layers=1, heads=2, ffn=64, vocab=VOCAB)])
def test_module_without_linear_fails_at_setup_not_in_training(tmp_path, architecture):
    class NoLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, HIDDEN)

        def forward(self, idx):
            return self.emb(idx) @ self.emb.weight.T  # (B, T, V)

    cb = CoDesignCallback("b200", architecture=architecture, warn_alignment=False)
    module = LM(NoLinear())
    with pytest.raises(ArchitectureError, match="no nn.Linear"):
        _fit_with(cb, module, tmp_path)
    assert module.global_step == 0
