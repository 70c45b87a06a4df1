"""One cache directory shared by every study on this machine: the corpus and the plot assets.

:func:`cache_dir` is, in this order (the rule Hugging Face and pip users expect):

1. ``$CO_DESIGN_CACHE`` when set;
2. ``$XDG_CACHE_HOME/co-design`` when ``XDG_CACHE_HOME`` is set;
3. ``~/.cache/co-design``.

Inside it: ``corpus/`` (the built-in byte corpus, :mod:`search.corpus`; override with
``proxy.data.cache_dir``) and ``assets/`` (``plotly-<version>.min.js``, one copy that each
study's ``plots/plotly.min.js`` links to). Deleting the directory is always safe: what is
missing is rebuilt on next use.

Files here are shared by parallel workers and studies, so :func:`shared_file` writes one
once, under an inter-process lock, through a temporary file renamed into place
(:mod:`search.files`), and checks it against the expected bytes' size and SHA-256 before
use; :func:`link_file` puts it into a run directory as a hard link (no extra disk), else
a symbolic link, else a copy. No torch here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from search.files import atomic_path, sha256_of, write_atomic

__all__ = ["cache_dir", "shared_file", "link_file"]

#: files already checked against their SHA-256 in this process: path -> (inode, size, mtime, sha256)
_checked: dict[str, tuple[int, int, int, str]] = {}


def cache_dir() -> Path:
    """The shared cache: ``$CO_DESIGN_CACHE``, else ``$XDG_CACHE_HOME/co-design``, else ``~/.cache/co-design``."""
    own = os.environ.get("CO_DESIGN_CACHE")
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "co-design"


def _holds(path: Path, size: int, sha256: str) -> bool:
    """Whether ``path`` is a file of ``size`` bytes with this SHA-256 (hashed once per process per version)."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size != size:
        return False
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    seen = _checked.get(str(path))
    if seen is not None and seen[:3] == key:
        return seen[3] == sha256
    digest = sha256_of(path)
    _checked[str(path)] = (*key, digest)
    return digest == sha256


def shared_file(name: str, data: bytes) -> Path:
    """``<cache>/assets/<name>`` holding exactly ``data``: written once, rewritten when damaged.

    Safe for parallel writers: under a file lock (``<name>.lock``), through a temporary
    file renamed into place.
    """
    from filelock import FileLock

    path = cache_dir() / "assets" / name
    size, sha = len(data), hashlib.sha256(data).hexdigest()
    if _holds(path, size, sha):  # the common case: no lock
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_name(path.name + ".lock"))):
        if not _holds(path, size, sha):  # another process may have written it meanwhile
            write_atomic(path, data)
    return path


def link_file(src: Path, dst: Path) -> str:
    """Make ``dst`` the file ``src``: a hard link, else a symbolic link, else a copy; return which.

    A ``dst`` that already has ``src``'s bytes (the same file, or a copy) is left alone
    (``"kept"``). The new ``dst`` appears whole (a temporary name renamed into place).
    """
    src, dst = Path(src), Path(dst)
    try:
        if dst.is_file() and (os.path.samefile(src, dst) or _same_bytes(src, dst)):
            return "kept"
    except OSError:
        pass
    with atomic_path(dst) as tmp:
        try:
            os.link(src, tmp)
            return "hard link"
        except OSError:  # another file system, or links not allowed
            pass
        try:
            os.symlink(src.resolve(), tmp)
            return "symbolic link"
        except OSError:
            shutil.copyfile(src, tmp)
            return "copy"


def _same_bytes(a: Path, b: Path) -> bool:
    return a.stat().st_size == b.stat().st_size and sha256_of(a) == sha256_of(b)
