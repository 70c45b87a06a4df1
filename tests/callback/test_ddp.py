"""CoDesignCallback under DDP: 2 CPU processes (gloo), run as a script so Lightning can launch its workers."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    '''
    import json, sys
    import lightning.pytorch as pl
    import optuna
    import torch
    import torch.nn.functional as F
    from lightning.pytorch.loggers import CSVLogger
    from lightning.pytorch.strategies import DDPStrategy
    from torch import nn

    from co_design.callback import INTERMEDIATE_VALUES_ATTR, CoDesignCallback, MedianStoppingRule
    from co_design.quant import FakeQuantLinear

    OUT = sys.argv[1]


    class LM(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(32, 32)
            self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
            self.head = nn.Linear(32, 32)

        def _loss(self, batch):
            x, y = batch  # (B, T), (B, T)
            h = self.embed(x)
            return F.cross_entropy(self.head(h + self.mlp(h)).flatten(0, 1), y.flatten())

        def training_step(self, batch, batch_idx):
            return self._loss(batch)

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", self._loss(batch), sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-2)

        def train_dataloader(self):
            tokens = torch.randint(0, 32, (64, 9), generator=torch.Generator().manual_seed(0))
            return torch.utils.data.DataLoader(list(zip(tokens[:, :-1], tokens[:, 1:])), batch_size=4)

        val_dataloader = train_dataloader


    # every process builds the same study; only rank zero's trial is written to and decides
    study = optuna.create_study(directions=["minimize", "maximize"])
    for i in range(3):
        done = study.ask()
        done.set_user_attr(INTERMEDIATE_VALUES_ATTR, {"2": 0.5, "4": 0.05 + 0.01 * i})
        study.tell(done, [1.0, 1.0])
    trial = study.ask()
    cb = CoDesignCallback("b200", trial=trial, stopping=MedianStoppingRule(min_completed_trials=3, warmup_steps=3),
                          log_quant_every_n_steps=2, warn_alignment=False)
    module = LM()
    trainer = pl.Trainer(
        strategy=DDPStrategy(process_group_backend="gloo"), accelerator="cpu", devices=2, max_steps=12,
        val_check_interval=2, limit_val_batches=1, num_sanity_val_steps=0, logger=CSVLogger(OUT, name="run"),
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False, callbacks=[cb],
    )
    trainer.fit(module)
    with open(f"{OUT}/rank{trainer.global_rank}.json", "w") as f:
        json.dump({
            "world_size": trainer.world_size,
            "step": trainer.global_step,
            "pruned": cb.pruned,
            "pruned_at_step": cb.pruned_at_step,
            "quantized": cb.quantized_modules,
            "fake_quant_layers": sum(isinstance(m, FakeQuantLinear) for m in module.modules()),
            "prediction": cb.prediction.output_tokens_per_s_per_gpu,
            "trial_values": trial.user_attrs.get(INTERMEDIATE_VALUES_ATTR),
        }, f)
    # gloo's threads must stop before the interpreter exits, or a process can end in
    # "terminate called without an active exception" (SIGABRT) after its work is done
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    '''
)


@pytest.mark.slow
def test_ddp_two_cpu_processes(tmp_path):
    script = tmp_path / "ddp_run.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["world_size"] == 2
        assert r["quantized"] == ["mlp.0", "mlp.2", "head"] and r["fake_quant_layers"] == 3  # each process
        assert r["prediction"] > 0
    # warm-up to step 3, then at step 4 the loss (~ln 32) is worse than the median 0.06: both ranks stop together
    assert [r["step"] for r in ranks] == [4, 4]
    assert [r["pruned_at_step"] for r in ranks] == [4, 4] and all(r["pruned"] for r in ranks)
    assert sorted(ranks[0]["trial_values"]) == ["2", "4"]  # rank zero wrote to its trial
    assert ranks[1]["trial_values"] is None  # the other rank did not
    # rank zero alone logged the prediction and the quantization statistics
    metrics = (tmp_path / "run" / "version_0" / "metrics.csv").read_text()
    assert "co_design/output_tokens_per_s_per_gpu" in metrics
    assert "co_design/quant/weight_relative_error_mean" in metrics
