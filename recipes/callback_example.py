"""Add co-design to a Lightning training that was written without it: one callback.

The first half of this file is an ordinary character-level GPT LightningModule
(nanoGPT-like, on two Shakespeare sonnets, public domain), with no co-design in
it. The second half, ``main``, trains it with :class:`co_design.callback.CoDesignCallback`
added to the Trainer. The callback:

- infers the architecture from the module's layers and says what it read,
- fake-quantizes its ``nn.Linear`` layers (NVFP4 by default) for the run,
- warns for dimensions that miss the GPU's tile alignment, with the modelled gain,
- logs the predicted serving performance of this shape (``co_design/...``) and
  the fake-quant error every few steps to the Trainer's loggers (CSV here).

Runs on CPU in well under a minute::

    python recipes/callback_example.py                       # 80 steps, NVFP4, predicted on one B200
    python recipes/callback_example.py --max-steps 20 --quant fp8 --hardware h200 --tp 2
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, Dataset

TEXT = """Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date;
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd;
And every fair from fair sometime declines,
By chance or nature's changing course untrimm'd;
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow'st;
Nor shall Death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st:
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.

Let me not to the marriage of true minds
Admit impediments. Love is not love
Which alters when it alteration finds,
Or bends with the remover to remove.
O no! it is an ever-fixed mark
That looks on tempests and is never shaken;
It is the star to every wand'ring bark,
Whose worth's unknown, although his height be taken.
Love's not Time's fool, though rosy lips and cheeks
Within his bending sickle's compass come;
Love alters not with his brief hours and weeks,
But bears it out even to the edge of doom.
If this be error and upon me prov'd,
I never writ, nor no man ever lov'd.
"""  # William Shakespeare, Sonnets 18 and 116 (1609), public domain


# =============================================================== an existing training, no co-design in it
class CharDataset(Dataset):
    """Every window of ``block_size + 1`` characters: input and next-character targets."""

    def __init__(self, ids: torch.Tensor, block_size: int) -> None:
        self.ids, self.block_size = ids, block_size

    def __len__(self) -> int:
        return len(self.ids) - self.block_size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.ids[i : i + self.block_size + 1]  # (T + 1,)
        return chunk[:-1], chunk[1:]


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, C)
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharGPT(pl.LightningModule):
    """A small character-level GPT."""

    def __init__(self, text: str = TEXT, n_embd: int = 64, n_head: int = 4, n_layer: int = 2,
                 block_size: int = 32, batch_size: int = 16, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["text"])
        self.chars = sorted(set(text))
        self.ids = torch.tensor([self.chars.index(c) for c in text])  # (N,)
        vocab = len(self.chars)
        self.tok_emb = nn.Embedding(vocab, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:  # (B, T) -> logits (B, T, vocab)
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def _loss(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch  # (B, T), (B, T)
        return F.cross_entropy(self(x).flatten(0, 1), y.flatten())

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)

    def _split(self, train: bool) -> CharDataset:
        cut = int(0.9 * len(self.ids))
        T = self.hparams.block_size
        return CharDataset(self.ids[:cut] if train else self.ids[cut - T :], T)

    def train_dataloader(self):
        return DataLoader(self._split(True), batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self._split(False), batch_size=self.hparams.batch_size)

    @torch.no_grad()
    def sample(self, prompt: str, n: int = 80) -> str:
        idx = torch.tensor([[self.chars.index(c) for c in prompt]])  # (1, T)
        for _ in range(n):
            logits = self(idx[:, -self.hparams.block_size :])[:, -1]  # (1, vocab)
            idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], dim=1)
        return "".join(self.chars[i] for i in idx[0].tolist())


# =============================================================== the co-design part
def main(argv: list[str] | None = None) -> dict[str, float]:
    from co_design.callback import CoDesignCallback
    from co_design.perf import Deployment

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-steps", type=int, default=80, help="optimizer steps (default 80)")
    p.add_argument("--hardware", default="b200", help="GPU to predict serving on (co_design.hardware.list_gpus())")
    p.add_argument("--quant", default="nvfp4", help="fake-quant format for training: nvfp4, fp8, bf16 or off")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs of the predicted deployment")
    p.add_argument("--concurrency", type=int, default=None, help="requests in flight (default: max throughput)")
    p.add_argument("--log-dir", default="runs/callback_example", help="CSV logs go here")
    p.add_argument("--accelerator", default="cpu", help="Lightning accelerator for training (cpu, gpu, auto)")
    args = p.parse_args(argv)

    pl.seed_everything(0, verbose=False)
    torch.set_num_threads(min(4, torch.get_num_threads()))
    model = CharGPT()
    quant = None if args.quant.lower() == "off" else args.quant
    precision = quant or "bf16"
    codesign = CoDesignCallback(
        args.hardware,
        deployment=Deployment(tp=args.tp, weights=precision, activations=precision, concurrency=args.concurrency),
        quant=quant,
        log_quant_every_n_steps=max(1, args.max_steps // 5),
    )
    trainer = pl.Trainer(
        max_steps=args.max_steps, val_check_interval=max(1, args.max_steps // 3), check_val_every_n_epoch=None,
        limit_val_batches=2, accelerator=args.accelerator, devices=1, logger=CSVLogger(args.log_dir),
        log_every_n_steps=10, callbacks=[codesign], enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model)

    pred = codesign.prediction
    val_loss = float(trainer.callback_metrics["val_loss"])
    print(f"\n{codesign.inference.describe() if codesign.inference else codesign.architecture}")
    print(f"quantized {len(codesign.quantized_modules)} layers to {args.quant}; validation loss {val_loss:.3f} "
          f"({val_loss / math.log(2):.2f} bits/char) after {trainer.global_step} steps")
    print(f"predicted on {args.tp} x {codesign.gpu.name}: {pred.output_tokens_per_s_per_gpu:,.0f} output tok/s/GPU, "
          f"{pred.output_tokens_per_s_per_user:,.0f} tok/s/user, TTFT {pred.ttft_s * 1e3:.2f} ms, "
          f"TPOT {pred.tpot_s * 1e3:.3f} ms at batch {pred.batch} ({pred.bound}-bound)")
    metrics_csv = Path(trainer.logger.log_dir) / "metrics.csv"
    with open(metrics_csv) as f:
        logged = sorted({k for row in csv.DictReader(f) for k, v in row.items() if k.startswith("co_design/") and v})
    print(f"logged to {metrics_csv}: {', '.join(logged)}")
    print("sample:", repr(model.sample("Shall I ")))
    return {"val_loss": val_loss, "steps": float(trainer.global_step),
            "output_tokens_per_s_per_gpu": pred.output_tokens_per_s_per_gpu}


if __name__ == "__main__":
    main()
