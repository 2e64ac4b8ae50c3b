#!/usr/bin/python3
"""tests/cli/test_cli.py - runs the built `dvar` command on real checkpoints
(imported from numpy arrays, or written through libdvar with ctypes or
tests/cli/cli_helper.c where the CLI cannot make them: bfloat16, variables
saved as several slices, attributes) and checks exit codes, values and
messages.

    test_cli.py --dvar build/cli/dvar --helper build/tests/cli/dvar_cli_helper
                [--lib build/libdvar.so | --sanitized] [--group NAME] [unittest args]
"""
import argparse
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from ptyrun import run_with_tty_stderr  # noqa: E402

DVAR = None  # the command under test
LIB = None   # libdvar.so, for checkpoints the CLI cannot write
HELPER = None  # tests/cli/cli_helper.c: writing any checkpoint, dvar_reader_map
SANITIZED = False  # built with ASan: memory bounds do not apply

# numpy dtype -> dvar dtype name, for every type a .npy file can carry to dvar
DTYPES = {
    np.bool_: "bool", np.int8: "int8", np.int16: "int16", np.int32: "int32",
    np.int64: "int64", np.uint8: "uint8", np.uint16: "uint16", np.uint32: "uint32",
    np.uint64: "uint64", np.float16: "float16", np.float32: "float32",
    np.float64: "float64",
}

SHAPES = [(), (5,), (3, 4), (2, 3, 4), (2, 1, 3, 2), (1, 2, 1, 2, 3), (2, 1, 2, 1, 2, 2),
          (1, 2, 1, 2, 1, 2, 2), (2, 1, 1, 2, 1, 2, 1, 2), (0,), (3, 0), (2, 0, 4)]


def random_array(dtype, shape, rng):
    if dtype is np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(size=shape) * 100).astype(dtype)


class CliCase(unittest.TestCase):
    """Each test runs in a fresh temporary directory."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="dvar-cli-")
        # A cleanup, not tearDown: it runs even when a setUp skips or fails.
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.rng = np.random.default_rng(zlib.crc32(self.id().encode()))

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def dvar(self, *args, code=0, env=None):
        """Run dvar; check its exit code; return (stdout, stderr) as text."""
        p = subprocess.run([DVAR] + [str(a) for a in args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=dict(os.environ, LC_ALL="C", **(env or {})))
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        self.assertEqual(p.returncode, code,
                         "dvar %s exited %d, expected %d\nstdout: %s\nstderr: %s"
                         % (" ".join(map(str, args)), p.returncode, code, out[-2000:], err[-2000:]))
        return out, err

    def save_npy(self, arr, name=None):
        name = name or "a%d.npy" % len(os.listdir(self.dir))
        path = self.path(name)
        np.save(path, arr)
        return path

    def import_arrays(self, out, arrays, *opts, code=0):
        pairs = ["%s=%s" % (name, self.save_npy(arr)) for name, arr in arrays.items()]
        return self.dvar("import", out, *pairs, *opts, code=code)

    def cat_npy(self, ckpt, name, *opts, env=None):
        dst = self.path("out-%d.npy" % len(os.listdir(self.dir)))
        self.dvar("cat", ckpt, name, "--npy", dst, *opts, env=env)
        return np.load(dst)

    def export_npy(self, ckpt):
        """Every variable of ckpt as NumPy reads it from one `dvar export --format npy`
        (one process where a `cat --npy` per variable would be dozens)."""
        dst = self.path("npy-%d" % len(os.listdir(self.dir)))
        self.dvar("export", ckpt, dst, "--format", "npy")
        with open(os.path.join(dst, "manifest.json")) as f:
            manifest = json.load(f)
        got = {name: np.load(os.path.join(dst, entry["file"]))
               for name, entry in manifest["variables"].items()}
        shutil.rmtree(dst)
        return got

    def assert_same_array(self, got, want):
        self.assertEqual(got.dtype, want.dtype)
        self.assertEqual(got.shape, want.shape)
        self.assertEqual(got.tobytes(), want.tobytes())

    def inspect_json(self, ckpt):
        out, err = self.dvar("inspect", ckpt, "--json")
        self.assertEqual(err, "")
        doc = json.loads(out)
        self.assertEqual(doc["schema_version"], 1)
        return doc

    def data_files(self, ckpt):
        files = sorted(glob.glob(os.path.join(ckpt, "data-*")))
        self.assertTrue(files, "no data file in %s" % ckpt)
        return files


# ---------------------------------------------------------------- libdvar


class Shape(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int32), ("dims", ctypes.c_int64 * 8)]


class Slice(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int32), ("start", ctypes.c_int64 * 8),
                ("length", ctypes.c_int64 * 8)]


class WriteOptions(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("chunk_size", ctypes.c_uint64),
                ("compress", ctypes.c_int), ("threads", ctypes.c_int),
                ("flags", ctypes.c_uint32), ("keep_last", ctypes.c_int),
                ("progress", ctypes.c_void_p), ("progress_userdata", ctypes.c_void_p)]


DVAR_BFLOAT16 = 14
DVAR_FLOAT32 = 1


def lib_write(path, variables):
    """Write a checkpoint through libdvar: variables is a list of
    (name, dtype code, full shape, (start, length) or None, raw bytes)."""
    lib = ctypes.CDLL(LIB)
    w = ctypes.c_void_p()
    opts = WriteOptions(version=1, flags=2)  # DVAR_WRITE_NO_FSYNC

    def check(rc):
        if rc != 0:
            raise RuntimeError("libdvar call failed: %d" % rc)

    check(lib.dvar_writer_open(ctypes.byref(w), path.encode(), ctypes.byref(opts)))
    for name, dtype, full, part, data in variables:
        shape = Shape(len(full), (ctypes.c_int64 * 8)(*full))
        sl = None
        if part is not None:
            sl = ctypes.byref(Slice(len(full), (ctypes.c_int64 * 8)(*part[0]),
                                    (ctypes.c_int64 * 8)(*part[1])))
        check(lib.dvar_writer_add(w, name.encode(), dtype, ctypes.byref(shape), sl, data))
    check(lib.dvar_writer_commit(w))
    lib.dvar_writer_free(w)


def lib_write_parts(path, token, parts):
    """Write a checkpoint through libdvar as several parts (one writer each, in
    this process), committed by part 0: parts is a list, per part, of
    (name, dtype code, full shape, (start, length) or None, raw bytes, attrs)."""
    lib = ctypes.CDLL(LIB)
    libc = ctypes.CDLL(None)
    opts = WriteOptions(version=1, flags=2)  # DVAR_WRITE_NO_FSYNC

    def check(rc):
        if rc != 0:
            raise RuntimeError("libdvar call failed: %d" % rc)

    writers, blobs, lens = [], [], []
    for p, variables in enumerate(parts):
        w = ctypes.c_void_p()
        check(lib.dvar_writer_open_part(ctypes.byref(w), path.encode(), token.encode(), p,
                                        len(parts), ctypes.byref(opts)))
        for name, dtype, full, part, data, attrs in variables:
            shape = Shape(len(full), (ctypes.c_int64 * 8)(*full))
            sl = None
            if part is not None:
                sl = ctypes.byref(Slice(len(full), (ctypes.c_int64 * 8)(*part[0]),
                                        (ctypes.c_int64 * 8)(*part[1])))
            check(lib.dvar_writer_add(w, name.encode(), dtype, ctypes.byref(shape), sl, data))
            for key, value in attrs.items():
                check(lib.dvar_writer_set_attr(w, name.encode(), key.encode(), value.encode()))
        blob, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(lib.dvar_writer_finish_part(w, ctypes.byref(blob), ctypes.byref(size)))
        writers.append(w)
        blobs.append(blob.value)
        lens.append(size.value)
    n = len(parts)
    check(lib.dvar_writer_commit_parts(writers[0], (ctypes.c_void_p * n)(*blobs),
                                       (ctypes.c_size_t * n)(*lens), n))
    for w in writers:
        lib.dvar_writer_free(w)
    for b in blobs:
        libc.free(ctypes.c_void_p(b))


def to_bfloat16(a):
    """bfloat16 bits of float32 values that bfloat16 holds exactly."""
    bits = np.asarray(a, dtype=np.float32).view(np.uint32)
    assert not (bits & 0xffff).any()
    return (bits >> 16).astype(np.uint16)


def div_offsets(rows, m):
    """TensorFlow's div rule: min(m, rows) shards, the first rows % n one row longer."""
    if rows == 0:
        return [0, 0]
    n = min(m, rows)
    base, extra = divmod(rows, n)
    offsets = [0]
    for i in range(n):
        offsets.append(offsets[-1] + base + (1 if i < extra else 0))
    return offsets


def shard_attrs(n):
    return {"kind": "sharded", "shards": str(n), "layout": "div"} if n > 1 else {}


def escape_name(name):
    """A variable name for cli_helper's spec file: %XX for anything but [A-Za-z0-9/_.-]."""
    raw = name.encode("utf-8", "surrogateescape") if isinstance(name, str) else name
    return "".join(chr(b) if chr(b).isalnum() and b < 128 or chr(b) in "/_.-" else "%%%02X" % b
                   for b in raw)


