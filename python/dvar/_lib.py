"""Loading libdvar and declaring what the package calls in it: the ctypes
mirrors of the public structs (checked against the sizes libdvar reports),
the function prototypes, and the conversion of a C status into an
exception. Nothing here is public API."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_int, c_int32,
                    c_int64, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)
from typing import List, Optional, Tuple

from ._errors import error_for

MAX_RANK = 8

# Where the copy installed with the package lives (cmake --install).
PACKAGE_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "libdvar.so")


class LibraryError(ImportError):
    """libdvar could not be found or loaded, or does not match this package."""


# ------------------------------------------------------------------ structs
# Each mirrors the C struct of the same name in include/dvar/; load() checks
# every one against dvar_abi_sizeof.

class Error_(Structure):
    _fields_ = [("code", c_int), ("message", c_char_p)]


class Shape(Structure):
    _fields_ = [("rank", c_int32), ("dims", c_int64 * MAX_RANK)]


class Slice(Structure):
    _fields_ = [("rank", c_int32), ("start", c_int64 * MAX_RANK),
                ("length", c_int64 * MAX_RANK)]


class ReadRequest(Structure):
    _fields_ = [("var", c_size_t), ("slice", POINTER(Slice)), ("dst", c_void_p),
                ("dst_bytes", c_size_t)]


class WriteRequest(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("full", POINTER(Shape)),
                ("slice", POINTER(Slice)), ("data", c_void_p)]


PROGRESS_FN = CFUNCTYPE(None, c_void_p, c_uint64, c_uint64)
NOTE_FN = CFUNCTYPE(None, c_void_p, c_char_p)
WRITTEN_FN = CFUNCTYPE(None, c_void_p, c_char_p, c_uint64)


class WriteOptions(Structure):
    _fields_ = [("version", c_uint), ("chunk_size", c_uint64), ("compress", c_int),
                ("threads", c_int), ("flags", c_uint32), ("keep_last", c_int),
                ("progress", PROGRESS_FN), ("progress_userdata", c_void_p)]


class ReadOptions(Structure):
    _fields_ = [("version", c_uint), ("threads", c_int), ("progress", PROGRESS_FN),
                ("progress_userdata", c_void_p), ("flags", c_uint)]


class VarInfo(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("shape", Shape),
                ("num_slices", c_size_t), ("raw_bytes", c_uint64),
                ("stored_bytes", c_uint64), ("num_chunks", c_size_t)]


class Mapping(Structure):
    _fields_ = [("data", c_void_p), ("size", c_size_t), ("base_", c_void_p),
                ("length_", c_size_t)]


class BadChunk(Structure):
    _fields_ = [("var", c_char_p), ("file", c_char_p), ("offset", c_uint64),
                ("chunk", c_uint64), ("code", c_int), ("message", c_char_p)]


BAD_CHUNK_FN = CFUNCTYPE(None, c_void_p, POINTER(BadChunk))


class Callbacks(Structure):
    # cancel is a const volatile sig_atomic_t * (int on Linux).
    _fields_ = [("progress", PROGRESS_FN), ("progress_userdata", c_void_p),
                ("note", NOTE_FN), ("note_userdata", c_void_p),
                ("written", WRITTEN_FN), ("written_userdata", c_void_p),
                ("cancel", POINTER(c_int))]


class ShardCount(Structure):
    _fields_ = [("name", c_char_p), ("shards", c_int64)]


class ReshardOptions(Structure):
    _fields_ = [("version", c_uint), ("shards", c_int64), ("partitioner", c_char_p),
                ("vars", POINTER(ShardCount)), ("num_vars", c_size_t),
                ("chunk_size", c_uint64), ("compress", c_int), ("threads", c_int),
                ("cb", Callbacks)]


class ExportOptions(Structure):
    _fields_ = [("version", c_uint), ("format", c_int), ("flags", c_uint32),
                ("drop_prefixes", POINTER(c_char_p)), ("num_drop_prefixes", c_size_t),
                ("chunk_size", c_uint64), ("threads", c_int), ("cb", Callbacks)]


class ImportSource(Structure):
    _fields_ = [("path", c_char_p), ("name", c_char_p)]


class ImportOptions(Structure):
    _fields_ = [("version", c_uint), ("step", c_int64), ("keep_last", c_int),
                ("shards", POINTER(ShardCount)), ("num_shards", c_size_t),
                ("chunk_size", c_uint64), ("compress", c_int), ("threads", c_int),
                ("cb", Callbacks)]


class DiffOptions(Structure):
    _fields_ = [("version", c_uint), ("atol", c_double), ("rtol", c_double), ("flags", c_uint32),
                ("exclude_prefixes", POINTER(c_char_p)), ("num_exclude_prefixes", c_size_t),
                ("piece_bytes", c_uint64), ("threads", c_int), ("cb", Callbacks)]


class VarDiff(Structure):
    _fields_ = [("name", c_char_p), ("status", c_int), ("dtype_a", c_int), ("dtype_b", c_int),
                ("shape_a", Shape), ("shape_b", Shape), ("num_elements", c_uint64),
                ("num_different", c_uint64), ("max_abs_diff", c_double), ("has_first", c_int),
                ("first_index", c_uint64), ("first_a", c_void_p), ("first_a_len", c_size_t),
                ("first_b", c_void_p), ("first_b_len", c_size_t), ("num_attrs", c_size_t)]


MIRRORS = {
    "dvar_error": Error_, "dvar_shape": Shape, "dvar_slice": Slice,
    "dvar_write_options": WriteOptions, "dvar_read_options": ReadOptions,
    "dvar_var_info": VarInfo, "dvar_mapping": Mapping, "dvar_bad_chunk": BadChunk,
    "dvar_callbacks": Callbacks, "dvar_shard_count": ShardCount,
    "dvar_reshard_options": ReshardOptions, "dvar_export_options": ExportOptions,
    "dvar_import_source": ImportSource, "dvar_import_options": ImportOptions,
    "dvar_read_request": ReadRequest, "dvar_diff_options": DiffOptions,
    "dvar_write_request": WriteRequest,
    "dvar_var_diff": VarDiff,
}

# Options versions (DVAR_*_OPTIONS_VERSION) this package fills in.
OPTIONS_VERSION = 1
READ_OPTIONS_VERSION = 2
READ_CACHED = 1  # DVAR_READ_CACHED

# ------------------------------------------------------------ prototypes
_vp = c_void_p
_pvp = POINTER(c_void_p)
PROTOTYPES = {
    "dvar_error_last": (POINTER(Error_), []),
    "dvar_error_clear": (None, []),
    "dvar_free": (None, [_vp]),
    "dvar_strerror": (c_char_p, [c_int]),
    "dvar_version": (c_char_p, []),
    "dvar_abi_sizeof": (c_size_t, [c_char_p]),
    "dvar_dtype_size": (c_size_t, [c_int]),
    "dvar_dtype_name": (c_char_p, [c_int]),
    "dvar_dtype_to_f64": (c_int, [POINTER(c_double), c_int, _vp, c_size_t]),
    "dvar_div_layout": (c_int, [c_int64, c_int64, POINTER(c_int64), POINTER(c_int64)]),
    "dvar_reader_open": (c_int, [_pvp, c_char_p, POINTER(ReadOptions)]),
    "dvar_reader_free": (None, [_vp]),
    "dvar_reader_path": (c_char_p, [_vp]),
    "dvar_reader_num_vars": (c_size_t, [_vp]),
    "dvar_reader_var": (c_int, [_vp, c_size_t, POINTER(VarInfo)]),
    "dvar_reader_find": (c_int, [_vp, c_char_p, POINTER(c_size_t)]),
    "dvar_reader_var_num_attrs": (c_size_t, [_vp, c_size_t]),
    "dvar_reader_var_attr_at": (c_int, [_vp, c_size_t, c_size_t, POINTER(c_char_p),
                                        POINTER(c_char_p)]),
    "dvar_reader_var_slice": (c_int, [_vp, c_size_t, c_size_t, POINTER(Slice)]),
    "dvar_reader_read": (c_int, [_vp, c_size_t, POINTER(Slice), _vp, c_size_t]),
    "dvar_reader_read_many": (c_int, [_vp, POINTER(ReadRequest), c_size_t]),
    "dvar_reader_read_strings": (c_int, [_vp, c_size_t, POINTER(c_uint64), c_uint64, _vp,
                                         c_size_t, POINTER(c_uint64)]),
    "dvar_reader_map": (c_int, [_vp, c_size_t, c_size_t, c_uint32, POINTER(Mapping)]),
    "dvar_reader_unmap": (None, [POINTER(Mapping)]),
    "dvar_reader_bytes_read": (c_uint64, [_vp]),
    "dvar_reader_verify": (c_int, [_vp, BAD_CHUNK_FN, _vp, POINTER(c_uint64)]),
    "dvar_reader_digest": (c_int, [_vp, c_size_t, POINTER(c_uint32)]),
    "dvar_writer_open": (c_int, [_pvp, c_char_p, POINTER(WriteOptions)]),
    "dvar_writer_open_step": (c_int, [_pvp, c_char_p, c_int64, POINTER(WriteOptions)]),
    "dvar_writer_add": (c_int, [_vp, c_char_p, c_int, POINTER(Shape), POINTER(Slice), _vp]),
    "dvar_writer_add_many": (c_int, [_vp, POINTER(WriteRequest), c_size_t]),
    "dvar_writer_begin_slice": (c_int, [_vp, c_char_p, c_int, POINTER(Shape), POINTER(Slice)]),
    "dvar_writer_write": (c_int, [_vp, _vp, c_size_t]),
    "dvar_writer_end_slice": (c_int, [_vp]),
    "dvar_writer_set_attr": (c_int, [_vp, c_char_p, c_char_p, c_char_p]),
    "dvar_writer_commit": (c_int, [_vp]),
    "dvar_writer_free": (None, [_vp]),
    "dvar_writer_set_cancel": (c_int, [_vp, POINTER(c_int)]),
    "dvar_reshard": (c_int, [c_char_p, c_char_p, POINTER(ReshardOptions)]),
    "dvar_export": (c_int, [c_char_p, c_char_p, POINTER(ExportOptions)]),
    "dvar_import": (c_int, [c_char_p, POINTER(ImportSource), c_size_t,
                            POINTER(ImportOptions)]),
    "dvar_diff": (c_int, [_pvp, c_char_p, c_char_p, POINTER(DiffOptions)]),
    "dvar_diff_report_free": (None, [_vp]),
    "dvar_diff_report_path": (c_char_p, [_vp, c_int]),
    "dvar_diff_report_num_excluded": (c_size_t, [_vp]),
    "dvar_diff_report_num_only_in": (c_size_t, [_vp, c_int]),
    "dvar_diff_report_only_in": (c_char_p, [_vp, c_int, c_size_t]),
    "dvar_diff_report_num_vars": (c_size_t, [_vp]),
    "dvar_diff_report_var": (c_int, [_vp, c_size_t, POINTER(VarDiff)]),
    "dvar_diff_report_attr_at": (c_int, [_vp, c_size_t, c_size_t, POINTER(c_char_p),
                                         POINTER(c_char_p), POINTER(c_char_p)]),
}


def _candidates() -> List[Tuple[str, Optional[str]]]:
    """(where, path) in the order they are tried; path None: not there."""
    env = os.environ.get("DVAR_LIBRARY")
    out: List[Tuple[str, Optional[str]]] = []
    out.append(("the DVAR_LIBRARY environment variable", env or None))
    out.append(("the copy installed with the package (%s)" % PACKAGE_LIB,
                PACKAGE_LIB if os.path.exists(PACKAGE_LIB) else None))
    system = ctypes.util.find_library("dvar")
    out.append(("the system's loader (libdvar.so.0 on the library path)", system or "libdvar.so.0"))
    return out


def load():
    """Find, load and check libdvar: DVAR_LIBRARY when set (and nothing else
    then), else the copy installed with the package, else the system's loader."""
    tried = []
    lib = None
    where = path = None
    for where, path in _candidates():
        if path is None:
            tried.append("%s: not set" % where if "DVAR_LIBRARY" in where
                         else "%s: not there" % where)
            continue
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            tried.append("%s: %s" % (where, e))
            if "DVAR_LIBRARY" in where:
                # A library named by hand that fails to load is an error, not
                # a reason to pick another one silently.
                raise LibraryError(
                    "cannot load libdvar from DVAR_LIBRARY=%s: %s%s" % (
                        path, e, _asan_hint(str(e)))) from None
    if lib is None:
        raise LibraryError(
            "libdvar not found. Tried, in order:\n  " + "\n  ".join(tried) +
            "\nBuild it (cmake --build build) and set DVAR_LIBRARY=build/libdvar.so, "
            "or install the package with it (cmake --install build --component python), "
            "or install libdvar where the loader finds it (cmake --install build; ldconfig).")
    for name, (restype, argtypes) in PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryError("libdvar at %s has no %s: it is older than this package"
                               % (path, name)) from None
        fn.restype = restype
        fn.argtypes = argtypes
    for cname, mirror in MIRRORS.items():
        want = lib.dvar_abi_sizeof(cname.encode())
        if want != ctypes.sizeof(mirror):
            raise LibraryError(
                "libdvar at %s lays out %s in %d bytes, this package in %d: the package "
                "and the library do not match (rebuild or reinstall them together)"
                % (path, cname, want, ctypes.sizeof(mirror)))
    return lib, path, where


