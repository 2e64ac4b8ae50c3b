"""Progress reporting and cancellation for the long calls: a tqdm bar on a
terminal by default, a callable of the caller's, or nothing; and Ctrl-C (or
an exception in the callable) cancels the C operation cleanly."""

from __future__ import annotations

import signal
import sys
import threading
from ctypes import c_int, pointer
from typing import Callable, Optional, Union

from ._errors import ECANCELED
from ._lib import check

ProgressArg = Union[None, bool, Callable[[int, int], None]]


def _tqdm_available() -> bool:
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


def default_progress_enabled() -> bool:
    """Whether progress=None draws a bar: tqdm is installed and stderr is a
    terminal."""
    try:
        tty = sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty and _tqdm_available()


class Progress:
    """One operation's progress callback and cancel flag.

    ``arg`` None: a tqdm bar when :func:`default_progress_enabled`;
    False: nothing; a callable: called as ``fn(done, total)`` in bytes.
    Whatever is chosen, a C callback is always there, so that a pending
    KeyboardInterrupt (or an exception the callable raises) is caught,
    sets the cancel flag, and is raised again once the C call returned.
    """

    def __init__(self, arg: ProgressArg, desc: str) -> None:
        self.bar = None
        self.pending: Optional[BaseException] = None
        self.cancel = c_int(0)
        self.cancel_ptr = pointer(self.cancel)
        if arg is None:
            arg = default_progress_enabled()
        if arg is True:
            if not _tqdm_available():
                raise ImportError("progress=True draws a tqdm bar, and tqdm is not installed")
            import tqdm
            self.bar = tqdm.tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024,
                                 desc=desc, file=sys.stderr, leave=False)
            self.fn: Optional[Callable[[int, int], None]] = self._bar
        elif arg is False:
            self.fn = None
        elif callable(arg):
            self.fn = arg
        else:
            raise TypeError("progress must be None, a bool or a callable (done, total), not %s"
                            % type(arg).__name__)

    def _bar(self, done: int, total: int) -> None:
        if total and self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.bar.n)

    def c_progress(self, _ud, done: int, total: int) -> None:
        """The C callback: never lets an exception out (ctypes would print
        and drop it)."""
        if self.pending is not None:
            return
        try:
            if self.fn is not None:
                self.fn(int(done), int(total))
        except BaseException as e:  # KeyboardInterrupt too: cancel, raise later
            self.pending = e
            self.cancel.value = 1

    def __enter__(self) -> "Progress":
        """While the C call runs: Ctrl-C sets the cancel flag instead of
        raising inside a callback (where ctypes would print and drop the
        KeyboardInterrupt: a callback's first line cannot catch it). Only in
        the main thread, and only over Python's default handler."""
        self._old = None
        if (threading.current_thread() is threading.main_thread() and
                signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._old = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
        self.close()

    def _on_sigint(self, signum, frame) -> None:
        if self.pending is None:
            self.pending = KeyboardInterrupt()
        self.cancel.value = 1

    def raise_pending(self) -> None:
        """Raise what the callback caught, if anything."""
        if self.pending is not None:
            e, self.pending = self.pending, None
            raise e

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def check(self, rc: int) -> None:
        """After a C call returned rc: what cancelled it (Ctrl-C, the
        callable's exception) is raised rather than the cancellation, then
        an error."""
        if rc == ECANCELED:
            self.raise_pending()
        check(rc)

    def finish(self, rc: int) -> None:
        """After the operation's last C call returned rc: the bar closed, as
        :meth:`check`, then anything the callable raised after the last
        piece."""
        self.close()
        self.check(rc)
        self.raise_pending()
