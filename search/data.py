"""Proxy training data: the built-in byte corpus, token files, or a user's LightningDataModule.

The built-in corpus (:mod:`search.corpus`, torch-free) is the bytes of the Python standard
library's ``.py`` sources, cached as two ``uint8`` files (vocabulary 256).

Batches are ``LongTensor (B, T+1)`` windows: inputs are ``[:, :-1]``, targets
``[:, 1:]``. Training windows are drawn at random positions from a generator seeded
with the study seed, so every trial sees the same data in the same order;
validation uses a fixed, evenly spaced set of windows, identical for every trial.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from search.corpus import build_stdlib_corpus

__all__ = [
    "TokenWindows",
    "RandomWindows",
    "ArrayDataModule",
    "build_stdlib_corpus",
    "make_datamodule",
]


class RandomWindows(IterableDataset):
    """Endless random windows of ``seq_len + 1`` tokens from a 1-D token array.

    Seeded: the same ``seed`` yields the same windows in the same order.
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, *, seed: int, vocab_fold: int | None = None) -> None:
        if len(tokens) <= seq_len + 1:
            raise ValueError(f"token array of {len(tokens)} tokens is shorter than seq_len+1={seq_len + 1}")
        self.tokens, self.seq_len, self.seed, self.vocab_fold = tokens, seq_len, seed, vocab_fold

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = torch.utils.data.get_worker_info()  # DataLoader workers each draw their own stream
        g = np.random.default_rng([self.seed, info.id if info is not None else 0])
        high = len(self.tokens) - self.seq_len - 1
        while True:
            start = int(g.integers(0, high + 1))
            window = np.asarray(self.tokens[start : start + self.seq_len + 1], dtype=np.int64)  # (T+1,)
            if self.vocab_fold:
                window = window % self.vocab_fold
            yield torch.from_numpy(window)


class TokenWindows(Dataset):
    """``count`` evenly spaced windows of ``seq_len + 1`` tokens (a fixed validation set)."""

    def __init__(self, tokens: np.ndarray, seq_len: int, count: int, *, vocab_fold: int | None = None) -> None:
        span = len(tokens) - seq_len - 1
        if span < 0:
            raise ValueError(f"validation array of {len(tokens)} tokens is shorter than seq_len+1={seq_len + 1}")
        self.starts = np.linspace(0, span, num=count, dtype=np.int64)
        self.tokens, self.seq_len, self.vocab_fold = tokens, seq_len, vocab_fold

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> torch.Tensor:
        s = int(self.starts[i])
        window = np.asarray(self.tokens[s : s + self.seq_len + 1], dtype=np.int64)  # (T+1,)
        if self.vocab_fold:
            window = window % self.vocab_fold
        return torch.from_numpy(window)


class ArrayDataModule(L.LightningDataModule):
    """Windows over two 1-D token arrays (memory-mapped files): train (random) and val (fixed)."""

    def __init__(
        self,
        train: np.ndarray,
        val: np.ndarray,
        *,
        vocab_size: int,
        seq_len: int,
        batch_size: int,
        val_batches: int,
        seed: int = 0,
        vocab_fold: int | None = None,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.train_tokens, self.val_tokens = train, val
        self.vocab_size = vocab_fold or vocab_size
        self.seq_len, self.batch_size, self.val_batches = seq_len, batch_size, val_batches
        self.seed, self.vocab_fold, self.num_workers = seed, vocab_fold, num_workers

    def train_dataloader(self) -> DataLoader:
        ds = RandomWindows(self.train_tokens, self.seq_len, seed=self.seed, vocab_fold=self.vocab_fold)
        return DataLoader(ds, batch_size=self.batch_size, num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        ds = TokenWindows(
            self.val_tokens, self.seq_len, self.val_batches * self.batch_size, vocab_fold=self.vocab_fold
        )
        return DataLoader(ds, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers)


def _load_tokens(path: str, dtype: str) -> np.ndarray:
    if path.endswith(".npy"):
        return np.load(path, mmap_mode="r")
    return np.memmap(path, dtype=np.dtype(dtype), mode="r")


def make_datamodule(data: Any, *, seed: int, run_dir: str | Path, vocab_fold: int | None = None) -> L.LightningDataModule:
    """Build the proxy's data module from a :class:`search.config.DataConfig`.

    The returned module has ``vocab_size`` (the proxy's vocabulary).
    """
    if data.source == "stdlib":
        cache = data.cache_dir or os.path.join(str(run_dir), "data")
        train_path, val_path = build_stdlib_corpus(cache, val_fraction=data.val_fraction)
        train = np.memmap(train_path, dtype=np.uint8, mode="r")
        val = np.memmap(val_path, dtype=np.uint8, mode="r")
        vocab = 256
    elif data.source == "tokens":
        tokens = _load_tokens(data.path, data.dtype)
        if data.val_path:
            train, val = tokens, _load_tokens(data.val_path, data.dtype)
        else:
            cut = int(len(tokens) * (1 - data.val_fraction))
            train, val = tokens[:cut], tokens[cut:]
        if data.vocab_size is not None:
            vocab = int(data.vocab_size)
        else:  # one pass over the file; give vocab_size to skip it
            vocab = int(max(int(np.max(train)), int(np.max(val)))) + 1
    elif data.source == "datamodule":
        from hydra.utils import instantiate

        dm = instantiate(data.datamodule)
        if not isinstance(dm, L.LightningDataModule):
            raise TypeError(
                f"proxy.data.datamodule._target_ built a {type(dm).__name__}, not a LightningDataModule"
            )
        vocab = data.vocab_size or getattr(dm, "vocab_size", None)
        if vocab is None:
            raise ValueError(
                "the data module has no vocab_size attribute; set proxy.data.vocab_size to its vocabulary size"
            )
        dm.vocab_size = int(vocab)
        return dm
    else:  # validated earlier
        raise ValueError(f"unknown proxy.data.source {data.source!r}")
    return ArrayDataModule(
        train,
        val,
        vocab_size=vocab,
        seq_len=data.seq_len,
        batch_size=data.batch_size,
        val_batches=data.val_batches,
        seed=seed,
        vocab_fold=vocab_fold if vocab_fold and vocab_fold < vocab else None,
        num_workers=data.num_workers,
    )
