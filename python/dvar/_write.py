"""Writing: :func:`save`."""

from __future__ import annotations

from ctypes import byref, c_int64, c_void_p, pointer
from typing import Any, Iterator, Mapping, Optional

import numpy as np

from . import _dtypes
from ._errors import InvalidArgument, EINVAL
from ._lib import (PROGRESS_FN, MAX_RANK, WriteOptions, WriteRequest, check, enc, fspath, lib,
                   shape_struct, slice_struct, OPTIONS_VERSION)
from ._progress import Progress, ProgressArg

_COMPRESS = {"auto": 0, "none": 1, "lz4": 2}
_NO_FSYNC = 1 << 1

# Non-contiguous (or converted) arrays are copied in pieces of at most this many bytes.
PIECE_BYTES = 8 << 20


def save(path, arrays: Mapping[str, Any], *, shards: Optional[Mapping[str, int]] = None,
         compress: str = "auto", attributes: Optional[Mapping[str, Mapping[str, str]]] = None,
         dtypes: Optional[Mapping[str, str]] = None, step: Optional[int] = None,
         keep_last: int = 0, chunk_size: int = 0, threads: int = 0, fsync: bool = True,
         progress: ProgressArg = None) -> str:
    """Write arrays as a new checkpoint, atomically: nothing appears at path
    unless every array was written (a failure or an exception leaves
    nothing behind).

    Args:
        path: the checkpoint directory to create (it must not exist); with
            ``step``, a checkpoint root that receives ``ckpt-<step>``.
        arrays: names to arrays (anything ``np.asarray`` takes, in any
            memory layout: non-contiguous, Fortran-order or big-endian
            arrays are copied in pieces of at most 8 MiB, never whole).
        shards: names to shard counts: such an array is saved as that many
            shards along its first axis in TensorFlow's "div" layout
            (attributes ``kind=sharded``, ``shards``, ``layout=div``), as
            ``dvar import --shards`` writes; capped by the row count.
        compress: ``"auto"`` (lz4 where it pays and is faster than the
            disk), ``"lz4"`` (wherever it saves 10%) or ``"none"`` (raw,
            mappable with :meth:`Tensor.map`).
        attributes: names to ``{key: value}`` string attributes to record.
        dtypes: names to a stored dtype other than the array's own; only
            ``"bfloat16"``, from float arrays (rounded to nearest even) or
            from ``uint16`` arrays of raw bfloat16 bits.
        step: write ``path/ckpt-<step>`` and make it the root's latest.
        keep_last: with ``step``, keep only this many checkpoints (0: all).
        chunk_size: raw bytes per chunk, a multiple of 4096 (0: 4 MiB).
        threads: writer threads (0: every CPU and 4 more).
        fsync: flush to disk before committing (off for scratch data).
        progress: ``None`` for a tqdm bar on a terminal (when tqdm is
            installed), ``False`` for none, or a callable ``(done, total)``.
            Ctrl-C (or an exception the callable raises) stops the save
            within a chunk of each writer thread and is raised; nothing is
            left at path.

    Returns:
        The directory written.
    """
    if not isinstance(arrays, Mapping):
        raise TypeError("arrays must be a mapping of names to arrays, not %s"
                        % type(arrays).__name__)
    if compress not in _COMPRESS:
        raise InvalidArgument(EINVAL, "compress must be one of %s, not %r"
                              % (", ".join(_COMPRESS), compress))
    shards = dict(shards or {})
    attributes = dict(attributes or {})
    dtypes = dict(dtypes or {})
    for what, m in (("shards", shards), ("attributes", attributes), ("dtypes", dtypes)):
        for name in m:
            if name not in arrays:
                raise InvalidArgument(EINVAL, "%s names '%s', which is not among the arrays"
                                      % (what, name))
    for name, n in shards.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidArgument(EINVAL, "shards['%s'] must be an int >= 1, not %r" % (name, n))
    for name, dt in dtypes.items():
        if dt != "bfloat16":
            raise InvalidArgument(EINVAL, "dtypes['%s'] = %r: only 'bfloat16' may be asked for"
                                  % (name, dt))

    # Check every array before writing anything.
    plan = []
    for name, value in arrays.items():
        cname = enc(name, "variable name")
        a = value if isinstance(value, np.ndarray) else np.asarray(value)
        if a.ndim > MAX_RANK:
            raise InvalidArgument(EINVAL, "'%s' has %d dimensions; dvar stores at most %d"
                                  % (name, a.ndim, MAX_RANK))
        if dtypes.get(name) == "bfloat16":
            if a.dtype.kind == "f":
                code = _dtypes.BFLOAT16
            elif a.dtype.kind == "u" and a.dtype.itemsize == 2:
                code = _dtypes.BFLOAT16
            else:
                raise TypeError("'%s' is saved as bfloat16 from float arrays or uint16 bits, "
                                "not %s" % (name, a.dtype))
        else:
            try:
                code = _dtypes.from_numpy(a.dtype)
            except TypeError as e:
                raise TypeError("'%s': %s" % (name, e)) from None
        plan.append((name, cname, a, code))

    opts = WriteOptions(version=OPTIONS_VERSION, chunk_size=chunk_size,
                        compress=_COMPRESS[compress], threads=threads,
                        flags=0 if fsync else _NO_FSYNC, keep_last=keep_last)
    prog = Progress(progress, "save")
    # Always there: a Ctrl-C during the C calls surfaces in it.
    opts.progress = PROGRESS_FN(prog.c_progress)
    w = c_void_p()
    p = fspath(path)
    try:
        prog.__enter__()
        if step is None:
            check(lib.dvar_writer_open(byref(w), p, byref(opts)))
        else:
            check(lib.dvar_writer_open_step(byref(w), p, int(step), byref(opts)))
        # Ctrl-C stops the writer within a chunk, even inside one large call.
        check(lib.dvar_writer_set_cancel(w, prog.cancel_ptr))
        _write_arrays(w, plan, shards, prog)
        for name, cname, a, code in plan:
            for k, v in attributes.get(name, {}).items():
                check(lib.dvar_writer_set_attr(w, cname, enc(k, "attribute key"),
                                               enc(v, "attribute value")))
        prog.raise_pending()  # an interrupt before the commit leaves nothing
        prog.check(lib.dvar_writer_commit(w))
        prog.raise_pending()
    finally:
        lib.dvar_writer_free(w)
        prog.__exit__(None, None, None)
    if step is None:
        return path if isinstance(path, str) else p.decode(errors="surrogateescape")
    import os
    return os.path.join(os.fsdecode(p), "ckpt-%d" % int(step))


