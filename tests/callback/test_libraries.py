"""The callback inside Lightning trainings written the way transformers and LitGPT users write them.

One tiny model per family (hidden 64, 2 layers, 4 experts), CPU, a few steps on fixed data. Each
case checks: the architecture read from the model's own config equals the one written here by
hand from that config; NVFP4 covers >= 95 % of attention + FFN + expert weights (experts 100 %);
the training loss is finite and falls; the checkpoint loads strictly into a fresh model
quantized the same way and gives the same logits; the prediction and the coverage reach the logger.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from typing import Any, Callable

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
import transformers as T  # the test extra
from lightning.pytorch.loggers.logger import Logger

from co_design import Architecture
from co_design.callback import CoDesignCallback
from co_design.quant import QuantConfig, quantize_model

if os.environ.get("CI") == "true":  # CI installs it (.ci/run): missing there is a failure, not a skip
    import litgpt
else:
    litgpt = pytest.importorskip("litgpt", reason="install it as the README does: pip install --no-deps litgpt==0.5.13")

VOCAB, SEQ, BATCH, STEPS = 128, 16, 4, 8
HF_COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 vocab_size=VOCAB)
BASE = dict(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, vocab=VOCAB)


# ----------------------------------------------------------------------------- LightningModules
class HFCausalLM(pl.LightningModule):
    """How transformers users wrap a model: AutoModelForCausalLM inside, labels=input_ids for the loss."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.model = T.AutoModelForCausalLM.from_config(config)
        self.losses: list[float] = []

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids).logits

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = self.model(input_ids=batch, labels=batch).loss
        self.losses.append(loss.item())
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