def bf16_bits(rng, shape):
    """Random bfloat16 values (no NaN) as their uint16 bits."""
    f = (rng.standard_normal(size=shape) * 100).astype(np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def bf16_as_f32(bits):
    """What `dvar cat --npy` writes for bfloat16: the float32 each value is."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


class HelperMixin:
    """Checkpoints written and mapped through tests/cli/cli_helper.c."""

    def helper(self, *args, code=0):
        p = subprocess.run([HELPER] + [str(a) for a in args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        out = p.stdout.decode("utf-8", "replace")
        err = p.stderr.decode("utf-8", "replace")
        self.assertEqual(p.returncode, code, "cli_helper %s: %s%s" % (" ".join(map(str, args)),
                                                                      out, err))
        return out, err

    def helper_write(self, out, variables, *opts):
        """variables: (name, dtype name, shape, [(slice text or "all", array)], attrs)."""
        lines = []
        for name, dtype, shape, slices, attrs in variables:
            lines.append("var %s %s %s" % (escape_name(name), dtype,
                                           ",".join(map(str, shape)) if shape else "-"))
            for spec, arr in slices:
                path = self.path("raw-%d.bin" % len(os.listdir(self.dir)))
                with open(path, "wb") as f:
                    f.write(np.ascontiguousarray(arr).tobytes())
                lines.append("slice %s %s" % (spec, path))
            for key, value in attrs.items():
                lines.append("attr %s %s" % (key, value))
        spec = self.path("spec-%d.txt" % len(os.listdir(self.dir)))
        with open(spec, "w") as f:
            f.write("\n".join(lines) + "\n")
        self.helper("write", out, spec, *opts)

    def helper_map(self, ckpt, name, *opts, code=0):
        dst = self.path("map-%d.bin" % len(os.listdir(self.dir)))
        out, err = self.helper("map", ckpt, name, dst, *opts, code=code)
        if code:
            return err
        with open(dst, "rb") as f:
            data = f.read()
        m = re.match(r"^size (\d+) aligned (\d)\n$", out)
        self.assertTrue(m, out)
        self.assertEqual(int(m.group(1)), len(data))
        return data, m.group(2) == "1"

    def layout(self, ckpt):
        """{name: (dtype, shape, [(start, length)...] in saved order, attributes)}."""
        return {v["name"]: (v["dtype"], tuple(v["shape"]),
                            [(tuple(s["start"]), tuple(s["length"])) for s in v["slices"]],
                            v["attributes"])
                for v in self.inspect_json(ckpt)["variables"]}

    def assert_div_layout(self, info, n_want, shape):
        """Slices are the div layout of n_want shards over shape (capped), attrs to match."""
        offsets = div_offsets(shape[0], n_want) if shape else [0, 1]
        n = len(offsets) - 1
        if shape:
            want = [((offsets[k],) + (0,) * (len(shape) - 1),
                     (offsets[k + 1] - offsets[k],) + tuple(shape[1:])) for k in range(n)]
        else:
            want = [((), ())]
        self.assertEqual(info[2], want)
        return n

    def no_leftovers(self, parent, name):
        """Nothing named name, and no hidden temporary sibling of it, in parent."""
        left = [f for f in os.listdir(parent) if f == name or f.startswith("." + name + ".")
                or f.startswith(name + ".tmp")]
        self.assertEqual(left, [], "left behind in %s" % parent)

    def errors_source(self):
        """A checkpoint holding a 4 x 3 float32 "a" in two shards, and an OUT beside it."""
        a = np.arange(12, dtype=np.float32).reshape(4, 3)
        src = self.path("src")
        self.import_arrays(src, {"a": a}, "--shards", "a=2")
        return src, self.path("out")

    def assert_usage_errors(self, cmd, args, out, usage):
        """`dvar cmd args... opts...` for each (opts, message) of usage: exit 2 with just
        that message and the hint, and nothing left at out."""
        for opts, message in usage:
            with self.subTest(opts=opts):
                _, err = self.dvar(cmd, *args, *opts, code=2)
                self.assertEqual(err, "dvar %s: %s\nSee 'dvar help %s'.\n" % (cmd, message, cmd))
                self.no_leftovers(os.path.dirname(out), os.path.basename(out))


# ----------------------------------------------------------------- import


class ImportTest(CliCase, HelperMixin):
    group = "import"

    def test_every_dtype_and_rank_round_trips(self):
        for compress in ([], ["--compress", "lz4"], ["--no-compress"]):
            arrays = {}
            for dtype in DTYPES:
                for shape in SHAPES:
                    name = "%s/r%d/%s" % (DTYPES[dtype], len(shape), "x".join(map(str, shape)))
                    arrays[name] = random_array(dtype, shape, self.rng)
            ckpt = self.path("ckpt" + "".join(compress))
            self.import_arrays(ckpt, arrays, *compress)
            doc = self.inspect_json(ckpt)
            by_name = {v["name"]: v for v in doc["variables"]}
            self.assertEqual(sorted(by_name), sorted(arrays))
            exported = self.export_npy(ckpt)
            for name, want in arrays.items():
                info = by_name[name]
                self.assertEqual(info["dtype"], DTYPES[want.dtype.type])
                self.assertEqual(tuple(info["shape"]), want.shape)
                self.assertEqual(info["raw_bytes"], want.nbytes)
                self.assert_same_array(exported[name], want)
                if not compress and want.ndim == 2:  # and through `cat`, once per dtype
                    self.assert_same_array(self.cat_npy(ckpt, name), want)

    def test_multi_chunk_arrays(self):
        a = self.rng.standard_normal((37, 1000)).astype(np.float32)  # 148000 bytes
        b = np.arange(50000, dtype=np.int64).reshape(50, 1000)
        for compress in ([], ["--compress", "lz4"], ["--no-compress"]):
            ckpt = self.path("ckpt" + "".join(compress))
            self.import_arrays(ckpt, {"a": a, "b": b}, "--chunk-size", "4096", *compress)
            doc = self.inspect_json(ckpt)
            chunks = {v["name"]: v["num_chunks"] for v in doc["variables"]}
            self.assertEqual(chunks["a"], -(-a.nbytes // 4096))
            self.assertEqual(chunks["b"], -(-b.nbytes // 4096))
            self.assert_same_array(self.cat_npy(ckpt, "a"), a)
            self.assert_same_array(self.cat_npy(ckpt, "b"), b)
            self.dvar("verify", ckpt)

    def test_special_floats(self):
        a = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, 3.4028235e38], np.float32)
        ckpt = self.path("ckpt")
        self.import_arrays(ckpt, {"s": a})
        self.assert_same_array(self.cat_npy(ckpt, "s"), a)
        out, _ = self.dvar("cat", ckpt, "s")
        self.assertEqual(out, "[nan, inf, -inf, -0, 0, 1e-45, 3.4028235e+38]\n")

    def test_npy_versions_2_and_3(self):
        a = self.rng.standard_normal((4, 5))
        files = []
        for version in ((1, 0), (2, 0), (3, 0)):
            path = self.path("v%d.npy" % version[0])
            with open(path, "wb") as f:
                np.lib.format.write_array(f, a, version=version)
            files.append("v%d=%s" % (version[0], path))
        ckpt = self.path("ckpt")
        self.dvar("import", ckpt, *files)
        for version in (1, 2, 3):
            self.assert_same_array(self.cat_npy(ckpt, "v%d" % version), a)

    def test_fortran_order_vector_is_accepted(self):
        # A rank-1 array has one layout whatever the header says.
        a = np.arange(6, dtype=np.int16)
        path = self.path("f.npy")
        with open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": "<i2", "fortran_order": True, "shape": (6,)})
            f.write(a.tobytes())
        ckpt = self.path("ckpt")
        self.dvar("import", ckpt, "v=" + path)
        self.assert_same_array(self.cat_npy(ckpt, "v"), a)

    def test_trailing_data_is_noted(self):
        path = self.save_npy(np.arange(4, dtype=np.int32))
        with open(path, "ab") as f:
            f.write(b"junk!")
        ckpt = self.path("ckpt")
        _, err = self.dvar("import", ckpt, "v=" + path)
        self.assertIn("note: '%s' has 5 bytes after the array data" % path, err)
        self.assert_same_array(self.cat_npy(ckpt, "v"), np.arange(4, dtype=np.int32))

    def bad_npy(self, header, data=b"", raw=None):
        """A .npy file with this header dict (or these raw bytes)."""
        path = self.path("bad.npy")
        with open(path, "wb") as f:
            if raw is not None:
                f.write(raw)
            else:
                np.lib.format.write_array_header_1_0(f, header)
                f.write(data)
        return path

    def assert_import_fails(self, path, message, code=3):
        ckpt = self.path("ckpt")
        good = self.save_npy(np.zeros(3, np.float32))
        _, err = self.dvar("import", ckpt, "good=" + good, "x=" + path, code=code)
        self.assertIn(message, err)
        self.assertTrue(err.startswith("dvar import: "), err)
        self.assertFalse(os.path.exists(ckpt), "import left %s behind" % ckpt)
        return err

    def test_rejects_bad_npy_files(self):
        f4 = np.zeros(6, np.float32).tobytes()
        cases = [
            (None, b"", b"GIF89a not numpy at all",
             "not a .npy, .npz or .safetensors file (bad magic)"),
            (None, b"", b"\x93NUMPY\x01\x00\x76\x00{'descr': '<f4',", "truncated .npy header"),
            (None, b"", b"\x93NUMPY\x01", "truncated .npy header"),
            (None, b"", b"\x93NUMPY\x09\x00\x10\x00{}              ",
             "unsupported .npy format version 9.0"),
            ({"descr": "<f4", "fortran_order": True, "shape": (2, 3)}, f4,
             None, "Fortran-order arrays are not supported"),
            ({"descr": "|O", "fortran_order": False, "shape": (2,)}, b"\0" * 16,
             None, "object arrays ('|O') cannot be imported"),
            ({"descr": ">f4", "fortran_order": False, "shape": (6,)}, f4,
             None, "dtype '>f4' is not little-endian"),
            ({"descr": "<c8", "fortran_order": False, "shape": (3,)}, f4,
             None, "dtype '<c8' is not supported"),
            ({"descr": [("a", "<f4"), ("b", "<i4")], "fortran_order": False, "shape": (3,)},
             f4, None, "structured dtypes are not supported"),
            ({"descr": "<V2", "fortran_order": False, "shape": (3,)}, f4,
             None, "bfloat16 cannot come from .npy"),
            ({"descr": "<f4", "fortran_order": False, "shape": (1,) * 9}, f4,
             None, "rank 9 is above dvar's maximum of 8"),
            ({"descr": "<f4", "fortran_order": False, "shape": (3, 4)}, f4,
             None, "data is truncated: shape [3,4] of float32 needs 48 bytes, the file holds 24"),
        ]
        for header, data, raw, message in cases:
            with self.subTest(message=message):
                path = self.bad_npy(header, data, raw)
                err = self.assert_import_fails(path, message)
                self.assertIn("'%s'" % path, err)

    def test_missing_npy_file(self):
        err = self.assert_import_fails(self.path("nope.npy"), "No such file or directory")
        self.assertIn("nope.npy", err)

    def test_big_endian_from_numpy(self):
        path = self.save_npy(np.arange(3, dtype=">i4"))
        self.assert_import_fails(path, "dtype '>i4' is not little-endian")

    def test_object_array_from_numpy(self):
        path = self.path("obj.npy")
        np.save(path, np.array([1, "a", None], dtype=object), allow_pickle=True)
        self.assert_import_fails(path, "object arrays ('|O') cannot be imported")

    def test_duplicate_name_is_a_usage_error(self):
        a = self.save_npy(np.zeros(2))
        ckpt = self.path("ckpt")
        _, err = self.dvar("import", ckpt, "w=" + a, "w=" + a, code=2)
        self.assertEqual(err, "dvar import: variable 'w' is given twice\n"
                              "See 'dvar help import'.\n")
        self.assertFalse(os.path.exists(ckpt))

    def test_bad_pairs_and_options(self):
        a = self.save_npy(np.zeros(2))
        ckpt = self.path("ckpt")
        for args, message in [
                (["noequals"], "'noequals' is not NAME=FILE.npy, FILE.npz or FILE.safetensors"),
                (["=" + a], "is not NAME=FILE.npy"),
                (["w="], "'w=' is not NAME=FILE.npy"),
                (["w=" + a, "--chunk-size", "1000"], "--chunk-size must be a multiple of 4096"),
                (["w=" + a, "--chunk-size", "2G"], "--chunk-size must be a multiple of 4096"),
                (["w=" + a, "--chunk-size", "lots"], "--chunk-size 'lots': expected a byte count"),
                (["w=" + a, "--compress", "zstd"], "--compress takes auto, lz4 or none, not 'zstd'"),
                (["w=" + a, "--keep", "2"], "--keep needs --step"),
                (["w=" + a, "--step", "-3"], "--step '-3': expected a whole number >= 0"),
                ([], "missing NAME=FILE.npy")]:
            with self.subTest(args=args):
                _, err = self.dvar("import", ckpt, *args, code=2)
                self.assertIn(message, err)
                self.assertTrue(err.endswith("See 'dvar help import'.\n"), err)
                self.assertFalse(os.path.exists(ckpt))

    def test_chunk_size_suffix(self):
        a = np.arange(5000, dtype=np.float64)  # 40000 bytes
        ckpt = self.path("ckpt")
        self.import_arrays(ckpt, {"a": a}, "--chunk-size", "8K", "--no-compress")
        self.assertEqual(self.inspect_json(ckpt)["variables"][0]["num_chunks"], 5)

    def test_existing_out_is_refused(self):
        ckpt = self.path("ckpt")
        self.import_arrays(ckpt, {"a": np.zeros(3)})
        _, err = self.import_arrays(ckpt, {"b": np.ones(3)}, code=3)
        self.assertIn("dvar import: ", err)
        self.assertIn("ckpt", err)
        self.assertEqual([v["name"] for v in self.inspect_json(ckpt)["variables"]], ["a"])

    def test_failed_import_leaves_nothing(self):
        # The library refuses a 2000-byte name after the files were mapped.
        for opts in ([], ["--step", "5"]):
            out = self.path("out")
            _, err = self.import_arrays(out, {"n" * 2000: np.zeros(3)}, *opts, code=3)
            self.assertTrue(err.startswith("dvar import: "), err)
            self.assertFalse(os.path.exists(out), "import left %s behind" % out)
            self.assertEqual(sorted(os.listdir(self.dir)), ["a0.npy"])
            os.unlink(self.path("a0.npy"))

    def test_progress_when_forced(self):
        _, err = self.import_arrays(self.path("ckpt"), {"a": np.zeros(300000)}, "--progress")
        self.assertRegex(err, r"^\rimport: +\d+% \(.* of 2\.3 MiB\)")
        self.assertRegex(err, r"\r *\r$")
        _, err = self.dvar("verify", self.path("ckpt"), "--progress")
        self.assertRegex(err, r"^\rverify: +\d+% \(")

    def test_progress_is_not_drawn_off_a_terminal(self):
        _, err = self.import_arrays(self.path("ckpt"), {"a": np.zeros(300000)})
        self.assertEqual(err, "")


# -------------------------------------------------------------------- cat

    def test_shards(self):
        a = self.rng.standard_normal((10, 3)).astype(np.float32)
        b = np.arange(7 * 2, dtype=np.int16).reshape(7, 2)
        s = np.array(3.5)
        ckpt = self.path("ckpt")
        _, err = self.import_arrays(ckpt, {"a": a, "b": b, "s": s}, "--shards", "a=4",
                                    "--shards", "b=8", "--shards", "s=2")
        self.assertIn("dvar import: note: variable 'b' has 7 rows: 7 shards, not 8\n", err)
        self.assertIn("dvar import: note: variable 's' is a scalar: 1 shard, not 2\n", err)
        layout = self.layout(ckpt)
        self.assertEqual(layout["a"][2], [((0, 0), (3, 3)), ((3, 0), (3, 3)), ((6, 0), (2, 3)),
                                          ((8, 0), (2, 3))])
        self.assertEqual(layout["a"][3], {"kind": "sharded", "shards": "4", "layout": "div"})
        self.assertEqual(self.assert_div_layout(layout["b"], 8, b.shape), 7)
        self.assertEqual(layout["b"][3], shard_attrs(7))
        self.assertEqual(layout["s"][2], [((), ())])
        self.assertEqual(layout["s"][3], {})
        self.assert_same_array(self.cat_npy(ckpt, "a"), a)
        self.assert_same_array(self.cat_npy(ckpt, "b"), b)
        self.assert_same_array(self.cat_npy(ckpt, "s"), s)
        # One shard is a plain variable, as TensorFlow saves it.
        one = self.path("one")
        self.import_arrays(one, {"a": a}, "--shards", "a=1", "--compress", "lz4")
        self.assertEqual(self.layout(one)["a"][2:], ([((0, 0), (10, 3))], {}))
        self.assert_same_array(self.cat_npy(one, "a"), a)

    def test_shards_errors(self):
        npy = self.save_npy(np.zeros((4, 2)))
        out = self.path("out")
        # Only the files say which arrays there are: an unknown NAME fails after reading them.
        _, err = self.dvar("import", out, "a=" + npy, "--shards", "b=2", code=3)
        self.assertEqual(err, "dvar import: shard count for 'b': no array of that name is "
                              "imported\n")
        self.no_leftovers(os.path.dirname(out), os.path.basename(out))
        self.assert_usage_errors("import", [out, "a=" + npy], out, [
            (["--shards", "a=0"], "--shards 'a=0': N must be at least 1"),
            (["--shards", "a=x"], "--shards 'a=x' is not NAME=N"),
            (["--shards", "a=2x"], "--shards 'a=2x': N must be a whole number"),
            (["--shards", "=2"], "--shards '=2' is not NAME=N"),
            (["--shards", "a=2", "--shards", "a=3"], "--shards gives 'a' twice"),
        ])


def skeleton(shape):
    """The layout `dvar cat` prints, each element shown as X."""
    if len(shape) == 0:
        return "X"
    if 0 in shape:
        return "[]"

    def rec(dims, depth):
        if len(dims) == 1:
            return "[" + ", ".join(["X"] * dims[0]) + "]"
        sep = ",\n" + "\n" * (len(dims) - 2) + " " * (depth + 1)
        return "[" + sep.join(rec(dims[1:], depth + 1) for _ in range(dims[0])) + "]"
    return rec(shape, 0)


TOKEN = re.compile(r"[^\[\],\s]+")


class CatTest(CliCase):
    group = "cat"

    def setUp(self):
        super().setUp()
        self.arrays = {
            "f32": self.rng.standard_normal((3, 4, 5)).astype(np.float32),
            "f64": self.rng.standard_normal((2, 3, 2, 2)),
            "f16": self.rng.standard_normal((7,)).astype(np.float16),
            "i64": np.array([[-2 ** 63, 2 ** 63 - 1], [2 ** 53 + 1, -1]], np.int64),
            "u64": np.array([2 ** 64 - 1, 0, 2 ** 53 + 1], np.uint64),
            "b": np.array([[True, False, True]]),
            "scalar": np.array(42, np.int32),
            "empty": np.zeros((2, 0, 3), np.float32),
            "big": np.arange(20000, dtype=np.int32).reshape(200, 100),
            "rank8": self.rng.standard_normal((2, 1, 3, 1, 2, 2, 1, 3)).astype(np.float32),
        }
        self.ckpt = self.path("ckpt")
        self.import_arrays(self.ckpt, self.arrays, "--chunk-size", "4096")

    def check_text(self, name, want, *opts, env=None):
        out, err = self.dvar("cat", self.ckpt, name, *opts, env=env)
        self.assertEqual(err, "")
        self.assertTrue(out.endswith("\n"))
        self.assertEqual(TOKEN.sub("X", out[:-1]), skeleton(want.shape))
        tokens = TOKEN.findall(out)
        flat = want.reshape(-1)
        self.assertEqual(len(tokens), flat.size)
        for tok, value in zip(tokens, flat):
            if want.dtype == np.bool_:
                self.assertEqual(tok, str(bool(value)))
            elif np.issubdtype(want.dtype, np.integer):
                self.assertEqual(int(tok), int(value))
            else:
                # Enough digits to read back as the same value of its type.
                self.assertEqual(want.dtype.type(float(tok)).tobytes(), value.tobytes(), tok)
        return out

    def test_text_dump_of_every_kind(self):
        for name, want in self.arrays.items():
            if name != "big":
                with self.subTest(name=name):
                    self.check_text(name, want)

    def test_text_layout(self):
        out, _ = self.dvar("cat", self.ckpt, "big", "--slice", "0,2:0,3")
        self.assertEqual(out, "[[0, 1, 2],\n [100, 101, 102]]\n")
        out, _ = self.dvar("cat", self.ckpt, "i64")
        self.assertEqual(out, "[[-9223372036854775808, 9223372036854775807],\n"
                              " [9007199254740993, -1]]\n")
        out, _ = self.dvar("cat", self.ckpt, "b")
        self.assertEqual(out, "[[True, False, True]]\n")
        out, _ = self.dvar("cat", self.ckpt, "scalar")
        self.assertEqual(out, "42\n")
        out, _ = self.dvar("cat", self.ckpt, "empty")
        self.assertEqual(out, "[]\n")
        out, _ = self.dvar("cat", self.ckpt, "f32", "--slice", "0,2:0,1:0,1")
        self.assertEqual(TOKEN.sub("X", out), "[[[X]],\n\n [[X]]]\n")

    def test_shortest_digits(self):
        ckpt = self.path("digits")
        self.import_arrays(ckpt, {
            "f": np.array([0.1, 1 / 3, 1e-7, 100, 0.0001, 123456.7, 1e16, 16777216], np.float32),
            "d": np.array([0.1, 1 / 3, 2.5e-300, 1e15 + 0.5, 2.0 ** 60])})
        out, _ = self.dvar("cat", ckpt, "f")
        self.assertEqual(out, "[0.1, 0.33333334, 1e-07, 100, 0.0001, 123456.7, 1e+16, 16777216]\n")
        out, _ = self.dvar("cat", ckpt, "d")
        self.assertEqual(out, "[0.1, 0.3333333333333333, 2.5e-300, 1000000000000000.5, "
                              "1.152921504606847e+18]\n")

    def test_large_text_needs_force(self):
        _, err = self.dvar("cat", self.ckpt, "big", code=2)
        self.assertEqual(err, "dvar cat: 'big' has 20000 elements; printing more than 10000 "
                              "needs --force (or use --slice or --npy)\n"
                              "See 'dvar help cat'.\n")
        self.check_text("big", self.arrays["big"], "--force")

    def test_npy_output(self):
        for name, want in self.arrays.items():
            with self.subTest(name=name):
                self.assert_same_array(self.cat_npy(self.ckpt, name), want)
        dst = self.path("f32.npy")
        self.dvar("cat", self.ckpt, "f32", "--npy", dst)
        with open(dst, "rb") as f:
            raw = f.read()
        self.assertEqual(raw[:8], b"\x93NUMPY\x01\x00")
        hlen = int.from_bytes(raw[8:10], "little")
        self.assertEqual((10 + hlen) % 64, 0)
        self.assertTrue(raw[10 + hlen - 1:10 + hlen] == b"\n")
        self.assertEqual(len(raw), 10 + hlen + self.arrays["f32"].nbytes)

    def test_npy_overwrites_atomically(self):
        dst = self.path("dst.npy")
        with open(dst, "w") as f:
            f.write("old")
        self.dvar("cat", self.ckpt, "nope", "--npy", dst, code=3)
        with open(dst) as f:
            self.assertEqual(f.read(), "old")
        # An existing file is refused without --force, and left as it was.
        _, err = self.dvar("cat", self.ckpt, "f16", "--npy", dst, code=3)
        self.assertEqual(err, "dvar cat: '%s' already exists; give a new FILE, or --force to "
                              "replace it\n" % dst)
        with open(dst) as f:
            self.assertEqual(f.read(), "old")
        self.dvar("cat", self.ckpt, "f16", "--npy", dst, "--force")
        self.assert_same_array(np.load(dst), self.arrays["f16"])
        self.assertEqual([n for n in os.listdir(self.dir) if "tmp" in n], [])

    def test_npy_to_a_pipe(self):
        p = subprocess.run([DVAR, "cat", self.ckpt, "f64", "--npy", "/dev/stdout"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual((p.returncode, p.stderr), (0, b""))
        with open(self.path("piped.npy"), "wb") as f:
            f.write(p.stdout)
        self.assert_same_array(np.load(self.path("piped.npy")), self.arrays["f64"])
        _, err = self.dvar("cat", self.ckpt, "f64", "--npy", self.dir, code=3)
        self.assertEqual(err, "dvar cat: cannot create '%s': Is a directory\n" % self.dir)
        _, err = self.dvar("cat", self.ckpt, "f64", "--npy", self.path("no", "x.npy"), code=3)
        self.assertEqual(err, "dvar cat: cannot create '%s': No such file or directory\n"
                         % self.path("no", "x.npy"))

    def random_spec(self, shape):
        spec, index = [], []
        for dim in shape:
            if dim == 0 or self.rng.random() < 0.25:
                spec.append("-")
                index.append(slice(None))
                continue
            start = int(self.rng.integers(0, dim))
            length = int(self.rng.integers(1, dim - start + 1))
            spec.append("%d,%d" % (start, length))
            index.append(slice(start, start + length))
        return ":".join(spec), tuple(index)

    def test_random_slices(self):
        for name in ("f32", "f64", "i64", "big", "rank8", "b"):
            want = self.arrays[name]
            for _ in range(6):
                spec, index = self.random_spec(want.shape)
                with self.subTest(name=name, spec=spec):
                    part = np.array(want[index], order="C")
                    self.assert_same_array(self.cat_npy(self.ckpt, name, "--slice", spec), part)
                    if part.size <= 10000:
                        self.check_text(name, part, "--slice", spec)

    def test_small_pieces(self):
        # A budget of a few elements splits inner axes too, down to one element.
        for budget in ("1", "24", "200"):
            env = {"DVAR_CLI_PIECE_BYTES": budget}
            for name in ("f32", "rank8", "i64", "scalar", "empty"):
                want = self.arrays[name]
                with self.subTest(name=name, budget=budget):
                    self.assert_same_array(self.cat_npy(self.ckpt, name, env=env), want)
                    self.check_text(name, want, env=env)
                    spec, index = self.random_spec(want.shape)
                    part = np.array(want[index], order="C")
                    self.assert_same_array(self.cat_npy(self.ckpt, name, "--slice", spec, env=env),
                                           part)

    def test_scalar_slice(self):
        out, _ = self.dvar("cat", self.ckpt, "scalar", "--slice", "")
        self.assertEqual(out, "42\n")

    def test_slice_errors(self):
        for spec in ("0,4:-:-", "2,2:-:-", "-:-", "a,b:-:-", "0,1:0,1:0,1:0,1"):
            with self.subTest(spec=spec):
                _, err = self.dvar("cat", self.ckpt, "f32", "--slice", spec, code=2)
                self.assertTrue(err.startswith("dvar cat: --slice '%s': " % spec), err)
                self.assertTrue(err.endswith("See 'dvar help cat'.\n"), err)
                prefix = "dvar cat: --slice '%s': " % spec
                self.assertGreater(len(err.splitlines()[0]), len(prefix) + 5)
        _, err = self.dvar("cat", self.ckpt, "f32", "--slice", "0,4:-:-", code=2)
        self.assertIn("[3,4,5]", err)

    def test_unknown_variable(self):
        _, err = self.dvar("cat", self.ckpt, "nope", code=3)
        self.assertTrue(err.startswith("dvar cat: "), err)
        self.assertIn("nope", err)
        self.assertEqual(len(err.splitlines()), 1)

    def test_progress_when_forced(self):
        dst = self.path("p.npy")
        _, err = self.dvar("cat", self.ckpt, "big", "--npy", dst, "--progress")
        self.assertIn("\rcat: 100% (78.1 KiB of 78.1 KiB)", err)
        self.assertTrue(err.endswith("\r"), repr(err))
        self.assertEqual(err.strip("\r ").count("\n"), 0)
        _, err = self.dvar("cat", self.ckpt, "big", "--npy", dst, "--progress", "--no-progress",
                           "--force")
        self.assertEqual(err, "")

    def test_bfloat16_written_as_float32(self):
        if not LIB:
            self.skipTest("needs --lib")
        values = np.array([[1.0, -2.5, 0.15625], [3.0e38, -0.0, 1.0e-38]], np.float32)
        values = (values.view(np.uint32) & 0xffff0000).view(np.float32)
        ckpt = self.path("bf16")
        lib_write(ckpt, [("w", DVAR_BFLOAT16, values.shape, None, to_bfloat16(values).tobytes())])
        dst = self.path("w.npy")
        _, err = self.dvar("cat", ckpt, "w", "--npy", dst)
        self.assertEqual(err, "dvar cat: note: 'w' is bfloat16, which numpy lacks; "
                              "writing it as float32 (exact)\n")
        self.assert_same_array(np.load(dst), values)
        out, _ = self.dvar("cat", ckpt, "w")
        got = np.array([float(t) for t in TOKEN.findall(out)], np.float32)
        self.assertEqual(got.tobytes(), values.reshape(-1).tobytes())
        self.assertEqual(self.inspect_json(ckpt)["variables"][0]["dtype"], "bfloat16")

    def test_variable_saved_in_slices(self):
        if not LIB:
            self.skipTest("needs --lib")
        full = self.rng.standard_normal((6, 4)).astype(np.float32)
        ckpt = self.path("sliced")
        lib_write(ckpt, [
            ("v", DVAR_FLOAT32, (6, 4), ((0, 0), (4, 4)), full[0:4].tobytes()),
            ("v", DVAR_FLOAT32, (6, 4), ((4, 0), (2, 4)), full[4:6].tobytes()),
        ])
        self.assert_same_array(self.cat_npy(ckpt, "v"), full)
        self.assert_same_array(self.cat_npy(ckpt, "v", "--slice", "3,2:1,2"), full[3:5, 1:3])
        doc = self.inspect_json(ckpt)
        slices = sorted((s["start"], s["length"]) for s in doc["variables"][0]["slices"])
        self.assertEqual(slices, [([0, 0], [4, 4]), ([4, 0], [2, 4])])
        out, _ = self.dvar("inspect", ckpt)
        row = [l for l in out.splitlines() if l.startswith("v ")]
        self.assertEqual(len(row), 1, out)
        self.assertEqual(sorted(row[0].split()[-2:]), ["0,4:-", "4,2:-"])


# ---------------------------------------------------------------- inspect


class InspectTest(CliCase):
    group = "inspect"

    def test_json_fields(self):
        sparse = np.zeros((512, 1024), np.float32)  # 2 MiB, mostly zero rows
        sparse[::16] = self.rng.standard_normal((32, 1024))
        dense = self.rng.standard_normal((100,))
        ckpt = self.path("ckpt")
        # lz4, not auto: auto's choice depends on how fast lz4 runs on this machine.
        self.import_arrays(ckpt, {"sparse": sparse, "dense": dense, "s": np.array(1.5)},
                           "--compress", "lz4")
        doc = self.inspect_json(ckpt)
        self.assertEqual(doc["path"], ckpt)
        self.assertEqual([v["name"] for v in doc["variables"]], ["dense", "s", "sparse"])
        v = {x["name"]: x for x in doc["variables"]}
        self.assertEqual(v["sparse"]["dtype"], "float32")
        self.assertEqual(v["sparse"]["shape"], [512, 1024])
        self.assertEqual(v["sparse"]["slices"], [{"start": [0, 0], "length": [512, 1024]}])
        self.assertEqual(v["sparse"]["raw_bytes"], sparse.nbytes)
        self.assertLess(v["sparse"]["stored_bytes"], sparse.nbytes)
        self.assertEqual(v["sparse"]["num_chunks"], 1)
        self.assertEqual(v["s"]["shape"], [])
        self.assertEqual(v["s"]["slices"], [{"start": [], "length": []}])
        self.assertEqual(v["dense"]["raw_bytes"], 800)
        self.assertEqual(doc["raw_bytes"], sum(x["raw_bytes"] for x in doc["variables"]))
        self.assertEqual(doc["stored_bytes"], sum(x["stored_bytes"] for x in doc["variables"]))
        self.assertEqual(doc["num_chunks"], sum(x["num_chunks"] for x in doc["variables"]))

    def test_no_compress_stores_raw(self):
        sparse = np.zeros((256, 1024), np.float32)
        ckpt = self.path("ckpt")
        self.import_arrays(ckpt, {"z": sparse}, "--no-compress")
        v = self.inspect_json(ckpt)["variables"][0]
        self.assertGreaterEqual(v["stored_bytes"], sparse.nbytes)

    def test_text(self):
        ckpt = self.path("ckpt")
        self.import_arrays(ckpt, {"layer/kernel": np.zeros((3, 4), np.float32),
                                  "step": np.array(7, np.int64)}, "--no-compress")
        out, err = self.dvar("inspect", ckpt)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertEqual(lines[0], ckpt)
        self.assertEqual(lines[1].split(), ["NAME", "DTYPE", "SHAPE", "RAW", "STORED", "RATIO",
                                            "CHUNKS", "SLICES"])
        self.assertEqual(lines[2].split()[:4] + lines[2].split()[-2:],
                         ["layer/kernel", "float32", "[3,4]", "48", "1", "-:-"])
        self.assertEqual(lines[3].split()[:4] + lines[3].split()[-2:],
                         ["step", "int64", "[]", "8", "1", "-"])
        self.assertRegex(lines[4], r"^2 variables, 2 chunks, 56 B raw, \d.* stored, ratio ")
        self.assertEqual(len(lines), 5)

    def test_json_escapes_names(self):
        names = ['quote"d', "back\\slash", "new\nline", "tab\there", "ctl\x01x", "caf\u00e9",
                 "\u6f22\u5b57/\U0001f600"]
        ckpt = self.path("ckpt")
        self.import_arrays(ckpt, {n: np.zeros(1) for n in names})
        out, _ = self.dvar("inspect", ckpt, "--json")
        self.assertNotIn("\n", out[:-1])
        doc = json.loads(out)
        self.assertEqual(sorted(v["name"] for v in doc["variables"]), sorted(names))

    def test_json_replaces_invalid_utf8(self):
        ckpt = self.path("ckpt")
        npy = self.save_npy(np.zeros(1))
        subprocess.run([DVAR.encode(), b"import", ckpt.encode(), b"bad\xffname=" + npy.encode()],
                       check=True)
        doc = json.loads(subprocess.run([DVAR, "inspect", ckpt, "--json"], check=True,
                                        stdout=subprocess.PIPE).stdout)
        self.assertEqual(doc["variables"][0]["name"], "bad\ufffdname")

    def test_root_resolves_to_latest(self):
        root = self.path("root")
        for step in (10, 20):
            self.import_arrays(root, {"v%d" % step: np.zeros(2)}, "--step", step)
        doc = self.inspect_json(root)
        self.assertEqual(os.path.basename(doc["path"].rstrip("/")), "ckpt-20")
        self.assertEqual([v["name"] for v in doc["variables"]], ["v20"])

    def test_parts_and_attributes(self):
        if not LIB:
            self.skipTest("needs --lib")
        full = self.rng.standard_normal((6, 4)).astype(np.float32)
        m = np.array([1.5, -2.0, 3.25])
        note = np.array(42, np.int32)
        sharded = {"kind": "sharded"}
        mirrored = {"kind": "mirrored", "synchronization": "ON_WRITE", "aggregation": "NONE"}
        ckpt = self.path("parts")
        lib_write_parts(ckpt, "a1b2", [
            [("v", DVAR_FLOAT32, (6, 4), ((0, 0), (4, 4)), full[0:4].tobytes(), sharded),
             ("m", 2, (3,), None, m.tobytes(), mirrored)],
            [("v", DVAR_FLOAT32, (6, 4), ((4, 0), (2, 4)), full[4:6].tobytes(), sharded),
             ("note", 3, (), None, note.tobytes(), {"comment": "two words\nline"})],
        ])
        self.assertEqual([os.path.basename(f) for f in self.data_files(ckpt)],
                         ["data-00000-of-00002", "data-00001-of-00002"])
        self.assertFalse(glob.glob(self.path(".parts.dvartmp-*")))
        doc = self.inspect_json(ckpt)
        v = {x["name"]: x for x in doc["variables"]}
        self.assertEqual(v["v"]["attributes"], sharded)
        self.assertEqual(v["m"]["attributes"], mirrored)
        self.assertEqual(list(v["m"]["attributes"]), ["aggregation", "kind", "synchronization"])
        self.assertEqual(v["note"]["attributes"], {"comment": "two words\nline"})
        self.assertEqual(sorted((s["start"], s["length"]) for s in v["v"]["slices"]),
                         [([0, 0], [4, 4]), ([4, 0], [2, 4])])
        out, err = self.dvar("inspect", ckpt)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertEqual(lines[2].split()[0], "m")
        self.assertEqual(lines[3], "    aggregation=NONE kind=mirrored synchronization=ON_WRITE")
        self.assertEqual(lines[4].split()[0], "note")
        self.assertEqual(lines[5], "    comment=two\\x20words\\nline")
        self.assertEqual(lines[6].split()[0], "v")
        self.assertEqual(lines[7], "    kind=sharded")
        self.assertRegex(lines[8], r"^3 variables, ")
        self.dvar("verify", ckpt)
        self.assert_same_array(self.cat_npy(ckpt, "v"), full)
        self.assert_same_array(self.cat_npy(ckpt, "v", "--slice", "3,2:-"), full[3:5])
        self.assert_same_array(self.cat_npy(ckpt, "m"), m)
        # Several data files diff like one.
        single = self.path("single")
        self.import_arrays(single, {"v": full, "m": m, "note": note})
        out, _ = self.dvar("diff", ckpt, single)
        self.assertTrue(out.startswith("identical: 3 variables"), out)
        # Variables without attributes have an empty object.
        self.assertEqual(self.inspect_json(single)["variables"][0]["attributes"], {})

    def test_missing_checkpoint(self):
        _, err = self.dvar("inspect", self.path("nope"), code=3)
        self.assertTrue(err.startswith("dvar inspect: "), err)
        self.assertIn("nope", err)


# ---------------------------------------------------------------- fixture


FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures", "v1")


class FixtureTest(CliCase):
    """The committed v1 checkpoint (docs/FORMAT.md), copied, never edited."""
    group = "fixture"

    def setUp(self):
        super().setUp()
        self.ckpt = self.path("v1")
        shutil.copytree(FIXTURE, self.ckpt)

    def test_inspect_and_verify(self):
        out, _ = self.dvar("inspect", self.ckpt)
        rows = {l.split()[0]: l.split() for l in out.splitlines()[2:-1]}
        self.assertEqual(sorted(rows), ["bf16", "bool_vec", "emb", "empty", "half", "int_vec",
                                        "matrix_f64", "scalar_f32", "sharded"])
        self.assertEqual(rows["sharded"][1:3] + rows["sharded"][-4:],
                         ["float32", "[10,3]", "3", "0,4:-", "4,3:-", "7,3:-"])
        self.assertEqual(rows["bf16"][1:3], ["bfloat16", "[2]"])
        self.assertEqual(out.splitlines()[-1].split(",")[:2], ["9 variables", " 13 chunks"])
        out, _ = self.dvar("verify", self.ckpt)
        self.assertRegex(out, r"^9 variables, 13 chunks, \d+ bytes checked: OK\n$")

    def test_values(self):
        for name, text in [
                ("bf16", "[1, -2.5]\n"),
                ("half", "[1, -2, 0.5, 65504]\n"),
                ("int_vec", "[-2, -1, 0, 1, 9007199254740993]\n"),
                ("bool_vec", "[True, False, True, True]\n"),
                ("scalar_f32", "3.5\n"),
                ("empty", "[]\n"),
                ("matrix_f64", "[[0.25, 1.25, 2.25, 3.25],\n [4.25, 5.25, 6.25, 7.25],\n"
                               " [8.25, 9.25, 10.25, 11.25]]\n")]:
            with self.subTest(name=name):
                self.assertEqual(self.dvar("cat", self.ckpt, name)[0], text)
        bf16 = self.cat_npy(self.ckpt, "bf16")
        self.assert_same_array(bf16, np.array([1, -2.5], np.float32))
        # Assembled from the three saved slices, and a slice across two of them.
        sharded = np.arange(30, dtype=np.float32).reshape(10, 3) - 7.5
        self.assert_same_array(self.cat_npy(self.ckpt, "sharded"), sharded)
        self.assert_same_array(self.cat_npy(self.ckpt, "sharded", "--slice", "3,5:1,2"),
                               sharded[3:8, 1:3])
        r, c = np.meshgrid(np.arange(256), np.arange(16), indexing="ij")
        emb = np.where(r % 2 == 1, 0.0, r * 16 + c + 0.125).astype(np.float32)
        self.assert_same_array(self.cat_npy(self.ckpt, "emb"), emb)
        self.assert_same_array(self.cat_npy(self.ckpt, "emb", "--slice", "100,3:14,2"),
                               emb[100:103, 14:16])

    def test_diff_with_an_import_of_itself(self):
        # Re-import every variable numpy can hold; diff sees only bf16 go missing.
        pairs = []
        for name in ("bool_vec", "emb", "empty", "half", "int_vec", "matrix_f64",
                     "scalar_f32", "sharded"):
            pairs.append("%s=%s" % (name, self.path(name + ".npy")))
            self.dvar("cat", self.ckpt, name, "--npy", self.path(name + ".npy"))
        copy = self.path("copy")
        self.dvar("import", copy, *pairs)
        out, _ = self.dvar("diff", self.ckpt, copy, code=1)
        self.assertEqual(out, "only in A: bf16\ndifferent: 1 only in A, 0 only in B, "
                              "0 with another dtype or shape, 0 with other values (of 8 in both)\n")


# ----------------------------------------------------------------- verify


class VerifyTest(CliCase):
    group = "verify"

    def setUp(self):
        super().setUp()
        self.a = self.rng.standard_normal(3 * 1024).astype(np.float32)  # 3 chunks of 4 KiB
        self.b = np.arange(100, dtype=np.int16)
        self.ckpt = self.path("ckpt")
        self.import_arrays(self.ckpt, {"a": self.a, "b": self.b}, "--chunk-size", "4096",
                           "--no-compress")

    def test_ok(self):
        out, err = self.dvar("verify", self.ckpt)
        self.assertEqual(err, "")
        stored = self.inspect_json(self.ckpt)["stored_bytes"]
        self.assertEqual(out, "2 variables, 4 chunks, %d bytes checked: OK\n" % stored)
        doc = json.loads(self.dvar("verify", self.ckpt, "--json")[0])
        self.assertEqual((doc["ok"], doc["num_bad"], doc["bad_chunks"], doc["num_chunks"]),
                         (True, 0, [], 4))

    def flip(self):
        """Flip a byte in the middle of a's second chunk; its file and offset."""
        data = self.data_files(self.ckpt)[0]
        with open(data, "r+b") as f:
            raw = f.read()
            chunk1 = raw.find(self.a.tobytes()[4096:4096 + 64])
            self.assertGreaterEqual(chunk1, 0)  # chunks land in any order
            f.seek(chunk1 + 100)
            f.write(bytes([raw[chunk1 + 100] ^ 0x10]))
        return data, chunk1

    def test_flipped_byte(self):
        data, chunk1 = self.flip()
        out, err = self.dvar("verify", self.ckpt, code=1)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertEqual(len(lines), 2, out)
        m = re.match(r"bad chunk: variable 'a', file (\S+), offset (\d+), chunk (\d+): (.+)$",
                     lines[0])
        self.assertTrue(m, lines[0])
        self.assertEqual(os.path.basename(m.group(1)), os.path.basename(data))
        self.assertEqual(int(m.group(2)), chunk1)
        self.assertEqual(int(m.group(3)), 1)
        self.assertRegex(lines[1], r"^2 variables, 4 chunks, \d+ bytes checked: 1 bad chunk$")

        doc = json.loads(self.dvar("verify", self.ckpt, "--json", code=1)[0])
        self.assertFalse(doc["ok"])
        self.assertEqual(doc["num_bad"], 1)
        bad = doc["bad_chunks"][0]
        self.assertEqual((bad["variable"], bad["offset"], bad["chunk"]), ("a", chunk1, 1))

        # Reading the chunk fails and says which; the other variable still reads.
        _, err = self.dvar("cat", self.ckpt, "a", "--npy", self.path("a.npy"), code=3)
        self.assertTrue(err.startswith("dvar cat: "), err)
        self.assertIn("chunk", err)
        self.assertFalse(os.path.exists(self.path("a.npy")))
        self.assert_same_array(self.cat_npy(self.ckpt, "a", "--slice", "0,1024"), self.a[:1024])
        self.assert_same_array(self.cat_npy(self.ckpt, "b"), self.b)

    def test_flipped_byte_in_compressed_chunk(self):
        ckpt = self.path("z")
        z = np.zeros(4096, np.int32)
        z[::7] = np.arange(len(z[::7]))
        self.import_arrays(ckpt, {"z": z}, "--chunk-size", "4096", "--compress", "lz4")
        v = self.inspect_json(ckpt)["variables"][0]
        self.assertLess(v["stored_bytes"], v["raw_bytes"])
        # Chunks start at 4 KiB boundaries, the file's first one at 0.
        data = self.data_files(ckpt)[0]
        with open(data, "r+b") as f:
            f.seek(8)
            byte = f.read(1)[0]
            f.seek(8)
            f.write(bytes([byte ^ 0x55]))
        out, _ = self.dvar("verify", ckpt, code=1)
        self.assertRegex(out, r"^bad chunk: variable 'z', file \S+, offset 0, chunk \d: .+\n"
                              r"1 variable, 4 chunks, \d+ bytes checked: 1 bad chunk\n$")

    def test_truncated_data_file(self):
        data = self.data_files(self.ckpt)[0]
        os.truncate(data, os.path.getsize(data) // 2)
        out, err = self.dvar("verify", self.ckpt, code=1)
        self.assertIn("bad chunk: variable ", out)
        self.assertIn(os.path.basename(data), out)
        self.assertRegex(out, r"bad chunks?\n$")
        _, err = self.dvar("cat", self.ckpt, "a", "--npy", self.path("x.npy"), code=3)
        self.assertIn(os.path.basename(data), err)

    def test_missing_data_file(self):
        data = self.data_files(self.ckpt)[0]
        os.unlink(data)
        # The index still opens; every chunk is reported, naming the file. Unreadable
        # is not corrupt: exit 3, with the OS's reason.
        out, err = self.dvar("verify", self.ckpt, code=3)
        self.assertEqual(err, "dvar verify: 4 chunks could not be read, so they were not "
                              "checked (%s: No such file or directory)\n" % data)
        lines = out.splitlines()
        self.assertEqual(len(lines), 5, out)
        for line in lines[:4]:
            self.assertRegex(line, r"^unreadable chunk: variable '[ab]', file \S*%s, offset \d+, "
                                   r"chunk \d: .*No such file" % os.path.basename(data))
        self.assertRegex(lines[4], r"^2 variables, 4 chunks, \d+ bytes checked: "
                                   r"4 unreadable chunks$")
        _, err = self.dvar("cat", self.ckpt, "b", code=3)
        self.assertTrue(err.startswith("dvar cat: "), err)
        self.assertIn(os.path.basename(data), err)

    def test_garbage_index(self):
        index = os.path.join(self.ckpt, "index")
        size = os.path.getsize(index)
        with open(index, "wb") as f:
            f.write(bytes(self.rng.integers(0, 256, size, dtype=np.uint8)))
        for cmd in ("verify", "inspect"):
            _, err = self.dvar(cmd, self.ckpt, code=3)
            self.assertTrue(err.startswith("dvar %s: " % cmd), err)
            self.assertIn("index", err)
            self.assertEqual(len(err.splitlines()), 1)

    def test_truncated_index(self):
        index = os.path.join(self.ckpt, "index")
        os.truncate(index, os.path.getsize(index) // 2)
        _, err = self.dvar("verify", self.ckpt, code=3)
        self.assertTrue(err.startswith("dvar verify: "), err)
        self.assertIn("index", err)

    def test_empty_index(self):
        os.truncate(os.path.join(self.ckpt, "index"), 0)
        _, err = self.dvar("verify", self.ckpt, code=3)
        self.assertIn("index", err)

    def test_not_a_checkpoint(self):
        os.mkdir(self.path("empty"))
        _, err = self.dvar("verify", self.path("empty"), code=3)
        self.assertTrue(err.startswith("dvar verify: "), err)


# ------------------------------------------------------------------- diff


class DiffTest(CliCase):
    group = "diff"

    def setUp(self):
        super().setUp()
        self.base = {
            "w": self.rng.standard_normal((64, 300)).astype(np.float32),
            "n": np.array([1.0, np.nan, 3.0]),
            "i": np.arange(10, dtype=np.int64),
            "only_a": np.zeros(2),
        }

    def make(self, name, arrays):
        ckpt = self.path(name)
        self.import_arrays(ckpt, arrays, "--chunk-size", "4096")
        return ckpt

    def test_identical(self):
        a = self.make("a", self.base)
        b = self.make("b", self.base)
        out, err = self.dvar("diff", a, b)
        self.assertEqual(err, "")
        self.assertEqual(out, "identical: 4 variables, %d elements\n" % (64 * 300 + 3 + 10 + 2))
        doc = json.loads(self.dvar("diff", a, b, "--json")[0])
        self.assertEqual(doc["schema_version"], 1)
        self.assertTrue(doc["identical"])
        self.assertEqual((doc["only_in_a"], doc["only_in_b"]), ([], []))
        self.assertEqual({v["status"] for v in doc["variables"]}, {"equal"})
        self.assertIsNone(doc["atol"])

    def test_different(self):
        other = {k: v.copy() for k, v in self.base.items() if k != "only_a"}
        other["w"][5, 7] += 0.5
        other["w"][60, 299] -= 0.25
        other["w"][1, 1] = -other["w"][1, 1] if other["w"][1, 1] != 0 else 1.0
        flip = abs(2 * float(self.base["w"][1, 1]))
        other["i"] = other["i"].astype(np.int32)
        other["only_b"] = np.zeros((3, 3), np.float32)
        # Another NaN (other payload bits) still equals NaN.
        other["n"] = np.array([1.0, np.nan, 3.0])
        other["n"].view(np.uint64)[1] |= np.uint64(1)
        self.assertNotEqual(other["n"].tobytes(), self.base["n"].tobytes())
        a = self.make("a", self.base)
        b = self.make("b", other)
        out, err = self.dvar("diff", a, b, code=1)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertIn("only in A: only_a", lines)
        self.assertIn("only in B: only_b", lines)
        self.assertIn("dtype differs: i: int64 vs int32", lines)
        want_max = max(np.float64(np.float32(self.base["w"][5, 7] + np.float32(0.5))) -
                       np.float64(self.base["w"][5, 7]), flip, 0.25)
        m = [l for l in lines if l.startswith("values differ: w: ")]
        self.assertEqual(len(m), 1, out)
        self.assertTrue(m[0].startswith("values differ: w: 3 of 19200 elements, max abs diff "))
        self.assertAlmostEqual(float(m[0].rsplit(" ", 1)[1]), want_max, places=5)
        self.assertEqual(lines[-1], "different: 1 only in A, 1 only in B, 1 with another dtype "
                                    "or shape, 1 with other values (of 3 in both)")

        doc = json.loads(self.dvar("diff", a, b, "--json", code=1)[0])
        self.assertFalse(doc["identical"])
        self.assertEqual((doc["only_in_a"], doc["only_in_b"]), (["only_a"], ["only_b"]))
        v = {x["name"]: x for x in doc["variables"]}
        self.assertEqual(v["w"]["status"], "values_differ")
        self.assertEqual((v["w"]["num_elements"], v["w"]["num_different"]), (19200, 3))
        self.assertAlmostEqual(v["w"]["max_abs_diff"], want_max, places=5)
        self.assertEqual((v["i"]["status"], v["i"]["dtype_a"], v["i"]["dtype_b"]),
                         ("dtype_differs", "int64", "int32"))
        self.assertEqual((v["n"]["status"], v["n"]["num_different"]), ("equal", 0))

    def test_shape_and_nan(self):
        a = self.make("a", {"s": np.zeros((2, 3)), "n": np.array([np.nan, 1.0])})
        b = self.make("b", {"s": np.zeros((3, 2)), "n": np.array([2.0, 1.0])})
        out, _ = self.dvar("diff", a, b, code=1)
        self.assertIn("shape differs: s: [2,3] vs [3,2]\n", out)
        self.assertIn("values differ: n: 1 of 2 elements, max abs diff 0\n", out)

    def test_atol(self):
        other = dict(self.base)
        other["w"] = self.base["w"] + np.float32(1e-3)
        a = self.make("a", self.base)
        b = self.make("b", other)
        out, _ = self.dvar("diff", a, b, code=1)
        self.assertRegex(out, r"values differ: w: 19200 of 19200 elements, max abs diff 0\.00")
        out, _ = self.dvar("diff", a, b, "--atol", "0.01")
        self.assertTrue(out.startswith("identical: "), out)
        doc = json.loads(self.dvar("diff", a, b, "--atol", "1e-2", "--json")[0])
        self.assertEqual(doc["atol"], 0.01)
        w = [v for v in doc["variables"] if v["name"] == "w"][0]
        self.assertEqual((w["status"], w["num_different"]), ("equal", 0))
        self.assertAlmostEqual(w["max_abs_diff"], 1e-3, delta=2e-4)
        self.dvar("diff", a, b, "--atol", "1e-5", code=1)
        _, err = self.dvar("diff", a, b, "--atol", "-1", code=2)
        _, err = self.dvar("diff", a, b, "--atol", "nan", code=2)
        self.assertIn("--atol 'nan': expected a finite number >= 0", err)

    def test_small_pieces(self):
        other = {k: v.copy() for k, v in self.base.items()}
        other["w"][63, 299] = 7.0
        other["w"][0, 0] = 9.0
        a = self.make("a", self.base)
        b = self.make("b", other)
        want = max(abs(7.0 - float(self.base["w"][63, 299])),
                   abs(9.0 - float(self.base["w"][0, 0])))
        for budget in ("1", "100", "5000"):
            out, _ = self.dvar("diff", a, b, code=1, env={"DVAR_CLI_PIECE_BYTES": budget})
            line = [l for l in out.splitlines() if l.startswith("values differ: w: ")]
            self.assertEqual(len(line), 1, out)
            self.assertTrue(line[0].startswith("values differ: w: 2 of 19200 elements"), line)
            self.assertAlmostEqual(float(line[0].rsplit(" ", 1)[1]), want, places=4)

    def test_large_variable_in_pieces(self):
        # 80 MiB per side crosses the 64 MiB piece budget.
        big = np.zeros((20, 1024, 1024), np.float32)
        other = big.copy()
        other[19, 1023, 1023] = 2.0
        other[0, 0, 0] = -1.0
        a = self.make("a", {"big": big})
        b = self.make("b", {"big": other})
        out, _ = self.dvar("diff", a, b, code=1)
        self.assertIn("values differ: big: 2 of 20971520 elements, max abs diff 2\n", out)

    def test_missing_checkpoint(self):
        a = self.make("a", self.base)
        _, err = self.dvar("diff", a, self.path("nope"), code=3)
        self.assertTrue(err.startswith("dvar diff: "), err)
        self.assertIn("nope", err)


# --------------------------------------------------------------------- ls


class LsTest(CliCase):
    group = "ls"

    def test_keep_and_latest(self):
        root = self.path("root")
        for step in (1, 2, 3, 4):
            self.import_arrays(root, {"w": np.full(1000, step, np.float32)}, "--step", step,
                               "--keep", "2")
        self.assertEqual(sorted(n for n in os.listdir(root) if n.startswith("ckpt-")),
                         ["ckpt-3", "ckpt-4"])
        out, err = self.dvar("ls", root)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["STEP", "NAME", "SIZE", "MARKS"])
        self.assertEqual(lines[1].split()[:2] + lines[1].split()[-1:], ["3", "ckpt-3", "kept"])
        self.assertEqual(lines[2].split()[:2] + lines[2].split()[-1:],
                         ["4", "ckpt-4", "latest,kept"])
        self.assertEqual(len(lines), 3)
        doc = json.loads(self.dvar("ls", root, "--json")[0])
        self.assertEqual(doc["schema_version"], 1)
        got = [(c["name"], c["step"], c["latest"], c["kept"]) for c in doc["checkpoints"]]
        self.assertEqual(got, [("ckpt-3", 3, False, True), ("ckpt-4", 4, True, True)])
        for c in doc["checkpoints"]:
            self.assertGreater(c["bytes"], 0)
        # The root reads as its latest checkpoint.
        self.assert_same_array(self.cat_npy(root, "w"), np.full(1000, 4, np.float32))

    def test_keep_all(self):
        root = self.path("root")
        for step in (5, 100, 20):
            self.import_arrays(root, {"w": np.zeros(1)}, "--step", step)
        doc = json.loads(self.dvar("ls", root, "--json")[0])
        self.assertEqual([c["step"] for c in doc["checkpoints"]], [5, 20, 100])
        self.assertEqual([c["latest"] for c in doc["checkpoints"]], [False, True, False])

    def test_empty_and_missing_root(self):
        os.mkdir(self.path("empty"))
        out, err = self.dvar("ls", self.path("empty"))
        self.assertEqual(out, "")
        self.assertIn("no checkpoints", err)
        doc = json.loads(self.dvar("ls", self.path("empty"), "--json")[0])
        self.assertEqual(doc["checkpoints"], [])
        self.assertEqual(doc["leftovers"], [])
        _, err = self.dvar("ls", self.path("nope"), code=3)
        self.assertTrue(err.startswith("dvar ls: "), err)
        self.assertIn("nope", err)

    def test_checkpoint_for_root(self):
        ck = self.path("ck")
        self.import_arrays(ck, {"w": np.zeros(3)})
        out, err = self.dvar("ls", ck)
        self.assertEqual(out, "")
        self.assertEqual(err, "dvar ls: '%s' is a checkpoint, not a checkpoint root (a directory "
                         "of checkpoints); 'dvar inspect %s' lists its variables\n" % (ck, ck))

    def test_leftovers(self):
        # What writers left behind (docs/FORMAT.md, "Temporary names"): listed with
        # size and writer; the next writer removes only those whose writer is gone.
        root = self.path("root")
        self.import_arrays(root, {"w": np.zeros(4, np.float32)}, "--step", 1)
        host = re.sub(r"[^A-Za-z0-9_-]", "_", os.uname().nodename)[:32]
        gone = subprocess.Popen(["true"])
        gone.wait()
        names = {"ckpt-2": "%s-%d-aaaaaaaaaaaa" % (host, gone.pid),
                 "ckpt-3": "%s-%d-bbbbbbbbbbbb" % (host, os.getpid()),
                 "ckpt-4": "x%s-1-cccccccccccc" % host[:30],
                 "ckpt-5": "a1b2"}
        for target, tag in names.items():
            d = os.path.join(root, ".%s.dvartmp-%s" % (target, tag))
            os.mkdir(d)
            with open(os.path.join(d, "data-00000-of-00001"), "wb") as f:
                f.write(b"\0" * 100)
        out, err = self.dvar("ls", root)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertEqual(lines[1].split()[:2], ["1", "ckpt-1"])
        self.assertEqual(lines[2], "")
        self.assertEqual(lines[3].split(), ["LEFTOVER", "SIZE", "WRITER"])
        self.assertEqual(lines[4].split(), [".ckpt-2.dvartmp-" + names["ckpt-2"], "100", "B",
                                            "gone", "(pid", "%d" % gone.pid, "on", host + ")"])
        self.assertEqual(lines[5].split()[3], "running")
        self.assertEqual(lines[6].split()[3], "unknown")
        self.assertEqual(lines[7].split()[1:], ["100", "B", "unknown"])
        doc = json.loads(self.dvar("ls", root, "--json")[0])
        self.assertEqual([(l["target"], l["bytes"], l["writer"]) for l in doc["leftovers"]],
                         [("ckpt-2", 100, "gone"), ("ckpt-3", 100, "running"),
                          ("ckpt-4", 100, "unknown"), ("ckpt-5", 100, "unknown")])
        self.assertEqual((doc["leftovers"][0]["host"], doc["leftovers"][0]["pid"]),
                         (host, gone.pid))
        self.assertEqual((doc["leftovers"][3]["host"], doc["leftovers"][3]["pid"]), (None, None))
        self.import_arrays(root, {"w": np.zeros(4, np.float32)}, "--step", 6)
        doc = json.loads(self.dvar("ls", root, "--json")[0])
        self.assertEqual([l["target"] for l in doc["leftovers"]], ["ckpt-3", "ckpt-4", "ckpt-5"])
        self.assertEqual([c["name"] for c in doc["checkpoints"]], ["ckpt-1", "ckpt-6"])


# ---------------------------------------------------------------- reshard

# Shapes whose rows do not divide evenly, a single row, and fewer rows than shards.
AWKWARD = {"a": (13, 5), "b": (10, 3), "c": (1, 7), "d": (7, 3)}


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x20]))


