"""Reading: :func:`open`, :class:`Checkpoint` and :class:`Tensor`."""

from __future__ import annotations

import builtins
import operator
import os
import threading
from ctypes import POINTER, byref, c_char_p, c_size_t, c_uint32, c_uint64, c_void_p, cast
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import _dtypes
from ._errors import ClosedError, EINVAL, Unsupported, ENOTSUPP
from ._lib import (BAD_CHUNK_FN, Mapping as _CMapping, ReadOptions, ReadRequest, Slice, VarInfo,
                   check, dec, fspath, lib, slice_struct, READ_CACHED, READ_OPTIONS_VERSION)

PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

_MAP_VERIFY = 1
_MAP_WHOLE = c_size_t(-1).value  # DVAR_MAP_WHOLE

# Rows read one at a time (for a step along axis 0) when a row is at least this big.
_ROW_READ_MIN = 64 << 10

# Arrays read into are page-aligned from this size on (the reader's smallest
# read straight from the disk, DIRECT_MIN in format/reader.c).
_PAGE = 4096
_ALIGN_MIN = 1 << 20


def _empty(shape: Tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """np.empty, starting on a page when large. Chunks start on pages in
    the data file, so the reader can then read a cold chunk's middle
    straight from the disk into the array (O_DIRECT); NumPy's own large
    arrays start 16 bytes into a page, which the reader fills through a
    buffer of its own, a copy more."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < _ALIGN_MIN:
        return np.empty(shape, dtype=dtype)
    raw = np.empty(nbytes + _PAGE, dtype=np.uint8)
    at = -raw.ctypes.data % _PAGE
    return raw[at:at + nbytes].view(dtype).reshape(shape)


@dataclass(frozen=True)
class TensorInfo:
    """What a checkpoint's index says of one variable (:meth:`Checkpoint.info`).

    Attributes:
        name: the variable's name in the checkpoint.
        dtype: dvar's name of its type: ``"float32"``, ``"bfloat16"``,
            ``"bool"``, ..., or ``"string"`` for a TensorFlow string tensor.
        numpy_dtype: the NumPy dtype reading it gives (``object`` for
            strings; ``float32`` for bfloat16 unless opened with
            ``raw_bfloat16=True``).
        shape: its full shape.
        slices: the parts it was saved as, each a tuple of ``slice`` objects
            (one per dimension): one slice covering it for a plain variable,
            one per shard for a sharded one.
        attributes: its string attributes (``kind``, ``shards``, ...).
        raw_bytes: bytes of the saved slices, uncompressed.
        stored_bytes: bytes they take on disk.
        num_chunks: chunks they are stored in.
    """

    name: str
    dtype: str
    numpy_dtype: np.dtype
    shape: Tuple[int, ...]
    slices: List[Tuple[slice, ...]] = field(repr=False)
    attributes: Dict[str, str]
    raw_bytes: int
    stored_bytes: int
    num_chunks: int


@dataclass(frozen=True)
class BadChunk:
    """One chunk that failed its checks (:func:`dvar.verify`)."""

    variable: str
    file: str
    offset: int
    chunk: int
    code: int
    message: str


def open(path: PathLike, *, raw_bfloat16: bool = False, threads: int = 0,  # noqa: A001
         cache: bool = False) -> "Checkpoint":
    """Open a checkpoint for reading.

    Args:
        path: a dvar checkpoint directory; a checkpoint root (its latest
            checkpoint, as the ``checkpoint`` pointer file names it); or a
            TensorFlow checkpoint in any form: its prefix
            (``.../model.ckpt-100``), its ``.index`` file, a directory whose
            ``checkpoint`` file names it, a SavedModel directory or its
            ``variables/``.
        raw_bfloat16: read bfloat16 variables as their raw ``uint16`` bits
            instead of widening them to ``float32`` (NumPy has no
            bfloat16).
        threads: read and decompress threads; 0 uses every CPU, and 4
            more threads for reads that go around the page cache.
        cache: keep what is read in the page cache, so that reading it again
            (in this process or another) is a copy from memory. By default
            large reads of data not cached yet go from the disk straight
            into the arrays (O_DIRECT): faster the first time, evicting
            nothing else, but leaving nothing cached for the next read.

    Returns:
        A :class:`Checkpoint`: a read-only mapping of names to lazy
        :class:`Tensor` objects. Use it in a ``with`` block, or ``close()`` it.

    Raises:
        NotFound: nothing is at path, or a root's latest is gone.
        CorruptError: the index fails its checks.
    """
    return Checkpoint(path, raw_bfloat16=raw_bfloat16, threads=threads, cache=cache)


class Checkpoint(Mapping[str, "Tensor"]):
    """An open checkpoint: a read-only mapping of variable names to lazy
    :class:`Tensor` objects, in name order. Nothing is read until a tensor is
    indexed or converted.

    >>> with dvar.open("ckpt") as ck:            # doctest: +SKIP
    ...     emb = ck["emb"][100:350]              # reads rows 100..349 only
    ...     print(ck.info("emb").shape, emb.dtype)

    One read at a time goes to the library (reads from several threads are
    serialised); each read is itself parallel.
    """

    def __init__(self, path: PathLike, *, raw_bfloat16: bool = False, threads: int = 0,
                 cache: bool = False) -> None:
        self._reader: Optional[c_void_p] = None
        self._lock = threading.RLock()
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
            raise TypeError("threads must be an int >= 0, not %r" % (threads,))
        opts = ReadOptions(version=READ_OPTIONS_VERSION, threads=threads,
                           flags=READ_CACHED if cache else 0)
        r = c_void_p()
        check(lib.dvar_reader_open(byref(r), fspath(path), byref(opts)))
        self._reader = r
        self.raw_bfloat16 = bool(raw_bfloat16)
        self.path: str = dec(lib.dvar_reader_path(r))
        """The checkpoint directory opened (a root's latest), or a TensorFlow
        checkpoint's prefix."""
        n = lib.dvar_reader_num_vars(r)
        self._names: List[str] = []
        self._index: Dict[str, int] = {}
        info = VarInfo()
        for i in range(n):
            check(lib.dvar_reader_var(r, i, byref(info)))
            name = dec(info.name)
            self._names.append(name)
            self._index[name] = i

    # -- mapping
    def __getitem__(self, name: str) -> "Tensor":
        if not isinstance(name, str):
            raise TypeError("variable names are str, not %s" % type(name).__name__)
        self._handle()
        i = self._index.get(name)
        if i is None:
            from ._errors import NotFound, ENOTFOUND
            raise NotFound(ENOTFOUND, "variable '%s' not found in %s" % (name, self.path))
        return Tensor(self, i, name)

    def __iter__(self) -> Iterator[str]:
        self._handle()
        return iter(list(self._names))

    def __len__(self) -> int:
        self._handle()
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        self._handle()
        return isinstance(name, str) and name in self._index

    # -- lifetime
    def close(self) -> None:
        """Release the checkpoint. Arrays already read (and arrays from
        :meth:`Tensor.map`) stay valid; any further read raises
        :class:`ClosedError`. Closing twice is harmless."""
        with self._lock:
            r, self._reader = self._reader, None
            if r is not None:
                lib.dvar_reader_free(r)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._reader is None

    def __enter__(self) -> "Checkpoint":
        self._handle()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: lib may be gone
            pass

    def __repr__(self) -> str:
        if self.closed:
            state = "closed"
        else:
            n = len(self._names)
            state = "%d variable%s" % (n, "" if n == 1 else "s")
        return "<dvar.Checkpoint %r (%s)>" % (self.path, state)

    def _handle(self) -> c_void_p:
        r = self._reader
        if r is None:
            raise ClosedError(EINVAL, "checkpoint %s is closed" % getattr(self, "path", "?"))
        return r

    def _find(self, name: str) -> int:
        self[name]  # the checks and the exception
        return self._index[name]

    # -- what the index says
    def info(self, name: str) -> TensorInfo:
        """Describe variable ``name`` from the index (reads no data)."""
        i = self._find(name)
        with self._lock:
            r = self._handle()
            v = VarInfo()
            check(lib.dvar_reader_var(r, i, byref(v)))
            shape = tuple(v.shape.dims[d] for d in range(v.shape.rank))
            slices = []
            s = Slice()
            for j in range(v.num_slices):
                check(lib.dvar_reader_var_slice(r, i, j, byref(s)))
                slices.append(tuple(builtins.slice(s.start[d], s.start[d] + s.length[d])
                                    for d in range(s.rank)))
            attrs = {}
            k_, v_ = c_char_p(), c_char_p()
            for k in range(lib.dvar_reader_var_num_attrs(r, i)):
                check(lib.dvar_reader_var_attr_at(r, i, k, byref(k_), byref(v_)))
                attrs[dec(k_.value)] = dec(v_.value)
            return TensorInfo(name=name, dtype=_dtypes.NAMES.get(v.dtype, str(v.dtype)),
                              numpy_dtype=self._result_dtype(v.dtype), shape=shape,
                              slices=slices, attributes=attrs, raw_bytes=v.raw_bytes,
                              stored_bytes=v.stored_bytes, num_chunks=v.num_chunks)

    def _result_dtype(self, code: int) -> np.dtype:
        if code == _dtypes.STRING:
            return np.dtype(object)
        if code == _dtypes.BFLOAT16 and not self.raw_bfloat16:
            return np.dtype(np.float32)
        try:
            return _dtypes.STORAGE[code]
        except KeyError:
            raise Unsupported(ENOTSUPP, "unknown dtype %d" % code) from None

    def read_many(self, names: Optional[Any] = None) -> Dict[str, np.ndarray]:
        """Several variables read whole, as ``np.asarray(ck[name])`` reads
        each, but with the reads of all of them in flight together: many
        small variables come in about as fast as one large one.

        Args:
            names: the variables (an iterable of names, or one name); None
                reads every variable.

        Returns:
            name -> array, in ``names``' order (the checkpoint's without
            ``names``). String tensors come back as object arrays of bytes.
        """
        wanted = list(self) if names is None else ([names] if isinstance(names, str)
                                                   else list(names))
        tensors = [self[n] for n in dict.fromkeys(wanted)]  # each read once
        out: Dict[str, np.ndarray] = {}
        numeric = [t for t in tensors if t._code != _dtypes.STRING]
        boxes = [_empty(t.shape, _dtypes.STORAGE[t._code]) for t in numeric]
        reqs = (ReadRequest * max(len(numeric), 1))()
        for k, (t, box) in enumerate(zip(numeric, boxes)):
            reqs[k].var, reqs[k].slice = t._i, None
            reqs[k].dst, reqs[k].dst_bytes = box.ctypes.data, box.nbytes
        with self._lock:
            check(lib.dvar_reader_read_many(self._handle(), reqs, len(numeric)))
        got = {t.name: t._finish(box) for t, box in zip(numeric, boxes)}
        for t in tensors:
            out[t.name] = got[t.name] if t.name in got else t.read()
        return out

    def digests(self) -> Dict[str, int]:
        """The CRC-32C of every variable's logical value (string tensors,
        which have none, are left out): equal for a checkpoint, its
        reshards and its exports."""
        out = {}
        for name in self:
            if self.info(name).dtype != "string":
                out[name] = self[name].digest()
        return out

    def verify(self) -> List[BadChunk]:
        """Read every chunk and check every checksum; the chunks that fail
        (an empty list when all are sound)."""
        bad: List[BadChunk] = []

        def on_bad(_ud, p):
            b = p.contents
            bad.append(BadChunk(dec(b.var), dec(b.file), b.offset, b.chunk, b.code,
                                dec(b.message)))

        fn = BAD_CHUNK_FN(on_bad)
        n = c_uint64()
        with self._lock:
            check(lib.dvar_reader_verify(self._handle(), fn, None, byref(n)))
        return bad

    @property
    def bytes_read(self) -> int:
        """Bytes read from the data files so far."""
        with self._lock:
            return lib.dvar_reader_bytes_read(self._handle())


class MappedBuffer:
    """The memory of one :meth:`Tensor.map` mapping: the base of the arrays
    it returns. The mapping is released when the last array using it goes,
    whether or not the checkpoint is still open."""

    def __init__(self, m: _CMapping, shape: Tuple[int, ...], dtype: np.dtype, name: str):
        self._m = m
        self.name = name
        self.address: int = m.data or 0
        """Where the mapped bytes start."""
        self.size: int = m.size
        """Bytes mapped (the variable's)."""
        self.__array_interface__ = {
            "version": 3, "shape": shape, "typestr": dtype.str,
            "data": (self.address, True),  # read-only
        }

    def __del__(self) -> None:
        try:
            lib.dvar_reader_unmap(byref(self._m))
        except Exception:
            pass

    def __repr__(self) -> str:
        return "<dvar.MappedBuffer %r: %d bytes at 0x%x>" % (self.name, self.size, self.address)


class Tensor:
    """One variable of an open :class:`Checkpoint`, read lazily.

    ``np.asarray(t)`` reads it whole; basic indexing (``t[a:b]``, ``t[i]``,
    ``t[..., :k]``, ``t[a:b, c:d]``, negative indices, steps, ``None``) reads
    only the box of elements the index touches (for a step along the first
    axis over large rows, only the rows it selects) and returns a new
    NumPy array (or a NumPy scalar when every axis is indexed by an
    integer), exactly as NumPy's own indexing of the whole array would.
    Advanced indexing (lists, arrays, masks) is refused: read the part you
    need first.

    bfloat16 comes back as float32 (exact), or as raw ``uint16`` when the
    checkpoint was opened with ``raw_bfloat16=True``; TensorFlow string
    tensors as object arrays of ``bytes``.
    """

    def __init__(self, ckpt: Checkpoint, i: int, name: str) -> None:
        self._ck = ckpt
        self._i = i
        self.name: str = name
        """The variable's name."""
        v = VarInfo()
        with ckpt._lock:
            check(lib.dvar_reader_var(ckpt._handle(), i, byref(v)))
        self._code = v.dtype
        self.shape: Tuple[int, ...] = tuple(v.shape.dims[d] for d in range(v.shape.rank))
        """The full shape."""
        self.dtype: np.dtype = ckpt._result_dtype(v.dtype)
        """The NumPy dtype reading gives."""
        self.dvar_dtype: str = _dtypes.NAMES.get(v.dtype, str(v.dtype))
        """dvar's name of the stored type ("bfloat16", "string", ...)."""

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the whole value as read."""
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return "<dvar.Tensor %r %s %s>" % (self.name, self.dvar_dtype, list(self.shape))

    def info(self) -> TensorInfo:
        """:meth:`Checkpoint.info` of this variable."""
        return self._ck.info(self.name)

    # -- reading
    def read(self) -> np.ndarray:
        """The whole value as a new array (``np.asarray(t)`` does the same)."""
        if self._code == _dtypes.STRING:
            return self._read_strings()
        return self._finish(self._read_box(None, self.shape))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.read()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        if self._code == _dtypes.STRING:
            return self._read_strings()[key]
        start, length, post, step0 = _plan(key, self.shape)
        storage = _dtypes.STORAGE[self._code]
        row_elems = 1
        for n in length[1:]:
            row_elems *= n
        if step0 is not None and len(length) and row_elems * storage.itemsize >= _ROW_READ_MIN:
            # A step along axis 0 over big rows: read only the rows selected.
            rows = list(step0)
            box = _empty((len(rows),) + tuple(length[1:]), storage)
            for k, row in enumerate(rows):
                s, n = list(start), list(length)
                s[0], n[0] = row, 1
                self._read_into(box[k:k + 1], s, n)
            post = _drop_axis0_step(post)
        else:
            box = self._read_box(start, length)
        out = box[post]  # () on a 0-d box: a scalar, as NumPy's a[()]
        if isinstance(out, np.ndarray) and any(
                isinstance(p, builtins.slice) and p.step not in (None, 1) for p in post):
            out = out.copy()  # a view of the box would keep all of it alive
        return self._finish(out)

    def _finish(self, a: Any) -> Any:
        if self._code == _dtypes.BFLOAT16 and not self._ck.raw_bfloat16:
            arr = _dtypes.bfloat16_to_float32(np.asarray(a))
            return arr[()] if np.ndim(a) == 0 and not isinstance(a, np.ndarray) else arr
        return a

    def _read_box(self, start, length) -> np.ndarray:
        box = _empty(tuple(length), _dtypes.STORAGE[self._code])
        self._read_into(box, start, length)
        return box

    def _read_into(self, out: np.ndarray, start, length) -> None:
        if out.size == 0:
            # Still check that the checkpoint is open.
            self._ck._handle()
            return
        sl = None if start is None else byref(slice_struct(start, length))
        with self._ck._lock:
            r = self._ck._handle()
            check(lib.dvar_reader_read(r, self._i, sl, out.ctypes.data, out.nbytes))

    def _read_strings(self) -> np.ndarray:
        n = self.size
        with self._ck._lock:
            r = self._ck._handle()
            v = VarInfo()
            check(lib.dvar_reader_var(r, self._i, byref(v)))
            lens = np.zeros(max(n, 1), dtype=np.uint64)
            buf = np.empty(max(v.stored_bytes, 1), dtype=np.uint8)
            total = c_uint64()
            check(lib.dvar_reader_read_strings(r, self._i, cast(lens.ctypes.data, POINTER(c_uint64)),
                                               n, buf.ctypes.data, buf.nbytes, byref(total)))
        out = np.empty(n, dtype=object)
        raw = buf.tobytes()
        at = 0
        for k in range(n):
            ln = int(lens[k])
            out[k] = raw[at:at + ln]
            at += ln
        return out.reshape(self.shape)

    def map(self, verify: bool = False) -> np.ndarray:
        """The variable in place, without a copy: a read-only array over
        the checkpoint's data file (pages are read when touched).

        Only a variable saved as one slice of raw chunks back to back can be
        mapped: what ``dvar.export(..., format="dvar")`` and
        ``dvar.save(..., compress="none")`` write. The array's ``base`` is a
        :class:`MappedBuffer`; the mapping lives as long as any array over
        it, even past :meth:`Checkpoint.close`.

        Args:
            verify: read every byte once and check its checksums first.

        Raises:
            Unsupported: the variable is compressed, sharded, a TensorFlow
                tensor, a string tensor, or bfloat16 in a checkpoint not
                opened with ``raw_bfloat16=True`` (a float32 view of it
                would be a copy).
        """
        if self._code == _dtypes.STRING:
            raise Unsupported(ENOTSUPP, "'%s' is a string tensor: it cannot be mapped" % self.name)
        if self._code == _dtypes.BFLOAT16 and not self._ck.raw_bfloat16:
            raise Unsupported(ENOTSUPP, "'%s' is bfloat16, which NumPy has not: open the "
                              "checkpoint with raw_bfloat16=True to map its uint16 bits"
                              % self.name)
        m = _CMapping()
        with self._ck._lock:
            check(lib.dvar_reader_map(self._ck._handle(), self._i, _MAP_WHOLE,
                                      _MAP_VERIFY if verify else 0, byref(m)))
        storage = _dtypes.STORAGE[self._code]
        if not m.data:
            lib.dvar_reader_unmap(byref(m))
            a = np.empty(self.shape, dtype=storage)
            a.flags.writeable = False
            return a
        buf = MappedBuffer(m, self.shape, storage, self.name)
        a = np.asarray(buf)
        assert a.base is buf
        return a

    def digest(self) -> int:
        """The CRC-32C of the logical value (row-major, little-endian bytes),
        whatever its slices, chunks and compression: equal digests prove a
        reshard or export moved every byte into place. Computed from the
        chunk checksums, without reading data, where it can."""
        crc = c_uint32()
        with self._ck._lock:
            check(lib.dvar_reader_digest(self._ck._handle(), self._i, byref(crc)))
        return crc.value


def _drop_axis0_step(post):
    # After reading the selected rows in order, axis 0 needs no step.
    out = list(post)
    for k, p in enumerate(out):
        if p is None or p is Ellipsis:
            continue
        if isinstance(p, builtins.slice):
            out[k] = builtins.slice(None)
        break
    return tuple(out)


def _plan(key: Any, shape: Tuple[int, ...]):
    """NumPy basic indexing of shape as (start, length) of the box to read,
    the index to apply to the box, and, when axis 0 has a step, the rows it
    selects (else None)."""
    if not isinstance(key, tuple):
        key = (key,)
    real = 0
    ellipsis = False
    for k in key:
        if k is Ellipsis:
            if ellipsis:
                raise IndexError("an index can only have a single ellipsis ('...')")
            ellipsis = True
        elif k is None or isinstance(k, builtins.slice):
            real += k is not None
        elif isinstance(k, (bool, np.bool_)):
            raise IndexError("boolean indices are advanced indexing, which dvar does not "
                             "do: read with np.asarray(t) first")
        else:
            try:
                operator.index(k)
            except TypeError:
                raise IndexError(
                    "only integers, slices (`:`), ellipsis (`...`) and None are valid "
                    "indices of a dvar.Tensor, not %s; read with np.asarray(t) first for "
                    "advanced indexing" % type(k).__name__) from None
            real += 1
    ndim = len(shape)
    if real > ndim:
        raise IndexError("too many indices for tensor: tensor is %d-dimensional, but %d "
                         "were indexed" % (ndim, real))
    full: List[Any] = []
    for k in key:
        if k is Ellipsis:
            # Kept in the box's index too: NumPy gives a 0-d array, not a
            # scalar, when an ellipsis is there.
            full.append(Ellipsis)
            full.extend([builtins.slice(None)] * (ndim - real))
        else:
            full.append(k)
    if not ellipsis:
        full.extend([builtins.slice(None)] * (ndim - real))
    start: List[int] = []
    length: List[int] = []
    post: List[Any] = []
    step0 = None
    d = 0
    for k in full:
        if k is None or k is Ellipsis:
            post.append(k)
            continue
        n = shape[d]
        if isinstance(k, builtins.slice):
            s0, s1, st = k.indices(n)  # ValueError for a zero step, as NumPy
            r = range(s0, s1, st)
            if len(r) == 0:
                start.append(0)
                length.append(0)
                post.append(builtins.slice(None))
            elif st > 0:
                start.append(s0)
                length.append(r[-1] - s0 + 1)
                post.append(builtins.slice(None, None, st))
            else:
                start.append(r[-1])
                length.append(s0 - r[-1] + 1)
                post.append(builtins.slice(None, None, st))
            if d == 0 and st != 1 and len(r) > 1:
                step0 = r
        else:
            i = operator.index(k)
            if i < -n or i >= n:
                raise IndexError("index %d is out of bounds for axis %d with size %d"
                                 % (i, d, n))
            if i < 0:
                i += n
            start.append(i)
            length.append(1)
            post.append(0)
        d += 1
    return start, length, tuple(post), step0
