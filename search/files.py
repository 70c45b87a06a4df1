"""Writing a file that other processes may read or write at the same time: one helper, :func:`atomic_path`.

Several workers on one study share its run directory and rewrite the same results
files. A file written in place can be read half-written, and a fixed temporary name
(``pareto.tmp``) is shared by every writer: one worker's ``os.replace`` then moves
another's half-written or other file into place (``pareto.csv`` holding the JSON meant
for ``pareto.json``), and the loser's ``os.replace`` finds no temporary file and raises.

So every write into a run directory or a shared cache goes through a temporary file of
its own (the process id and a random token in its name) in the target's directory,
then ``os.replace`` onto the target: a rename within one file system is atomic, so a
reader sees the old file or the new one, never a mix; with several writers the last
rename wins and every version is whole.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "write_atomic", "temporary_name", "sha256_of"]


def temporary_name(path: str | Path) -> Path:
    """A name beside ``path`` that no other writer uses: ``.<stem>.<pid>-<token>.tmp<suffix>``.

    Hidden, and ending in the target's suffix, so a writer that infers the format from the
    name (matplotlib's ``savefig``) writes the right one.
    """
    path = Path(path)
    return path.with_name(f".{path.stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp{path.suffix}")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a unique temporary path beside ``path``; move it onto ``path`` when the block succeeds.

    The temporary file is removed when the block raises (or writes nothing), and ``path``
    is left as it was.
    """
    path = Path(path)
    tmp = temporary_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")


def sha256_of(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()
