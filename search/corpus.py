"""The built-in proxy corpus: the Python standard library's ``.py`` sources as bytes.

Real text that every machine has without a download. Files are read in sorted order; a
file goes to validation when the SHA-256 of its path relative to the stdlib root falls
in the lowest ``val_fraction`` of the hash range, so the split is deterministic and
independent of the file count. The two splits are cached as ``uint8`` files
(vocabulary 256; :mod:`search.data` serves windows of them).

Parallel workers share the cache: it is built once under a file lock, each file through
a temporary file of its own renamed into place, the metadata (sizes and SHA-256) last;
before every use the files are checked against it, so a damaged cache is rebuilt, not
read. No torch here: a worker checks the corpus before it loads the training stack.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sysconfig
from pathlib import Path
from typing import Callable

from filelock import FileLock

from search.files import atomic_path, sha256_of, write_atomic

__all__ = ["build_stdlib_corpus"]

log = logging.getLogger("search")


def _is_val(rel_path: str, val_fraction: float) -> bool:
    digest = hashlib.sha256(rel_path.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < val_fraction


#: the corpus metadata's format; a cache without it (or with another) is rebuilt
_CORPUS_FORMAT = 2


def build_stdlib_corpus(
    cache_dir: str | Path, *, val_fraction: float = 0.05, say: Callable[[str], None] = log.warning
) -> tuple[Path, Path]:
    """Write (once) and return the train/val byte files of the stdlib corpus.

    Safe for parallel workers sharing ``cache_dir``: the corpus is built once, under an
    inter-process lock (``<tag>.lock``), into temporary files of the builder's own that
    are renamed into place (:mod:`search.files`); the metadata file, with each split's
    size and SHA-256, is written last. A cached corpus is used only when it matches its
    metadata; a damaged one (a truncated file, other bytes, no or unreadable metadata)
    is rebuilt, and ``say`` gets one line saying why.
    """
    cache = Path(cache_dir)
    root = Path(sysconfig.get_paths()["stdlib"])
    tag = f"stdlib-py{sysconfig.get_python_version()}-v{int(val_fraction * 1000)}"
    train_path, val_path, meta_path = (cache / f"{tag}.{s}" for s in ("train.bin", "val.bin", "json"))
    if _corpus_problem(train_path, val_path, meta_path) is None:  # the common case: no lock needed
        return train_path, val_path
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache / f"{tag}.lock")):
        problem = _corpus_problem(train_path, val_path, meta_path)  # another worker may have built it meanwhile
        if problem is None:
            return train_path, val_path
        if problem != _MISSING:
            say(f"corpus cache {cache / tag}.*: {problem}; rebuilding it")
        _write_stdlib_corpus(root, train_path, val_path, meta_path, val_fraction)
    return train_path, val_path


_MISSING = "not built yet"


def _corpus_problem(train_path: Path, val_path: Path, meta_path: Path) -> str | None:
    """Why the cached corpus cannot be used (None: it matches its metadata)."""
    if not meta_path.is_file():
        return _MISSING if not (train_path.exists() or val_path.exists()) else "its metadata file is missing"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return "its metadata file is unreadable"
    if not isinstance(meta, dict) or meta.get("format") != _CORPUS_FORMAT:
        return "its metadata is of an older format (no checksums)"
    for split, path in (("train", train_path), ("val", val_path)):
        if not path.is_file():
            return f"{path.name} is missing"
        size = path.stat().st_size
        if size != meta.get(f"bytes_{split}"):
            return f"{path.name} has {size:,} bytes, its metadata says {meta.get(f'bytes_{split}')!r} (a cut-short write?)"
        if sha256_of(path) != meta.get(f"sha256_{split}"):
            return f"{path.name} does not match its SHA-256 in the metadata"
    return None


def _write_stdlib_corpus(root: Path, train_path: Path, val_path: Path, meta_path: Path, val_fraction: float) -> None:
    """Split the stdlib sources into the two byte files, then write the metadata (last)."""
    files = sorted(
        p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts
    )
    if not files:
        raise RuntimeError(f"no .py files under the stdlib path {root}; use proxy.data.source=tokens instead")
    meta_path.unlink(missing_ok=True)  # no metadata while the splits change: readers wait for the lock
    n_train = n_val = 0
    h_train, h_val = hashlib.sha256(), hashlib.sha256()
    with atomic_path(train_path) as tmp_train, atomic_path(val_path) as tmp_val:
        with open(tmp_train, "wb") as ft, open(tmp_val, "wb") as fv:
            for p in files:
                rel = p.relative_to(root).as_posix()
                try:
                    data = p.read_bytes() + b"\n"
                except OSError:
                    continue
                if _is_val(rel, val_fraction):
                    fv.write(data)
                    h_val.update(data)
                    n_val += 1
                else:
                    ft.write(data)
                    h_train.update(data)
                    n_train += 1
        if n_val == 0 or n_train == 0:
            raise RuntimeError(f"stdlib split left an empty side (train={n_train}, val={n_val}); change val_fraction")
    meta = {
        "format": _CORPUS_FORMAT,
        "root": str(root),
        "files_train": n_train,
        "files_val": n_val,
        "bytes_train": train_path.stat().st_size,  # = tokens: one byte is one token
        "bytes_val": val_path.stat().st_size,
        "sha256_train": h_train.hexdigest(),
        "sha256_val": h_val.hexdigest(),
        "val_fraction": val_fraction,
        "split": "sha256(relative path) < val_fraction * 2**64",
    }
    write_atomic(meta_path, json.dumps(meta, indent=2))
