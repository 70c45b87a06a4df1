"""Proxy data: the stdlib byte corpus, token files, windows (fast)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from co_design.arch import Architecture
from search.config import ConfigError, DataConfig
from search.corpus import _is_val
from search.data import ArrayDataModule, RandomWindows, TokenWindows, build_stdlib_corpus, make_datamodule
from search.proxy import ProxyLM, split_batch

REPO = Path(__file__).resolve().parents[2]


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


def test_stdlib_datamodule_uses_the_shared_cache(tmp_path, shared_cache):
    dm = make_datamodule(DataConfig(seq_len=64, batch_size=2, val_batches=3), seed=0, run_dir=tmp_path)
    assert dm.vocab_size == 256 and not (tmp_path / "data").exists()  # not per study: in the shared cache
    assert Path(dm.train_tokens.filename).parent == shared_cache / "corpus"
    batch = next(iter(dm.train_dataloader()))
    assert batch.shape == (2, 65) and int(batch.max()) < 256
    own = tmp_path / "own-cache"  # proxy.data.cache_dir still overrides it
    dm = make_datamodule(DataConfig(seq_len=64, cache_dir=str(own)), seed=0)
    assert Path(dm.train_tokens.filename).parent == own


# --------------------------------------------------------------------------- a user's data module
DATAMODULES = textwrap.dedent(
    """
    import lightning as L
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    class FormDataModule(L.LightningDataModule):
        \"\"\"16 windows (seq_len + 1 = 9 ids below ``top``) served in batches of 4 of the form ``form``.\"\"\"

        def __init__(self, form, vocab_size=None, top=50, dtype="int64", rows=16, val=True):
            super().__init__()
            if vocab_size is not None:
                self.vocab_size = vocab_size
            self.form, self.top, self.dtype, self.rows, self.val = form, top, dtype, rows, val

        def setup(self, stage=None):
            g = torch.Generator().manual_seed(0)
            self.x = torch.randint(0, self.top, (self.rows, 9), generator=g).to(getattr(torch, self.dtype))

        def _loader(self):
            x, form = self.x, self.form
            if form == "tensor":
                ds = list(x)
            elif form == "list":  # a TensorDataset of one tensor: batches are [x]
                ds = TensorDataset(x)
            elif form == "pair":
                ds = TensorDataset(x[:, :-1], x[:, 1:])
            elif form == "dict":
                ds = [{"input_ids": r, "attention_mask": torch.ones_like(r)} for r in x]
            elif form == "labels":  # the first 4 positions are padding, not scored
                ds = [{"input_ids": r, "labels": torch.cat([torch.full((4,), -100), r[4:]])} for r in x]
            elif form == "triple":
                ds = TensorDataset(x, x, x)
            elif form == "flat":
                ds = x.flatten()
            return DataLoader(ds, batch_size=4)

        def train_dataloader(self):
            return self._loader()

        def val_dataloader(self):
            if not self.val:
                return super().val_dataloader()
            return self._loader()
    """
)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """An importable module of test data modules (Hydra builds ``_target_`` from its dotted path)."""
    (tmp_path / "user_datamodules.py").write_text(DATAMODULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "user_datamodules", raising=False)
    return "user_datamodules.FormDataModule"


def _user(target: str, **kwargs) -> DataConfig:
    vocab = kwargs.pop("data_vocab", None)
    return DataConfig(source="datamodule", vocab_size=vocab, datamodule={"_target_": target, **kwargs})


def _x(dm) -> torch.Tensor:  # the test module's windows in loader order
    return dm.x.long()


@pytest.mark.parametrize("form", ["tensor", "list", "pair", "dict"])
def test_accepted_batch_forms_split_to_inputs_and_targets(user_module, form):
    dm = make_datamodule(_user(user_module, form=form, vocab_size=50), seed=0)
    inputs, targets = split_batch(next(iter(dm.train_dataloader())))
    x = _x(dm)[:4]
    assert inputs.dtype == targets.dtype == torch.int64
    assert torch.equal(inputs, x[:, :-1]) and torch.equal(targets, x[:, 1:])  # (4, 8) each


def test_labels_follow_hugging_face_convention_and_minus_100_is_not_scored(user_module):
    dm = make_datamodule(_user(user_module, form="labels", data_vocab=50), seed=0)
    assert dm.vocab_size == 50  # proxy.data.vocab_size when the module has none
    batch = next(iter(dm.train_dataloader()))
    inputs, targets = split_batch(batch)
    x = _x(dm)[:4]
    assert torch.equal(inputs, x[:, :-1])  # labels are unshifted: the split shifts them
    assert (targets[:, :3] == -100).all() and torch.equal(targets[:, 3:], x[:, 4:])
    model = ProxyLM(TINY, max_seq_len=8, lr=1e-3, total_steps=1)
    with torch.no_grad():
        logits = model(inputs).float()  # (4, 8, 50)
        expected = F.cross_entropy(logits[:, 3:].flatten(0, 1), x[:, 4:].flatten())  # only the scored positions
        assert torch.allclose(model._loss(batch), expected)


TINY = Architecture(name="tiny", hidden=16, layers=1, heads=2, kv_heads=1, head_dim=8, ffn=32, vocab=50)


def test_a_tensor_dataset_module_trains(user_module, tmp_path):
    """The most common user data module, a TensorDataset (batches ``[x]``), trains a proxy."""
    import lightning as L

    dm = make_datamodule(_user(user_module, form="list", vocab_size=50), seed=0)
    model = ProxyLM(TINY, max_seq_len=8, lr=1e-3, total_steps=3)
    trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=1, default_root_dir=str(tmp_path))
    trainer.fit(model, datamodule=dm)
    assert trainer.global_step == 3 and model.tokens_seen == 3 * 4 * 8
    assert math.isfinite(float(trainer.callback_metrics["train_loss"]))


# --------------------------------------------------------------------------- bad input: stopped before any trial
def _tokens(path: Path, ids, dtype="uint16") -> str:
    np.asarray(ids, dtype=dtype).tofile(path)
    return str(path)


def _bad_tokens(tmp, **kw) -> DataConfig:
    return DataConfig(source="tokens", seq_len=kw.pop("seq_len", 16), **kw)


BAD = {  # name: (config from (tmp_path, user data module target), problems (each a list of substrings))
    "missing file": (lambda tmp, t: _bad_tokens(tmp, path=str(tmp / "nope.bin")),
                     [["proxy.data.path=", "nope.bin", "no such file"]]),
    "empty file": (lambda tmp, t: _bad_tokens(tmp, path=_tokens(tmp / "e.bin", [])),
                   [["proxy.data.path=", "the file is empty"]]),
    "odd size for uint16": (lambda tmp, t: _bad_tokens(tmp, path=str(_write(tmp / "o.bin", b"\x01" * 2001))),
                            [["proxy.data.path=", "2,001 bytes is not a whole number of 2-byte uint16", "proxy.data.dtype"]]),
    "2-D .npy": (lambda tmp, t: _bad_tokens(tmp, path=_npy(tmp / "m.npy", np.zeros((10, 10), np.int64))),
                 [["proxy.data.path=", "a 2-D int64 array, not a 1-D integer one"]]),
    "float .npy": (lambda tmp, t: _bad_tokens(tmp, path=_npy(tmp / "f.npy", np.zeros(1000, np.float32))),
                   [["proxy.data.path=", "a 1-D float32 array"]]),
    "empty .npy": (lambda tmp, t: _bad_tokens(tmp, path=_npy(tmp / "z.npy", np.zeros(0, np.uint16))),
                   [["proxy.data.path=", "holds no tokens"]]),
    "odd-sized val_path": (lambda tmp, t: _bad_tokens(tmp, path=_tokens(tmp / "t.bin", range(1000)),
                                                     val_path=str(_write(tmp / "v.bin", b"\x01" * 5))),
                           [["proxy.data.val_path=", "5 bytes is not a whole number"]]),
    "train and val too short": (lambda tmp, t: _bad_tokens(tmp, path=_tokens(tmp / "s.bin", range(100)), seq_len=128),
                                [["proxy.data.path=", "training split has 95 tokens", "proxy.data.seq_len + 1 = 129"],
                                 ["proxy.data.path=", "validation split", "has 5 tokens", "proxy.data.val_fraction"]]),
    "val split too short": (lambda tmp, t: _bad_tokens(tmp, path=_tokens(tmp / "s.bin", range(2000)), seq_len=128),
                            [["proxy.data.path=", "proxy.data.val_fraction=0.05) has 100 tokens, fewer than "
                              "proxy.data.seq_len + 1 = 129"]]),
    "val_path too short": (lambda tmp, t: _bad_tokens(tmp, path=_tokens(tmp / "t.bin", range(1000)),
                                                      val_path=_tokens(tmp / "v.bin", range(16))),
                           [["proxy.data.val_path=", "has 16 tokens, fewer than proxy.data.seq_len + 1 = 17"]]),
    "vocab_size below the largest id": (lambda tmp, t: _bad_tokens(tmp, path=_tokens(tmp / "t.bin", range(5000)),
                                                                   vocab_size=1000),
                                        [["proxy.data.vocab_size=1000", "id 4,999", "proxy.data.vocab_size=5000"]]),
    "negative ids": (lambda tmp, t: _bad_tokens(tmp, path=_tokens(tmp / "n.bin", [-3] + [1] * 999, "int32"),
                                                dtype="int32"),
                     [["proxy.data.path=", "negative token id -3"]]),
    "not a data module": (lambda tmp, t: _user("builtins.dict"),
                          [["proxy.data.datamodule._target_ built a dict, not a LightningDataModule"]]),
    "no vocab_size": (lambda tmp, t: _user(t, form="tensor"),
                      [["proxy.data.vocab_size", "has no vocab_size"]]),
    "3-element batches": (lambda tmp, t: _user(t, form="triple", vocab_size=50),
                          [["proxy.data.datamodule", "first train batch is list[Tensor(4, 9) int64, Tensor(4, 9) "
                            "int64, Tensor(4, 9) int64]", "accepted batch forms"],
                           ["proxy.data.datamodule", "first val batch is list["]]),
    "1-D batches": (lambda tmp, t: _user(t, form="flat", vocab_size=50),
                    [["proxy.data.datamodule", "first train batch is Tensor(4,) int64"], ["first val batch"]]),
    "float batches": (lambda tmp, t: _user(t, form="tensor", vocab_size=50, dtype="float32"),
                      [["proxy.data.datamodule", "Tensor(4, 9) float32, not integer token ids"], ["val"]]),
    "ids outside vocab_size": (lambda tmp, t: _user(t, form="dict", data_vocab=10),
                               [["proxy.data.datamodule", "inputs hold token ids in [1, 49], outside the vocabulary "
                                 "[0, 10)", "proxy.data.vocab_size", "at least 50"], ["val"]]),
    "empty dataset": (lambda tmp, t: _user(t, form="tensor", vocab_size=50, rows=0),
                      [["proxy.data.datamodule", "train_dataloader() yields no batch"], ["val_dataloader()"]]),
    "no val_dataloader": (lambda tmp, t: _user(t, form="list", vocab_size=50, val=False),
                          [["proxy.data.datamodule", "has no val_dataloader()"]]),
}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _npy(path: Path, arr: np.ndarray) -> str:
    np.save(path, arr)
    return str(path)


@pytest.mark.parametrize("case", list(BAD))
def test_bad_data_stops_the_job_with_the_key_to_fix(case, tmp_path, user_module):
    make, expected = BAD[case]
    with pytest.raises(ConfigError) as info:
        make_datamodule(make(tmp_path, user_module), seed=0, run_dir=tmp_path)
    problems = info.value.problems
    assert len(problems) == len(expected), problems
    for problem, parts in zip(problems, expected):
        for part in parts:
            assert part in problem, (part, problem)


@pytest.mark.slow
def test_the_job_reports_bad_data_as_a_configuration_error(tmp_path, shared_cache):
    """Through ``python -m search``: exit status 2 and the key, no traceback, no trial."""
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, "-m", "search", "n_trials=1", "proxy.data.source=tokens", f"proxy.data.path={empty}",
         f"hydra.run.dir={tmp_path / 'run'}", "tracking=off", "plots=false"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "proxy.data.path=" in proc.stderr and "the file is empty" in proc.stderr
    assert "Traceback" not in proc.stderr
