"""Ctrl-C and SIGTERM as one exception, so every command ends its children and keeps its results.

`raise_on_signals()` turns SIGINT and SIGTERM into `Interrupted` in the main thread (a
BaseException, like KeyboardInterrupt, so `except Exception` never swallows it). Only the first
signal raises: a second Ctrl-C while the command cleans up (terminating child processes, writing a
partial report) is ignored, so the cleanup finishes. Exit codes are the shell's: 128 + signal
number, 130 for SIGINT and 143 for SIGTERM.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TextIO

from sglnode.exitcodes import EXIT_INTERNAL

HANDLED_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
EXIT_SIGINT = 128 + signal.SIGINT  # 130, sglnode.exitcodes.EXIT_SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143


class Interrupted(BaseException):  # named like KeyboardInterrupt, its sibling
    """SIGINT or SIGTERM arrived."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_exit_code(name: str) -> int:
    return 128 + signal.Signals[name].value


@contextmanager
def raise_on_signals() -> Iterator[None]:
    """Within the block, SIGINT/SIGTERM raise Interrupted (once); the previous handlers come back after.

    Off the main thread (a test driving a command from a thread) signals cannot be handled there,
    so the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired: list[int] = []

    def handler(signum: int, _frame: FrameType | None) -> None:
        if fired:
            return  # cleanup in progress: let it finish
        fired.append(signum)
        raise Interrupted(signum)

    previous = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS}
    for sig in HANDLED_SIGNALS:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def guarded(command: str, stderr: TextIO, body: Callable[[], int]) -> int:
    """Run a command's body so that no traceback reaches the user.

    A signal outside a `raise_on_signals` block (Ctrl-C while arguments are checked) exits 130/143
    with one line; an unexpected exception is a bug in sglnode: one line naming it, exit 70.
    """
    try:
        return body()
    except Interrupted as signal_:
        stderr.write(f"sglnode {command}: interrupted by {signal_.name}\n")
        return signal_.exit_code
    except KeyboardInterrupt:
        stderr.write(f"sglnode {command}: interrupted by SIGINT\n")
        return EXIT_SIGINT
    except Exception as error:
        stderr.write(
            f"sglnode {command}: internal error: {type(error).__name__}: {error}"[:2000]
            + "\n(a bug in sglnode: please report it with the command line)\n"
        )
        return EXIT_INTERNAL
