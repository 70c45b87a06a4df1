"""Proxy training data: the built-in byte corpus, token files, or a user's LightningDataModule.

The built-in corpus (:mod:`search.corpus`, torch-free) is the bytes of the Python standard
library's ``.py`` sources, cached as two ``uint8`` files (vocabulary 256) in the machine's
shared cache (:mod:`search.cache`).

:func:`make_datamodule` checks the data before the first trial and raises
:class:`search.config.ConfigError` (the job's exit status 2) naming the key to fix.

Batches here are ``LongTensor (B, T+1)`` windows: inputs are ``[:, :-1]``, targets
``[:, 1:]`` (a user's data module may yield any form :func:`search.proxy.split_batch` reads). Training windows are drawn at random positions from a generator seeded
with the study seed, so every trial sees the same data in the same order;
validation uses a fixed, evenly spaced set of windows, identical for every trial.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterator

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from lightning.fabric.utilities.exceptions import MisconfigurationException

from search.cache import cache_dir
from search.config import ConfigError
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
        if len(tokens) < seq_len + 1:
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


def _load_tokens(path: str, dtype: str, key: str, problems: list[str]) -> np.ndarray | None:
    """The 1-D token array of ``path`` (memory-mapped), or None with a line in ``problems`` saying why not."""
    fix = f"fix {key} (a .bin of raw {dtype} token ids, or a .npy of a 1-D integer array)"
    if not os.path.isfile(path):
        problems.append(f"{key}={path!r}: no such file; {fix}")
        return None
    if path.endswith(".npy"):
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            problems.append(f"{key}={path!r}: not a readable .npy file ({exc}); write it with np.save, or {fix}")
            return None
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            problems.append(f"{key}={path!r}: holds a {arr.ndim}-D {arr.dtype} array, not a 1-D integer one; "
                            f"save ids.reshape(-1) of an integer dtype (e.g. np.uint16), or {fix}")
            return None
        if len(arr) == 0:
            problems.append(f"{key}={path!r}: holds no tokens; {fix}")
            return None
        return arr
    try:
        item = np.dtype(dtype).itemsize
    except TypeError:
        problems.append(f"proxy.data.dtype={dtype!r}: not a numpy dtype; fix it (uint8, uint16, uint32, int32, int64)")
        return None
    size = os.path.getsize(path)
    if size == 0:
        problems.append(f"{key}={path!r}: the file is empty; {fix}")
        return None
    if size % item:
        problems.append(f"{key}={path!r}: {size:,} bytes is not a whole number of {item}-byte {dtype} token ids; "
                        f"fix proxy.data.dtype (the dtype the file was written with) or the file (cut short?)")
        return None
    return np.memmap(path, dtype=np.dtype(dtype), mode="r")


def _token_splits(data: Any) -> tuple[np.ndarray, np.ndarray, int]:
    """Train and val token arrays of ``source=tokens`` and the vocabulary; :class:`ConfigError` when unusable.

    Checks, before any trial: the files load as 1-D integer arrays, each split has at
    least one window (``seq_len + 1`` tokens), no id is negative, and every id is below
    ``vocab_size`` when it is given (one pass over the file: ``np.max`` of the memory map,
    the pass that finds the vocabulary when it is not given).
    """
    problems: list[str] = []
    tokens = _load_tokens(data.path, data.dtype, "proxy.data.path", problems)
    val_tokens = _load_tokens(data.val_path, data.dtype, "proxy.data.val_path", problems) if data.val_path else None
    if problems:
        raise ConfigError(problems)
    assert tokens is not None
    if val_tokens is not None:
        train, val = tokens, val_tokens
    else:
        cut = int(len(tokens) * (1 - data.val_fraction))
        train, val = tokens[:cut], tokens[cut:]
    need = data.seq_len + 1  # one window: seq_len inputs and the next token
    if len(train) < need:
        split = "" if data.val_path else f" (after the last val_fraction={data.val_fraction} went to validation)"
        problems.append(f"proxy.data.path={data.path!r}: the training split has {len(train):,} tokens{split}, fewer "
                        f"than proxy.data.seq_len + 1 = {need:,}; fix: a longer file or a smaller proxy.data.seq_len")
    if len(val) < need:
        if data.val_path:
            problems.append(f"proxy.data.val_path={data.val_path!r}: has {len(val):,} tokens, fewer than "
                            f"proxy.data.seq_len + 1 = {need:,}; fix: a longer file or a smaller proxy.data.seq_len")
        else:
            problems.append(
                f"proxy.data.path={data.path!r}: the validation split (its last proxy.data.val_fraction="
                f"{data.val_fraction}) has {len(val):,} tokens, fewer than proxy.data.seq_len + 1 = {need:,}; fix: "
                f"raise proxy.data.val_fraction, set proxy.data.val_path, or lower proxy.data.seq_len")
    if problems:
        raise ConfigError(problems)
    hi = max(int(np.max(train)), int(np.max(val)))
    if train.dtype.kind == "i":  # a signed dtype can hold negative ids
        lo = min(int(np.min(train)), int(np.min(val)))
        if lo < 0:
            problems.append(f"proxy.data.path={data.path!r}: holds the negative token id {lo}; "
                            f"fix proxy.data.dtype (the dtype the file was written with) or the file")
    if data.vocab_size is not None and hi >= data.vocab_size:
        problems.append(f"proxy.data.vocab_size={data.vocab_size}: the token files hold the id {hi:,}, outside the "
                        f"vocabulary; fix: proxy.data.vocab_size={hi + 1} or more (or unset it: largest id + 1)")
    if problems:
        raise ConfigError(problems)
    vocab = int(data.vocab_size) if data.vocab_size is not None else hi + 1
    return train, val, vocab


def _user_datamodule(data: Any) -> L.LightningDataModule:
    """The user's data module from ``proxy.data.datamodule``, its first batches checked."""
    from hydra.utils import instantiate

    key = "proxy.data.datamodule"
    dm = instantiate(data.datamodule)
    if not isinstance(dm, L.LightningDataModule):
        raise ConfigError([f"{key}._target_ built a {type(dm).__name__}, not a LightningDataModule; "
                           f"fix {key}._target_ (the class path of your LightningDataModule)"])
    vocab = data.vocab_size or getattr(dm, "vocab_size", None)
    if vocab is None:
        raise ConfigError([f"proxy.data.vocab_size: the data module ({type(dm).__name__}) has no vocab_size "
                           f"attribute; set proxy.data.vocab_size to its vocabulary size"])
    dm.vocab_size = int(vocab)
    dm.prepare_data()
    dm.setup("fit")
    problems = [p for split in ("train", "val") if (p := _batch_problem(dm, split, int(vocab))) is not None]
    if problems:
        raise ConfigError(problems)
    return dm


