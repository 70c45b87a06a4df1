"""SIGTERM ends the job the way Ctrl-C does.

A batch system ends a job at its time limit (or on preemption, or ``scancel``) with SIGTERM,
then SIGKILL after a grace period; ``kill`` and ``timeout`` send SIGTERM too. Python's default
answer to it ends the process at once: no results files, no message, the trial in flight left
RUNNING until the next run fails it. Inside a proxy run it was worse: Lightning turns SIGTERM
into its ``SIGTERMException``, a ``SystemExit`` of status 0, so the job ended silently and
reported success.

:func:`sigterm_interrupts` makes SIGTERM raise :class:`Terminated`, a ``KeyboardInterrupt``,
so every path that handles Ctrl-C handles it: the trial in flight is recorded as interrupted
(its shape queued again), the results files are written, and ``python -m search`` exits with
status 143 (128 + SIGTERM) instead of Ctrl-C's 130. The same command resumes.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Iterator

__all__ = ["Terminated", "sigterm_interrupts", "EXIT_STATUS"]


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: the job ends as on Ctrl-C."""

    def __str__(self) -> str:
        return "SIGTERM"


#: exit status of ``python -m search`` for each way a job is interrupted
EXIT_STATUS = {Terminated: 128 + signal.SIGTERM, KeyboardInterrupt: 130}


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated`; the previous handler is restored after it.

    Only the main thread can set a signal handler: elsewhere (a launcher running the job in a
    thread) the block runs with SIGTERM as it was. Lightning's Trainer adds its own handler for
    the length of a fit and calls the one it found, this one, after its own.
    """
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
