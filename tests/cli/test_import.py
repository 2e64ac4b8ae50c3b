#!/usr/bin/python3
"""tests/cli/test_import.py - `dvar import` of .npz archives and safetensors
files, beside the .npy files test_cli.py's import group covers.

Archives from np.savez (stored members) and np.savez_compressed (deflated),
whole or under a PREFIX=; safetensors files written here byte by byte as the
format's specification says (an 8-byte little-endian header length, the
JSON header padded with spaces, the byte buffer), with every dtype the
format shares with dvar (BF16 and F16 too), tensors listed in any order and
__metadata__; values checked with `dvar cat --json` and `--npy`. Also: what
is refused (a damaged archive, a dtype dvar lacks) with nothing left at OUT,
shards of container arrays, `dvar export` to safetensors read back against
the specification and imported again, and peak memory bounded while big
files stream.

    test_import.py --dvar build/cli/dvar --helper build/tests/cli/dvar_cli_helper
                   [--lib build/libdvar.so | --sanitized] [unittest args]
"""
import json
import os
import struct
import subprocess
import sys
import zipfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli  # noqa: E402
from test_cli import (DTYPES, SHAPES, CliCase, HelperMixin, bf16_as_f32, bf16_bits,  # noqa: E402
                      flip_byte, random_array)

# safetensors' dtype names for the dtypes dvar has, and numpy's types for them
# (bfloat16 travels as its uint16 bits).
ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "BF16": np.uint16,
             "I8": np.int8, "I16": np.int16, "I32": np.int32, "I64": np.int64,
             "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
             "BOOL": np.bool_}
DVAR_NAMES = {"F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
              "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64", "U8": "uint8",
              "U16": "uint16", "U32": "uint32", "U64": "uint64", "BOOL": "bool"}


def safetensors_bytes(tensors, order=None, metadata=None):
    """A safetensors file: tensors {name: (dtype name, array)}, their data in
    `order` (default: the header's), the header padded to 8 bytes."""
    offsets, data = {}, b""
    for name in order or tensors:
        raw = np.ascontiguousarray(tensors[name][1]).tobytes()
        offsets[name] = [len(data), len(data) + len(raw)]
        data += raw
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, arr) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": offsets[name]}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def parse_safetensors(blob):
    """The specification's rules, checked: ({name: (dtype, shape, bytes)}, metadata)."""
    (n,) = struct.unpack("<Q", blob[:8])
    text = blob[8:8 + n]
    assert text.startswith(b"{"), text[:20]
    header = json.loads(text.decode("utf-8"))
    assert text.rstrip(b" ").endswith(b"}"), "the header pads with spaces only"
    metadata = header.pop("__metadata__", None)
    buffer = blob[8 + n:]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    at = 0
    for begin, end, name in spans:
        # The tensors tile the byte buffer, in the order of their offsets.
        assert begin == at, "tensor %r starts at %d, not %d" % (name, begin, at)
        at = end
    assert at == len(buffer), "%d bytes of data, %d used" % (len(buffer), at)
    out = {}
    for name, v in header.items():
        assert set(v) == {"dtype", "shape", "data_offsets"}, v
        begin, end = v["data_offsets"]
        out[name] = (v["dtype"], tuple(v["shape"]), buffer[begin:end])
    return out, metadata