class LitGPTModule(pl.LightningModule):
    """How LitGPT users write one (litgpt's pretrain recipe): GPT(config), next-token cross-entropy."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.model = litgpt.GPT(config)
        self.losses: list[float] = []

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        logits = self.model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        self.losses.append(loss.item())
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


class RecordingLogger(Logger):
    def __init__(self) -> None:
        super().__init__()
        self.metrics: dict[str, float] = {}
        self.hparams: dict[str, Any] = {}

    name = "recording"
    version = 0

    @property
    def experiment(self) -> None:
        return None

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.metrics.update(metrics)

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        self.hparams.update(params)


# ----------------------------------------------------------------------------- the matrix
def _litgpt(**kw: Any) -> Any:
    base = dict(n_embd=64, n_layer=2, n_head=4, n_query_groups=2, head_size=64, vocab_size=VOCAB,
                padded_vocab_size=VOCAB, block_size=SEQ, norm_class_name="RMSNorm", bias=False,
                parallel_residual=False, rotary_percentage=1.0, rope_base=10000)
    return litgpt.Config(**(base | kw))


CASES: dict[str, tuple[Callable[[], Any], type, Architecture]] = {
    "hf-llama": (lambda: T.LlamaConfig(intermediate_size=128, **HF_COMMON), HFCausalLM,
                 Architecture(**BASE, ffn=128)),
    "hf-qwen3": (lambda: T.Qwen3Config(intermediate_size=128, rope_parameters={"rope_type": "default",
                                                                               "rope_theta": 50000.0}, **HF_COMMON),
                 HFCausalLM, Architecture(**BASE, ffn=128, rope_theta=50000.0)),
    "hf-qwen3-moe": (lambda: T.Qwen3MoeConfig(intermediate_size=128, moe_intermediate_size=32, num_experts=4,
                                              num_experts_per_tok=2, **HF_COMMON), HFCausalLM,
                     Architecture(**BASE, ffn=128, experts=4, experts_per_token=2, expert_ffn=32)),
    "hf-mixtral": (lambda: T.MixtralConfig(intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                                           **HF_COMMON), HFCausalLM,
                   Architecture(**BASE, ffn=64, experts=4, experts_per_token=2, rope_theta=1e6)),
    "hf-gpt-oss": (lambda: T.GptOssConfig(intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                                          sliding_window=8, **HF_COMMON), HFCausalLM,
                   Architecture(**BASE, ffn=64, experts=4, experts_per_token=2, attention_bias=True,
                                sliding_window=8, full_attention_every=2, rope_theta=150000.0)),
    "hf-deepseek-v3": (lambda: T.DeepseekV3Config(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, vocab_size=VOCAB,
        intermediate_size=128, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=32, qk_nope_head_dim=16,
        qk_rope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1), HFCausalLM,
        Architecture(hidden=64, layers=2, heads=4, kv_heads=4, head_dim=16, vocab=VOCAB, ffn=128, experts=4,
                     experts_per_token=2, shared_experts=1, expert_ffn=32, dense_layers=1,
                     mla=dict(kv_lora_rank=16, q_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
                              v_head_dim=16))),
    # issue 12: layer inspection read this one as 2 heads, 1 KV head, head_dim 128 from the fused qkv
    "litgpt-llama": (lambda: _litgpt(mlp_class_name="LLaMAMLP", intermediate_size=128), LitGPTModule,
                     Architecture(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=64, vocab=VOCAB, ffn=128)),
    "litgpt-mixtral": (lambda: _litgpt(mlp_class_name="LLaMAMoE", intermediate_size=128, moe_intermediate_size=32,
                                       n_expert=4, n_expert_per_token=2), LitGPTModule,
                       Architecture(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=64, vocab=VOCAB, ffn=128,
                                    experts=4, experts_per_token=2, expert_ffn=32)),
}
MOE = {"hf-qwen3-moe", "hf-mixtral", "hf-gpt-oss", "hf-deepseek-v3", "litgpt-mixtral"}


def _data() -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(0)
    pattern = torch.randint(0, VOCAB, (2, SEQ + 1), generator=g)  # two sequences, repeated: learnable fast
    data = pattern.repeat(BATCH, 1)
    return torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=False)


@pytest.mark.parametrize("case", sorted(CASES))
def test_callback_in_library_training(case: str, tmp_path: Any) -> None:
    make_config, module_cls, expected = CASES[case]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = module_cls(make_config())
    logger = RecordingLogger()
    cb = CoDesignCallback("b200", stopping=None, warn_alignment=False, log_quant_every_n_steps=0)
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", logger=logger, callbacks=[cb],
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(does not have many workers|smaller than the logging).*")
        trainer.fit(module, train_dataloaders=_data())

    # the architecture is the config's, read from the model's own config object
    assert cb.architecture == expected, cb.inference.describe()
    assert cb.inference is not None and cb.inference.source.split()[0] in ("HF", "LitGPT")
    # NVFP4 covers the attention, FFN and expert weights; lm_head, embeddings, router stay high precision
    report = cb.quant_coverage
    assert report is not None and report.format == "nvfp4"
    assert report.fraction() >= 0.95, str(report)
    assert report.fraction(("attention",)) == 1.0
    if case in MOE:
        assert report.fraction(("experts",)) == 1.0, str(report)
        assert report.kept["router"] > 0
    assert report.kept["lm_head"] > 0 and report.kept["embeddings"] > 0 and not report.skipped
    # the loss is finite and falls
    assert len(module.losses) == STEPS and all(math.isfinite(v) for v in module.losses)
    assert sum(module.losses[-2:]) / 2 < module.losses[0] - 0.5, module.losses
    # predictions and coverage reach the logger
    assert logger.metrics["co_design/output_tokens_per_s_per_gpu"] > 0
    assert logger.metrics["co_design/quant/coverage"] == pytest.approx(report.fraction())
    assert logger.hparams["co_design"]["architecture"] == expected.to_dict() | {"name": cb.architecture.name}

    # the checkpoint reloads strictly into a fresh model quantized the same way, with the same outputs
    path = tmp_path / "last.ckpt"
    trainer.save_checkpoint(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh = module_cls(make_config())
    quantize_model(fresh, QuantConfig())
    state = torch.load(path, weights_only=True)["state_dict"]
    fresh.load_state_dict(state, strict=True)
    x = _data().dataset[:2, :SEQ]
    module.eval(), fresh.eval()
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), module(x), rtol=0, atol=0)


def test_low_coverage_warns_and_names_what_was_kept():
    # skipping the MLPs leaves the attention only: far below what the architecture implies
    from co_design.callback import CoDesignWarning
    from co_design.quant import DEFAULT_SKIP

    torch.manual_seed(0)
    make_config, module_cls, expected = CASES["hf-llama"]
    module = module_cls(make_config())
    cb = CoDesignCallback("b200", quant=QuantConfig(skip=(*DEFAULT_SKIP, "*mlp*")), stopping=None,
                          warn_alignment=False)
    trainer = pl.Trainer(max_steps=1, accelerator="cpu", logger=False, callbacks=[cb], enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    with pytest.warns(CoDesignWarning, match=r"quant='nvfp4' covers only 33\.3% of the attention, FFN and expert "
                                             r"weights \(24,576 of the 73,728 its architecture implies\)"):
        cb.setup(trainer, module, "fit")
    assert cb.quant_coverage.kinds["ffn"] == (0, 49152)


@pytest.mark.slow
def test_export_dir_writes_what_trains_and_serves_the_trained_model(tmp_path: Any) -> None:
    # issue 13: CoDesignCallback(export_dir=...) writes co-design export's files for the model it trained
    make_config, module_cls, expected = CASES["hf-qwen3-moe"]
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = module_cls(make_config())
    out = tmp_path / "export"
    cb = CoDesignCallback("b200", stopping=None, warn_alignment=False, log_quant_every_n_steps=0, export_dir=out)
    trainer = pl.Trainer(max_steps=2, accelerator="cpu", logger=False, callbacks=[cb], enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, train_dataloaders=_data())
    assert sorted(p.relative_to(out).as_posix() for p in cb.exported.values()) == [
        "arch.yaml", "config.json", "quantization/llmcompressor_recipe.yaml", "quantization/modelopt_quant_cfg.yaml",
        "quantization/plan.json", "serving/extra_llm_api_options.yaml", "serving/predicted.json"]
    # transformers reads the exported config back as the trained shape
    config = T.AutoConfig.from_pretrained(out)
    assert Architecture.from_hf_config(config).to_dict() | {"name": ""} == expected.to_dict() | {"name": ""}
    predicted = json.loads((out / "serving" / "predicted.json").read_text())
    assert predicted["output_tokens_per_s_per_gpu"] == pytest.approx(cb.prediction.output_tokens_per_s_per_gpu)


def test_export_dir_refuses_an_unexportable_shape_before_training(tmp_path: Any) -> None:
    make_config, module_cls, _ = CASES["hf-gpt-oss"]  # a sliding window: no exported family holds it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = module_cls(make_config())
    cb = CoDesignCallback("b200", stopping=None, warn_alignment=False, export_dir=tmp_path / "export")
    trainer = pl.Trainer(max_steps=2, accelerator="cpu", logger=False, callbacks=[cb], enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(ValueError, match=r"CoDesignCallback\(export_dir=.*\): .*sliding"):
        trainer.fit(module, train_dataloaders=_data())
    assert module.losses == [] and not (tmp_path / "export").exists()
