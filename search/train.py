"""One proxy training run: Lightning ``Trainer`` + ``CoDesignCallback`` on the data module."""

from __future__ import annotations

import logging
import math
import os
import signal
import warnings
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, RichProgressBar
from lightning.pytorch.utilities.exceptions import SIGTERMException

from co_design.arch import Architecture
from co_design.model.parametrization import MuP
from search.config import SearchConfig, show_progress_bars, steps_of
from search.proxy import ProxyLM, trainer_settings
from search.signals import Terminated

__all__ = ["ProxyResult", "train_proxy", "cpu_threads"]


@dataclass(frozen=True)
class ProxyResult:
    """Final validation loss (nats/token), optimizer steps run, and why it stopped early (if it did).

    ``curve``: the validation loss against training tokens seen, ``[(tokens, loss), ...]``.
    """

    loss: float
    steps: int
    pruned_reason: str | None = None
    curve: tuple[tuple[int, float], ...] = ()


class _NonFiniteGuard(Callback):
    """Stop at the first non-finite training loss instead of training on NaNs to the end."""

    def __init__(self) -> None:
        self.bad_step: int | None = None
        self.bad_value: float | None = None

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None and not torch.isfinite(loss.detach()).all():
            self.bad_step, self.bad_value = trainer.global_step, float(loss.detach().float().mean())
            trainer.should_stop = True


class _StepProgressBar(RichProgressBar):
    """Lightning's rich progress bar labelled with the trial instead of "Epoch 0/-2".

    A proxy run is budgeted in steps (``max_steps``, ``max_epochs=-1``) on endless data,
    so Lightning's "Epoch {epoch}/{max_epochs - 1}" label reads "Epoch 0/-2"; the bar
    itself already counts steps up to ``max_steps``.
    """

    def __init__(self, label: str) -> None:
        super().__init__()
        self.label = label

    def _get_train_description(self, current_epoch: int) -> str:  # Lightning's hook for the label
        return self.label if current_epoch == 0 else f"{self.label} (epoch {current_epoch})"


def cpu_threads(requested: int | None) -> int:
    """Torch threads for a CPU proxy: ``requested`` (``proxy.threads``), or, for None, every core
    this process may use.

    Never taken from the machine's load: the thread count sets how torch splits a proxy's
    reductions, and so the float rounding of its loss. The default study's losses on 2 cores
    moved by up to 0.04 nats between 1 and 2 threads (about a seed's noise), which changed its
    front; when the count followed the load average, the same command on the same machine
    gave another front whenever the machine was busy at start.
    """
    if requested is not None:
        return requested
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _quiet_lightning() -> None:
    # Lightning's per-Trainer banners ("GPU available: ...", "You are using a CUDA device ...") repeat
    # for every trial, and its "Received SIGTERM" comes twice (its handler and Hydra's) before the job's
    # own "terminated (SIGTERM)" line; keep its warnings and errors.
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda", "lightning.fabric",
                 "lightning.pytorch.trainer.connectors.signal_connector"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*treespec.*")
    warnings.filterwarnings("ignore", message=r".*Your `IterableDataset` has `__len__` defined.*")
    warnings.filterwarnings("ignore", message=r".*Precision .*-mixed is not supported by the model summary.*")


def _fit_or_interrupt(call: Any, *args: Any, **kwargs: Any) -> Any:
    """``trainer.fit``/``validate``, with Ctrl-C re-raised as ``KeyboardInterrupt`` and SIGTERM as
    :class:`search.signals.Terminated`.

    On Ctrl-C Lightning sets SIGINT to ignored and calls ``sys.exit(1)``: the trial would
    stay RUNNING, the results would not be written and the job would end with status 1
    and no message. Restore the SIGINT handler and raise ``KeyboardInterrupt`` instead,
    so the trial is recorded as interrupted and the study ends the way Ctrl-C between
    trials ends it (results written, exit status 130). SIGTERM the same way (status 143):
    Lightning raises its ``SIGTERMException``, a ``SystemExit`` of status 0, unless the
    job's own handler (search.signals), which Lightning calls after its own, raised first.
    """
    handler = signal.getsignal(signal.SIGINT)
    try:
        return call(*args, **kwargs)
    except SIGTERMException:  # Lightning's answer to SIGTERM: a SystemExit of status 0 (search.signals)
        raise Terminated from None
    except SystemExit as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):  # Ctrl-C, or SIGTERM as search.signals raises it
            raise exc.__context__ from None
        raise
    finally:
        if handler is not None and signal.getsignal(signal.SIGINT) is not handler:
            try:
                signal.signal(signal.SIGINT, handler)
            except ValueError:  # pragma: no cover - not the main thread
                pass


