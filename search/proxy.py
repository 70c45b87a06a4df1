"""The proxy run: a reduced candidate trained briefly with Lightning.

:func:`reduce_architecture` shrinks a full-size candidate (pure Python);
:class:`ProxyLM` wraps :class:`co_design.model.Transformer` as a LightningModule
(next-token cross-entropy plus the MoE load-balancing loss, AdamW with linear warmup
and cosine decay); :func:`trainer_settings` picks the device and mixed precision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F

from co_design.arch import Architecture
from co_design.model.parametrization import MuP, optimizer_groups
from search.space import largest_divisor_at_most

__all__ = ["ProxyLM", "reduce_architecture", "trainer_settings", "proxy_collisions", "split_batch"]


def _round(x: float) -> int:
    """Round half up (Python's round() sends 2.5 to 2 but 3.5 to 4)."""
    return int(math.floor(x + 0.5))


def reduce_architecture(arch: Architecture, reduction: Any, vocab: int) -> Architecture:
    """The proxy of ``arch``: narrower, shallower, fewer experts, the data's vocabulary.

    Width, by default: ``heads * width`` heads of the same ``head_dim`` (at least
    enough for ``reduction.min_hidden``), KV heads scaled alike and made to divide the
    heads. With ``reduction.keep_layout``: the candidate's heads and KV heads, each of
    ``head_dim * width`` (even, for RoPE; at least enough for ``min_hidden``; raised until
    the hidden size is whole 16-element NVFP4 blocks), so two candidates that differ in
    heads or KV heads never share a proxy. Either way the FFN widths scale by the same
    hidden ratio (rounded to 16, the NVFP4 block). Depth: ``layers * depth`` layers; the
    dense-first layers of an MoE are scaled alike, or kept as they are with
    ``keep_layout``, leaving at least one MoE layer. Experts: ``experts * experts`` (at
    least top-k + 1; top-k and shared experts kept).
    """
    if reduction.keep_layout:
        heads, kv = arch.heads, arch.kv_heads
        head_dim = max(2, 2 * _round(arch.head_dim * reduction.width / 2), 2 * math.ceil(reduction.min_hidden / heads / 2))
        while (heads * head_dim) % 16 and head_dim < arch.head_dim:  # hidden in whole NVFP4 blocks
            head_dim += 2
        head_dim = min(head_dim, arch.head_dim)
    else:
        head_dim = arch.head_dim
        min_heads = max(1, math.ceil(reduction.min_hidden / head_dim))
        heads = min(arch.heads, max(min_heads, _round(arch.heads * reduction.width)))
        kv = largest_divisor_at_most(heads, max(1, _round(arch.kv_heads * heads / arch.heads)))
    hidden = heads * head_dim
    ratio = hidden / arch.hidden

    def width(n: int) -> int:  # multiples of 16: whole NVFP4 blocks, so every Linear is fake-quantized
        return max(16, _round(n * ratio / 16) * 16)

    layers = max(1, _round(arch.layers * reduction.depth))
    changes: dict[str, Any] = dict(
        hidden=hidden,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        layers=layers,
        ffn=width(arch.ffn),
        vocab=vocab,
        name=f"{arch.name}-proxy",
    )
    if arch.is_moe:
        experts = max(arch.experts_per_token + 1, _round(arch.experts * reduction.experts))
        experts = min(experts, arch.experts)
        dense = arch.dense_layers if reduction.keep_layout else _round(arch.dense_layers * reduction.depth)
        dense = min(dense, layers - 1)
        changes.update(
            experts=experts,
            expert_ffn=width(arch.expert_ffn),
            shared_expert_ffn=width(arch.shared_expert_ffn),
            dense_layers=dense,
        )
    return arch.replace(**changes)


def trainer_settings(accelerator: str, precision: str) -> dict[str, Any]:
    """Lightning ``accelerator``/``precision`` for this machine.

    ``auto``: a CUDA GPU when present, else CPU; ``bf16-mixed`` on GPUs that support
    bfloat16 (Ampere and newer), ``16-mixed`` on older GPUs, ``32-true`` on CPU
    (bfloat16 autocast on CPU is slower than float32 for these small matrices).
    """
    cuda = torch.cuda.is_available()
    if accelerator == "auto":
        accelerator = "gpu" if cuda else "cpu"
    if accelerator in ("gpu", "cuda") and not cuda:
        raise RuntimeError("proxy.accelerator=gpu but no CUDA device is available; use proxy.accelerator=auto or cpu")
    if precision == "auto":
        if accelerator in ("gpu", "cuda"):
            precision = "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
        else:
            precision = "32-true"
    return {"accelerator": accelerator, "precision": precision, "devices": 1}


#: a target of this value is not scored (Hugging Face's ``labels`` convention, ``F.cross_entropy``'s default)
IGNORE_INDEX = -100

#: the batch forms :func:`split_batch` reads, for error messages
BATCH_FORMS = (
    "a tensor (B, T+1) of token ids; a 1-element tuple/list [x] of one (a TensorDataset's batch); "
    "a pair (inputs, targets) of (B, T) each; or a dict with input_ids (B, T+1) and optionally labels (B, T+1)"
)


def split_batch(batch: Any, *, long: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs, targets)``, each ``LongTensor (B, T)``, of one batch; the one place batch forms are read.

    - a tensor ``x`` ``(B, T+1)``: ``x[:, :-1]``, ``x[:, 1:]`` (the built-in data's form);
    - ``[x]`` or ``(x,)`` (a ``TensorDataset`` of one tensor): as ``x``;
    - ``(inputs, targets)``: taken as they are, already shifted, each ``(B, T)``;
    - a dict with ``input_ids`` ``(B, T+1)``: as that tensor; with ``labels`` too, Hugging
      Face's convention: labels are unshifted (usually a copy of ``input_ids``) and the model
      shifts, so inputs ``input_ids[:, :-1]``, targets ``labels[:, 1:]``; a label of
      :data:`IGNORE_INDEX` (-100, e.g. padding) is not scored. Other keys (``attention_mask``) are ignored.

    ``long=False`` leaves the dtype as it is (the data check reads it). Raises ``ValueError``
    on another form; shapes and dtypes are not checked here (:func:`search.data.make_datamodule`
    checks one batch of a user's data module before the first trial).
    """
    if isinstance(batch, torch.Tensor):
        inputs, targets = batch[:, :-1], batch[:, 1:]  # (B, T), (B, T)
    elif isinstance(batch, (tuple, list)) and len(batch) == 1:
        return split_batch(batch[0], long=long)
    elif isinstance(batch, (tuple, list)) and len(batch) == 2:
        inputs, targets = batch
    elif isinstance(batch, Mapping) and "input_ids" in batch:  # a dict, or Hugging Face's BatchEncoding
        ids = batch["input_ids"]
        labels = batch.get("labels", ids)
        inputs, targets = ids[:, :-1], labels[:, 1:]  # (B, T), (B, T)
    else:
        kind = f"a {len(batch)}-element {type(batch).__name__}" if isinstance(batch, (tuple, list)) else (
            f"a dict with keys {sorted(map(str, batch))}" if isinstance(batch, Mapping) else f"a {type(batch).__name__}")
        raise ValueError(f"a batch is {kind}; accepted: {BATCH_FORMS}")
    return (inputs.long(), targets.long()) if long else (inputs, targets)


class ProxyLM(L.LightningModule):
    """Next-token language model around :class:`co_design.model.Transformer`.

    Batches are any form :func:`split_batch` reads (LongTensor ``(B, T+1)`` windows, ``[x]``,
    ``(inputs, targets)`` pairs of ``(B, T)``, dicts with ``input_ids``). Logs ``train_loss`` and ``val_loss`` (mean cross-entropy, nats/token) and
    ``tokens`` (training tokens seen, the x-axis a loss curve is read against);
    ``tokens_at_step`` maps each validated global step to the tokens seen by then.
    ``mup``: train under μP (:class:`co_design.model.MuP`): hidden weights at ``lr / width_mult``.
    """

    def __init__(
        self,
        arch: Architecture,
        *,
        max_seq_len: int,
        lr: float,
        total_steps: int,
        warmup_steps: int = 0,
        min_lr_ratio: float = 0.1,
        weight_decay: float = 0.1,
        aux_loss_coef: float = 0.01,
        mup: MuP | None = None,
    ) -> None:
        super().__init__()
        from co_design.model import Transformer

        self.arch, self.mup = arch, mup
        self.model = Transformer(arch, max_seq_len=max_seq_len, mup=mup)
        self.lr, self.total_steps, self.warmup_steps = lr, max(1, total_steps), warmup_steps
        self.min_lr_ratio, self.weight_decay, self.aux_loss_coef = min_lr_ratio, weight_decay, aux_loss_coef
        self.tokens_seen = 0  # training target tokens so far
        self.tokens_at_step: dict[int, int] = {}

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens)  # (B, T, V)

    def _loss(self, batch: Any) -> torch.Tensor:
        inputs, targets = split_batch(batch)
        logits = self(inputs)  # (B, T, V)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.tokens_seen += int(split_batch(batch)[1].numel())
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=False)
        if self.arch.is_moe and self.aux_loss_coef:
            loss = loss + self.aux_loss_coef * self.model.aux_loss
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("val_loss", loss, prog_bar=True, on_step=False, on_epoch=True)
        return loss

    def on_validation_epoch_end(self) -> None:
        self.tokens_at_step[int(self.global_step)] = self.tokens_seen
        self.log("tokens", float(self.tokens_seen), on_step=False, on_epoch=True)

    def configure_optimizers(self) -> Any:
        groups = optimizer_groups(self.model, lr=self.lr, weight_decay=self.weight_decay, mup=self.mup,
                                  hidden=self.arch.hidden)
        opt = torch.optim.AdamW(groups, lr=self.lr, betas=(0.9, 0.95))
        warm, total, floor = self.warmup_steps, self.total_steps, self.min_lr_ratio

        def factor(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            progress = min(1.0, (step - warm) / max(1, total - warm))
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def proxy_collisions(space: Any, deployment: Any, reduction: Any, vocab: int, *, limit: int = 100_000) -> tuple[int, int, list[str]] | None:
    """Whether distinct candidates of ``space`` share a proxy under ``reduction``.

    Returns (distinct candidates, distinct proxies, up to three examples "A and B") by
    enumerating the space, or None when it has more than ``limit`` suggestion
    combinations (not checked). Candidates that differ only in precision train
    different proxies (their QAT format differs). Pure Python; ~0.2 ms per candidate.
    """
    from search.space import enumerate_candidates, grid_size, shape_label

    if grid_size(space, deployment) > limit:
        return None
    owner: dict[tuple[str, str | None], str] = {}
    examples: list[str] = []
    n = 0
    for _, _, cand in enumerate_candidates(space, deployment):
        n += 1
        reduced = reduce_architecture(cand.arch, reduction, vocab).replace(name="proxy")
        key = (repr(reduced), cand.precision)
        if key in owner:
            if len(examples) < 3:
                examples.append(f"{owner[key]} and {shape_label(cand.arch)}")
        else:
            owner[key] = shape_label(cand.arch)
    return n, len(owner), examples
