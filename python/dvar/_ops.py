"""The offline operations: reshard, export, import, verify, digest, diff."""

from __future__ import annotations

import itertools
import os
from ctypes import byref, c_char_p
from dataclasses import dataclass, field
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import numpy as np

from . import _dtypes
from ._checkpoint import BadChunk, Checkpoint
from ._errors import ECANCELED, EINVAL, InvalidArgument
from ._lib import (NOTE_FN, PROGRESS_FN, WRITTEN_FN, Callbacks, ExportOptions, ImportOptions,
                   ImportSource, ReshardOptions, ShardCount, check, dec, enc, fspath, lib,
                   OPTIONS_VERSION)
from ._progress import Progress, ProgressArg

_COMPRESS = {"auto": 0, "none": 1, "lz4": 2}
_FORMATS = {"auto": 0, "dvar": 1, "safetensors": 2, "tf": 3, "npy": 4}
_KEEP_SHARDS, _DROP_OPTIMIZER, _SHORT_NAMES = 1, 2, 4


@dataclass
class OpResult:
    """What :func:`reshard`, :func:`export` and :func:`import_` did.

    Attributes:
        path: the output written.
        written: each variable written (under its name in the output) and
            its raw bytes.
        notes: what the operation left out or changed, for people
            ("string tensor 'x' skipped: safetensors has no strings").
    """

    path: str
    written: Dict[str, int] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)


class _Op:
    """The callbacks of one offline call, kept alive for its duration."""

    def __init__(self, progress: ProgressArg, desc: str, out) -> None:
        self.result = OpResult(os.fsdecode(out))
        self.prog = Progress(progress, desc)
        self._progress = PROGRESS_FN(self.prog.c_progress)
        self._note = NOTE_FN(self._on_note)
        self._written = WRITTEN_FN(self._on_written)

    def _on_note(self, _ud, msg) -> None:
        self.result.notes.append(dec(msg))

    def _on_written(self, _ud, name, nbytes) -> None:
        self.result.written[dec(name)] = int(nbytes)

    def callbacks(self) -> Callbacks:
        cb = Callbacks()
        cb.progress = self._progress
        cb.note = self._note
        cb.written = self._written
        cb.cancel = self.prog.cancel_ptr
        return cb

    def finish(self, rc: int) -> OpResult:
        self.prog.close()
        if rc == ECANCELED:
            self.prog.raise_pending()
        check(rc)
        self.prog.raise_pending()
        return self.result


def _compress(compress: str) -> int:
    if compress not in _COMPRESS:
        raise InvalidArgument(EINVAL, "compress must be one of %s, not %r"
                              % (", ".join(_COMPRESS), compress))
    return _COMPRESS[compress]


def _shard_counts(m: Optional[Mapping[str, int]], what: str):
    m = dict(m or {})
    arr = (ShardCount * max(len(m), 1))()
    names = []
    for k, (name, n) in enumerate(m.items()):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidArgument(EINVAL, "%s['%s'] must be an int >= 1, not %r" % (what, name, n))
        names.append(enc(name, "variable name"))
        arr[k].name = names[-1]
        arr[k].shards = n
    return arr, len(m), names


def reshard(src, dst, shards: Optional[int] = None, *, partitioner: Optional[str] = None,
            vars: Optional[Mapping[str, int]] = None, compress: str = "auto",
            chunk_size: int = 0, threads: int = 0, progress: ProgressArg = None) -> OpResult:
    """Write a new checkpoint with its sharded variables as another number of
    shards (div layout along the first axis), everything else copied as
    saved. Memory stays at a few chunks whatever the sizes.

    Args:
        src: a checkpoint, a root (its latest) or a TensorFlow checkpoint.
        dst: the checkpoint directory to create (must not exist).
        shards: every sharded variable as this many shards.
        partitioner: or as TensorFlow's partitioner would shard it:
            ``"fixed:M"``, ``"min-size:BYTES[:MAX]"``, ``"max-size:BYTES[:MAX]"``.
        vars: names (sharded or not) to shard counts, overriding the above.
        compress, chunk_size, threads: as in :func:`save`.
        progress: as in :func:`save`; Ctrl-C cancels and removes the output.
    """
    if shards is not None and (not isinstance(shards, int) or isinstance(shards, bool)):
        raise TypeError("shards must be an int, not %s" % type(shards).__name__)
    if shards is None and partitioner is None and not vars:
        raise InvalidArgument(EINVAL, "reshard needs shards, partitioner or vars")
    op = _Op(progress, "reshard", fspath(dst))
    sc, nsc, keep = _shard_counts(vars, "vars")
    part = enc(partitioner, "partitioner") if partitioner is not None else None
    opts = ReshardOptions(version=OPTIONS_VERSION, shards=shards or 0, partitioner=part,
                          vars=sc, num_vars=nsc, chunk_size=chunk_size,
                          compress=_compress(compress), threads=threads, cb=op.callbacks())
    with op.prog:
        rc = lib.dvar_reshard(fspath(src), fspath(dst), byref(opts))
    return op.finish(rc)


