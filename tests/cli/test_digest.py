#!/usr/bin/python3
"""tests/cli/test_digest.py - `dvar digest` and `dvar verify --against`.

Digests are the CRC-32C of each array's bytes as numpy holds them (C order,
little-endian), computed here with the table-driven CRC of tfbundle.py: for
every dtype and shape imported from .npy, for row and column slices written
by the helper, and for a TensorFlow fixture (its string tensor gets "-" and
a note). They are equal across `dvar reshard` and `dvar export`, and differ
after one changed value; --json's document; an unknown name exits 3.
`verify --against` exits 0 for a reshard of the same values, 1 naming each
variable that differs (values, shape, missing), with its JSON section.

    test_digest.py --dvar build/cli/dvar --helper build/tests/cli/dvar_cli_helper
                   [--lib build/libdvar.so | --sanitized] [unittest args]
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli  # noqa: E402
from test_cli import DTYPES, CliCase, HelperMixin, random_array  # noqa: E402
from tfbundle import crc32c  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(SOURCE_DIR, "fixtures", "tf")


def digest_of(arr):
    return "%08x" % crc32c(np.ascontiguousarray(arr).tobytes())


def shape_text(shape):
    return "[%s]" % ",".join(map(str, shape))


class DigestTest(CliCase, HelperMixin):
    group = "digest"

    def digests(self, ckpt, *args, code=0):
        """{name: (dtype, shape text, crc)} of `dvar digest`, and the names in order."""
        out, err = self.dvar("digest", ckpt, *args, code=code)
        rows, order = {}, []
        for line in out.splitlines():
            name, dtype, shape, crc = line.split()
            rows[name] = (dtype, shape, crc)
            order.append(name)
        return rows, order, err

    def emb_source(self, arr, name="src", shards=2):
        src = self.path(name)
        self.import_arrays(src, {"emb": arr, "bias": np.arange(7, dtype=np.float64)},
                           "--shards", "emb=%d" % shards)
        return src

    def test_every_dtype_equals_crc_of_bytes(self):
        shapes = [(), (0,), (5,), (3, 4), (2, 3, 4), (3, 0)]
        arrays = {}
        for dtype, dname in DTYPES.items():
            for k, shape in enumerate(shapes):
                arrays["%s/%d" % (dname, k)] = random_array(dtype, shape, self.rng)
        src = self.path("src")
        self.import_arrays(src, arrays)
        rows, order, err = self.digests(src)
        self.assertEqual(err, "")
        self.assertEqual(order, sorted(arrays))
        for name, a in arrays.items():
            dtype = DTYPES[a.dtype.type]
            self.assertEqual(rows[name], (dtype, shape_text(a.shape), digest_of(a)), name)
        self.assertEqual(rows["float32/1"][2], "00000000")  # the CRC of no bytes

    def test_row_and_column_slices(self):
        a = random_array(np.int32, (9, 6), self.rng)
        ckpt = self.path("sliced")
        self.helper_write(ckpt, [
            ("rows", "int32", (9, 6), [("5,4:-", a[5:]), ("0,5:-", a[:5])], {}),
            ("cols", "int32", (9, 6), [("-:0,2", a[:, :2]), ("-:2,4", a[:, 2:])], {}),
        ])
        rows, _, _ = self.digests(ckpt)
        self.assertEqual(rows["rows"][2], digest_of(a))
        self.assertEqual(rows["cols"][2], digest_of(a))

    def test_equal_across_reshard_and_export(self):
        a = random_array(np.float32, (40, 7), self.rng)
        src = self.emb_source(a)
        want, _, _ = self.digests(src)
        self.assertEqual(want["emb"], ("float32", "[40,7]", digest_of(a)))
        resharded, exported = self.path("r3"), self.path("single")
        self.dvar("reshard", src, resharded, "--shards", "3", "--chunk-size", "4096")
        self.dvar("export", src, exported, "--single-shard")
        self.assertEqual(len(self.layout(resharded)["emb"][2]), 3)
        self.assertEqual(self.digests(resharded)[0], want)
        self.assertEqual(self.digests(exported)[0], want)

    def test_one_changed_value_changes_the_digest(self):
        a = random_array(np.float32, (40, 7), self.rng)
        b = a.copy()
        b[17, 3] += 1
        da, _, _ = self.digests(self.emb_source(a, "a"))
        db, _, _ = self.digests(self.emb_source(b, "b"))
        self.assertNotEqual(da["emb"], db["emb"])
        self.assertEqual(db["emb"][2], digest_of(b))
        self.assertEqual(da["bias"], db["bias"])

    def test_names_json_and_unknown_name(self):
        a = random_array(np.int16, (4, 3), self.rng)
        src = self.emb_source(a)
        rows, order, _ = self.digests(src, "emb", "bias")
        self.assertEqual(order, ["emb", "bias"])
        out, err = self.dvar("digest", src, "--json")
        self.assertEqual(err, "")
        doc = json.loads(out)
        self.assertEqual(doc["schema_version"], 1)
        self.assertEqual(doc["path"], src)
        self.assertEqual(doc["variables"], [
            {"name": "bias", "dtype": "float64", "shape": [7],
             "crc32c": digest_of(np.arange(7, dtype=np.float64))},
            {"name": "emb", "dtype": "int16", "shape": [4, 3], "crc32c": digest_of(a)},
        ])
        out, err = self.dvar("digest", src, "emb", "nope", code=3)
        self.assertEqual(out, "")
        self.assertIn("nope", err)
        self.dvar("digest", code=2)
        self.dvar("digest", self.path("missing"), code=3)

    def test_tensorflow_fixture(self):
        prefix = os.path.join(FIXTURES, "vars_and_arithmetic", "variables")
        rows, _, err = self.digests(prefix)
        self.assertEqual(rows["_CHECKPOINTABLE_OBJECT_GRAPH"], ("string", "[]", "-"))
        self.assertIn("_CHECKPOINTABLE_OBJECT_GRAPH", err)
        for name, v in (("x", 1.0), ("y", 2.0), ("child/z", 3.0)):
            full = name + "/.ATTRIBUTES/VARIABLE_VALUE"
            self.assertEqual(rows[full], ("float32", "[]", digest_of(np.float32(v).reshape(()))))
        rows, _, _ = self.digests(prefix, "--short-names", "x")
        self.assertEqual(list(rows), ["x"])
        out, _ = self.dvar("digest", prefix, "--json")
        graph = json.loads(out)["variables"][0]
        self.assertEqual((graph["dtype"], graph["crc32c"]), ("string", None))
        emb = os.path.join(FIXTURES, "embedding", "embedding.ckpt")
        rows, _, _ = self.digests(emb)
        want = np.array([[1, 2], [3, 5], [7, 11]], dtype=np.float32)
        self.assertEqual(rows["my_embedding"], ("float32", "[3,2]", digest_of(want)))

    def test_verify_against(self):
        a = random_array(np.float32, (40, 7), self.rng)
        src = self.emb_source(a)
        resharded = self.path("r3")
        self.dvar("reshard", src, resharded, "--shards", "3")
        out, _ = self.dvar("verify", resharded, "--against", src)
        self.assertIn("against %s: 2 variables compared: OK" % src, out)

        b = a.copy()
        b[0, 0] = -b[0, 0] + 1
        changed = self.emb_source(b, "changed")
        out, _ = self.dvar("verify", changed, "--against", src, code=1)
        self.assertIn("digest differs: emb: %s vs %s" % (digest_of(b), digest_of(a)), out)
        self.assertNotIn("bias", out)
        self.assertIn("1 differs", out)

        other = self.path("other")
        self.import_arrays(other, {"emb": a[:20], "extra": np.zeros(3, np.int8)})
        out, _ = self.dvar("verify", other, "--against", src, code=1)
        self.assertIn("shape differs: emb: [20,7] vs [40,7]", out)
        self.assertIn("only in %s: extra" % other, out)
        self.assertIn("only in %s: bias" % src, out)

        out, _ = self.dvar("verify", other, "--against", src, "--json", code=1)
        doc = json.loads(out)
        self.assertFalse(doc["ok"])
        self.assertEqual(doc["num_bad"], 0)
        against = doc["against"]
        self.assertEqual(against["path"], src)
        self.assertEqual(sorted((d["name"], d["status"]) for d in against["differences"]),
                         [("bias", "only_in_other"), ("emb", "shape_differs"),
                          ("extra", "only_in_path")])
        self.assertEqual((against["num_compared"], against["num_different"], against["ok"]),
                         (0, 3, False))
        out, _ = self.dvar("verify", resharded, "--against", src, "--json")
        doc = json.loads(out)
        self.assertTrue(doc["ok"] and doc["against"]["ok"])
        self.assertEqual(doc["against"]["differences"], [])
        self.dvar("verify", src, "--against", self.path("missing"), code=3)

    def test_verify_against_a_tensorflow_source(self):
        # A conversion out of TensorFlow leaves the object graph out: noted, not a difference.
        prefix = os.path.join(FIXTURES, "optimizer_slots", "variables")
        converted = self.path("converted")
        self.dvar("export", prefix, converted, "--single-shard")
        out, err = self.dvar("verify", converted, "--against", prefix)
        self.assertIn("against %s: 8 variables compared: OK" % prefix, out)
        self.assertIn("dvar verify: note: variable '_CHECKPOINTABLE_OBJECT_GRAPH', a string "
                      "tensor, is only in '%s': not compared" % prefix, err)


if __name__ == "__main__":
    test_cli.run(lambda args: [DigestTest])