def div_offsets(rows: int, n: int):
    """TensorFlow's div layout of rows over n shards: n + 1 offsets."""
    count = c_int64()
    check(lib.dvar_div_layout(rows, n, None, byref(count)))
    offs = (c_int64 * (count.value + 1))()
    check(lib.dvar_div_layout(rows, n, offs, byref(count)))
    return list(offs)


def _parts(a: np.ndarray, nshards: int):
    """The slices a is saved as: [(sub-array, Slice or None)], its shards'
    rows along axis 0 in the div layout, or a whole."""
    if a.ndim == 0 or nshards <= 1:
        return [(a, None)]
    offs = div_offsets(a.shape[0], nshards)
    out = []
    for k in range(len(offs) - 1):
        start = [0] * a.ndim
        length = list(a.shape)
        start[0], length[0] = offs[k], offs[k + 1] - offs[k]
        out.append((a[offs[k]:offs[k + 1]], slice_struct(start, length)))
    return out


def _write_arrays(w, plan, shards: Mapping[str, int], prog: Progress) -> None:
    """Every array of plan into w: those dvar stores as they lie in memory
    (C-contiguous, its dtype) borrowed, all in one dvar_writer_add_many so
    that their chunks are written together; the rest converted and streamed
    in pieces; then the sharded ones' attributes."""
    batch, keep, streamed, sharded = [], [], [], []
    for name, cname, a, code in plan:
        full = shape_struct(a.shape)
        parts = _parts(a, shards.get(name, 1))
        if len(parts) > 1:
            sharded.append((cname, len(parts)))
        for sub, sl in parts:
            if code != _dtypes.BFLOAT16 and sub.dtype == _dtypes.STORAGE[code] and \
                    sub.flags.c_contiguous:
                keep.append((full, sl))
                batch.append(WriteRequest(cname, code, pointer(full),
                                          pointer(sl) if sl is not None else None,
                                          sub.ctypes.data))
            else:
                streamed.append((cname, code, full, sub, sl))
    if batch:
        requests = (WriteRequest * len(batch))(*batch)
        prog.check(lib.dvar_writer_add_many(w, requests, len(batch)))
        prog.raise_pending()
    for cname, code, full, sub, sl in streamed:
        check(lib.dvar_writer_begin_slice(w, cname, code, byref(full),
                                          byref(sl) if sl is not None else None))
        for piece in _pieces(sub, code):
            prog.check(lib.dvar_writer_write(w, piece.ctypes.data, piece.nbytes))
            prog.raise_pending()
        prog.check(lib.dvar_writer_end_slice(w))
    for cname, n in sharded:
        check(lib.dvar_writer_set_attr(w, cname, b"kind", b"sharded"))
        check(lib.dvar_writer_set_attr(w, cname, b"shards", str(n).encode()))
        check(lib.dvar_writer_set_attr(w, cname, b"layout", b"div"))


def _convert(a: np.ndarray, code: int) -> np.ndarray:
    """A C-contiguous little-endian copy of a as dvar stores code."""
    if code == _dtypes.BFLOAT16:
        if a.dtype.kind == "u":
            return np.ascontiguousarray(a, dtype="<u2")
        return _dtypes.float32_to_bfloat16(np.asarray(a, dtype=np.float32))
    return np.ascontiguousarray(a, dtype=_dtypes.STORAGE[code])


def _pieces(a: np.ndarray, code: int) -> Iterator[np.ndarray]:
    """a in row-major order, as C-contiguous converted pieces of at most
    PIECE_BYTES (or one element's row, whichever is larger)."""
    item = max(a.dtype.itemsize, _dtypes.STORAGE[code].itemsize)
    if a.ndim == 0 or a.size * item <= PIECE_BYTES:
        if a.size:
            yield _convert(a, code)
        return
    row = a[0].size * item
    if row <= PIECE_BYTES:
        step = max(1, PIECE_BYTES // max(row, 1))
        for r in range(0, a.shape[0], step):
            yield _convert(a[r:r + step], code)
    else:
        for r in range(a.shape[0]):
            yield from _pieces(a[r], code)