def export(src, dst, format: str = "auto", *, keep_shards: bool = False,
           drop_optimizer: bool = False, short_names: bool = False,
           drop_prefixes: Sequence[str] = (), chunk_size: int = 0, threads: int = 0,
           progress: ProgressArg = None) -> OpResult:
    """Write every variable as one full tensor in another format, for
    serving or for another tool.

    Args:
        src: a checkpoint, a root (its latest) or a TensorFlow checkpoint.
        dst: the output; it must not exist.
        format: ``"dvar"`` (raw chunks, each variable mappable with
            :meth:`Tensor.map`), ``"safetensors"`` (one file), ``"tf"`` (a
            TensorFlow checkpoint at the prefix dst), ``"npy"`` (a directory
            of .npy files and manifest.json), or ``"auto"`` (safetensors when
            dst ends in ``.safetensors``, dvar otherwise).
        keep_shards: ``"tf"`` only: keep sharded variables as TensorFlow
            partitioned tensors.
        drop_optimizer: leave out optimizer slots (TF1's ``.../Adam``, TF2's
            ``/.OPTIMIZER_SLOT/`` keys).
        short_names: TF2 keys under their short names
            (``x/.ATTRIBUTES/VARIABLE_VALUE`` becomes ``x``).
        drop_prefixes: leave out the variables whose name starts with one
            of these.
        chunk_size, threads, progress: as in :func:`save`.
    """
    if format not in _FORMATS:
        raise InvalidArgument(EINVAL, "format must be one of %s, not %r"
                              % (", ".join(_FORMATS), format))
    if isinstance(drop_prefixes, (str, bytes)):
        drop_prefixes = [drop_prefixes]
    prefixes = [enc(p, "prefix") for p in drop_prefixes]
    arr = (c_char_p * max(len(prefixes), 1))(*prefixes)
    flags = ((_KEEP_SHARDS if keep_shards else 0) | (_DROP_OPTIMIZER if drop_optimizer else 0)
             | (_SHORT_NAMES if short_names else 0))
    op = _Op(progress, "export", fspath(dst))
    opts = ExportOptions(version=OPTIONS_VERSION, format=_FORMATS[format], flags=flags,
                         drop_prefixes=arr, num_drop_prefixes=len(prefixes),
                         chunk_size=chunk_size, threads=threads, cb=op.callbacks())
    with op.prog:
        rc = lib.dvar_export(fspath(src), fspath(dst), byref(opts))
    return op.finish(rc)


SourceArg = Union[str, "os.PathLike[str]", Tuple[Any, Optional[str]]]


def import_(dst, sources: Union[SourceArg, Sequence[SourceArg]], *, step: Optional[int] = None,
            keep_last: int = 0, shards: Optional[Mapping[str, int]] = None,
            compress: str = "auto", chunk_size: int = 0, threads: int = 0,
            progress: ProgressArg = None) -> OpResult:
    """Create a checkpoint from ``.npy`` files, ``.npz`` archives and
    ``.safetensors`` files, streamed in pieces (never loaded whole).
    (``import`` is a Python keyword, hence the underscore.)

    Args:
        dst: the checkpoint directory to create; with ``step``, a root.
        sources: a path, a ``(path, name)`` pair, or a list of them. A
            ``.npy`` file's name defaults to its file name less ``.npy``; an
            ``.npz`` or ``.safetensors`` file's arrays keep their names, or
            become ``name/array`` when a name is given.
        step: write ``dst/ckpt-<step>`` and make it the root's latest.
        keep_last: with ``step``, keep this many checkpoints (0: all).
        shards: array names to div shard counts.
        compress, chunk_size, threads, progress: as in :func:`save`.
    """
    if isinstance(sources, (str, bytes, os.PathLike)) or (
            isinstance(sources, tuple) and len(sources) == 2 and
            (sources[1] is None or isinstance(sources[1], str)) and
            isinstance(sources[0], (str, bytes, os.PathLike))):
        sources = [sources]
    keep = []
    srcs = (ImportSource * max(len(sources), 1))()
    for k, s in enumerate(sources):
        if isinstance(s, tuple):
            path, name = s
        else:
            path, name = s, None
        keep.append(fspath(path))
        srcs[k].path = keep[-1]
        if name is not None:
            keep.append(enc(name, "name"))
            srcs[k].name = keep[-1]
    sc, nsc, keep2 = _shard_counts(shards, "shards")
    op = _Op(progress, "import", fspath(dst))
    opts = ImportOptions(version=OPTIONS_VERSION, step=-1 if step is None else int(step),
                         keep_last=keep_last, shards=sc, num_shards=nsc,
                         chunk_size=chunk_size, compress=_compress(compress), threads=threads,
                         cb=op.callbacks())
    with op.prog:
        rc = lib.dvar_import(fspath(dst), srcs, len(sources), byref(opts))
    return op.finish(rc)