def _asan_hint(message: str) -> str:
    if "ASan runtime" in message or "libasan" in message:
        return (" (a libdvar built with DVAR_SANITIZE needs the ASan runtime loaded first: "
                "LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0)")
    return ""


lib, path, found_by = load()


def last_error():
    """The exception for the calling thread's last libdvar error."""
    e = lib.dvar_error_last().contents
    msg = e.message.decode("utf-8", "replace") if e.message else ""
    return error_for(e.code, msg)


def check(rc: int) -> None:
    """Raise the exception for a non-zero status from libdvar."""
    if rc != 0:
        err = last_error()
        if err.code != rc:
            # The record describes an older failure: keep the call's own code.
            err = error_for(rc, err.message or lib.dvar_strerror(rc).decode())
        raise err


def enc(s, what: str = "name") -> bytes:
    """A str (or bytes) as the C string libdvar takes; NUL bytes are refused."""
    if isinstance(s, str):
        b = s.encode("utf-8", "surrogateescape")
    elif isinstance(s, (bytes, bytearray)):
        b = bytes(s)
    else:
        raise TypeError("%s must be str, not %s" % (what, type(s).__name__))
    if b"\0" in b:
        from ._errors import InvalidArgument, EINVAL
        raise InvalidArgument(EINVAL, "%s %r contains a NUL byte" % (what, s))
    return b


def dec(b: Optional[bytes]) -> str:
    """A C string from libdvar as str (bytes that are not UTF-8 survive as
    surrogates, so enc(dec(b)) == b)."""
    return b.decode("utf-8", "surrogateescape") if b is not None else ""


def fspath(p) -> bytes:
    """A path (str, bytes or os.PathLike) as bytes."""
    try:
        b = os.fsencode(p)
    except TypeError:
        raise TypeError("path must be str, bytes or os.PathLike, not %s"
                        % type(p).__name__) from None
    if b"\0" in b:
        from ._errors import InvalidArgument, EINVAL
        raise InvalidArgument(EINVAL, "path %r contains a NUL byte" % (p,))
    return b


def shape_struct(shape) -> Shape:
    s = Shape()
    s.rank = len(shape)
    for d, n in enumerate(shape):
        s.dims[d] = n
    return s


def slice_struct(start, length) -> Slice:
    s = Slice()
    s.rank = len(start)
    for d in range(len(start)):
        s.start[d] = start[d]
        s.length[d] = length[d]
    return s
