"""The exceptions dvar raises: one class per kind of failure, all under
:class:`dvar.Error`, each also under the built-in exception a Python
programmer would catch for it (``KeyError`` for a missing variable,
``OSError`` for the operating system, ``ValueError`` for bad values)."""

from __future__ import annotations

import builtins
from typing import Dict, Type

__all__ = [
    "Error", "NotFound", "ExistsError", "InvalidArgument", "ShapeError", "CorruptError",
    "IOError", "VersionError", "Unsupported", "Cancelled", "ClosedError",
    "OK", "ERROR", "ENOTFOUND", "EEXISTS", "EINVAL", "ENOMEM", "EIO", "ECORRUPT",
    "EVERSION", "ESHAPE", "ECOMM", "EDEVICE", "ENOTSUPP", "EMISMATCH", "ECANCELED", "EBUSY",
]

# The C status codes (dvar/common.h, dvar_code).
OK = 0
ERROR = -1
ENOTFOUND = -2
EEXISTS = -3
EINVAL = -4
ENOMEM = -5
EIO = -6
ECORRUPT = -7
EVERSION = -8
ESHAPE = -9
ECOMM = -10
EDEVICE = -11
ENOTSUPP = -12
EMISMATCH = -13
ECANCELED = -14
EBUSY = -15


class Error(Exception):
    """A failure reported by libdvar, or bad input caught before it got there.

    Attributes:
        code: the C status code (``dvar.ENOTFOUND``, ``dvar.ECORRUPT``, ...;
            ``dvar.EINVAL`` for bad input caught in Python).
        message: what failed and where, as libdvar's ``dvar_error_last()``
            says it (a file, a variable, a slice).
    """

    def __init__(self, code: int = ERROR, message: str = "") -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return "%s(%d, %r)" % (type(self).__name__, self.code, self.message)

    def __reduce__(self):  # pickles as (class, (code, message))
        return (type(self), (self.code, self.message))


class NotFound(Error, KeyError):
    """A file, checkpoint or variable does not exist (``DVAR_ENOTFOUND``).
    Also a ``KeyError``, so ``name in ckpt`` and ``ckpt.get(name)`` work."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class ExistsError(Error, builtins.FileExistsError):
    """The output exists already (``DVAR_EEXISTS``): nothing is replaced."""


class InvalidArgument(Error, ValueError):
    """A bad argument: a name, dtype, option or slice (``DVAR_EINVAL``)."""


class ShapeError(Error, ValueError):
    """Shapes or slices do not fit together (``DVAR_ESHAPE``)."""


class CorruptError(Error):
    """Data on disk failed a check: a checksum, a size, an encoding
    (``DVAR_ECORRUPT``)."""


class VersionError(Error):
    """Written by a newer, incompatible format version (``DVAR_EVERSION``)."""


class IOError(Error, builtins.OSError):  # noqa: A001 - dvar.IOError, an OSError
    """The operating system refused an I/O call (``DVAR_EIO``). Also an
    ``OSError``; ``errno`` holds the dvar code, not a C errno."""

    def __str__(self) -> str:  # OSError would print "[Errno -6] ..."
        return self.message


class Unsupported(Error):
    """What dvar cannot do with this input (``DVAR_ENOTSUPP``): mapping a
    compressed variable, a dtype a format has not, ..."""


class Cancelled(Error):
    """The operation was cancelled (``DVAR_ECANCELED``); its output was
    removed."""


class ClosedError(Error, ValueError):
    """The checkpoint was closed: open it again to read."""


_BY_CODE: Dict[int, Type[Error]] = {
    ENOTFOUND: NotFound,
    EEXISTS: ExistsError,
    EINVAL: InvalidArgument,
    ESHAPE: ShapeError,
    ECORRUPT: CorruptError,
    EVERSION: VersionError,
    EIO: IOError,
    ENOTSUPP: Unsupported,
    ECANCELED: Cancelled,
}


def error_for(code: int, message: str) -> Error:
    """The exception for a C status code and its message."""
    if code == ENOMEM:
        # MemoryError is what Python code expects for this one.
        return _MemoryError(code, message)
    return _BY_CODE.get(code, Error)(code, message)


class _MemoryError(Error, MemoryError):
    """Out of memory in libdvar (``DVAR_ENOMEM``)."""
