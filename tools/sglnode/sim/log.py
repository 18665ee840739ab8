"""Writes log lines the way SGLang does: "[YYYY-mm-dd HH:MM:SS TP0] message", flushed per line."""

from __future__ import annotations

import sys
import threading
from datetime import datetime
from typing import TextIO

from sglnode.readiness.loglines import format_prefix


class SimLog:
    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream or sys.stderr
        self._lock = threading.Lock()

    def _write(self, text: str) -> None:
        with self._lock:
            self._stream.write(text if text.endswith("\n") else text + "\n")
            self._stream.flush()

    def info(self, message: str, rank_tag: str = "TP0") -> None:
        """One SGLang log record; a multi-line message keeps its continuation lines unprefixed."""
        self._write(format_prefix(datetime.now(), rank_tag) + message)

    def plain(self, message: str) -> None:
        """A line without SGLang's prefix (uvicorn's access/startup lines, the sim banner)."""
        self._write(message)