def _describe(x: Any) -> str:
    """A short account of a batch's form: ``list[Tensor(2, 9) float32]``."""
    if isinstance(x, torch.Tensor):
        return f"Tensor{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}"
    if isinstance(x, (tuple, list)):
        return f"{type(x).__name__}[{', '.join(_describe(v) for v in x[:4])}{', ...' if len(x) > 4 else ''}]"
    if isinstance(x, Mapping):
        return f"{type(x).__name__}(" + ", ".join(f"{k}={_describe(v)}" for k, v in list(x.items())[:6]) + ")"
    return type(x).__name__


def _batch_problem(dm: L.LightningDataModule, split: str, vocab: int) -> str | None:
    """What is wrong with the first batch of ``dm``'s ``split`` loader (None: the proxy can train on it).

    One batch of each loader, before the first trial: its form (:func:`search.proxy.split_batch`
    reads it, the same code the trials use), integer dtype, 2-D ``(B, T)`` shape and ids in
    ``[0, vocab)`` (targets of -100 are not scored).
    """
    from search.proxy import BATCH_FORMS, IGNORE_INDEX, split_batch

    key = "proxy.data.datamodule"
    try:
        batch = next(iter(getattr(dm, f"{split}_dataloader")()))
    except StopIteration:
        return f"{key}: its {split}_dataloader() yields no batch; fix the data module (an empty {split} dataset?)"
    except MisconfigurationException:
        return (f"{key}: the data module has no {split}_dataloader(); the proxy trains on the train loader and "
                f"scores on the val loader; fix: implement both")
    got = f"its first {split} batch is {_describe(batch)}"
    accepted = f"accepted batch forms: {BATCH_FORMS}"
    try:
        inputs, targets = split_batch(batch, long=False)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError):
        return f"{key}: {got}; fix the data module's collate; {accepted}"
    if not all(isinstance(t, torch.Tensor) for t in (inputs, targets)):
        return f"{key}: {got}, not torch tensors; fix the data module's collate; {accepted}"
    for t in (inputs, targets):
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            return f"{key}: {got}, not integer token ids; fix the data module (ids as torch.long); {accepted}"
    if inputs.dim() != 2 or inputs.shape != targets.shape or inputs.shape[1] < 1:
        return (f"{key}: {got}: inputs {tuple(inputs.shape)} and targets {tuple(targets.shape)} are not both "
                f"(B, T) with T >= 1; fix the data module; {accepted}")
    scored = targets[targets != IGNORE_INDEX]
    for name, ids in (("inputs", inputs), ("targets", scored)):
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            lo, hi = int(ids.min()), int(ids.max())
            return (f"{key}: its first {split} batch's {name} hold token ids in [{lo}, {hi}], outside the vocabulary "
                    f"[0, {vocab}); fix proxy.data.vocab_size (or the data module's vocab_size) to at least {hi + 1}, "
                    f"or the data")
    return None


def make_datamodule(
    data: Any, *, seed: int, run_dir: str | Path | None = None, vocab_fold: int | None = None
) -> L.LightningDataModule:
    """Build the proxy's data module from a :class:`search.config.DataConfig`.

    The returned module has ``vocab_size`` (the proxy's vocabulary). Raises
    :class:`search.config.ConfigError`, naming the key and its fix, when the data cannot
    train a proxy (a token file that is empty, of another dtype, too short for one window,
    or holds ids outside ``vocab_size``; a data module whose first batch is of a form
    :func:`search.proxy.split_batch` does not read): the job stops before the first trial.
    The stdlib corpus is cached in ``proxy.data.cache_dir``, by default the machine's
    shared cache (:func:`search.cache.cache_dir` ``/corpus``). ``run_dir`` is unused (kept for callers).
    """
    if data.source == "stdlib":
        cache = data.cache_dir or cache_dir() / "corpus"
        train_path, val_path = build_stdlib_corpus(cache, val_fraction=data.val_fraction)
        train = np.memmap(train_path, dtype=np.uint8, mode="r")
        val = np.memmap(val_path, dtype=np.uint8, mode="r")
        vocab = 256
    elif data.source == "tokens":
        train, val, vocab = _token_splits(data)
    elif data.source == "datamodule":
        return _user_datamodule(data)
    else:  # validated earlier
        raise ConfigError([f"proxy.data.source={data.source!r}: unknown; fix it (stdlib, tokens or datamodule)"])
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
