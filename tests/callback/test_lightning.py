"""CoDesignCallback in real Trainers: logging, QAT checkpoints, resume, fit twice, Optuna stopping."""

import csv
import json
import warnings

import lightning.pytorch as pl
import optuna
import pytest
import torch
import torch.nn.functional as F
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn

from co_design.arch import Architecture, ArchitectureError
from co_design.callback import (
    INTERMEDIATE_VALUES_ATTR,
    PRUNED_AT_STEP_ATTR,
    CoDesignCallback,
    CoDesignWarning,
    MedianStoppingRule,
)
from co_design.quant import FakeQuantLinear

VOCAB, HIDDEN, SEQ = 32, 32, 8


class Net(nn.Module):
    """A plain stack written without co-design in mind: embedding, two MLP blocks, head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(HIDDEN), nn.Linear(HIDDEN, 64), nn.GELU(), nn.Linear(64, HIDDEN))
            for _ in range(2)
        )
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, idx):  # (B, T) -> (B, T, V)
        x = self.embed(idx)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


class LM(pl.LightningModule):
    def __init__(self, lr: float = 1e-2) -> None:
        super().__init__()
        self.lr = lr
        self.net = Net()

    def _loss(self, batch):
        x, y = batch  # (B, T), (B, T)
        return F.cross_entropy(self.net(x).flatten(0, 1), y.flatten())

    def training_step(self, batch, batch_idx):
        return self._loss(batch)

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, VOCAB, (64, SEQ + 1), generator=g)
        return torch.utils.data.DataLoader(list(zip(tokens[:, :-1], tokens[:, 1:])), batch_size=4)

    val_dataloader = train_dataloader


ARCH = Architecture(hidden=HIDDEN, layers=2, heads=2, ffn=64, vocab=VOCAB, gated_ffn=False)


def trainer(tmp_path, cb, steps=4, **kw):
    kw.setdefault("enable_checkpointing", False)
    return pl.Trainer(
        max_steps=steps, val_check_interval=2, limit_val_batches=1, num_sanity_val_steps=0, accelerator="cpu",
        devices=1, logger=CSVLogger(tmp_path, name="run"), enable_progress_bar=False, enable_model_summary=False,
        callbacks=[cb, *kw.pop("callbacks", [])], **kw,
    )


def read_metrics(t: pl.Trainer) -> list[dict[str, str]]:
    with open(f"{t.logger.log_dir}/metrics.csv") as f:
        return list(csv.DictReader(f))


def test_prediction_and_quant_stats_in_csv(tmp_path):
    cb = CoDesignCallback("b200", log_quant_every_n_steps=2, warn_alignment=False)
    t = trainer(tmp_path, cb)
    t.fit(LM())
    rows = read_metrics(t)
    pred_rows = [r for r in rows if r.get("co_design/output_tokens_per_s_per_gpu")]
    assert len(pred_rows) == 1
    row = pred_rows[0]
    predicted = cb.prediction.output_tokens_per_s_per_gpu
    assert float(row["co_design/output_tokens_per_s_per_gpu"]) == pytest.approx(predicted)
    for name in ("output_tokens_per_s_per_user", "ttft_ms", "ttft_p99_ms", "tpot_ms", "tpot_p99_ms", "memory_per_gpu_gb", "fits",
                 "params_total"):
        assert row[f"co_design/{name}"] != "", name
    assert float(row["co_design/tpot_ms"]) == pytest.approx(cb.prediction.tpot_s * 1e3)
    assert float(row["co_design/ttft_p99_ms"]) == pytest.approx(cb.prediction.ttft_p99_s * 1e3)
    assert float(row["co_design/tpot_p99_ms"]) == pytest.approx(cb.prediction.tpot_p99_s * 1e3)
    assert sum(float(row[f"co_design/bound_{b}"]) for b in ("compute", "memory", "communication")) == 1.0
    # fake-quant statistics at steps 2 and 4
    quant_steps = [int(r["step"]) for r in rows if r.get("co_design/quant/weight_relative_error_mean")]
    assert quant_steps == [2, 4]
    key = "co_design/quant/weight_relative_error_mean"
    errors = [float(r[key]) for r in rows if r.get(key)]
    assert all(0 < e < 1 for e in errors)  # NVFP4 loses something, not everything
    hparams = yaml.safe_load(open(f"{t.logger.log_dir}/hparams.yaml"))
    assert hparams["co_design"]["architecture"]["hidden"] == HIDDEN
    assert hparams["co_design"]["hardware"] == "b200"


def test_every_logger_gets_the_prediction(tmp_path):  # tensorboard comes with the test extra
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cb = CoDesignCallback("b200", architecture=ARCH, warn_alignment=False, log_quant_every_n_steps=0)
    csv_logger, tb_logger = CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")
    t = pl.Trainer(max_steps=1, accelerator="cpu", logger=[csv_logger, tb_logger], enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False, limit_val_batches=0, callbacks=[cb])
    t.fit(LM())
    events = EventAccumulator(tb_logger.log_dir)
    events.Reload()
    (scalar,) = events.Scalars("co_design/tpot_ms")
    assert scalar.value == pytest.approx(cb.prediction.tpot_s * 1e3, rel=1e-6)
    assert "co_design/tpot_ms" in open(f"{csv_logger.log_dir}/metrics.csv").readline()


def test_qat_checkpoint_loads_into_plain_model(tmp_path):
    cb = CoDesignCallback("b200", warn_alignment=False)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    module = LM()
    t = trainer(tmp_path, cb, callbacks=[ckpt], enable_checkpointing=True)
    t.fit(module)
    assert isinstance(module.net.blocks[0][1], FakeQuantLinear)  # kept quantized after fit (training behaviour)
    plain = LM()
    state = torch.load(ckpt.last_model_path, weights_only=True)["state_dict"]
    assert set(state) == set(plain.state_dict())
    plain.load_state_dict(state, strict=True)
    assert not any(isinstance(m, FakeQuantLinear) for m in plain.modules())
    for name, tensor in module.state_dict().items():
        assert torch.equal(plain.state_dict()[name], tensor), name
    # and the trained QAT model computes the same as the plain one once its layers are dequantized
    from co_design.quant import dequantize_model

    dequantize_model(module)
    x = torch.randint(0, VOCAB, (2, SEQ))
    assert torch.equal(module.net(x), plain.net(x))


def test_resume_restores_callback_state(tmp_path):
    cb = CoDesignCallback("b200", architecture=ARCH, warn_alignment=False)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    trainer(tmp_path, cb, steps=4, callbacks=[ckpt], enable_checkpointing=True).fit(LM())
    assert sorted(cb.intermediate_values) == [2, 4]

    resumed = CoDesignCallback("b200", architecture=ARCH, warn_alignment=False)
    t = trainer(tmp_path, resumed, steps=6)
    t.fit(LM(), ckpt_path=ckpt.last_model_path)
    assert sorted(resumed.intermediate_values) == [2, 4, 6]
    assert resumed.intermediate_values[2] == cb.intermediate_values[2]
    assert resumed.state_dict()["validations"] == 3


def test_fit_twice_does_not_quantize_twice_and_dequantize_on_fit_end(tmp_path):
    module = LM()
    cb = CoDesignCallback("b200", quant="fp8", warn_alignment=False)
    trainer(tmp_path, cb, steps=2).fit(module)
    first = list(cb.quantized_modules)
    assert first == ["net.blocks.0.1", "net.blocks.0.3", "net.blocks.1.1", "net.blocks.1.3", "net.head"]
    layer = module.net.blocks[0][1]
    trainer(tmp_path, cb, steps=2).fit(module)
    assert cb.quantized_modules == first and module.net.blocks[0][1] is layer  # untouched, not re-wrapped
    assert layer.config.format == "fp8"

    cb2 = CoDesignCallback("b200", quant="nvfp4", dequantize_on_fit_end=True, warn_alignment=False)
    with pytest.warns(CoDesignWarning, match="already fake-quantized to fp8, so quant='nvfp4' is not applied"):
        trainer(tmp_path, cb2, steps=2).fit(module)
    assert not any(isinstance(m, FakeQuantLinear) for m in module.modules())  # dequantized at the end
    cb3 = CoDesignCallback("b200", quant="nvfp4", warn_alignment=False)
    trainer(tmp_path, cb3, steps=1).fit(module)  # a plain model again: quantized to the new format
    assert module.net.blocks[0][1].config.format == "nvfp4"


def test_moe_experts_quantized_once_and_router_kept(tmp_path):
    from co_design.model import Transformer

    arch = Architecture(hidden=HIDDEN, layers=1, heads=2, ffn=32, vocab=VOCAB, experts=4, experts_per_token=2)

    class MoELM(LM):
        def __init__(self):
            super().__init__()
            self.net = Transformer(arch, max_seq_len=SEQ)

    module = MoELM()
    for _ in range(2):  # a second fit finds the quantized experts and leaves them alone
        cb = CoDesignCallback("b200", warn_alignment=False)
        trainer(tmp_path, cb, steps=1).fit(module)
        assert "net.layers.0.ffn.experts" in cb.quantized_modules
        assert not any("router" in n or "lm_head" in n for n in cb.quantized_modules)  # default skips, under "net."
    assert type(module.net.layers[0].ffn.experts.weight_quant).__name__ == "WeightFakeQuant"


def test_quant_off(tmp_path):
    module = LM()
    cb = CoDesignCallback("b200", quant=None, warn_alignment=False)
    t = trainer(tmp_path, cb, steps=2)
    t.fit(module)
    assert cb.quantized_modules == [] and not any(isinstance(m, FakeQuantLinear) for m in module.modules())
    assert cb.deployment.weights == "bf16"  # serving predicted in the training precision
    assert not any(r.get("co_design/quant/weight_relative_error_mean") for r in read_metrics(t))


def test_alignment_warnings(tmp_path):
    cb = CoDesignCallback("b200", architecture=ARCH)
    with pytest.warns(UserWarning, match="CoDesignCallback \\(b200\\)") as record:
        trainer(tmp_path, cb, steps=1).fit(LM())
    messages = [str(w.message) for w in record if "CoDesignCallback (b200)" in str(w.message)]
    from co_design.perf import shape_advice

    advice = shape_advice(ARCH, cb.gpu, cb.deployment, min_gain=-float("inf"))
    assert len(messages) == len(advice) > 0  # every misaligned dimension, with the model's gain
    assert any("hidden=32 is not a multiple of 128" in m for m in messages)


# ------------------------------------------------------------------ Optuna
def _study_with_completed(losses_by_step: dict[int, float], n: int = 3) -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "maximize"])  # multi-objective: no trial.report
    for i in range(n):
        t = study.ask()
        t.set_user_attr(INTERMEDIATE_VALUES_ATTR, {str(s): v + 0.01 * i for s, v in losses_by_step.items()})
        study.tell(t, [1.0, 1.0])
    return study


def test_stopping_rule_prunes_a_bad_trial(tmp_path):
    study = _study_with_completed({1: 0.1, 2: 0.05, 4: 0.01})  # far better than random tokens' ~ln(32)
    trial = study.ask()
    rule = MedianStoppingRule(min_completed_trials=3)
    cb = CoDesignCallback("b200", trial=trial, stopping=rule, warn_alignment=False)
    t = trainer(tmp_path, cb, steps=8)
    t.fit(LM())
    assert cb.pruned and cb.pruned_at_step == 2 and t.global_step == 2  # stopped at the first validation
    values = trial.user_attrs[INTERMEDIATE_VALUES_ATTR]
    assert list(values) == ["2"] and values["2"] > 1.0
    json.dumps(values)  # JSON-serializable for every storage
    assert trial.user_attrs[PRUNED_AT_STEP_ATTR] == 2
    with pytest.raises(optuna.TrialPruned, match="median"):
        cb.check_pruned()
    study.tell(trial, state=optuna.trial.TrialState.PRUNED)


def test_good_trial_runs_to_the_end_and_records(tmp_path):
    study = _study_with_completed({2: 50.0, 4: 50.0, 6: 50.0})
    trial = study.ask()
    cb = CoDesignCallback("b200", trial=trial, warn_alignment=False)
    t = trainer(tmp_path, cb, steps=6)
    t.fit(LM())
    assert not cb.pruned and t.global_step == 6
    assert list(trial.user_attrs[INTERMEDIATE_VALUES_ATTR]) == ["2", "4", "6"]
    cb.check_pruned()  # does not raise


def test_validate_after_fit_records_the_final_step(tmp_path):
    study = _study_with_completed({2: 0.01, 3: 0.01})  # would stop any run that gets to decide
    trial = study.ask()
    rule = MedianStoppingRule(warmup_steps=3)  # ... but the only validation in fit (step 2) is in warm-up
    cb = CoDesignCallback("b200", trial=trial, stopping=rule, warn_alignment=False)
    t = trainer(tmp_path, cb, steps=3)  # validation at step 2 only
    module = LM()
    t.fit(module)
    assert sorted(cb.intermediate_values) == [2] and t.global_step == 3
    t.validate(module, verbose=False)  # records the value at the final step, never decides
    assert sorted(cb.intermediate_values) == [2, 3] and not cb.pruned
    assert list(trial.user_attrs[INTERMEDIATE_VALUES_ATTR]) == ["2", "3"]
    # a fresh Trainer's validate() (global step 0) records nothing
    pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
               limit_val_batches=1, callbacks=[cb]).validate(module, verbose=False)
    assert 0 not in cb.intermediate_values


def test_validate_under_inference_mode_before_qat_fit(tmp_path, monkeypatch):
    # trainer.validate/test/predict run under torch.inference_mode (fit's own validation does not).
    # A baseline validation of an already fake-quantized model, then QAT: the fake-quant's first
    # call (and its CPU scratch buffer) happens under inference mode.
    import threading

    from co_design.quant import formats, quantize_model

    monkeypatch.setattr(formats, "_scratch", threading.local())  # as in a fresh process
    lm = LM()
    quantize_model(lm)
    cb = CoDesignCallback("b200", architecture=ARCH)
    t = trainer(tmp_path, cb)
    t.validate(lm, verbose=False)
    t.fit(lm)
    assert t.global_step == 4 and cb.quantized_modules


class LateLM(LM):
    """Builds its network in configure_model (called after the callbacks' setup)."""

    def __init__(self) -> None:
        pl.LightningModule.__init__(self)
        self.lr, self.net = 1e-2, None

    def configure_model(self) -> None:
        if self.net is None:
            self.net = Net()


@pytest.mark.parametrize("architecture", [None, ARCH])
def test_layers_built_in_configure_model_give_a_clear_error(tmp_path, architecture):
    t = trainer(tmp_path, CoDesignCallback("b200", architecture=architecture))
    with pytest.raises(ArchitectureError, match=r"LateLM builds its layers in configure_model.*__init__"):
        t.fit(LateLM())


def test_layers_built_in_configure_model_with_prediction_only(tmp_path):
    cb = CoDesignCallback("b200", architecture=ARCH, quant=None, warn_alignment=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CoDesignWarning)  # no "contradicts the module" from an empty module
        trainer(tmp_path, cb).fit(LateLM())
    assert cb.prediction is not None and not cb.quantized_modules


def test_an_alignment_warning_whose_fix_gains_nothing_says_to_keep_the_shape(tmp_path):
    # the 32-wide toy misses every tile; aligning it means a larger model, which the model finds no faster
    cb = CoDesignCallback("b200", architecture=ARCH, log_quant_every_n_steps=0)
    with pytest.warns(CoDesignWarning, match=r"hidden=32 is not a multiple of 128; .*hidden=128: [+-]\d+\.\d%; no aligned "
                      r"neighbour gains the 1% worth a change: keep the shape"):
        trainer(tmp_path, cb, steps=1).fit(LM())
