"""Train one language model the way a proxy trial does, for the benchmarks that need many runs.

The same pieces as ``search/train.py``: :class:`search.proxy.ProxyLM` (AdamW, linear warmup
and cosine decay to ``min_lr_ratio``, gradient clipping), fake-quantization of every Linear and
expert weight with :func:`co_design.quant.quantize_model` (what the search's callback applies),
the built-in byte-level corpus through :func:`search.data.make_datamodule`, Lightning's loop on
the CPU in float32. Without the Optuna trial, the callback's early stopping and W&B, so a
benchmark can run the same candidate at several widths, lengths, learning rates and seeds.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

from co_design.arch import Architecture
from co_design.model import MuP
from co_design.quant import QuantConfig, quantize_model
from search.config import DataConfig
from search.data import make_datamodule
from search.proxy import ProxyLM

__all__ = ["Run", "train_lm", "CACHE"]

CACHE = Path(__file__).resolve().parent / "results" / ".cache"  # the built-in corpus, built once


@dataclass(frozen=True)
class Run:
    """Final validation loss (nats/token), the curve ``((tokens, loss), ...)``, seconds of wall time."""

    loss: float
    curve: tuple[tuple[int, float], ...]
    seconds: float


class _Losses(Callback):
    def __init__(self) -> None:
        self.values: dict[int, float] = {}

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.sanity_checking:
            self.values[int(trainer.global_step)] = float(trainer.callback_metrics["val_loss"])


def train_lm(
    arch: Architecture,
    *,
    steps: int,
    lr: float,
    mup: MuP | None,
    quant: str | None = "nvfp4",
    seed: int = 0,
    batch_size: int = 8,
    seq_len: int = 128,
    val_batches: int = 4,
    validations: int = 4,
    warmup_steps: int = 15,
    min_lr_ratio: float = 0.1,
    weight_decay: float = 0.1,
    grad_clip: float = 1.0,
    threads: int = 1,
) -> Run:
    """Train ``arch`` (its vocab must be 256, the corpus's bytes) for ``steps`` optimizer steps of
    ``batch_size x seq_len`` tokens; validate ``validations`` times on the first
    ``val_batches x batch_size`` held-out windows. ``quant``: QAT format, None for float32."""
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*Your `IterableDataset` has `__len__` defined.*")
    torch.set_num_threads(threads)
    L.seed_everything(seed, workers=True, verbose=False)
    data = DataConfig(source="stdlib", cache_dir=str(CACHE), seq_len=seq_len, batch_size=batch_size,
                      val_batches=val_batches)
    dm = make_datamodule(data, seed=seed, run_dir=str(CACHE))
    model = ProxyLM(arch, max_seq_len=seq_len, lr=lr, total_steps=steps, warmup_steps=min(warmup_steps, steps // 2),
                    min_lr_ratio=min_lr_ratio, weight_decay=weight_decay, mup=mup)
    if quant is not None:
        quantize_model(model, QuantConfig(format=quant))
    losses = _Losses()
    every = max(1, math.ceil(steps / validations))
    trainer = L.Trainer(max_steps=steps, val_check_interval=every, check_val_every_n_epoch=None,
                        num_sanity_val_steps=0, limit_val_batches=val_batches, gradient_clip_val=grad_clip or None,
                        logger=False, enable_checkpointing=False, enable_model_summary=False,
                        enable_progress_bar=False, accelerator="cpu", devices=1, precision="32-true",
                        callbacks=[losses])
    start = time.perf_counter()
    trainer.fit(model, datamodule=dm)
    if steps not in losses.values:
        trainer.validate(model, datamodule=dm, verbose=False)
    seconds = time.perf_counter() - start
    curve = tuple((model.tokens_at_step[s], v) for s, v in sorted(losses.values.items()) if s in model.tokens_at_step)
    return Run(loss=losses.values[steps], curve=curve, seconds=seconds)