def digest(path, names: Optional[Iterable[str]] = None) -> Dict[str, int]:
    """The CRC-32C of each variable's logical value (all but string tensors
    when names is None): equal for a checkpoint, its reshards and exports."""
    with Checkpoint(path) as ck:
        if names is None:
            return ck.digests()
        if isinstance(names, str):
            names = [names]
        return {n: ck[n].digest() for n in names}


@dataclass
class VerifyReport:
    """What :func:`verify` found. True (``bool(report)``) when all is sound.

    Attributes:
        path: the checkpoint checked.
        bad_chunks: every chunk that failed its checks.
        digest_mismatches: with ``against``: the variables whose digests
            differ, as ``(name, digest, other digest)``.
        missing: with ``against``: the variables only one side has.
    """

    path: str
    bad_chunks: List[BadChunk] = field(default_factory=list)
    digest_mismatches: List[Tuple[str, int, int]] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No bad chunk, no digest mismatch, nothing missing."""
        return not (self.bad_chunks or self.digest_mismatches or self.missing)

    def __bool__(self) -> bool:
        return self.ok


def verify(path, *, against=None) -> VerifyReport:
    """Read every chunk of a checkpoint and check every checksum.

    Args:
        path: a checkpoint, a root or a TensorFlow checkpoint.
        against: another checkpoint whose variables' digests must equal
            these (a reshard or export of it, or its source).

    Returns:
        A :class:`VerifyReport`; it does not raise for bad chunks (only when
        the checkpoint cannot be read at all).
    """
    with Checkpoint(path) as ck:
        rep = VerifyReport(ck.path, ck.verify())
        if against is not None:
            mine = ck.digests()
            with Checkpoint(against) as other:
                theirs = other.digests()
            for name in sorted(set(mine) | set(theirs)):
                if name not in mine or name not in theirs:
                    rep.missing.append(name)
                elif mine[name] != theirs[name]:
                    rep.digest_mismatches.append((name, mine[name], theirs[name]))
        return rep


# ---------------------------------------------------------------- diff

@dataclass
class VariableDiff:
    """How one variable both checkpoints hold compares (:func:`diff`).

    Attributes:
        name: the name it is matched by.
        status: ``"equal"``, ``"values_differ"``, ``"dtype_differs"`` or
            ``"shape_differs"``.
        dtype_a, dtype_b, shape_a, shape_b: both sides' types and shapes.
        num_elements: elements compared (0 unless dtypes and shapes agree).
        num_different: elements that differ.
        max_abs_diff: the largest ``|a - b|`` among elements whose bytes
            differ (inf when infinite; NaNs are ignored; None for strings).
        first_difference: ``(index, a, b)`` of the first differing element
            in row-major order, or None.
        attributes_differ: ``(key, a, b)`` for each attribute that differs
            (None for a side without it); a reshard's or export's layout
            attributes (shards, layout, kind plain vs sharded) are not counted.
    """

    name: str
    status: str
    dtype_a: str
    dtype_b: str
    shape_a: Tuple[int, ...]
    shape_b: Tuple[int, ...]
    num_elements: int = 0
    num_different: int = 0
    max_abs_diff: Optional[float] = 0.0
    first_difference: Optional[Tuple[Tuple[int, ...], Any, Any]] = None
    attributes_differ: List[Tuple[str, Optional[str], Optional[str]]] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        """Same dtype, shape, values and attributes."""
        return self.status == "equal" and not self.attributes_differ


@dataclass
class DiffReport:
    """What :func:`diff` found; ``bool(report)`` is True when identical.

    Attributes:
        only_in_a, only_in_b: names only one side has.
        variables: a :class:`VariableDiff` for every name both have, in
            name order.
        excluded: variables left out (``exclude``, ``skip_tf_bookkeeping``).
    """

    a: str
    b: str
    only_in_a: List[str] = field(default_factory=list)
    only_in_b: List[str] = field(default_factory=list)
    variables: List[VariableDiff] = field(default_factory=list)
    excluded: int = 0

    @property
    def identical(self) -> bool:
        """Nothing differs."""
        return not self.only_in_a and not self.only_in_b and all(
            v.equal for v in self.variables)

    def __bool__(self) -> bool:
        return self.identical

    def differing(self) -> List[VariableDiff]:
        """The variables that differ in any way."""
        return [v for v in self.variables if not v.equal]


# Elements compared per piece (of each side); memory stays at a few times this.
DIFF_PIECE_ELEMENTS = 1 << 20


def _boxes(shape: Tuple[int, ...], max_elems: int) -> Iterator[Tuple[List[int], List[int]]]:
    """shape in row-major boxes of at most max_elems elements (at least one
    element each), as dvar_slice_walk walks it: the axes before `axis` one
    index at a time, `axis` in runs, the axes after it whole."""
    if any(n == 0 for n in shape):
        return
    if not shape:
        yield [], []
        return
    rank = len(shape)
    axis = rank - 1
    inner = 1
    while axis > 0 and inner * shape[axis] <= max_elems:
        inner *= shape[axis]
        axis -= 1
    # inner: elements of one index along axis (the axes after it, whole).
    if inner * shape[axis] <= max_elems:
        yield [0] * rank, list(shape)
        return
    run = max(1, max_elems // inner)
    for outer in itertools.product(*(range(n) for n in shape[:axis])):
        for s in range(0, shape[axis], run):
            n = min(run, shape[axis] - s)
            yield (list(outer) + [s] + [0] * (rank - axis - 1),
                   [1] * axis + [n] + list(shape[axis + 1:]))


def _short(name: str) -> str:
    p = lib.dvar_short_name(enc(name))
    if not p:
        raise MemoryError("dvar_short_name")
    try:
        from ctypes import string_at
        return dec(string_at(p))
    finally:
        lib.dvar_free(p)


def _to_f64(raw: np.ndarray, code: int) -> np.ndarray:
    if code == _dtypes.BFLOAT16:
        return _dtypes.bfloat16_to_float32(raw).astype(np.float64)
    return raw.astype(np.float64)


_LAYOUT_KINDS = (None, "plain", "sharded")


def _attr_diffs(ia: Dict[str, str], ib: Dict[str, str]):
    if not ia or not ib:
        return []  # a side without attributes (TensorFlow's, a plain import) says nothing
    out = []
    for key in sorted(set(ia) | set(ib)):
        x, y = ia.get(key), ib.get(key)
        if x == y:
            continue
        if key in ("shards", "layout") or (key == "kind" and x in _LAYOUT_KINDS
                                          and y in _LAYOUT_KINDS):
            continue
        out.append((key, x, y))
    return out


def diff(a, b, *, atol: Optional[float] = None, rtol: Optional[float] = None,
         bitwise: bool = False, exclude: Sequence[str] = (), skip_tf_bookkeeping: bool = False,
         attrs: bool = True, short_names: bool = False,
         progress: ProgressArg = None) -> DiffReport:
    """Compare two checkpoints variable by variable, as ``dvar diff`` does,
    reading both in bounded pieces (about a million elements at a time).

    Elements are equal as ``numpy.array_equal(a, b, equal_nan=True)`` has it
    (-0.0 equals 0.0, any NaN any NaN; integers exactly). ``bitwise`` wants
    equal bytes instead; ``atol``/``rtol`` accept ``|a - b| <= atol + rtol *
    |b|`` (as doubles, B the reference, as ``numpy.isclose``). String
    tensors compare element by element, byte for byte.

    Args:
        a, b: checkpoints, roots or TensorFlow checkpoints.
        exclude: leave out the variables whose name starts with one of these.
        skip_tf_bookkeeping: leave out what TensorFlow keeps beside the
            variables (``_CHECKPOINTABLE_OBJECT_GRAPH``, ``save_counter``,
            string tensors).
        attrs: compare attributes too.
        short_names: match variables by their TF2 short names.
        progress: as in :func:`save`.
    """
    if bitwise and (atol is not None or rtol is not None):
        raise InvalidArgument(EINVAL, "bitwise cannot go with atol or rtol")
    for what, v in (("atol", atol), ("rtol", rtol)):
        if v is not None and not (isinstance(v, (int, float)) and v >= 0):
            raise InvalidArgument(EINVAL, "%s must be a number >= 0, not %r" % (what, v))
    if isinstance(exclude, str):
        exclude = [exclude]
    tol = atol is not None or rtol is not None
    at, rt = float(atol or 0), float(rtol or 0)
    prog = Progress(progress, "diff")
    with prog, Checkpoint(a, raw_bfloat16=True) as ca, Checkpoint(b, raw_bfloat16=True) as cb:
        rep = DiffReport(ca.path, cb.path)

        def keyed(ck: Checkpoint) -> Dict[str, str]:
            out: Dict[str, str] = {}
            for name in ck:
                key = _short(name) if short_names else name
                info = ck.info(name)
                if any(name.startswith(p) or key.startswith(p) for p in exclude) or (
                        skip_tf_bookkeeping and (
                            name in ("_CHECKPOINTABLE_OBJECT_GRAPH", "save_counter") or
                            name.startswith("save_counter/") or info.dtype == "string")):
                    rep.excluded += 1
                    continue
                if key in out:
                    raise InvalidArgument(EINVAL, "short_names: '%s' is the short name of both "
                                          "'%s' and '%s' in %s" % (key, out[key], name, ck.path))
                out[key] = name
            return out

        ka, kb = keyed(ca), keyed(cb)
        rep.only_in_a = sorted(set(ka) - set(kb))
        rep.only_in_b = sorted(set(kb) - set(ka))
        common = sorted(set(ka) & set(kb))
        total = sum(2 * ca.info(ka[k]).raw_bytes for k in common)
        done = 0
        for key in common:
            ta, tb = ca[ka[key]], cb[kb[key]]
            ia, ib = ta.info(), tb.info()
            vd = VariableDiff(key, "equal", ia.dtype, ib.dtype, ia.shape, ib.shape)
            if attrs:
                vd.attributes_differ = _attr_diffs(ia.attributes, ib.attributes)
            if ia.dtype != ib.dtype:
                vd.status = "dtype_differs"
            elif ia.shape != ib.shape:
                vd.status = "shape_differs"
            elif ia.dtype == "string":
                vd.num_elements = ta.size
                vd.max_abs_diff = None
                xa, xb = ta.read().ravel(), tb.read().ravel()
                for k in range(xa.size):
                    if xa[k] != xb[k]:
                        if vd.first_difference is None:
                            vd.first_difference = (np.unravel_index(k, ia.shape), xa[k], xb[k])
                        vd.num_different += 1
            else:
                vd.num_elements = ta.size
                _compare(ta, tb, vd, bitwise, tol, at, rt)
            if vd.num_different:
                vd.status = "values_differ"
            rep.variables.append(vd)
            done += 2 * ia.raw_bytes
            prog.c_progress(None, done, total)
            prog.raise_pending()
        return rep


def _compare(ta, tb, vd: VariableDiff, bitwise: bool, tol: bool, at: float, rt: float) -> None:
    code = ta._code
    storage = _dtypes.STORAGE[code]
    is_float = storage.kind == "f" or code == _dtypes.BFLOAT16
    bits = np.dtype("u%d" % storage.itemsize)
    base = 0
    max_abs = 0.0
    for start, length in _boxes(ta.shape, DIFF_PIECE_ELEMENTS):
        pa = ta._read_box(start, length).ravel()
        pb = tb._read_box(start, length).ravel()
        neq = pa.view(bits) != pb.view(bits)
        if neq.any():
            pos = np.flatnonzero(neq)
            x, y = _to_f64(pa[pos], code), _to_f64(pb[pos], code)
            with np.errstate(invalid="ignore", over="ignore"):
                d = np.abs(x - y)
            finite = d[~np.isnan(d)]
            if finite.size:
                max_abs = max(max_abs, float(finite.max()))
            both_nan = np.isnan(x) & np.isnan(y)
            if bitwise:
                differ = np.ones(pos.size, dtype=bool)
            elif tol:
                with np.errstate(invalid="ignore", over="ignore"):
                    differ = ~(both_nan | (d <= at + rt * np.abs(y)))
            elif is_float:
                differ = ~(both_nan | (x == y))
            else:
                differ = np.ones(pos.size, dtype=bool)
            nd = int(differ.sum())
            if nd and vd.first_difference is None:
                k = int(pos[np.argmax(differ)])
                va, vb = ta._finish(pa[k:k + 1])[0], tb._finish(pb[k:k + 1])[0]
                if code == _dtypes.BFLOAT16:
                    va = _dtypes.bfloat16_to_float32(pa[k:k + 1])[0]
                    vb = _dtypes.bfloat16_to_float32(pb[k:k + 1])[0]
                vd.first_difference = (tuple(int(i) for i in np.unravel_index(base + k, ta.shape)),
                                       va, vb)
            vd.num_different += nd
        base += pa.size
    vd.max_abs_diff = max_abs
