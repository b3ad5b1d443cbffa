"""A closed pipe is not an error: ``onejob … | head -1`` and ``| grep -q`` exit as the
command would have.

When the reader of stdout goes away (``head`` read its line, ``grep -q`` found its match),
the next write raises ``BrokenPipeError``. Raised out of the command, it would print a
traceback and turn the command's own exit status (``can-i-failover``'s 0 "yes" or 1
"no") into 1, so a script with ``pipefail`` would read "no" for a "yes". Instead, stdout is
wrapped: from the first broken write on, what the command writes goes nowhere, the command
runs to its end and returns its status, and the file descriptor is pointed at
``/dev/null`` so the interpreter's last flush at exit is silent too.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class ClosedPipeTolerant:
    """A text stream that drops what is written once its reader has gone."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.reader_gone = True
        with contextlib.suppress(OSError, ValueError):  # a stream with no descriptor
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def tolerate_closed_stdout() -> Iterator[None]:
    """Run the block with stdout wrapped (``ClosedPipeTolerant``), restored afterwards."""
    original = sys.stdout
    sys.stdout = ClosedPipeTolerant(original)
    try:
        yield
    finally:
        with contextlib.suppress(BrokenPipeError):
            sys.stdout.flush()
        sys.stdout = original