class ImportFormatsTest(CliCase, HelperMixin):
    group = "import_formats"

    def cat_json(self, ckpt, name):
        out, _ = self.dvar("cat", ckpt, name, "--json")
        return json.loads(out)

    def assert_imported(self, ckpt, arrays):
        """ckpt holds exactly arrays {name: array}, read back through one npy export
        (bfloat16 given as the float32 it widens to)."""
        doc = self.inspect_json(ckpt)
        self.assertEqual(sorted(v["name"] for v in doc["variables"]), sorted(arrays))
        got = self.export_npy(ckpt)
        for name, want in arrays.items():
            self.assert_same_array(got[name], want)

    def test_npz_stored_and_compressed(self):
        arrays = {}
        for dtype in DTYPES:
            for shape in SHAPES[:5] + SHAPES[-3:]:
                arrays["%s_%s" % (DTYPES[dtype], "x".join(map(str, shape)) or "s")] = \
                    random_array(dtype, shape, self.rng)
        for save in (np.savez, np.savez_compressed):
            with self.subTest(save=save.__name__):
                path = self.path(save.__name__ + ".npz")
                save(path, **arrays)
                # Alone: every array under its own name.
                ckpt = self.path("ckpt-" + save.__name__)
                self.dvar("import", ckpt, path)
                self.assert_imported(ckpt, arrays)
                self.dvar("verify", ckpt)
                # PREFIX=: under PREFIX/.
                ckpt = self.path("pre-" + save.__name__)
                self.dvar("import", ckpt, "model=" + path, "--compress", "lz4")
                self.assert_imported(ckpt, {"model/" + k: v for k, v in arrays.items()})

    def test_npz_json_values(self):
        path = self.path("small.npz")
        np.savez_compressed(path, w=np.array([[1.5, -2.0], [0.25, 3.0]], np.float32),
                            flags=np.array([True, False, True]), n=np.int64(-7))
        ckpt = self.path("ckpt")
        self.dvar("import", ckpt, path)
        w = self.cat_json(ckpt, "w")
        self.assertEqual((w["dtype"], w["shape"], w["values"]),
                         ("float32", [2, 2], [[1.5, -2], [0.25, 3]]))
        self.assertEqual(self.cat_json(ckpt, "flags")["values"], [True, False, True])
        n = self.cat_json(ckpt, "n")
        self.assertEqual((n["dtype"], n["shape"], n["values"]), ("int64", [], -7))

    def test_npz_other_members_are_noted(self):
        path = self.path("mixed.npz")
        np.savez(path, a=np.arange(3, dtype=np.int16))
        with zipfile.ZipFile(path, "a") as z:
            z.writestr("README.txt", "hello")
        ckpt = self.path("ckpt")
        _, err = self.dvar("import", ckpt, path)
        self.assertEqual(err, "dvar import: note: '%s': member 'README.txt' left out: not a "
                              ".npy file\n" % path)
        self.assert_imported(ckpt, {"a": np.arange(3, dtype=np.int16)})

    def test_safetensors_every_dtype(self):
        tensors, want = {}, {}
        for k, (st, np_type) in enumerate(ST_DTYPES.items()):
            shape = [(), (4,), (2, 3), (2, 0, 3), (3, 1, 2)][k % 5]
            name = "layer.%d.%s" % (k, st)
            if st == "BF16":
                bits = bf16_bits(self.rng, shape)
                tensors[name] = (st, bits)
                want[name] = bf16_as_f32(bits)
            else:
                arr = random_array(np_type, shape, self.rng)
                tensors[name] = (st, arr)
                want[name] = arr
        # The data in reverse order of the header, and metadata, as the format allows.
        path = self.path("model.safetensors")
        with open(path, "wb") as f:
            f.write(safetensors_bytes(tensors, order=list(reversed(tensors)),
                                      metadata={"format": "pt"}))
        ckpt = self.path("ckpt")
        self.dvar("import", ckpt, path)
        self.assert_imported(ckpt, want)
        doc = self.inspect_json(ckpt)
        for v in doc["variables"]:
            self.assertEqual(v["dtype"], DVAR_NAMES[tensors[v["name"]][0]])
        bf = self.cat_json(ckpt, "layer.3.BF16")
        self.assertEqual(bf["dtype"], "bfloat16")
        self.assertEqual(bf["values"], bf16_as_f32(tensors["layer.3.BF16"][1]).tolist())

    def test_safetensors_unsupported_dtype(self):
        for dtype in ("F8_E4M3", "F8_E5M2", "C64"):
            with self.subTest(dtype=dtype):
                path = self.path("f8.safetensors")
                header = json.dumps({"ok": {"dtype": "F32", "shape": [1],
                                            "data_offsets": [0, 4]},
                                     "q": {"dtype": dtype, "shape": [2],
                                           "data_offsets": [4, 12]}}).encode()
                with open(path, "wb") as f:
                    f.write(struct.pack("<Q", len(header)) + header + bytes(12))
                ckpt = self.path("ckpt")
                _, err = self.dvar("import", ckpt, path, code=3)
                self.assertEqual(err, "dvar import: '%s': tensor 'q' has dtype %s, which dvar "
                                      "cannot hold (it holds BOOL, U8-U64, I8-I64, F16, BF16, "
                                      "F32, F64)\n" % (path, dtype))
                self.no_leftovers(self.dir, "ckpt")

    def test_damaged_files_leave_nothing(self):
        a = np.arange(5000, dtype=np.float32)
        stored = self.path("stored.npz")
        np.savez(stored, a=a)
        flip_byte(stored, os.path.getsize(stored) // 2)  # inside a's data
        cut = self.path("cut.npz")
        np.savez_compressed(cut, a=a)
        with open(cut, "r+b") as f:
            f.truncate(os.path.getsize(cut) - 30)
        bad_st = self.path("bad.safetensors")
        with open(bad_st, "wb") as f:
            f.write(safetensors_bytes({"a": ("F32", a)})[:-8])
        for path, message in [
                (stored, "member 'a.npy' fails its CRC-32 check"),
                (cut, "bad .npz archive: no end of central directory record"),
                (bad_st, "tensor 'a': data_offsets [0, 20000] lie outside the 19992 bytes")]:
            with self.subTest(path=path):
                good = self.save_npy(np.zeros(3))
                for opts in ([], ["--step", "1"]):
                    out = self.path("out")
                    _, err = self.dvar("import", out, "g=" + good, path, *opts, code=3)
                    self.assertTrue(err.startswith("dvar import: '%s': " % path), err)
                    self.assertIn(message, err)
                    self.no_leftovers(self.dir, "out")

    def test_bare_file_must_be_a_container(self):
        npy = self.save_npy(np.zeros(2))
        out = self.path("out")
        self.assert_usage_errors("import", [out], out, [
            ([npy], "'%s' is not NAME=FILE.npy, FILE.npz or FILE.safetensors" % npy)])

    def test_names_across_files_must_differ(self):
        npz = self.path("a.npz")
        np.savez(npz, w=np.zeros(2))
        st = self.path("b.safetensors")
        with open(st, "wb") as f:
            f.write(safetensors_bytes({"w": ("F32", np.zeros(2, np.float32))}))
        _, err = self.dvar("import", self.path("out"), npz, st, code=3)
        self.assertEqual(err, "dvar import: two arrays are named 'w': from '%s' and '%s'\n"
                         % (npz, st))
        self.no_leftovers(self.dir, "out")

    def test_shards_of_container_arrays(self):
        emb = random_array(np.float32, (10, 4), self.rng)
        npz = self.path("m.npz")
        np.savez_compressed(npz, emb=emb)
        bias = random_array(np.float16, (7,), self.rng)
        st = self.path("m.safetensors")
        with open(st, "wb") as f:
            f.write(safetensors_bytes({"bias": ("F16", bias)}))
        ckpt = self.path("ckpt")
        self.dvar("import", ckpt, "npz=" + npz, st, "--shards", "npz/emb=3",
                  "--shards", "bias=2", "--chunk-size", "4K")
        layout = self.layout(ckpt)
        self.assert_div_layout(layout["npz/emb"], 3, emb.shape)
        self.assertEqual(layout["npz/emb"][3], {"kind": "sharded", "shards": "3",
                                                "layout": "div"})
        self.assert_div_layout(layout["bias"], 2, bias.shape)
        self.assert_imported(ckpt, {"npz/emb": emb, "bias": bias})

    def test_export_to_safetensors_follows_the_format(self):
        arrays = {"a": random_array(np.float32, (3, 5), self.rng),
                  "b/c": random_array(np.int8, (7,), self.rng),
                  "s": random_array(np.float64, (), self.rng),
                  "z": np.zeros((0, 2), np.uint16)}
        npz = self.path("in.npz")
        np.savez(npz, **arrays)
        ckpt = self.path("ckpt")
        self.dvar("import", ckpt, npz, "--shards", "a=2")
        out = self.path("out.safetensors")
        self.dvar("export", ckpt, out, "--format", "safetensors")
        with open(out, "rb") as f:
            blob = f.read()
        tensors, _ = parse_safetensors(blob)
        # The header's length keeps the data 8-byte aligned.
        self.assertEqual(struct.unpack("<Q", blob[:8])[0] % 8, 0)
        names = {"float32": "F32", "int8": "I8", "float64": "F64", "uint16": "U16"}
        self.assertEqual(sorted(tensors), sorted(arrays))
        for name, arr in arrays.items():
            self.assertEqual(tensors[name], (names[arr.dtype.name], arr.shape, arr.tobytes()))
        # And back.
        again = self.path("again")
        self.dvar("import", again, out)
        self.assert_imported(again, arrays)

    def test_memory_stays_bounded(self):
        # 64 MiB through 1 MiB chunks, as .npy, stored .npz and deflated .npz:
        # the command's peak RSS stays far below the array's size.
        rows = 64 * 1024
        big = np.lib.format.open_memmap(self.path("big.npy"), mode="w+", dtype=np.float32,
                                        shape=(rows, 256))
        for r in range(0, rows, 8192):
            big[r:r + 8192] = np.arange(r, r + 8192, dtype=np.float32)[:, None]
        big.flush()
        np.savez(self.path("big.npz"), big=big)
        np.savez_compressed(self.path("bigc.npz"), big=big)
        probe = ("import resource, subprocess, sys\n"
                 "rc = subprocess.call(sys.argv[1:])\n"
                 "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
        for k, src in enumerate(["big=" + self.path("big.npy"), self.path("big.npz"),
                                 self.path("bigc.npz")]):
            with self.subTest(src=src):
                out = self.path("out%d" % k)
                p = subprocess.run([sys.executable, "-c", probe, test_cli.DVAR, "import", out,
                                    src, "--chunk-size", "1M", "--shards", "big=3"],
                                   stdout=subprocess.PIPE, check=True)
                rc, kib = map(int, p.stdout.split())
                self.assertEqual(rc, 0)
                if not test_cli.SANITIZED:
                    self.assertLess(kib, 48 * 1024, "peak RSS %d KiB for a 64 MiB array" % kib)
                self.assert_div_layout(self.layout(out)["big"], 3, (rows, 256))
                last = self.cat_npy(out, "big", "--slice", "%d,1:-" % (rows - 1))
                self.assert_same_array(last, big[rows - 1:])
                self.dvar("verify", out)


if __name__ == "__main__":
    test_cli.run(lambda args: [ImportFormatsTest])
