"""The shared cache (:mod:`search.cache`): where it is, one corpus for every study, damaged files rebuilt."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

import search.corpus
from search.cache import cache_dir, link_file, shared_file
from search.config import DataConfig
from search.data import make_datamodule


def test_cache_dir_follows_co_design_cache_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("CO_DESIGN_CACHE", str(tmp_path / "own"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "own"
    monkeypatch.delenv("CO_DESIGN_CACHE")
    assert cache_dir() == tmp_path / "xdg" / "co-design"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "co-design"
    monkeypatch.setenv("CO_DESIGN_CACHE", "")  # empty: unset
    assert cache_dir() == tmp_path / "home" / ".cache" / "co-design"


def test_two_studies_share_one_corpus_and_a_damaged_one_is_rebuilt(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("CO_DESIGN_CACHE", str(tmp_path / "cache"))  # a fresh cache: count the builds
    builds: list[Path] = []
    write = search.corpus._write_stdlib_corpus

    def counted(root, train_path, *args):
        builds.append(train_path)
        return write(root, train_path, *args)

    monkeypatch.setattr(search.corpus, "_write_stdlib_corpus", counted)
    data = DataConfig(seq_len=32, batch_size=2, val_batches=1)
    a = make_datamodule(data, seed=0, run_dir=tmp_path / "run-a")
    b = make_datamodule(data, seed=1, run_dir=tmp_path / "run-b")
    train = Path(a.train_tokens.filename)
    assert len(builds) == 1 and builds[0] == train and train.parent == tmp_path / "cache" / "corpus"
    assert Path(b.train_tokens.filename) == train and not (tmp_path / "run-a").exists()
    good, size = np.array(a.train_tokens[:1000]), train.stat().st_size
    del a, b  # release the memory maps before the file changes

    with open(train, "r+b") as f:  # cut short, as by a killed writer
        f.truncate(size // 3)
    with caplog.at_level("WARNING", logger="search"):
        c = make_datamodule(data, seed=0)
    assert len(builds) == 2 and train.stat().st_size == size
    assert f"has {size // 3:,} bytes" in caplog.text and "rebuilding" in caplog.text
    assert np.array_equal(np.array(c.train_tokens[:1000]), good)
    make_datamodule(data, seed=0)  # intact again: used as it is
    assert len(builds) == 2


def test_shared_file_is_written_once_and_rewritten_when_damaged(monkeypatch, tmp_path):
    monkeypatch.setenv("CO_DESIGN_CACHE", str(tmp_path))
    path = shared_file("x.js", b"abc" * 100)
    assert path == tmp_path / "assets" / "x.js" and path.read_bytes() == b"abc" * 100
    inode = path.stat().st_ino
    assert shared_file("x.js", b"abc" * 100).stat().st_ino == inode  # kept
    path.write_bytes(b"abd" * 100)  # same size, other bytes
    os.utime(path, ns=(1, 1))  # and another mtime, as any rewrite has
    assert shared_file("x.js", b"abc" * 100).read_bytes() == b"abc" * 100
    assert sorted(p.name for p in (tmp_path / "assets").iterdir()) == ["x.js", "x.js.lock"]  # no temporary left


def test_link_file_links_then_falls_back_to_a_symlink_then_a_copy(monkeypatch, tmp_path):
    src = tmp_path / "src.js"
    src.write_bytes(b"plotly" * 10)
    assert link_file(src, tmp_path / "a.js") == "hard link" and (tmp_path / "a.js").stat().st_ino == src.stat().st_ino
    assert link_file(src, tmp_path / "a.js") == "kept"

    def refuse(*args, **kwargs):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", refuse)
    assert link_file(src, tmp_path / "b.js") == "symbolic link"
    assert os.readlink(tmp_path / "b.js") == str(src.resolve()) and os.path.samefile(tmp_path / "b.js", src)
    monkeypatch.setattr(os, "symlink", refuse)
    assert link_file(src, tmp_path / "c.js") == "copy"
    assert (tmp_path / "c.js").read_bytes() == src.read_bytes() and not (tmp_path / "c.js").is_symlink()
    assert link_file(src, tmp_path / "c.js") == "kept"  # a whole copy is the right file too
    (tmp_path / "c.js").write_bytes(b"old")  # another version: replaced
    assert link_file(src, tmp_path / "c.js") == "copy" and (tmp_path / "c.js").read_bytes() == src.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.js", "b.js", "c.js", "src.js"]


def test_the_session_cache_is_not_the_users(shared_cache):
    assert os.environ["CO_DESIGN_CACHE"] == str(shared_cache) and cache_dir() == shared_cache
    assert Path.home() / ".cache" not in shared_cache.parents
