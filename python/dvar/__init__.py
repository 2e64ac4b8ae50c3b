"""dvar for Python: read any dvar or TensorFlow checkpoint into NumPy (and
PyTorch), write checkpoints, reshard, export, import, verify and compare
them. A thin layer over libdvar (through ctypes): the reads are libdvar's
partial, checksummed, parallel reads, and nothing is loaded that an index
does not touch.

Reading
-------
    import dvar, numpy as np
    with dvar.open("ckpt") as ck:        # a checkpoint, a root (its latest),
        print(list(ck))                  # or a TensorFlow checkpoint
        info = ck.info("emb")            # dtype, shape, slices, attributes, bytes
        emb = ck["emb"]                  # a lazy dvar.Tensor: nothing read yet
        rows = emb[1000:1010]            # reads only those rows (np.ndarray)
        col = emb[..., :4]               # NumPy's basic indexing, steps too
        whole = np.asarray(emb)          # all of it
        view = ck["w"].map()             # zero-copy, read-only (raw, one slice)
        crc = emb.digest()               # CRC-32C of the logical value

Types: every dvar dtype comes back as NumPy's; bfloat16 as float32
(exact), or as raw uint16 bits with ``dvar.open(path, raw_bfloat16=True)``;
TensorFlow string tensors as object arrays of bytes.

Writing
-------
    dvar.save("out", {"w": w, "emb": table}, shards={"emb": 4},
              compress="auto", attributes={"w": {"note": "init"}})

The checkpoint appears atomically, or not at all.

Offline operations
------------------
    dvar.reshard("ckpt", "ckpt-3", shards=3)
    dvar.export("tf_ckpt/model.ckpt-100", "model.safetensors")   # or "dvar", "tf", "npy"
    dvar.import_("imported", ["weights.npz", ("emb.npy", "emb")])
    dvar.verify("ckpt", against="ckpt-3").ok
    dvar.diff("a", "b", rtol=1e-6).identical
    dvar.digest("ckpt")                  # name -> CRC-32C

Each takes ``progress``: None (a tqdm bar when tqdm is installed and stderr
is a terminal), False, or a callable ``(done_bytes, total_bytes)``. Ctrl-C
cancels; a failed or cancelled operation leaves nothing at its output.

PyTorch
-------
``dvar.torch.load(path)`` and ``dvar.torch.save(path, state_dict)`` (import
``dvar.torch``; PyTorch itself is optional).

Errors
------
Every failure raises a :class:`dvar.Error` with ``.code`` (the C status)
and ``.message`` (libdvar's words: what failed, where): :class:`NotFound`
(also a KeyError), :class:`ExistsError`, :class:`InvalidArgument`,
:class:`ShapeError`, :class:`CorruptError`, :class:`IOError` (also an
OSError), :class:`VersionError`, :class:`Unsupported`, :class:`Cancelled`,
:class:`ClosedError`. Wrong Python types raise TypeError, indices out of
range IndexError, as NumPy does.

The library
-----------
libdvar is found through the ``DVAR_LIBRARY`` environment variable when it
is set, else the copy installed with the package (``cmake --install build
--component python``), else the system's loader. ``dvar.library_path`` says
which was loaded; the package checks the library's struct layouts when it
is imported.
"""

from __future__ import annotations

from . import _lib
from ._checkpoint import BadChunk, Checkpoint, MappedBuffer, Tensor, TensorInfo, open  # noqa: F401
from ._errors import (Cancelled, ClosedError, CorruptError, Error, ExistsError,
                      InvalidArgument, IOError, NotFound, ShapeError, Unsupported, VersionError,
                      OK, ERROR, ENOTFOUND, EEXISTS, EINVAL, ENOMEM, EIO, ECORRUPT, EVERSION,
                      ESHAPE, ECOMM, EDEVICE, ENOTSUPP, EMISMATCH, ECANCELED, EBUSY)
from ._ops import (DiffReport, OpResult, VariableDiff, VerifyReport, diff, digest, export,
                   import_, reshard, verify)
from ._progress import default_progress_enabled
from ._write import save

library_path: str = _lib.path
"""The libdvar file this package loaded."""

library_found_by: str = _lib.found_by
"""How it was found: the DVAR_LIBRARY variable, the package's copy, or the system's loader."""

__version__: str = _lib.lib.dvar_version().decode()
"""libdvar's version (the package's is the same)."""

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "float64")
"""The dtypes dvar stores (plus TensorFlow's string tensors, read only)."""

# open and IOError are left out of __all__: a star import must not shadow
# the built-ins of the same names (use dvar.open, dvar.IOError).
__all__ = [
    "Checkpoint", "Tensor", "TensorInfo", "MappedBuffer", "BadChunk",
    "save", "reshard", "export", "import_", "verify", "diff", "digest",
    "OpResult", "VerifyReport", "DiffReport", "VariableDiff",
    "Error", "NotFound", "ExistsError", "InvalidArgument", "ShapeError", "CorruptError",
    "VersionError", "Unsupported", "Cancelled", "ClosedError",
    "default_progress_enabled", "library_path", "library_found_by", "DTYPES",
    "OK", "ERROR", "ENOTFOUND", "EEXISTS", "EINVAL", "ENOMEM", "EIO", "ECORRUPT", "EVERSION",
    "ESHAPE", "ECOMM", "EDEVICE", "ENOTSUPP", "EMISMATCH", "ECANCELED", "EBUSY",
]

# The public classes show (and pickle) as dvar.X, where they are documented.
for _cls in (Checkpoint, Tensor, TensorInfo, MappedBuffer, BadChunk, OpResult, VerifyReport,
             DiffReport, VariableDiff, Error, NotFound, ExistsError, InvalidArgument,
             ShapeError, CorruptError, IOError, VersionError, Unsupported, Cancelled,
             ClosedError):
    _cls.__module__ = __name__
del _cls
