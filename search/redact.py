"""Secrets stay out of every file, log and console line the job writes: one redaction, :func:`redact`.

A database storage carries its password in the URL
(``storage=postgresql+psycopg://user:PASSWORD@host/db``), and the URL travels far: into
Hydra's ``.hydra/{config,hydra,overrides}.yaml`` (Hydra writes them before the job
starts; :func:`redact_files` rewrites them at once), into W&B's run metadata (W&B
records ``sys.argv``; :func:`redacted_argv` hides it while a run starts), into log
lines (:func:`redact_log_records`), onto the console (:func:`redact_console`: what Hydra
prints itself, ``--cfg job`` included) and into error messages. :func:`redact` hides URL
passwords (as SQLAlchemy's ``render_as_string(hide_password=True)`` does:
``user:***@host``) and the value of any key named like a secret (``password``,
``token``, ``api_key``, ``secret``, ...), in a string, a ``key=value`` override, a
YAML line or a nested dict/list.
"""

from __future__ import annotations

import logging
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from search.files import write_atomic

__all__ = [
    "HIDDEN",
    "redact",
    "redact_files",
    "hydra_files",
    "redact_log_records",
    "redact_console",
    "redacted_argv",
    "is_secret_key",
]

HIDDEN = "***"

# A key naming a secret: its last dotted part is a secret's name, alone or after one word
# (password, db_password, hf_token, wandb_api_key); experts_per_token is not one.
_SECRET_NAME = re.compile(
    r"(?:[a-z0-9]+_)?(?:password|passwd|pwd|token|secret|credentials?|(?:api|access|secret|private)_?key"
    r"|(?:auth|access|refresh)_?token)",
    re.IGNORECASE,
)
# scheme://user:PASSWORD@host -> the password (which cannot hold "@" or whitespace); Hydra escapes the
# colons of a swept override (scheme\://user\:PASSWORD@host)
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*\\?://[^\s:/@\\]*\\?:)(?P<password>[^\s@]+)@")
# key=value (an override) or key: value (a YAML line); the value optionally quoted
_ASSIGNMENT = re.compile(r"""(?P<key>[\w.+~-]+)(?P<sep>=|:[ \t]+)(?P<value>'[^'\n]*'|"[^"\n]*"|[^\s,;&'"\]}]+)""")


def is_secret_key(key: str) -> bool:
    """Whether a config key names a secret (``db_password``, ``tracking.api_key``, ``WANDB_API_KEY``)."""
    return bool(_SECRET_NAME.fullmatch(key.rsplit(".", 1)[-1].replace("-", "_")))


def redact(value: Any) -> Any:
    """``value`` with URL passwords and the values of secret-named keys replaced by ``***``.

    Strings, and dicts, lists and tuples of them (nested), are redacted; other values are
    returned as they are. A string without a secret comes back unchanged.
    """
    if isinstance(value, str):
        text = _URL_PASSWORD.sub(lambda m: f"{m['head']}{HIDDEN}@", value)
        return _ASSIGNMENT.sub(
            lambda m: f"{m['key']}{m['sep']}{HIDDEN}" if is_secret_key(m["key"]) else m[0], text
        )
    if isinstance(value, dict):
        return {k: HIDDEN if is_secret_key(str(k)) and v is not None else redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    return value


def redact_files(paths: Iterable[str | Path]) -> list[Path]:
    """Rewrite each existing text file that holds a secret with it hidden; return those rewritten."""
    rewritten = []
    for path in map(Path, paths):
        if not path.is_file():
            continue
        text = path.read_text()
        hidden = redact(text)
        if hidden != text:
            write_atomic(path, hidden)  # whole: parallel workers of one study share the run dir
            rewritten.append(path)
    return rewritten


def hydra_files(hydra_cfg: Any) -> list[Path]:
    """The files Hydra wrote for this job with its config and overrides in them.

    ``<run dir>/<hydra.output_subdir>/{config,hydra,overrides}.yaml`` (none when
    ``hydra.output_subdir`` is null) and, for ``--multirun``, ``<sweep dir>/multirun.yaml``.
    """
    files = []
    if hydra_cfg.output_subdir is not None:
        sub = Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir
        files += [sub / "config.yaml", sub / "hydra.yaml", sub / "overrides.yaml"]
    if getattr(hydra_cfg.mode, "name", hydra_cfg.mode) == "MULTIRUN":
        files.append(Path(hydra_cfg.sweep.dir) / "multirun.yaml")
    return files


def redact_log_records() -> None:
    """Redact the message of every log record this process creates from now on.

    For ``python -m search``: Hydra's launcher logs each job's overrides (``#0 : storage=...``)
    before the job starts; a record factory is the one hook that sees those lines.
    """
    make_record = logging.getLogRecordFactory()
    if getattr(make_record, "redacts", False):
        return

    def redacting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            record.msg, record.args = redact(record.getMessage()), ()
        except Exception:  # a malformed message: logging reports it when the record is emitted
            pass
        return record

    redacting.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(redacting)


@contextmanager
def redacted_argv() -> Iterator[None]:
    """``sys.argv`` redacted while the block runs (W&B records the command line in each run's metadata)."""
    argv = sys.argv
    sys.argv = redact(list(argv))
    try:
        yield
    finally:
        sys.argv = argv


class _RedactingStream:
    """A text stream that redacts what is written to it, and is otherwise the stream it wraps."""

    redacts = True

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text) if isinstance(text, str) else text)
        return len(text)  # what the caller gave: print() and logging check nothing else

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding, buffer, ...
        return getattr(self._stream, name)


def redact_console() -> None:
    """Redact everything this process writes to ``sys.stdout`` and ``sys.stderr`` from now on.

    For ``python -m search``: Hydra prints some things itself, before or without the job
    (``--cfg job``/``--cfg hydra`` print the composed config, storage URL included);
    a wrapped stream is the one place that sees all of them. A secret split across two
    ``write`` calls is not seen whole; Hydra, Python's ``print`` and logging write each
    line in one call.
    """
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not getattr(stream, "redacts", False):
            setattr(sys, name, _RedactingStream(stream))