class ReshardTest(CliCase, HelperMixin):
    group = "reshard"

    def check_resharded(self, ckpt, arrays, shards, merged=()):
        """Every variable of arrays is in ckpt as the div layout of shards[name], values
        exact; those in merged were sharded and are one shard now (kind=plain)."""
        layout = self.layout(ckpt)
        self.assertEqual(sorted(layout), sorted(arrays))
        values = self.export_npy(ckpt)
        for name, want in arrays.items():
            with self.subTest(ckpt=os.path.basename(ckpt), name=name):
                n = self.assert_div_layout(layout[name], shards[name], want.shape)
                self.assertEqual(layout[name][3],
                                 {"kind": "plain"} if n == 1 and name in merged else shard_attrs(n))
                self.assert_same_array(values[name], want)

    def test_every_n_to_m(self):
        arrays = {k: self.rng.standard_normal(s).astype(np.float32) for k, s in AWKWARD.items()}
        for n in range(1, 9):
            src = self.path("n%d" % n)
            self.import_arrays(src, arrays, *[x for k in arrays for x in ("--shards", "%s=%d" % (k, n))])
            self.check_resharded(src, arrays, {k: n for k in arrays})
            for m in range(1, 9):
                dst = self.path("n%d-m%d" % (n, m))
                # Tiny pieces (a few elements, less than a row) now and then.
                env = {"DVAR_CLI_PIECE_BYTES": "12"} if (n + m) % 3 == 0 else None
                if m % 2:
                    # --var reshards any variable, sharded or not, into at most its rows.
                    want = {k: min(m, AWKWARD[k][0]) for k in arrays}
                    opts = [x for k in arrays for x in ("--var", "%s=%d" % (k, want[k]))]
                else:
                    # --shards reshards the sharded ones; plain ones (1 shard) stay plain.
                    opts = ["--shards", m]
                    want = {k: m if min(n, AWKWARD[k][0]) > 1 else 1 for k in arrays}
                self.dvar("reshard", src, dst, *opts, env=env)
                self.check_resharded(dst, arrays, want,
                                     [k for k in arrays if min(n, AWKWARD[k][0]) > 1])
                shutil.rmtree(dst)
            shutil.rmtree(src)

    def test_every_dtype(self):
        variables, expect = [], {}
        for dtype in list(DTYPES) + ["bfloat16"]:
            name = "v_" + (DTYPES[dtype] if dtype in DTYPES else dtype)
            if dtype == "bfloat16":
                bits = bf16_bits(self.rng, (11, 4))
                full, expect[name] = bits, bf16_as_f32(bits)
            else:
                full = random_array(dtype, (11, 4), self.rng)
                expect[name] = full
            offsets = div_offsets(11, 3)
            slices = [("%d,%d:-" % (offsets[k], offsets[k + 1] - offsets[k]),
                       full[offsets[k]:offsets[k + 1]]) for k in range(3)]
            variables.append((name, name[2:], (11, 4), slices, shard_attrs(3)))
        src = self.path("src")
        self.helper_write(src, variables)
        for m in (5, 1, 11, 12):
            dst = self.path("m%d" % m)
            self.dvar("reshard", src, dst, "--shards", m)
            layout = self.layout(dst)
            for name, want in expect.items():
                with self.subTest(m=m, name=name):
                    self.assertEqual(layout[name][0], name[2:])
                    n = self.assert_div_layout(layout[name], m, (11, 4))
                    self.assertEqual(n, min(m, 11))
                    self.assertEqual(layout[name][3], shard_attrs(n) or {"kind": "plain"})
                    self.assert_same_array(self.cat_npy(dst, name), want)
            self.dvar("verify", dst)

    def test_attributes_and_kept_variables(self):
        full = self.rng.standard_normal((9, 4)).astype(np.float32)
        cols = np.arange(6 * 5, dtype=np.int32).reshape(6, 5)
        mirrored = np.array([1.5, 2.5])
        src = self.path("src")
        self.helper_write(src, [
            ("emb", "float32", (9, 4), [("0,5:-", full[:5]), ("5,4:-", full[5:])],
             dict(shard_attrs(2), note="keep me", aggregation="NONE")),
            # Saved by columns, no attributes: sharded because of its two slices.
            ("cols", "int32", (6, 5), [("-:0,2", cols[:, :2]), ("-:2,3", cols[:, 2:])], {}),
            ("m", "float64", (2,), [("all", mirrored)],
             {"kind": "mirrored", "synchronization": "ON_WRITE", "aggregation": "NONE"}),
        ])
        before = self.layout(src)
        # --var on one variable: the others are copied as they were saved.
        dst = self.path("var")
        self.dvar("reshard", src, dst, "--var", "emb=3")
        after = self.layout(dst)
        self.assert_div_layout(after["emb"], 3, (9, 4))
        self.assertEqual(after["emb"][3], dict(shard_attrs(3), note="keep me", aggregation="NONE"))
        self.assertEqual(after["cols"], before["cols"])
        self.assertEqual(after["m"], before["m"])
        self.assert_same_array(self.cat_npy(dst, "emb"), full)
        self.assert_same_array(self.cat_npy(dst, "cols"), cols)
        self.assert_same_array(self.cat_npy(dst, "m"), mirrored)
        # --shards: both sharded variables, the mirrored one kept.
        dst = self.path("shards")
        self.dvar("reshard", src, dst, "--shards", "4")
        after = self.layout(dst)
        self.assert_div_layout(after["emb"], 4, (9, 4))
        self.assertEqual(after["emb"][3], dict(shard_attrs(4), note="keep me", aggregation="NONE"))
        self.assert_div_layout(after["cols"], 4, (6, 5))
        self.assertEqual(after["cols"][3], shard_attrs(4))
        self.assertEqual(after["m"], before["m"])
        self.assert_same_array(self.cat_npy(dst, "cols"), cols)
        # One shard: a plain entry, without the layout's attributes.
        dst = self.path("merged")
        self.dvar("reshard", src, dst, "--shards", "1")
        after = self.layout(dst)
        self.assertEqual(after["emb"][2:], ([((0, 0), (9, 4))], {"kind": "plain", "note": "keep me",
                                                                 "aggregation": "NONE"}))
        self.assertEqual(after["cols"][2:], ([((0, 0), (6, 5))], {}))
        self.assert_same_array(self.cat_npy(dst, "emb"), full)
        # --var overrides --shards; a plain variable sharded with --var.
        dst = self.path("override")
        _, err = self.dvar("reshard", src, dst, "--shards", "2", "--var", "cols=1", "--var", "m=2")
        after = self.layout(dst)
        self.assert_div_layout(after["emb"], 2, (9, 4))
        self.assertEqual(after["cols"][2:], ([((0, 0), (6, 5))], {}))
        # A mirrored variable cut into shards is a sharded variable, as dvar_save writes one.
        self.assert_div_layout(after["m"], 2, (2,))
        self.assertEqual(after["m"][3], {"kind": "sharded", "shards": "2", "layout": "div"})
        self.assertIn("dvar reshard: note: variable 'm' becomes a sharded variable of 2 shards: "
                      "its synchronization and aggregation (a replicated variable's) are left "
                      "out\n", err)
        self.assert_same_array(self.cat_npy(dst, "m"), mirrored)

    def test_plain_variable_with_var(self):
        w = self.rng.standard_normal((10, 3))
        s = np.array(7, np.int64)
        src = self.path("src")
        self.import_arrays(src, {"w": w, "s": s})
        dst = self.path("dst")
        # Named, more shards than rows is a mistake: refused, nothing written.
        _, err = self.dvar("reshard", src, dst, "--var", "w=4", "--var", "s=3", code=3)
        self.assertEqual(err, "dvar reshard: variable 's' has 1 row (a scalar): it cannot be cut "
                              "into 3 shards\n")
        _, err = self.dvar("reshard", src, dst, "--var", "w=11", code=3)
        self.assertEqual(err, "dvar reshard: variable 'w' has 10 rows: it cannot be cut into 11 "
                              "shards\n")
        self.no_leftovers(self.dir, "dst")
        _, err = self.dvar("reshard", src, dst, "--var", "w=4", "--var", "s=1")
        self.assertEqual(err, "")
        layout = self.layout(dst)
        self.assertEqual(layout["w"][2], [((0, 0), (3, 3)), ((3, 0), (3, 3)), ((6, 0), (2, 3)),
                                          ((8, 0), (2, 3))])
        self.assertEqual(layout["w"][3], shard_attrs(4))
        self.assertEqual(layout["s"][2:], ([((), ())], {}))
        self.assert_same_array(self.cat_npy(dst, "w"), w)
        self.assert_same_array(self.cat_npy(dst, "s"), s)
        # --shards alone finds nothing sharded: every variable is copied.
        dst2 = self.path("dst2")
        self.dvar("reshard", src, dst2, "--shards", "3")
        self.assertEqual(self.layout(dst2), self.layout(src))

    def test_compressed_checkpoint(self):
        # Zero rows compress; lz4 chunks of 4 KiB split rows at odd places.
        table = self.rng.standard_normal((300, 37)).astype(np.float32)
        table[::3] = 0
        src = self.path("src")
        self.import_arrays(src, {"t": table}, "--shards", "t=7", "--compress", "lz4",
                           "--chunk-size", "4K")
        v = self.inspect_json(src)["variables"][0]
        self.assertLess(v["stored_bytes"], v["raw_bytes"])
        for m, opts in ((3, ["--compress", "lz4"]), (8, ["--compress", "none"]), (1, [])):
            dst = self.path("m%d" % m)
            self.dvar("reshard", src, dst, "--shards", m, "--chunk-size", "8K", *opts,
                      env={"DVAR_CLI_PIECE_BYTES": "5000"})
            self.check_resharded(dst, {"t": table}, {"t": m}, ["t"])
            v = self.inspect_json(dst)["variables"][0]
            if opts == ["--compress", "lz4"]:
                self.assertLess(v["stored_bytes"], v["raw_bytes"])
            if opts == ["--compress", "none"]:
                self.assertEqual(v["stored_bytes"], v["raw_bytes"])

    def test_partitioner(self):
        t = self.rng.standard_normal((100, 16)).astype(np.float32)  # 6400 bytes, 64 per row
        src = self.path("src")
        self.import_arrays(src, {"t": t}, "--shards", "t=2")
        # fixed:3; min-size: min(rows, 10, ceil(6400 / 2048)); max-size: ceil(100 / (1024 // 64)).
        for spec, n in (("fixed:3", 3), ("min-size:2K:10", 4), ("max-size:1K", 7),
                        ("fixed:1000", 100)):
            dst = self.path(spec.replace(":", "_"))
            self.dvar("reshard", src, dst, "--partitioner", spec)
            self.check_resharded(dst, {"t": t}, {"t": n})
        # min-size's MAX_SHARDS defaults to 1, as TensorFlow's: a note, not silence.
        dst = self.path("one")
        _, err = self.dvar("reshard", src, dst, "--partitioner", "min-size:2K")
        self.check_resharded(dst, {"t": t}, {"t": 1}, ["t"])
        self.assertEqual(err, "dvar reshard: note: variable 't': the partitioner 'min-size:2K' "
                              "gives 1 shard (min-size's MAX_SHARDS defaults to 1, as "
                              "TensorFlow's)\n")

    def test_errors(self):
        src, out = self.errors_source()
        usage = [
            ([], "nothing to do: give --shards, --partitioner or --var"),
            (["--shards", "0"], "--shards must be at least 1"),
            (["--shards", "-1"], "--shards '-1': expected a whole number >= 0"),
            (["--var", "a=0"], "--var 'a=0': M must be at least 1"),
            (["--var", "a"], "--var 'a' is not NAME=M"),
            (["--var", "a=x"], "--var 'a=x': M must be a whole number"),
            (["--var", "a=2", "--var", "a=3"], "--var gives variable 'a' twice"),
            (["--shards", "2", "--partitioner", "fixed:2"],
             "--shards and --partitioner both say how to shard every sharded variable: "
             "give one of them"),
            (["--compress", "zstd", "--shards", "2"],
             "--compress takes auto, lz4 or none, not 'zstd'"),
        ]
        self.assert_usage_errors("reshard", [src, out], out, usage)
        _, err = self.dvar("reshard", src, out, "--partitioner", "bogus:1", code=2)
        self.assertTrue(err.startswith("dvar reshard: --partitioner: "), err)
        self.assertIn("bogus", err)
        # An unknown --var: nothing is written.
        _, err = self.dvar("reshard", src, out, "--var", "nope=2", code=3)
        self.assertEqual(err, "dvar reshard: variable 'nope' not found in checkpoint "
                              "'%s'\n" % src)
        self.no_leftovers(self.dir, "out")
        # OUT exists: refused, untouched.
        os.mkdir(out)
        _, err = self.dvar("reshard", src, out, "--shards", "3", code=3)
        self.assertEqual(err, "dvar reshard: '%s' already exists; give a new path, or --force to "
                              "replace it\n" % out)
        self.assertEqual(os.listdir(out), [])
        os.rmdir(out)
        # IN missing, IN corrupt: a clear message, and nothing at OUT.
        _, err = self.dvar("reshard", self.path("missing"), out, "--shards", "3", code=3)
        self.assertTrue(err.startswith("dvar reshard: "), err)
        self.assertIn("missing", err)
        data = self.data_files(src)[0]
        flip_byte(data, 64 + 5)  # shard 1's chunk, packed after shard 0's
        _, err = self.dvar("reshard", src, out, "--shards", "3", code=3)
        self.assertTrue(err.startswith("dvar reshard: "), err)
        self.assertIn("variable 'a'", err)
        self.assertIn("checksum mismatch", err)
        self.no_leftovers(self.dir, "out")

    def test_progress(self):
        src = self.path("src")
        self.import_arrays(src, {"a": np.zeros((3000, 100))}, "--shards", "a=3")
        _, err = self.dvar("reshard", src, self.path("o1"), "--shards", "5", "--progress")
        self.assertRegex(err, r"^\rreshard: +\d+% \(.* of 2\.3 MiB\)")
        self.assertRegex(err, r"\r *\r$")
        _, err = self.dvar("reshard", src, self.path("o2"), "--shards", "5")
        self.assertEqual(err, "")

    def test_memory_stays_bounded(self):
        # 64 MiB in 3 shards to 5, through 1 MiB chunks: the command's peak RSS
        # must stay far below the variable's size.
        rows = 64 * 1024
        big = np.lib.format.open_memmap(self.path("big.npy"), mode="w+", dtype=np.float32,
                                        shape=(rows, 256))
        for r in range(0, rows, 8192):
            big[r:r + 8192] = np.arange(r, r + 8192, dtype=np.float32)[:, None]
        big.flush()
        del big
        src = self.path("src")
        self.dvar("import", src, "big=" + self.path("big.npy"), "--shards", "big=3",
                  "--chunk-size", "1M", "--no-compress")
        os.unlink(self.path("big.npy"))
        dst = self.path("dst")
        probe = ("import resource, subprocess, sys\n"
                 "rc = subprocess.call(sys.argv[1:])\n"
                 "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
        p = subprocess.run([sys.executable, "-c", probe, DVAR, "reshard", src, dst, "--shards", "5",
                            "--chunk-size", "1M"], stdout=subprocess.PIPE, check=True)
        rc, kib = map(int, p.stdout.split())
        self.assertEqual(rc, 0)
        if not SANITIZED:
            self.assertLess(kib, 48 * 1024, "peak RSS %d KiB for a 64 MiB variable" % kib)
        layout = self.layout(dst)
        self.assert_div_layout(layout["big"], 5, (rows, 256))
        self.dvar("verify", dst)
        # Spot checks: the first and last rows of every shard.
        for lo, hi in zip(div_offsets(rows, 5), div_offsets(rows, 5)[1:]):
            got = self.cat_npy(dst, "big", "--slice", "%d,1:-" % lo)
            self.assertTrue((got == lo).all())
            got = self.cat_npy(dst, "big", "--slice", "%d,1:0,3" % (hi - 1))
            self.assertTrue((got == hi - 1).all())


# ----------------------------------------------------------------- export


def parse_safetensors(path):
    """The standard layout, checked strictly: (header dict, {name: bytes})."""
    with open(path, "rb") as f:
        blob = f.read()
    assert len(blob) >= 8, "shorter than the length prefix"
    n = int.from_bytes(blob[:8], "little")
    assert (8 + n) % 8 == 0, "data does not start 8-byte aligned"
    text = blob[8:8 + n].decode("utf-8")
    assert text.startswith("{"), text[:20]
    assert text == text.rstrip(" ").ljust(n), "header padding is not spaces"
    header = json.loads(text)
    data = blob[8 + n:]
    tensors, end = {}, 0
    for name, info in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                             key=lambda kv: kv[1]["data_offsets"]):
        begin, stop = info["data_offsets"]
        assert begin == end, "%s starts at %d, not %d" % (name, begin, end)
        size = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I8": 1, "I16": 2, "I32": 4,
                "I64": 8, "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1}[info["dtype"]]
        assert stop - begin == size * int(np.prod(info["shape"], dtype=np.int64)), name
        tensors[name] = data[begin:stop]
        end = stop
    assert end == len(data), "%d bytes of data, the header covers %d" % (len(data), end)
    return header, tensors