def train_proxy(
    *,
    trial: Any,
    cfg: SearchConfig,
    full_arch: Architecture,
    proxy_arch: Architecture,
    gpu: Any,
    deployment: Any,
    quant: str,
    datamodule: Any,
    stopping: Any,
    tracker: Any,
    run_dir: str,
) -> ProxyResult:
    """Train ``proxy_arch`` for the budget; the callback scores ``full_arch`` on ``deployment``.

    The model is initialised with the study seed (every trial alike), QAT in ``quant``;
    validation every ``budget.val_every_steps`` (default: four times a run) and once at
    the end, so the returned loss is always the final one.
    """
    from co_design.callback import CoDesignCallback

    _quiet_lightning()
    p = cfg.proxy
    steps = steps_of(p)
    val_every = p.budget.val_every_steps or max(1, math.ceil(steps / 4))
    val_every = min(val_every, steps)
    settings = trainer_settings(p.accelerator, p.precision)
    if settings["accelerator"] == "cpu":
        torch.set_num_threads(cpu_threads(p.threads))
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    model = ProxyLM(
        proxy_arch,
        max_seq_len=p.max_seq_len or p.data.seq_len,
        lr=p.lr,
        total_steps=steps,
        warmup_steps=min(p.warmup_steps, steps // 2),
        min_lr_ratio=p.min_lr_ratio,
        weight_decay=p.weight_decay,
        aux_loss_coef=p.aux_loss_coef,
        mup=MuP(p.mup.base_hidden, p.mup.base_head_dim) if p.mup is not None else None,
    )
    from search.objective import NonFiniteLossError
    from search.scoring import perf_slo

    slo = perf_slo(cfg.deployment.slo) if deployment.concurrency is None else None
    callback = CoDesignCallback(
        gpu,
        deployment=deployment,
        quant=quant,
        architecture=full_arch,  # the performance model scores the full-size candidate
        verify_architecture=False,  # ... while the module trains its reduced proxy
        trial=trial,
        stopping=stopping,
        slo=slo,
        log_quant_every_n_steps=max(1, val_every),
        warn_alignment=False,  # the space is aligned by construction
    )
    guard = _NonFiniteGuard()
    progress = show_progress_bars(cfg)
    logger = None
    if tracker is not None:
        try:
            logger = tracker.trial_logger(trial)
        except Exception as exc:  # tracking trouble (e.g. no network online) must not fail the trial
            logging.getLogger("search").warning("W&B run of trial %d not created: %s", trial.number, exc)
    trainer = L.Trainer(
        max_steps=steps,
        val_check_interval=val_every,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        limit_val_batches=p.data.val_batches,
        gradient_clip_val=p.grad_clip or None,
        logger=logger if logger is not None else False,
        log_every_n_steps=max(1, min(10, val_every)),
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress,
        default_root_dir=os.path.join(run_dir, "lightning"),
        callbacks=[callback, guard, *([_StepProgressBar(f"trial {trial.number} proxy")] if progress else [])],
        **settings,
    )
    _fit_or_interrupt(trainer.fit, model, datamodule=datamodule)
    if guard.bad_step is not None:
        raise NonFiniteLossError(f"training loss became {guard.bad_value} at step {guard.bad_step} (diverged)")
    last = callback.intermediate_values.get(max(callback.intermediate_values, default=-1))
    if last is not None and not math.isfinite(last):
        raise NonFiniteLossError(f"validation loss became {last} at step {trainer.global_step} (diverged)")
    if callback.pruned:
        reason = f"stopped early at step {callback.pruned_at_step}: {callback.stop_reason}"
        return ProxyResult(loss=float("nan"), steps=trainer.global_step, pruned_reason=reason,
                           curve=_curve(callback.intermediate_values, model.tokens_at_step))
    values = callback.intermediate_values
    if trainer.global_step not in values:  # the last validation did not fall on the last step
        _fit_or_interrupt(trainer.validate, model, datamodule=datamodule, verbose=False)
        values = callback.intermediate_values
    loss = values.get(trainer.global_step)
    if loss is None:
        raise RuntimeError(f"no validation loss recorded at step {trainer.global_step}; have {sorted(values)}")
    if logger is not None:
        logger.experiment.summary["proxy/final_val_loss"] = float(loss)
    return ProxyResult(loss=float(loss), steps=int(trainer.global_step),
                       curve=_curve(values, model.tokens_at_step))


def _curve(values: dict[int, float], tokens_at_step: dict[int, int]) -> tuple[tuple[int, float], ...]:
    """Validation loss by global step -> ``((tokens seen, loss), ...)`` in token order."""
    return tuple((tokens_at_step[s], float(v)) for s, v in sorted(values.items()) if s in tokens_at_step)

