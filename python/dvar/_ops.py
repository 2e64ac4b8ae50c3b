"""The offline operations: reshard, export, import, verify, digest, diff."""

from __future__ import annotations

import os
from ctypes import byref, c_char_p, c_void_p, string_at
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _dtypes
from ._checkpoint import BadChunk, Checkpoint
from ._errors import EINVAL, InvalidArgument
from ._lib import (NOTE_FN, PROGRESS_FN, WRITTEN_FN, Callbacks, DiffOptions, ExportOptions,
                   ImportOptions, ImportSource, ReshardOptions, ShardCount, VarDiff, check, dec,
                   enc, fspath, lib, OPTIONS_VERSION)
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
        self.prog.finish(rc)
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


_BITWISE, _SKIP_TF_BOOKKEEPING, _NO_ATTRS, _DIFF_SHORT_NAMES = 1, 2, 4, 8
_STATUS = ("equal", "values_differ", "dtype_differs", "shape_differs")


def diff(a, b, *, atol: Optional[float] = None, rtol: Optional[float] = None,
         bitwise: bool = False, exclude: Sequence[str] = (), skip_tf_bookkeeping: bool = False,
         attrs: bool = True, short_names: bool = False,
         progress: ProgressArg = None) -> DiffReport:
    """Compare two checkpoints variable by variable, as ``dvar diff`` does,
    reading both in bounded pieces (16 MiB of memory at a time).

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
    for what, v in (("atol", atol), ("rtol", rtol)):
        if v is not None and not (isinstance(v, (int, float)) and v >= 0):
            raise InvalidArgument(EINVAL, "%s must be a number >= 0, not %r" % (what, v))
    if isinstance(exclude, str):
        exclude = [exclude]
    prefixes = [enc(p, "prefix") for p in exclude]
    flags = ((_BITWISE if bitwise else 0) | (_SKIP_TF_BOOKKEEPING if skip_tf_bookkeeping else 0)
             | (0 if attrs else _NO_ATTRS) | (_DIFF_SHORT_NAMES if short_names else 0))
    prog = Progress(progress, "diff")
    progress_fn = PROGRESS_FN(prog.c_progress)
    cb = Callbacks(progress=progress_fn, cancel=prog.cancel_ptr)
    opts = DiffOptions(version=OPTIONS_VERSION, atol=-1 if atol is None else float(atol),
                       rtol=-1 if rtol is None else float(rtol), flags=flags,
                       exclude_prefixes=(c_char_p * max(len(prefixes), 1))(*prefixes),
                       num_exclude_prefixes=len(prefixes), cb=cb)
    rep = c_void_p()
    with prog:
        rc = lib.dvar_diff(byref(rep), fspath(a), fspath(b), byref(opts))
    try:
        prog.finish(rc)
        return _report(rep)
    finally:
        lib.dvar_diff_report_free(rep)


def _report(rep: c_void_p) -> DiffReport:
    """The DiffReport of a C report, in name order."""
    out = DiffReport(dec(lib.dvar_diff_report_path(rep, 0)),
                     dec(lib.dvar_diff_report_path(rep, 1)),
                     excluded=lib.dvar_diff_report_num_excluded(rep))
    for side, names in ((0, out.only_in_a), (1, out.only_in_b)):
        names.extend(sorted(dec(lib.dvar_diff_report_only_in(rep, side, k))
                            for k in range(lib.dvar_diff_report_num_only_in(rep, side))))
    c = VarDiff()
    key, x, y = c_char_p(), c_char_p(), c_char_p()
    for i in range(lib.dvar_diff_report_num_vars(rep)):
        check(lib.dvar_diff_report_var(rep, i, byref(c)))
        shape_a = tuple(c.shape_a.dims[d] for d in range(c.shape_a.rank))
        vd = VariableDiff(dec(c.name), _STATUS[c.status],
                          _dtypes.NAMES.get(c.dtype_a, str(c.dtype_a)),
                          _dtypes.NAMES.get(c.dtype_b, str(c.dtype_b)), shape_a,
                          tuple(c.shape_b.dims[d] for d in range(c.shape_b.rank)),
                          c.num_elements, c.num_different, c.max_abs_diff)
        strings = c.dtype_a == _dtypes.STRING
        if strings and vd.status in ("equal", "values_differ"):
            vd.max_abs_diff = None
        if c.has_first:
            index = tuple(int(k) for k in np.unravel_index(c.first_index, shape_a))
            vd.first_difference = (index, _element(c.dtype_a, c.first_a, c.first_a_len),
                                   _element(c.dtype_b, c.first_b, c.first_b_len))
        for k in range(c.num_attrs):
            check(lib.dvar_diff_report_attr_at(rep, i, k, byref(key), byref(x), byref(y)))
            vd.attributes_differ.append((dec(key.value), None if x.value is None else dec(x.value),
                                         None if y.value is None else dec(y.value)))
        out.variables.append(vd)
    out.variables.sort(key=lambda v: v.name)
    return out


def _element(code: int, p: Optional[int], n: int) -> Any:
    """A differing element from its bytes: a string tensor's as bytes, a
    NumPy scalar of its dtype otherwise (bfloat16 as float32)."""
    raw = string_at(p, n) if n else b""
    if code == _dtypes.STRING:
        return raw
    x = np.frombuffer(raw, dtype=_dtypes.STORAGE[code])
    return (_dtypes.bfloat16_to_float32(x) if code == _dtypes.BFLOAT16 else x)[0]