ST_DTYPES = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16",
             "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8",
             "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL"}


class ExportTest(CliCase, HelperMixin):
    group = "export"

    def make_source(self):
        """Sharded variables of every dtype (lz4 where it pays), a plain one,
        a scalar, an empty one and optimizer slots; returns {name: (dtype, full bytes, shape)}."""
        variables, expect = [], {}
        for k, dtype in enumerate(list(DTYPES) + ["bfloat16"]):
            dname = DTYPES[dtype] if dtype in DTYPES else dtype
            shape = (13, 5) if k % 2 else (10, 3)
            full = bf16_bits(self.rng, shape) if dtype == "bfloat16" else \
                random_array(dtype, shape, self.rng)
            full[::2] = 0  # some zero rows, so lz4 takes some chunks
            n = 2 + k % 4
            offsets = div_offsets(shape[0], n)
            slices = [("%d,%d:-" % (offsets[j], offsets[j + 1] - offsets[j]),
                       full[offsets[j]:offsets[j + 1]]) for j in range(len(offsets) - 1)]
            name = "model/" + dname
            variables.append((name, dname, shape, slices, dict(shard_attrs(n), note=dname)))
            expect[name] = (dname, full.tobytes(), shape)
        plain = self.rng.standard_normal((3, 4))
        scalar = np.array(42, np.int64)
        empty = np.zeros((0, 4), np.float32)
        slot = self.rng.standard_normal((10, 3)).astype(np.float32)
        variables += [
            ("plain", "float64", (3, 4), [("all", plain)], {"kind": "plain"}),
            ("step", "int64", (), [("all", scalar)], {}),
            ("empty", "float32", (0, 4), [("all", empty)], {}),
            ("opt/m/emb", "float32", (10, 3), [("0,5:-", slot[:5]), ("5,5:-", slot[5:])],
             shard_attrs(2)),
            ("slot_v", "float32", (10, 3), [("all", slot)], {}),
            ("zeros", "uint8", (64, 100), [("all", np.zeros((64, 100), np.uint8))], {}),
        ]
        expect["zeros"] = ("uint8", bytes(6400), (64, 100))
        expect["plain"] = ("float64", plain.tobytes(), (3, 4))
        expect["step"] = ("int64", scalar.tobytes(), ())
        expect["empty"] = ("float32", b"", (0, 4))
        expect["opt/m/emb"] = ("float32", slot.tobytes(), (10, 3))
        expect["slot_v"] = ("float32", slot.tobytes(), (10, 3))
        src = self.path("src")
        self.helper_write(src, variables, "--compress", "lz4", "--chunk-size", "4096")
        return src, expect

    def test_dvar_export_maps_exactly(self):
        src, expect = self.make_source()
        self.assertTrue(any(v["stored_bytes"] < v["raw_bytes"]
                            for v in self.inspect_json(src)["variables"]))
        before = self.layout(src)
        out = self.path("serving")
        self.dvar("export", src, out, "--single-shard", env={"DVAR_CLI_PIECE_BYTES": "40"})
        doc = self.inspect_json(out)
        self.assertEqual(sorted(v["name"] for v in doc["variables"]), sorted(expect))
        for v in doc["variables"]:
            name = v["name"]
            dtype, data, shape = expect[name]
            with self.subTest(name=name):
                self.assertEqual((v["dtype"], tuple(v["shape"])), (dtype, shape))
                self.assertEqual(v["stored_bytes"], v["raw_bytes"])  # raw, uncompressed
                self.assertEqual(len(v["slices"]), 1)
                # Attributes: the layout's go, the others stay.
                attrs = {k: x for k, x in before[name][3].items() if k not in ("shards", "layout")}
                if attrs.get("kind") == "sharded":
                    attrs["kind"] = "plain"
                self.assertEqual(v["attributes"], attrs)
                mapped, aligned = self.helper_map(out, name, "--verify")
                self.assertEqual(mapped, data)
                self.assertTrue(aligned)
                mapped, _ = self.helper_map(out, name)
                self.assertEqual(mapped, data)
        self.dvar("verify", out)
        # The source itself cannot be mapped: several slices, lz4 chunks.
        err = self.helper_map(src, "model/float32", code=1)
        self.assertIn("cannot map variable 'model/float32' whole: it is saved as", err)
        err = self.helper_map(src, "zeros", code=1)
        self.assertIn("cannot map variable 'zeros' slice -:-: chunk 0 of 2 is lz4-compressed", err)

    def test_large_variable_maps(self):
        # Many chunks, written by several threads: still one contiguous run.
        a = self.rng.standard_normal((1000, 300)).astype(np.float32)
        src = self.path("src")
        self.import_arrays(src, {"a": a}, "--shards", "a=7", "--chunk-size", "4K")
        out = self.path("out")
        self.dvar("export", src, out, "--single-shard", "--chunk-size", "8K")
        self.assertEqual(self.inspect_json(out)["variables"][0]["num_chunks"], -(-a.nbytes // 8192))
        mapped, aligned = self.helper_map(out, "a", "--verify")
        self.assertEqual(mapped, a.tobytes())
        self.assertTrue(aligned)

    def test_safetensors(self):
        src, expect = self.make_source()
        out = self.path("model.safetensors")
        self.dvar("export", src, out, "--single-shard", "--format", "safetensors",
                  env={"DVAR_CLI_PIECE_BYTES": "24"})
        header, tensors = parse_safetensors(out)
        self.assertEqual(header["__metadata__"], {"format": "pt"})
        self.assertEqual(sorted(tensors), sorted(expect))
        for name, (dtype, data, shape) in expect.items():
            with self.subTest(name=name):
                self.assertEqual(header[name]["dtype"], ST_DTYPES[dtype])
                self.assertEqual(tuple(header[name]["shape"]), shape)
                self.assertEqual(tensors[name], data)
        self.assertEqual(oct(os.stat(out).st_mode & 0o777), oct(0o666 & ~self.umask()))
        self.assertEqual(sorted(os.listdir(self.dir)), sorted(
            [f for f in os.listdir(self.dir) if not f.startswith("model.safetensors.tmp")]))

    def test_npy_directory(self):
        src, expect = self.make_source()
        out = self.path("arrays")
        _, err = self.dvar("export", src, out, "--format", "npy", env={"DVAR_CLI_PIECE_BYTES": "24"})
        self.assertIn("dvar export: note: 'model/bfloat16' is bfloat16, which numpy lacks: "
                      "written as float32 (exactly)\n", err)
        with open(os.path.join(out, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual((manifest["format"], manifest["version"]), ("dvar-npy", 1))
        self.assertEqual(sorted(manifest["variables"]), sorted(expect))
        self.assertEqual(manifest["variables"]["opt/m/emb"]["file"], "opt__m__emb.npy")
        for name, (dtype, data, shape) in expect.items():
            with self.subTest(name=name):
                entry = manifest["variables"][name]
                self.assertEqual((entry["dtype"], tuple(entry["shape"])), (dtype, shape))
                arr = np.load(os.path.join(out, entry["file"]))
                self.assertEqual(arr.shape, shape)
                if dtype == "bfloat16":
                    bits = np.frombuffer(data, np.uint16).astype(np.uint32) << 16
                    self.assertEqual(arr.tobytes(), bits.view(np.float32).tobytes())
                else:
                    self.assertEqual(arr.tobytes(), data)
        self.assertEqual([f for f in os.listdir(self.dir) if f.startswith(".")], [])

    def test_format_follows_name(self):
        src, expect = self.make_source()
        out = self.path("by-name.safetensors")
        self.dvar("export", src, out)
        header, tensors = parse_safetensors(out)
        self.assertEqual(sorted(tensors), sorted(expect))
        _, err = self.dvar("export", src, self.path("x.safetensors"), "--format", "dvar",
                           "--single-shard", code=3)
        self.assertIn("ends in .safetensors, but the format asked for is dvar", err)
        self.assertFalse(os.path.exists(self.path("x.safetensors")))

    def test_name_filters(self):
        variables = [(name, "float32", (2,), [("all", np.arange(2, dtype=np.float32) + k)], {})
                     for k, name in enumerate([
                         "dense/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                         "dense/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
                         "w", "w/Adam", "w/Adam_1", "global_step"])]
        src = self.path("src")
        self.helper_write(src, variables)
        out = self.path("out.safetensors")
        self.dvar("export", src, out, "--drop-optimizer", "--short-names",
                  "--drop-prefix", "global_")
        header, tensors = parse_safetensors(out)
        self.assertEqual(sorted(tensors), ["dense/kernel", "w"])
        self.assertEqual(tensors["dense/kernel"], np.arange(2, dtype=np.float32).tobytes())
        _, err = self.dvar("export", src, self.path("o2.safetensors"), "--drop-prefix", "nope",
                           code=3)
        self.assertIn("no variable of checkpoint '%s' starts with 'nope'" % src, err)

    def test_summary_line_on_a_terminal(self):
        a = np.arange(12, dtype=np.float32).reshape(4, 3)
        npy = self.path("a.npy")
        np.save(npy, a)
        runs = [
            (["import", self.path("ckpt"), "a=" + npy, "--shards", "a=2"], "import", "ckpt"),
            (["reshard", self.path("ckpt"), self.path("r"), "--shards", "3"], "reshard", "r"),
            (["export", self.path("ckpt"), self.path("m.safetensors")], "export", "m.safetensors"),
        ]
        for args, cmd, out in runs:
            with self.subTest(cmd=cmd):
                code, _, err = run_with_tty_stderr([DVAR] + args)
                self.assertEqual(code, 0, err)
                self.assertRegex(err.decode(), r"^dvar %s: wrote '%s': 1 variable, 48 B in "
                                 r"[0-9.]+ s\r?\n$" % (cmd, re.escape(self.path(out))))
        code, _, err = run_with_tty_stderr([DVAR, "export", self.path("ckpt"),
                                            self.path("q.safetensors"), "--quiet"])
        self.assertEqual((code, err), (0, b""))
        # Not a terminal: nothing.
        _, err = self.dvar("export", self.path("ckpt"), self.path("n.safetensors"))
        self.assertEqual(err, "")

    def umask(self):
        mask = os.umask(0)
        os.umask(mask)
        return mask

    def test_safetensors_values_with_numpy(self):
        # numpy reads back what a safetensors reader would hand a framework.
        arrays = {"f16": self.rng.standard_normal((4, 3)).astype(np.float16),
                  "u64": np.array([0, 2**64 - 1, 5], np.uint64),
                  "b": np.array([[True, False], [False, True]])}
        src = self.path("src")
        self.import_arrays(src, arrays, "--shards", "f16=3")
        out = self.path("m.safetensors")
        self.dvar("export", src, out, "--single-shard", "--format=safetensors")
        header, tensors = parse_safetensors(out)
        np_types = {"F16": np.float16, "U64": np.uint64, "BOOL": np.bool_}
        for name, want in arrays.items():
            got = np.frombuffer(tensors[name], np_types[header[name]["dtype"]])
            self.assert_same_array(got.reshape(header[name]["shape"]), want)

    def test_drop_prefix(self):
        src, expect = self.make_source()
        for fmt in ("dvar", "safetensors"):
            out = self.path("out-" + fmt)
            self.dvar("export", src, out, "--single-shard", "--format", fmt,
                      "--drop-prefix", "opt/", "--drop-prefix", "slot_")
            if fmt == "dvar":
                names = [v["name"] for v in self.inspect_json(out)["variables"]]
            else:
                names = list(parse_safetensors(out)[1])
            self.assertEqual(sorted(names), sorted(k for k in expect
                                                   if not k.startswith(("opt/", "slot_"))))

    def test_errors(self):
        src, out = self.errors_source()
        usage = [
            ([], "export writes every variable as one full tensor: give --single-shard"),
            (["--single-shard", "--format", "npz"],
             "--format takes dvar, safetensors, tf or npy, not 'npz'"),
            (["--single-shard", "--format", "safetensors", "--chunk-size", "8K"],
             "--chunk-size applies to --format dvar only"),
            (["--single-shard", "--chunk-size", "1000"],
             "--chunk-size must be a multiple of 4096 from 4096 to 1 GiB"),
            (["--single-shard", "--drop-prefix", ""], "--drop-prefix '' would drop every variable"),
        ]
        self.assert_usage_errors("export", [src, out], out, usage)
        for fmt in ("dvar", "safetensors"):
            with open(out, "w") as f:
                f.write("x")
            _, err = self.dvar("export", src, out, "--single-shard", "--format", fmt, code=3)
            self.assertEqual(err, "dvar export: '%s' already exists; give a new path, or --force "
                                  "to replace it\n" % out)
            with open(out) as f:
                self.assertEqual(f.read(), "x")
            os.unlink(out)
        # A corrupt IN: nothing at OUT, no temporary file.
        flip_byte(self.data_files(src)[0], 64 + 7)  # shard 1's packed chunk
        for fmt in ("dvar", "safetensors"):
            _, err = self.dvar("export", src, out, "--single-shard", "--format", fmt, code=3)
            self.assertTrue(err.startswith("dvar export: "), err)
            self.assertIn("checksum mismatch", err)
            self.no_leftovers(self.dir, "out")

    def test_names_and_coverage(self):
        half = np.arange(6, dtype=np.int32).reshape(2, 3)
        src = self.path("src")
        self.helper_write(src, [
            (b"bad\xffname", "int32", (2, 3), [("all", half)], {}),
            ("__metadata__", "int32", (2, 3), [("all", half)], {}),
            ("partial", "int32", (4, 3), [("0,2:-", half)], {}),
        ])
        out = self.path("out")
        _, err = self.dvar("export", src, out, "--single-shard", "--format", "safetensors",
                           "--drop-prefix", "partial", "--drop-prefix", "__", code=3)
        self.assertIn("cannot be named in a safetensors file (names must be UTF-8", err)
        self.no_leftovers(self.dir, "out")
        _, err = self.dvar("export", src, out, "--single-shard", "--format", "safetensors",
                           "--drop-prefix", "partial", "--drop-prefix", "bad", code=3)
        self.assertIn("variable '__metadata__' cannot be named in a safetensors file", err)
        # A variable whose saved slices do not cover it cannot be exported whole.
        _, err = self.dvar("export", src, out, "--single-shard", code=3)
        self.assertIn("variable 'partial': slice -:- is not covered by the 1 saved slices", err)
        self.no_leftovers(self.dir, "out")
        self.dvar("export", src, out, "--single-shard", "--drop-prefix", "partial")
        self.assertEqual(len(self.inspect_json(out)["variables"]), 2)

    def test_progress(self):
        src = self.path("src")
        self.import_arrays(src, {"a": np.zeros((3000, 100))}, "--shards", "a=3")
        for fmt in ("dvar", "safetensors"):
            _, err = self.dvar("export", src, self.path("o-" + fmt), "--single-shard", "--format",
                               fmt, "--progress")
            self.assertRegex(err, r"^\rexport: +\d+% \(.* of 2\.3 MiB\)")
            self.assertRegex(err, r"\r *\r$")
            _, err = self.dvar("export", src, self.path("p-" + fmt), "--single-shard",
                               "--format", fmt)
            self.assertEqual(err, "")


# -------------------------------------------------------------------- usage


COMMANDS = ["import", "inspect", "cat", "verify", "diff", "ls", "reshard", "export", "help",
            "version"]


class UsageTest(CliCase):
    group = "usage"

    def test_help_for_every_command(self):
        for cmd in COMMANDS:
            with self.subTest(cmd=cmd):
                out, err = self.dvar(cmd, "--help")
                self.assertEqual(err, "")
                self.assertTrue(out.startswith("usage: dvar %s" % cmd), out)
                self.assertIn("Exit status: 0 success, ", out)
                self.assertIn("2 usage error, 3 runtime error.", out)
                self.assertEqual(self.dvar(cmd, "-h")[0], out)
                self.assertEqual(self.dvar("help", cmd)[0], out)
        self.assertIn("1 a chunk is corrupt", self.dvar("verify", "--help")[0])
        self.assertIn("1 the checkpoints differ", self.dvar("diff", "--help")[0])
        self.assertIn("--chunk-size BYTES", self.dvar("import", "--help")[0])
        self.assertIn("numpy has no bfloat16", self.dvar("import", "--help")[0])

    def test_overview(self):
        out, err = self.dvar("help")
        self.assertEqual(err, "")
        for cmd in COMMANDS:
            self.assertRegex(out, r"\n  %s +\S" % cmd)
        for code in ("0  success", "1  a check failed", "2  usage error", "3  runtime error"):
            self.assertIn(code, out)
        self.assertEqual(self.dvar("--help")[0], out)
        _, err = self.dvar(code=2)
        self.assertEqual(err, out)

    def test_version(self):
        out, _ = self.dvar("version")
        self.assertRegex(out, r"^dvar \d+\.\d+\.\d+ \(libdvar \d+\.\d+\.\d+\)\n$")
        self.assertEqual(self.dvar("--version")[0], out)

    def test_usage_errors(self):
        cases = [
            (["frobnicate"], "dvar: 'frobnicate' is not a dvar command. See 'dvar help'.\n"),
            (["help", "frobnicate"], "dvar help: 'frobnicate' is not a dvar command\n"
                                     "See 'dvar help help'.\n"),
            (["inspect"], "dvar inspect: missing PATH\nSee 'dvar help inspect'.\n"),
            (["inspect", "a", "b"], "dvar inspect: unexpected argument 'b'\n"
                                    "See 'dvar help inspect'.\n"),
            (["inspect", "a", "--jsn"], "dvar inspect: unknown option '--jsn'; did you mean "
                                        "'--json'?\nSee 'dvar help inspect'.\n"),
            (["inspect", "a", "-j"], "dvar inspect: unknown option '-j'\n"
                                     "See 'dvar help inspect'.\n"),
            (["inspect", "a", "--json=yes"], "dvar inspect: --json takes no value\n"
                                             "See 'dvar help inspect'.\n"),
            (["cat", "a"], "dvar cat: missing NAME\nSee 'dvar help cat'.\n"),
            (["cat", "a", "b", "--slice"], "dvar cat: --slice needs a value (SPEC)\n"
                                           "See 'dvar help cat'.\n"),
            (["diff", "a"], "dvar diff: missing B\nSee 'dvar help diff'.\n"),
            (["diff", "a", "b", "--atol", "x"],
             "dvar diff: --atol 'x': expected a finite number >= 0\nSee 'dvar help diff'.\n"),
            (["import", "out", "a=b", "--step", "1.5"],
             "dvar import: --step '1.5': expected a whole number >= 0\n"
             "See 'dvar help import'.\n"),
            (["verify"], "dvar verify: missing PATH\nSee 'dvar help verify'.\n"),
            (["ls"], "dvar ls: missing ROOT\nSee 'dvar help ls'.\n"),
            (["version", "x"], "dvar version: unexpected argument 'x'\n"
                               "See 'dvar help version'.\n"),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                out, err = self.dvar(*args, code=2)
                self.assertEqual(out, "")
                self.assertEqual(err, message)

    def test_options_anywhere_and_double_dash(self):
        ckpt = self.path("ckpt")
        npy = self.save_npy(np.arange(3, dtype=np.int8))
        self.dvar("import", ckpt, "--", "-x=" + npy)
        out, _ = self.dvar("cat", "--slice", "1,2", ckpt, "--", "-x")
        self.assertEqual(out, "[1, 2]\n")
        out, _ = self.dvar("cat", "--slice=0,1", ckpt, "--", "-x")
        self.assertEqual(out, "[0]\n")

    def test_quick_command_on_a_terminal_draws_nothing(self):
        # On a terminal progress waits a second before it shows; --progress does not wait.
        ckpt = self.path("ckpt")
        self.import_arrays(ckpt, {"w": np.zeros(1000)})
        for opts, drawn in (([], False), (["--progress"], True)):
            code, _, err = run_with_tty_stderr([DVAR, "diff", ckpt, ckpt] + opts)
            self.assertEqual(code, 0)
            self.assertEqual(b"\rdiff: 100% (15.6 KiB of 15.6 KiB)" in err, drawn, err)

    def test_json_prints_no_progress(self):
        ckpt = self.path("ckpt")
        self.import_arrays(ckpt, {"w": np.zeros(10)})
        out, err = self.dvar("verify", ckpt, "--json", "--progress")
        self.assertEqual(err, "")
        json.loads(out)
        out, err = self.dvar("diff", ckpt, ckpt, "--json", "--progress")
        self.assertEqual(err, "")
        json.loads(out)


def run(cases):
    """Run the test classes cases(args) chooses (args: the parsed command line,
    which sets the command and helpers under test); names after the options
    keep only the tests whose id holds one of them. Exits."""
    global DVAR, LIB, HELPER, SANITIZED
    parser = argparse.ArgumentParser()
    parser.add_argument("--dvar", required=True, help="the dvar command to test")
    parser.add_argument("--lib", help="libdvar.so, for checkpoints the CLI cannot write")
    parser.add_argument("--helper", help="tests/cli/cli_helper")
    parser.add_argument("--sanitized", action="store_true", help="libdvar is built with ASan")
    parser.add_argument("--group", help="run only this group of tests")
    args, rest = parser.parse_known_args()
    DVAR = os.path.abspath(args.dvar)
    LIB = args.lib and os.path.abspath(args.lib)
    HELPER = args.helper and os.path.abspath(args.helper)
    SANITIZED = args.sanitized
    loader = unittest.TestLoader()
    suite = unittest.TestSuite()
    for case in cases(args):
        suite.addTests(loader.loadTestsFromTestCase(case))
    if rest:
        suite = unittest.TestSuite(t for t in iter_tests(suite) if any(r in t.id() for r in rest))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() and result.testsRun else 1)


def iter_tests(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from iter_tests(t)
        else:
            yield t


if __name__ == "__main__":
    run(lambda args: [c for c in CliCase.__subclasses__() if args.group in (None, c.group)])
