"""Proxy data: the stdlib byte corpus, token files, windows (fast)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

import numpy as np
import pytest
import torch

from search.config import DataConfig
from search.corpus import _is_val
from search.data import ArrayDataModule, RandomWindows, TokenWindows, build_stdlib_corpus, make_datamodule


def test_stdlib_corpus_split_is_deterministic_and_cached(tmp_path):
    train, val = build_stdlib_corpus(tmp_path, val_fraction=0.05)
    assert train.stat().st_size > 1_000_000 and val.stat().st_size > 10_000
    mtime = train.stat().st_mtime_ns
    train2, val2 = build_stdlib_corpus(tmp_path, val_fraction=0.05)
    assert (train2, val2) == (train, val) and train.stat().st_mtime_ns == mtime  # cached, not rebuilt
    # the split depends only on the relative path: another process with another hash seed splits alike
    paths = [f"pkg/m{i}.py" for i in range(200)]
    code = f"from search.corpus import _is_val; print([_is_val(p, 0.05) for p in {paths!r}])"
    other = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": "12345"},
                           capture_output=True, text=True, check=True).stdout.strip()
    assert other == str([_is_val(p, 0.05) for p in paths]) and "True" in other
    frac = np.mean([_is_val(f"pkg/m{i}.py", 0.05) for i in range(4000)])
    assert 0.03 < frac < 0.07
    # a validation file's bytes are in val.bin, not in train.bin
    import pathlib

    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    val_file = next(p for p in sorted(root.glob("*.py")) if _is_val(p.relative_to(root).as_posix(), 0.05))
    needle = val_file.read_bytes()[:200]
    assert needle in val.read_bytes() and needle not in train.read_bytes()


def test_windows_are_reproducible_and_shaped():
    tokens = np.arange(1000, dtype=np.uint16)
    a = iter(RandomWindows(tokens, 16, seed=3))
    b = iter(RandomWindows(tokens, 16, seed=3))
    for _ in range(5):
        x, y = next(a), next(b)
        assert x.shape == (17,) and x.dtype == torch.int64 and torch.equal(x, y)
        assert torch.equal(x[1:] - x[:-1], torch.ones(16, dtype=torch.int64))  # contiguous
    val = TokenWindows(tokens, 16, 4)
    assert len(val) == 4 and val[0][0] == 0 and val[3][-1] == 999  # evenly spaced, ends at the end
    folded = TokenWindows(tokens, 16, 2, vocab_fold=100)
    assert int(folded[1].max()) < 100


def test_token_file_source(tmp_path):
    ids = (np.arange(20_000) * 7919 % 50_000).astype(np.uint16)
    path = tmp_path / "train.bin"
    ids.tofile(path)
    data = DataConfig(source="tokens", path=str(path), dtype="uint16", seq_len=32, batch_size=4, val_batches=2)
    dm = make_datamodule(data, seed=0, run_dir=tmp_path)
    assert isinstance(dm, ArrayDataModule) and dm.vocab_size == int(ids.max()) + 1
    assert len(dm.train_tokens) == 19_000 and len(dm.val_tokens) == 1_000  # the last 5% validate
    batch = next(iter(dm.train_dataloader()))
    assert batch.shape == (4, 33)
    assert sum(1 for _ in dm.val_dataloader()) == 2
    folded = make_datamodule(data, seed=0, run_dir=tmp_path, vocab_fold=1000)
    assert folded.vocab_size == 1000 and int(next(iter(folded.train_dataloader())).max()) < 1000


def test_stdlib_datamodule(tmp_path):
    dm = make_datamodule(DataConfig(seq_len=64, batch_size=2, val_batches=3), seed=0, run_dir=tmp_path)
    assert dm.vocab_size == 256 and (tmp_path / "data").is_dir()
    batch = next(iter(dm.train_dataloader()))
    assert batch.shape == (2, 65) and int(batch.max()) < 256


def test_user_datamodule_by_target(tmp_path):
    data = DataConfig(source="datamodule", datamodule={"_target_": "search.data.ArrayDataModule",
                                                      "train": None, "val": None, "vocab_size": 50,
                                                      "seq_len": 8, "batch_size": 2, "val_batches": 1})
    dm = make_datamodule(data, seed=0, run_dir=tmp_path)
    assert dm.vocab_size == 50
    with pytest.raises(TypeError, match="not a LightningDataModule"):
        make_datamodule(DataConfig(source="datamodule", datamodule={"_target_": "builtins.dict"}), seed=0, run_dir=tmp_path)
