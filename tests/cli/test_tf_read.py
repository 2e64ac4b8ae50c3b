#!/usr/bin/python3
"""tests/cli/test_tf_read.py - the dvar command on TensorFlow checkpoints
(TensorBundle: PREFIX.index plus PREFIX.data-NNNNN-of-MMMMM): the real ones
in fixtures/tf/ (copied, never edited) with exact values, damaged copies,
TF's `checkpoint` state file, string tensors, --short-names, a partitioned
(ShardedVariable) tensor (fixtures/tf/sharded_variable, the reference's
worked example), and bundles this file writes itself (tensorflow is not
needed: write_bundle below encodes the format of
../shared/reference/tf-behavior.md §4, and reproduces its worked examples
byte for byte) for what no fixture holds: string tensors of every rank,
every dtype, a dtype dvar has no type for.

    test_tf_read.py --dvar build/cli/dvar [--helper H] [--lib L | --sanitized]
                    [unittest args]
"""
import base64
import json
import os
import re
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli  # noqa: E402  (CliCase, parse_safetensors: the same driver)
from test_cli import CliCase, flip_byte, parse_safetensors  # noqa: E402
from tfbundle import crc32c, mask  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures", "tf")
GRAPH = "_CHECKPOINTABLE_OBJECT_GRAPH"


def key(name):
    """A TF2 object-based key: name/.ATTRIBUTES/VARIABLE_VALUE."""
    return name + "/.ATTRIBUTES/VARIABLE_VALUE"


def f32(text):
    return np.array(np.float32(text), np.float32)


# Every fixture: its prefix in its folder, and {key: (dtype, shape, value or
# None for the object graph, index entry size)}. Values are TensorFlow's
# (tf-behavior.md §4.10, fixtures/tf/README.md).
FIXTURE_VARS = {
    "embedding": ("embedding.ckpt", {
        "my_embedding": ("float32", [3, 2],
                         np.array([[1, 2], [3, 5], [7, 11]], np.float32), 24),
    }),
    "half_plus_two": ("variables", {
        "a": ("float32", [], f32("0.5"), 4),
        "b": ("float32", [], f32("2"), 4),
        "c": ("float32", [], f32("3"), 4),
    }),
    "vars_and_arithmetic": ("variables", {
        key("x"): ("float32", [], f32("1"), 4),
        key("y"): ("float32", [], f32("2"), 4),
        key("child/z"): ("float32", [], f32("3"), 4),
        GRAPH: ("string", [], None, 256),
    }),
    "optimizer_slots": ("variables", {
        key("v"): ("float32", [], f32("4.999"), 4),
        key("opt/iter"): ("int64", [], np.array(1, np.int64), 8),
        key("opt/beta_1"): ("float32", [], f32("0.9"), 4),
        key("opt/beta_2"): ("float32", [], f32("0.999"), 4),
        key("opt/decay"): ("float32", [], f32("0"), 4),
        key("opt/learning_rate"): ("float32", [], f32("0.001"), 4),
        "v/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE":
            ("float32", [], f32("0.30000007"), 4),
        "v/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE":
            ("float32", [], f32("0.008999884"), 4),
        GRAPH: ("string", [], None, 774),
    }),
    "two_shards": ("variables", {
        key("v"): ("float32", [1, 1, 1], np.ones((1, 1, 1), np.float32), 4),
        GRAPH: ("string", [], None, 120),
    }),
}

# Where each fixture's object graph starts in data file 0.
GRAPH_OFFSET = {"vars_and_arithmetic": 12, "optimizer_slots": 36, "two_shards": 0}


def text_of(arr):
    """What `dvar cat` prints for a small array of whole or short floats."""
    def fmt(x):
        if arr.dtype == np.bool_:
            return "True" if x else "False"
        if arr.dtype.kind == "f":
            s = str(arr.dtype.type(x))
            return s[:-2] if s.endswith(".0") else s
        return str(x)
    if arr.ndim == 0:
        return fmt(arr[()]) + "\n"

    def rec(a, depth):
        if a.ndim == 1:
            return "[" + ", ".join(fmt(x) for x in a) + "]"
        sep = ",\n" + "\n" * (a.ndim - 2) + " " * (depth + 1)
        return "[" + sep.join(rec(s, depth + 1) for s in a) + "]"
    return rec(arr, 0) + "\n"


def cquote(b):
    """What `dvar cat` prints for one string element."""
    out = '"'
    for c in b:
        if c == 0x22:
            out += '\\"'
        elif c == 0x5c:
            out += "\\\\"
        elif c == 0x0a:
            out += "\\n"
        elif c == 0x0d:
            out += "\\r"
        elif c == 0x09:
            out += "\\t"
        elif 0x20 <= c <= 0x7e:
            out += chr(c)
        else:
            out += "\\x%02x" % c
    return out + '"'


def json_bytes(v):
    """A string element of `dvar cat --json` back to its bytes."""
    if isinstance(v, str):
        return v.encode("utf-8")
    return base64.b64decode(v["base64"])


def read_varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7f) << shift
        shift += 7
        if c < 0x80:
            return v, i


def scalar_string(data, offset):
    """A scalar DT_STRING entry's element, decoded by hand: varint length,
    4 bytes of length checksum, the bytes (tf-behavior.md §4.5)."""
    n, i = read_varint(data, offset)
    return data[i + 4:i + 4 + n]


# ------------------------------------------------------------ bundle writer

def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def pb_varint(field, v):
    return varint(field << 3) + varint(v) if v else b""


def pb_bytes(field, b):
    return varint((field << 3) | 2) + varint(len(b)) + b


def entry_proto(dtype, dims, shard=0, offset=0, size=0, crc=0, slices=()):
    """BundleEntryProto, proto3 as TF writes it; slices: per slice, per dim
    None (whole) or (start, length)."""
    shape = b"".join(pb_bytes(2, pb_varint(1, d)) for d in dims)
    out = pb_varint(1, dtype) + pb_bytes(2, shape)
    out += pb_varint(3, shard) + pb_varint(4, offset) + pb_varint(5, size)
    if crc:
        out += varint((6 << 3) | 5) + struct.pack("<I", crc)
    for sl in slices:
        extents = b"".join(pb_bytes(1, b"" if e is None else
                                    pb_varint(1, e[0]) + varint(2 << 3) + varint(e[1]))
                           for e in sl)
        out += pb_bytes(7, extents)
    return out


def header_proto(num_shards):
    return pb_varint(1, num_shards) + pb_bytes(3, pb_varint(1, 1))


def table_block(entries, interval):
    out, restarts, last = bytearray(), [], b""
    for k, (k_, value) in enumerate(entries):
        shared = 0
        if k % interval == 0:
            restarts.append(len(out))
        else:
            while shared < min(len(last), len(k_)) and last[shared] == k_[shared]:
                shared += 1
        out += varint(shared) + varint(len(k_) - shared) + varint(len(value))
        out += k_[shared:] + value
        last = k_
    for r in restarts or [0]:
        out += struct.pack("<I", r)
    return bytes(out + struct.pack("<I", len(restarts or [0])))


def table(entries):
    """A LevelDB-format table as TensorBundle writes it (one data block)."""
    out = bytearray()

    def put(contents):
        at = len(out)
        out.extend(contents + b"\x00" + struct.pack("<I", mask(crc32c(contents + b"\x00"))))
        return at, len(contents)
    data = put(table_block(entries, 16))
    meta = put(table_block([], 1))
    last = entries[-1][0]
    i = next((i for i, b in enumerate(last) if b != 0xff), None)
    succ = last if i is None else last[:i] + bytes([last[i] + 1])
    index = put(table_block([(succ, varint(data[0]) + varint(data[1]))], 1))
    footer = varint(meta[0]) + varint(meta[1]) + varint(index[0]) + varint(index[1])
    footer += b"\x00" * (40 - len(footer)) + struct.pack("<Q", 0xdb4775248b80fb57)
    return bytes(out) + footer


def string_data(elems):
    """A DT_STRING tensor's bytes and its entry's (masked) checksum."""
    lens = b"".join(varint(len(e)) for e in elems)
    crc_l = crc32c(b"".join(struct.pack("<I", len(e)) for e in elems))
    masked = struct.pack("<I", mask(crc_l))
    body = b"".join(elems)
    return lens + masked + body, mask(crc32c(masked + body, crc_l))


TF_DTYPES = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6,
             "string": 7, "int64": 9, "bool": 10, "bfloat16": 14, "uint16": 17,
             "float16": 19, "uint32": 22, "uint64": 23}


def slice_key(full, extents):
    """EncodeTensorNameSlice for small starts and lengths (< 64)."""
    escaped = {0x00: b"\x00\xff", 0xff: b"\xff\x00"}
    out = b"\x00" + b"".join(escaped.get(c, bytes([c])) for c in full)
    out += b"\x00\x01" + b"\x01" + bytes([len(extents)])
    for e in extents:
        start, length = (0, -1) if e is None else e
        out += bytes([(0x80 ^ start) & 0xff, (0x80 ^ length) & 0xff])
    return out


def write_bundle(prefix, tensors):
    """tensors: (key, dtype name or TF number, shape, raw bytes or a list of
    bytes (strings)); each may end with a shard number (default 0). Returns
    the data files' paths."""
    shards = max([t[4] for t in tensors if len(t) > 4] + [0]) + 1
    data = [bytearray() for _ in range(shards)]
    entries = [(b"", header_proto(shards))]
    for t in tensors:
        name, dtype, shape, value = t[:4]
        shard = t[4] if len(t) > 4 else 0
        code = TF_DTYPES.get(dtype, dtype)
        if isinstance(value, list):
            raw, crc = string_data(value)
        else:
            raw, crc = bytes(value), mask(crc32c(bytes(value)))
        entries.append((name.encode(), entry_proto(code, shape, shard, len(data[shard]),
                                                   len(raw), crc)))
        data[shard] += raw
    entries.sort()
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    with open(prefix + ".index", "wb") as f:
        f.write(table(entries))
    files = []
    for k, d in enumerate(data):
        files.append("%s.data-%05d-of-%05d" % (prefix, k, shards))
        with open(files[-1], "wb") as f:
            f.write(d)
    return files


# tf-behavior.md §4.6: ShardedVariable `s` with 4 int32 shards [0],[1],[2],[3]:
# fixtures/tf/sharded_variable, PREFIX ckpt-1 (the whole .index, 291 bytes, and
# its data file).
SHARDED_FIXTURE = os.path.join(FIXTURES, "sharded_variable", "ckpt-1")
SHARDED_DATA = np.arange(4, dtype="<i4").tobytes()
SHARDED = key("s")


class TfCase(CliCase):
    def fixture(self, name, dest=None):
        """A copy of fixtures/tf/NAME; its prefix."""
        dest = dest or self.path(name)
        shutil.copytree(os.path.join(FIXTURES, name), dest)
        return os.path.join(dest, FIXTURE_VARS[name][0])

    def data_file(self, prefix, shard=0, shards=1):
        return "%s.data-%05d-of-%05d" % (prefix, shard, shards)

    def graph_bytes(self, name):
        with open(os.path.join(FIXTURES, name, "variables.data-00000-of-0000%d"
                               % (2 if name == "two_shards" else 1)), "rb") as f:
            return scalar_string(f.read(), GRAPH_OFFSET[name])

    def sharded(self):
        """A copy of the §4.6 ShardedVariable bundle; its prefix."""
        dest = self.path("sv")
        shutil.copytree(os.path.dirname(SHARDED_FIXTURE), dest)
        return os.path.join(dest, os.path.basename(SHARDED_FIXTURE))

    def cat_raw(self, ckpt, name, *opts):
        dst = self.path("raw-%d.bin" % len(os.listdir(self.dir)))
        self.dvar("cat", ckpt, name, "--raw", dst, *opts)
        with open(dst, "rb") as f:
            return f.read()

    def cat_json(self, ckpt, name, *opts, code=0):
        out, err = self.dvar("cat", ckpt, name, "--json", *opts, code=code)
        self.assertEqual(err, "")
        doc = json.loads(out)
        self.assertEqual(doc["schema_version"], 1)
        return doc

    def table(self, out):
        """inspect's table: {name: [dtype, shape, raw, stored, ratio, chunks, slices...]},
        the size cells joined ("256 B")."""
        rows = {}
        for line in out.splitlines()[2:-1]:
            if line.startswith("    "):
                continue
            m = re.match(r"^(\S+)\s+(\S+(?: \d+)?)\s+(\S+)\s+(\S+ \S+)\s+(\S+ \S+)\s+(\S+)\s+"
                         r"(\d+)\s+(.*)$", line)
            self.assertTrue(m, line)
            rows[m.group(1)] = list(m.groups()[1:7]) + m.group(8).split()
        return rows


# --------------------------------------------------------------- fixtures


class FixtureReadTest(TfCase):
    """Every fixture: listed, read with exact values, verified."""

    def test_bundles_this_test_writes_match_the_reference(self):
        # The writer below the reader's tests reproduces the reference's bytes.
        data, crc = string_data([b"hello", b"world"])
        self.assertEqual(data.hex(), "0505b56f994f68656c6c6f776f726c64")
        self.assertEqual(crc, 0x07d64c1b)
        entries = [(b"", header_proto(1))]
        for i in range(4):
            entries.append((slice_key(SHARDED.encode(), [(i, 1)]),
                            entry_proto(3, [1], 0, 4 * i, 4,
                                        mask(crc32c(struct.pack("<i", i))))))
        entries.append((SHARDED.encode(),
                        entry_proto(3, [4], slices=[[(i, 1)] for i in range(4)])))
        with open(SHARDED_FIXTURE + ".index", "rb") as f:
            self.assertEqual(table(entries), f.read())
        with open(SHARDED_FIXTURE + ".data-00000-of-00001", "rb") as f:
            self.assertEqual(f.read(), SHARDED_DATA)
        with open(os.path.join(FIXTURES, "embedding", "embedding.ckpt.index"), "rb") as f:
            embedding = f.read()
        w = self.path("w", "embedding.ckpt")
        write_bundle(w, [("my_embedding", "float32", [3, 2],
                          np.array([1, 2, 3, 5, 7, 11], "<f4").tobytes())])
        with open(w + ".index", "rb") as f:
            self.assertEqual(f.read(), embedding)

    def test_values(self):
        for fixture, (_, variables) in FIXTURE_VARS.items():
            prefix = self.fixture(fixture)
            for name, (dtype, shape, value, _) in variables.items():
                with self.subTest(fixture=fixture, name=name):
                    if value is None:
                        continue
                    self.assertEqual(self.dvar("cat", prefix, name)[0], text_of(value))
                    self.assert_same_array(self.cat_npy(prefix, name), value)
                    self.assertEqual(self.cat_raw(prefix, name), value.tobytes())
                    doc = self.cat_json(prefix, name)
                    self.assertEqual((doc["name"], doc["dtype"], doc["shape"]),
                                     (name, dtype, shape))
                    self.assertEqual(np.array(doc["values"], value.dtype).tobytes(),
                                     value.tobytes())

    def test_object_graph(self):
        # The object graph: a scalar string tensor, read as its bytes.
        for fixture in ("vars_and_arithmetic", "optimizer_slots", "two_shards"):
            with self.subTest(fixture=fixture):
                prefix = self.fixture(fixture)
                want = self.graph_bytes(fixture)
                size = FIXTURE_VARS[fixture][1][GRAPH][3]
                self.assertEqual(len(varint(len(want))) + 4 + len(want), size)
                self.assertEqual(self.cat_raw(prefix, GRAPH), want)
                self.assertEqual(self.dvar("cat", prefix, GRAPH)[0], cquote(want) + "\n")
                doc = self.cat_json(prefix, GRAPH)
                self.assertEqual((doc["dtype"], doc["shape"]), ("string", []))
                self.assertEqual(json_bytes(doc["values"]), want)
                _, err = self.dvar("cat", prefix, GRAPH, "--npy", self.path("g.npy"), code=2)
                self.assertIn("string tensor", err)
                self.assertFalse(os.path.exists(self.path("g.npy")))
        self.assertEqual(len(self.graph_bytes("vars_and_arithmetic")), 250)

    def test_inspect(self):
        for fixture, (_, variables) in FIXTURE_VARS.items():
            with self.subTest(fixture=fixture):
                prefix = self.fixture(fixture)
                doc = self.inspect_json(prefix)
                got = {v["name"]: (v["dtype"], v["shape"], v["raw_bytes"], len(v["slices"]),
                                   v["attributes"])
                       for v in doc["variables"]}
                want = {name: (dtype, shape, size, 1, {})
                        for name, (dtype, shape, _, size) in variables.items()}
                self.assertEqual(got, want)
                self.assertEqual([v["name"] for v in doc["variables"]], sorted(variables))
                self.assertEqual(doc["raw_bytes"], sum(v[3] for v in variables.values()))
                out, err = self.dvar("inspect", prefix)
                self.assertEqual(err, "")
                rows = self.table(out)
                self.assertEqual(sorted(rows), sorted(variables))
                for name, (dtype, shape, _, size) in variables.items():
                    self.assertEqual(rows[name][:3],
                                     [dtype, "[%s]" % ",".join(map(str, shape)), "%d B" % size])
                self.assertRegex(out.splitlines()[-1],
                                 r"^%d variables?, %d chunks?, " % (len(variables), len(variables)))
        # The listing of one fixture, as it prints.
        out, _ = self.dvar("inspect", self.fixture("vars_and_arithmetic", self.path("va2")))
        rows = self.table(out)
        self.assertEqual(rows[GRAPH], ["string", "[]", "256 B", "256 B", "1.00", "1", "-"])
        self.assertEqual(rows[key("child/z")],
                         ["float32", "[]", "4 B", "4 B", "1.00", "1", "-"])
        emb = self.fixture("embedding", self.path("emb2"))
        self.assertEqual(self.table(self.dvar("inspect", emb)[0])
                         ["my_embedding"], ["float32", "[3,2]", "24 B", "24 B", "1.00", "1",
                                            "-:-"])

    def test_verify(self):
        for fixture, (_, variables) in FIXTURE_VARS.items():
            with self.subTest(fixture=fixture):
                prefix = self.fixture(fixture)
                n, size = len(variables), sum(v[3] for v in variables.values())
                out, err = self.dvar("verify", prefix)
                self.assertEqual(err, "")
                s = "" if n == 1 else "s"
                self.assertEqual(out, "%d variable%s, %d chunk%s, %d bytes checked: OK\n"
                                 % (n, s, n, s, size))
                doc = json.loads(self.dvar("verify", prefix, "--json")[0])
                self.assertEqual((doc["ok"], doc["num_bad"], doc["num_variables"],
                                  doc["bytes"]), (True, 0, n, size))

    def test_two_data_files(self):
        # v lives in data-00001, the object graph in data-00000.
        prefix = self.fixture("two_shards")
        self.assertEqual(self.dvar("cat", prefix, key("v"))[0], "[[[1]]]\n")
        self.assertEqual(self.cat_raw(prefix, GRAPH), self.graph_bytes("two_shards"))
        # Damage in data-00001 is v's, and only v's.
        flip_byte(self.data_file(prefix, 1, 2), 2)
        out, _ = self.dvar("verify", prefix, code=1)
        lines = out.splitlines()
        self.assertEqual(len(lines), 2, out)
        self.assertRegex(lines[0], r"^bad chunk: variable 'v/\.ATTRIBUTES/VARIABLE_VALUE', "
                                   r"file \S*variables\.data-00001-of-00002, offset 0, chunk 0: ")
        self.assertEqual(lines[1], "2 variables, 2 chunks, 124 bytes checked: 1 bad chunk")
        self.dvar("cat", prefix, key("v"), code=3)
        self.assertEqual(self.cat_raw(prefix, GRAPH), self.graph_bytes("two_shards"))
        # Without data-00001, v cannot be read: the error names the file.
        os.unlink(self.data_file(prefix, 1, 2))
        _, err = self.dvar("cat", prefix, key("v"), code=3)
        self.assertTrue(err.startswith("dvar cat: "), err)
        self.assertIn("variables.data-00001-of-00002", err)
        # Unreadable, not corrupt: exit 3, naming the file and the OS's reason.
        out, err = self.dvar("verify", prefix, code=3)
        self.assertIn("unreadable chunk: ", out)
        self.assertIn("variables.data-00001-of-00002", out)
        self.assertIn("No such file or directory", err)
        self.assertEqual(self.cat_raw(prefix, GRAPH), self.graph_bytes("two_shards"))


# ------------------------------------------------------------------ damage


class DamageTest(TfCase):
    def setUp(self):
        super().setUp()
        self.prefix = self.fixture("vars_and_arithmetic")
        self.data = self.data_file(self.prefix)

    def test_flipped_value_byte(self):
        flip_byte(self.data, 1)  # in x (offset 0)
        out, err = self.dvar("verify", self.prefix, code=1)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertEqual(len(lines), 2, out)
        m = re.match(r"^bad chunk: variable '(.+)', file (\S+), offset (\d+), chunk (\d+): (.+)$",
                     lines[0])
        self.assertTrue(m, lines[0])
        self.assertEqual(m.group(1), key("x"))
        self.assertEqual(os.path.realpath(m.group(2)), os.path.realpath(self.data))
        self.assertEqual((m.group(3), m.group(4)), ("0", "0"))
        self.assertEqual(lines[1], "4 variables, 4 chunks, 268 bytes checked: 1 bad chunk")
        doc = json.loads(self.dvar("verify", self.prefix, "--json", code=1)[0])
        self.assertEqual((doc["ok"], doc["num_bad"]), (False, 1))
        self.assertEqual(doc["bad_chunks"][0]["variable"], key("x"))
        out, _ = self.dvar("verify", self.prefix, "--short-names", code=1)
        self.assertTrue(out.startswith("bad chunk: variable 'x', file "), out)
        _, err = self.dvar("cat", self.prefix, key("x"), code=3)
        self.assertTrue(err.startswith("dvar cat: "), err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertFalse(os.path.exists(self.path("x.npy")))
        self.dvar("cat", self.prefix, key("x"), "--npy", self.path("x.npy"), code=3)
        self.assertFalse(os.path.exists(self.path("x.npy")))
        # The rest still reads.
        self.assertEqual(self.dvar("cat", self.prefix, key("y"))[0], "2\n")
        self.assertEqual(self.cat_raw(self.prefix, GRAPH), self.graph_bytes("vars_and_arithmetic"))
        # Diff reads and fails, saying so.
        _, err = self.dvar("diff", self.prefix, self.fixture("vars_and_arithmetic",
                                                            self.path("clean")), code=3)
        self.assertTrue(err.startswith("dvar diff: "), err)

    def test_flipped_string_byte(self):
        flip_byte(self.data, 12 + 6 + 100)  # inside the object graph's bytes
        out, _ = self.dvar("verify", self.prefix, code=1)
        self.assertRegex(out, r"^bad chunk: variable '%s', file \S*variables\.data-00000-of-00001, "
                              r"offset 12, chunk 0: .+\n4 variables, 4 chunks, 268 bytes checked: "
                              r"1 bad chunk\n$" % GRAPH)
        for opts in ([], ["--json"], ["--raw", self.path("g.bin")]):
            with self.subTest(opts=opts):
                out, err = self.dvar("cat", self.prefix, GRAPH, *opts, code=3)
                self.assertTrue(err.startswith("dvar cat: "), err)
                if opts == ["--json"]:
                    # One document, saying why.
                    doc = json.loads(out)
                    self.assertEqual((doc["ok"], doc["error"]["code"]), (False, "DVAR_ECORRUPT"))
                else:
                    self.assertEqual(out, "")
        self.assertFalse(os.path.exists(self.path("g.bin")))
        self.assertEqual(self.dvar("cat", self.prefix, key("x"))[0], "1\n")

    def test_truncated_data_file(self):
        os.truncate(self.data, 100)  # the scalars stay, the object graph does not
        out, err = self.dvar("verify", self.prefix, code=1)
        self.assertRegex(out, r"^bad chunk: variable '%s', file \S*variables\.data-00000-of-00001"
                              % GRAPH)
        self.assertTrue(out.endswith("1 bad chunk\n"), out)
        _, err = self.dvar("cat", self.prefix, GRAPH, code=3)
        self.assertIn("variables.data-00000-of-00001", err)
        self.assertEqual(self.dvar("cat", self.prefix, key("child/z"))[0], "3\n")

    def test_damaged_index(self):
        index = self.prefix + ".index"
        with open(index, "rb") as f:
            good = f.read()
        damaged = {
            "flipped": good[:40] + bytes([good[40] ^ 0x04]) + good[41:],
            "truncated": good[:len(good) // 2],
            "empty": b"",
            "garbage": bytes(self.rng.integers(0, 256, len(good), dtype=np.uint8)),
            "bad magic": good[:-1] + b"\x00",
        }
        for what, blob in damaged.items():
            with open(index, "wb") as f:
                f.write(blob)
            for cmd in (["inspect"], ["verify"], ["cat", "-", key("x")]):
                with self.subTest(what=what, cmd=cmd[0]):
                    args = [self.prefix if a == "-" else a for a in cmd]
                    if len(args) == 1:
                        args.append(self.prefix)
                    out, err = self.dvar(*args, code=3)
                    self.assertEqual(out, "")
                    self.assertTrue(err.startswith("dvar %s: " % cmd[0]), err)
                    self.assertEqual(len(err.splitlines()), 1, err)
                    self.assertIn("variables.index", err)

    def test_missing_data_file(self):
        os.unlink(self.data)
        # Unreadable, not corrupt: exit 3 with the OS's reason.
        out, err = self.dvar("verify", self.prefix, code=3)
        self.assertIn("No such file or directory", err)
        self.assertEqual(out.count("unreadable chunk: "), 4, out)
        _, err = self.dvar("cat", self.prefix, key("y"), code=3)
        self.assertIn("variables.data-00000-of-00001", err)


# -------------------------------------------------------------- state file


STATE = ('model_checkpoint_path: "ckpt-2"\n'
         'all_model_checkpoint_paths: "ckpt-1"\n'
         'all_model_checkpoint_paths: "ckpt-2"\n')


class StateFileTest(TfCase):
    def tf_dir(self, state=STATE):
        """A directory as tf.train.CheckpointManager leaves it: ckpt-1 (half_plus_two),
        ckpt-2 (embedding) and the `checkpoint` state file."""
        d = self.path("train")
        os.mkdir(d)
        for n, fixture in ((1, "half_plus_two"), (2, "embedding")):
            src = os.path.join(FIXTURES, fixture, FIXTURE_VARS[fixture][0])
            for suffix in (".index", ".data-00000-of-00001"):
                shutil.copy(src + suffix, os.path.join(d, "ckpt-%d%s" % (n, suffix)))
        with open(os.path.join(d, "checkpoint"), "w") as f:
            f.write(state)
        return d

    def test_directory_opens_its_latest(self):
        d = self.tf_dir()
        doc = self.inspect_json(d)
        self.assertEqual([v["name"] for v in doc["variables"]], ["my_embedding"])
        self.assertEqual(os.path.basename(doc["path"].rstrip("/")), "ckpt-2")
        self.assertEqual(self.dvar("cat", d, "my_embedding")[0],
                         "[[1, 2],\n [3, 5],\n [7, 11]]\n")
        self.assertRegex(self.dvar("verify", d)[0], r"^1 variable, 1 chunk, 24 bytes checked: OK")
        # The prefixes themselves.
        self.assertEqual(self.dvar("cat", os.path.join(d, "ckpt-1"), "b")[0], "2\n")

    def test_ls(self):
        d = self.tf_dir()
        out, err = self.dvar("ls", d)
        self.assertEqual(err, "")
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["STEP", "NAME", "SIZE", "MARKS"])
        self.assertEqual(lines[1].split(), ["1", "ckpt-1", "163", "B", "kept,tf"])
        self.assertEqual(lines[2].split(), ["2", "ckpt-2", "160", "B", "latest,kept,tf"])
        self.assertEqual(len(lines), 3)
        doc = json.loads(self.dvar("ls", d, "--json")[0])
        self.assertEqual(doc["checkpoints"], [
            {"name": "ckpt-1", "step": 1, "bytes": 151 + 12, "latest": False, "kept": True,
             "format": "tf", "base": None},
            {"name": "ckpt-2", "step": 2, "bytes": 136 + 24, "latest": True, "kept": True,
             "format": "tf", "base": None}])
        # A directory of one bundle and no state file; two data files add up.
        self.fixture("two_shards")
        doc = json.loads(self.dvar("ls", self.path("two_shards"), "--json")[0])
        self.assertEqual(doc["checkpoints"], [
            {"name": "variables", "step": None, "bytes": 200 + 120 + 4, "latest": False,
             "kept": False, "format": "tf", "base": None}])
        # A state file naming a checkpoint that is gone: noted, the rest listed.
        os.unlink(os.path.join(d, "ckpt-1.index"))
        out, err = self.dvar("ls", d)
        self.assertIn("'ckpt-1'", err)
        self.assertEqual([l.split()[1] for l in out.splitlines()[1:]], ["ckpt-2"])

    def test_ls_dvar_and_tf_side_by_side(self):
        root = self.path("root")
        self.import_arrays(root, {"w": np.zeros(3, np.float32)}, "--step", "5")
        for suffix in (".index", ".data-00000-of-00001"):
            shutil.copy(os.path.join(FIXTURES, "half_plus_two", "variables" + suffix),
                        os.path.join(root, "model.ckpt-7" + suffix))
        doc = json.loads(self.dvar("ls", root, "--json")[0])
        self.assertEqual([(c["name"], c["step"], c["latest"], c["kept"], c["format"])
                          for c in doc["checkpoints"]],
                         [("ckpt-5", 5, True, True, "dvar"),
                          ("model.ckpt-7", 7, False, False, "tf")])
        # The root still reads as its dvar latest; the TF one by its prefix.
        self.assertEqual(self.dvar("cat", root, "w")[0], "[0, 0, 0]\n")
        self.assertEqual(self.dvar("cat", os.path.join(root, "model.ckpt-7"), "a")[0], "0.5\n")

    def test_absolute_paths_and_timestamps(self):
        # TF1's Saver writes absolute paths; CheckpointManager adds timestamps.
        d = self.tf_dir("")
        state = ('model_checkpoint_path: "%s/ckpt-1"\n'
                 'all_model_checkpoint_paths: "%s/ckpt-2"\n'
                 'all_model_checkpoint_paths: "%s/ckpt-1"\n'
                 'all_model_checkpoint_timestamps: 1700000000.5\n'
                 'all_model_checkpoint_timestamps: 1700000100.25\n'
                 'last_preserved_timestamp: 1699999999.0\n' % (d, d, d))
        with open(os.path.join(d, "checkpoint"), "w") as f:
            f.write(state)
        self.assertEqual(self.dvar("cat", d, "c")[0], "3\n")
        doc = json.loads(self.dvar("ls", d, "--json")[0])
        self.assertEqual([(os.path.basename(c["name"]), c["latest"], c["kept"])
                          for c in doc["checkpoints"]],
                         [("ckpt-1", True, True), ("ckpt-2", False, True)])

    def test_comments_and_a_malformed_state_file(self):
        # Text format allows a comment after a value: the reader and `ls` agree on it.
        d = self.tf_dir(STATE.replace('"ckpt-2"\n', '"ckpt-1"  # rolled back\n', 1))
        self.assertEqual(self.dvar("cat", d, "c")[0], "3\n")
        out, err = self.dvar("ls", d)
        self.assertEqual(err, "")
        self.assertEqual(out.splitlines()[1].split(), ["1", "ckpt-1", "163", "B", "latest,kept,tf"])
        # An unquoted path: `ls` says so and still lists the bundles, unmarked.
        with open(os.path.join(d, "checkpoint"), "w") as f:
            f.write("model_checkpoint_path: ckpt-2\n")
        out, err = self.dvar("ls", d)
        self.assertIn("line 1: model_checkpoint_path is not a quoted path", err)
        self.assertEqual([l.split()[1:] for l in out.splitlines()[1:]],
                         [["ckpt-1", "163", "B", "tf"], ["ckpt-2", "160", "B", "tf"]])

    def test_latest_missing(self):
        d = self.tf_dir(STATE.replace('"ckpt-2"\nall', '"ckpt-3"\nall', 1))
        for cmd in ("inspect", "verify"):
            _, err = self.dvar(cmd, d, code=3)
            self.assertTrue(err.startswith("dvar %s: " % cmd), err)
            self.assertIn("ckpt-3", err)


class TypedPathsTest(TfCase):
    """The paths people type for a TF checkpoint, and what is said of a broken one."""

    def test_savedmodel_and_index_forms(self):
        version = self.path("saved", "00000123")
        os.makedirs(os.path.join(version, "variables"))
        open(os.path.join(version, "saved_model.pb"), "wb").close()
        for suffix in (".index", ".data-00000-of-00001"):
            shutil.copy(os.path.join(FIXTURES, "half_plus_two", "variables" + suffix),
                        os.path.join(version, "variables", "variables" + suffix))
        prefix = os.path.join(version, "variables", "variables")
        for form in (version, os.path.join(version, "variables"), prefix + ".index"):
            self.assertEqual(self.dvar("cat", form, "b")[0], "2\n", form)
            self.assertEqual(self.inspect_json(form)["path"], prefix, form)
        # A CheckpointManager's directory without its state file: by its index file.
        self.assertEqual(self.dvar("cat", self.tf_pair() + "/model.ckpt-200.index",
                                   "my_embedding", "--slice", "2,1:-")[0], "[[7, 11]]\n")

    def tf_pair(self):
        """DIR holding model.ckpt-100 and model.ckpt-200 (embedding), no state file."""
        d = self.path("train")
        os.makedirs(d, exist_ok=True)
        for step in (100, 200):
            for suffix in (".index", ".data-00000-of-00001"):
                shutil.copy(os.path.join(FIXTURES, "embedding", "embedding.ckpt" + suffix),
                            os.path.join(d, "model.ckpt-%d%s" % (step, suffix)))
        return d

    def test_several_prefixes(self):
        d = self.tf_pair()
        for cmd in ("inspect", "verify"):
            _, err = self.dvar(cmd, d, code=3)
            self.assertEqual(err, "dvar %s: '%s' holds model.ckpt-100 and model.ckpt-200: give "
                                  "one, e.g. '%s/model.ckpt-200'\n" % (cmd, d, d))

    def test_dvar_root_with_a_broken_pointer(self):
        root = self.path("root")
        for step in (1, 2, 3):
            self.import_arrays(root, {"w": np.zeros(3, np.float32)}, "--step", str(step))
        shutil.rmtree(os.path.join(root, "ckpt-3"))
        with open(os.path.join(root, "checkpoint"), "w") as f:
            f.write('model_checkpoint_path: "ckpt-4"\n'
                    'all_model_checkpoint_paths: "ckpt-1"\n'
                    'all_model_checkpoint_paths: "ckpt-2"\n'
                    'all_model_checkpoint_paths: "ckpt-4"\n')
        out, err = self.dvar("ls", root)
        self.assertEqual(err, "dvar ls: note: the checkpoint file names 'ckpt-4' as latest, but "
                              "there is no checkpoint directory 'ckpt-4'\n")
        self.assertEqual([l.split()[1] for l in out.splitlines()[1:]], ["ckpt-1", "ckpt-2"])
        _, err = self.dvar("inspect", root, code=3)
        self.assertEqual(err, "dvar inspect: root '%s': its latest checkpoint 'ckpt-4' (named by "
                              "its checkpoint file) does not exist; it holds ckpt-1 and ckpt-2: "
                              "give one, e.g. '%s/ckpt-2'\n" % (root, root))
        self.assertEqual(self.dvar("cat", os.path.join(root, "ckpt-2"), "w")[0], "[0, 0, 0]\n")


class PartialReadTest(TfCase):
    """A slice of a TF tensor reads only its bytes; the tensor's CRC is checked when
    all of it is read."""

    ROWS, COLS = 512, 64

    def test_slice_of_a_damaged_tensor(self):
        prefix = self.path("big", "model.ckpt-1")
        values = np.arange(self.ROWS * self.COLS, dtype="<f4").reshape(self.ROWS, self.COLS)
        data, = write_bundle(prefix, [("t", "float32", [self.ROWS, self.COLS], values.tobytes())])
        row = values.itemsize * self.COLS
        with open(data, "r+b") as f:  # damage row 3
            f.seek(3 * row + 1)
            b = f.read(1)
            f.seek(3 * row + 1)
            f.write(bytes([b[0] ^ 0x40]))
        got = np.frombuffer(self.cat_raw(prefix, "t", "--slice", "300,1:-"), "<f4")
        self.assertEqual(got.tolist(), values[300].tolist())
        _, err = self.dvar("cat", prefix, "t", "--raw", self.path("all.bin"), code=3)
        self.assertIn("checksum mismatch", err)
        # Walked in pieces (as a big tensor is), the parts still add up to the check.
        _, err = self.dvar("cat", prefix, "t", "--raw", self.path("all.bin"), code=3,
                           env={"DVAR_CLI_PIECE_BYTES": str(64 * row)})
        self.assertIn("checksum mismatch", err)
        self.assertRegex(self.dvar("verify", prefix, code=1)[0], r"1 bad chunk")

    def test_help_says_so(self):
        out, _ = self.dvar("cat", "--help")
        self.assertIn("A --slice of a TensorFlow tensor reads only its own bytes", out)


# ------------------------------------------------------------ short names


SLOTS_SHORT = [GRAPH, "opt/beta_1", "opt/beta_2", "opt/decay", "opt/iter", "opt/learning_rate",
               "v", "v@opt/m", "v@opt/v"]


class ShortNamesTest(TfCase):
    def test_inspect(self):
        prefix = self.fixture("optimizer_slots")
        out, _ = self.dvar("inspect", prefix, "--short-names")
        rows = self.table(out)
        self.assertEqual(sorted(rows), sorted(SLOTS_SHORT))
        self.assertEqual(rows["opt/iter"][:2], ["int64", "[]"])
        doc = self.inspect_json(prefix)
        self.assertNotIn("full_name", doc["variables"][0])
        doc = json.loads(self.dvar("inspect", prefix, "--json", "--short-names")[0])
        self.assertEqual([v["name"] for v in doc["variables"]], [
            GRAPH, "opt/beta_1", "opt/beta_2", "opt/decay", "opt/iter", "opt/learning_rate",
            "v", "v@opt/m", "v@opt/v"])
        self.assertEqual([v["full_name"] for v in doc["variables"]],
                         sorted(FIXTURE_VARS["optimizer_slots"][1]))
        # Full names are the default.
        out, _ = self.dvar("inspect", prefix)
        self.assertEqual(sorted(self.table(out)), sorted(FIXTURE_VARS["optimizer_slots"][1]))

    def test_cat(self):
        prefix = self.fixture("optimizer_slots")
        self.assertEqual(self.dvar("cat", prefix, "v@opt/m", "--short-names")[0], "0.30000007\n")
        self.assertEqual(self.dvar("cat", prefix, "v", "--short-names")[0], "4.999\n")
        self.assertEqual(self.dvar("cat", prefix, key("opt/iter"), "--short-names")[0], "1\n")
        # A short name that names one variable needs no --short-names.
        self.assertEqual(self.dvar("cat", prefix, "v@opt/v")[0],
                         self.dvar("cat", prefix, "v@opt/v", "--short-names")[0])
        # And a full key finds the variable an export stored under its short name.
        short = self.path("short")
        self.dvar("export", prefix, short, "--single-shard", "--short-names")
        self.assertEqual(self.dvar("cat", short, key("v"))[0], "4.999\n")
        _, err = self.dvar("cat", prefix, "w", "--short-names", code=3)
        self.assertTrue(err.startswith("dvar cat: "), err)
        doc = self.cat_json(prefix, "v@opt/v", "--short-names")
        self.assertEqual((doc["name"], doc["full_name"]),
                         ("v@opt/v", "v/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE"))

    def test_forms_and_collisions(self):
        # Names a dvar checkpoint may hold too: every form, and a collision.
        ckpt = self.path("names")
        self.import_arrays(ckpt, {
            "t/.ATTRIBUTES/table-keys": np.arange(3, dtype=np.int64),
            key("a"): np.zeros(1, np.float32),
            "a": np.ones(1, np.float32),
            "m/.OPTIMIZER_SLOT/model/opt/v/.ATTRIBUTES/VARIABLE_VALUE": np.zeros(2),
            "plain/name": np.zeros(1, np.int8),
        })
        doc = json.loads(self.dvar("inspect", ckpt, "--json", "--short-names")[0])
        self.assertEqual(sorted(v["name"] for v in doc["variables"]),
                         ["a", "a", "m@model/opt/v", "plain/name", "t:table-keys"])
        # A full name wins over a short one.
        self.assertEqual(self.dvar("cat", ckpt, "a", "--short-names")[0], "[1]\n")
        self.assertEqual(self.dvar("cat", ckpt, "t:table-keys", "--short-names")[0],
                         "[0, 1, 2]\n")
        _, err = self.dvar("diff", ckpt, ckpt, "--short-names", code=3)
        self.assertIn("'a' is the short name of both", err)
        self.dvar("diff", ckpt, ckpt)

    def test_diff_against_dvar_names(self):
        # A TF2 checkpoint against the same values saved under short names.
        prefix = self.fixture("vars_and_arithmetic")
        ckpt = self.path("mine")
        self.import_arrays(ckpt, {"x": f32("1"), "y": f32("2"), "child/z": f32("3")})
        out, _ = self.dvar("diff", prefix, ckpt, "--short-names", code=1)
        self.assertEqual(out, "only in A: %s\ndifferent: 1 only in A, 0 only in B, 0 with another "
                              "dtype or shape, 0 with other values (of 3 in both)\n" % GRAPH)
        out, _ = self.dvar("diff", prefix, ckpt, code=1)
        self.assertIn("only in A: %s\n" % key("x"), out)
        self.assertIn("only in B: x\n", out)
        doc = json.loads(self.dvar("diff", prefix, ckpt, "--json", "--short-names", code=1)[0])
        self.assertEqual(doc["only_in_a"], [GRAPH])
        self.assertEqual(sorted(v["name"] for v in doc["variables"]), ["child/z", "x", "y"])


# ------------------------------------------------------------------- diff


class DiffTest(TfCase):
    def test_identical_copies(self):
        a = self.fixture("vars_and_arithmetic", self.path("a"))
        b = self.fixture("vars_and_arithmetic", self.path("b"))
        out, err = self.dvar("diff", a, b)
        self.assertEqual((out, err), ("identical: 4 variables, 4 elements\n", ""))
        doc = json.loads(self.dvar("diff", a, b, "--json")[0])
        graph = [v for v in doc["variables"] if v["name"] == GRAPH][0]
        self.assertEqual(graph, {"name": GRAPH, "status": "equal", "dtype_a": "string",
                                 "dtype_b": "string", "shape_a": [], "shape_b": [],
                                 "num_elements": 1, "num_different": 0})
        self.assertTrue(doc["identical"])

    def test_two_fixtures(self):
        a = self.fixture("vars_and_arithmetic")
        b = self.fixture("two_shards")
        out, _ = self.dvar("diff", a, b, code=1)
        self.assertEqual(out.splitlines(), [
            "only in A: %s" % key("child/z"), "only in A: %s" % key("x"),
            "only in A: %s" % key("y"), "only in B: %s" % key("v"),
            "values differ: %s: 1 of 1 strings" % GRAPH,
            "    first difference at []: %s... vs %s..." % (
                cquote(self.graph_bytes("vars_and_arithmetic")[:64]),
                cquote(self.graph_bytes("two_shards")[:64])),
            "different: 3 only in A, 1 only in B, 0 with another dtype or shape, "
            "1 with other values (of 1 in both)"])
        doc = json.loads(self.dvar("diff", a, b, "--json", code=1)[0])
        first = doc["variables"][0].pop("first_difference")
        self.assertEqual(doc["variables"], [{
            "name": GRAPH, "status": "values_differ", "dtype_a": "string", "dtype_b": "string",
            "shape_a": [], "shape_b": [], "num_elements": 1, "num_different": 1}])
        self.assertEqual((first["index"], json_bytes(first["a"]), json_bytes(first["b"])),
                         ([], self.graph_bytes("vars_and_arithmetic"),
                          self.graph_bytes("two_shards")))

    def test_strings_by_bytes(self):
        a, b = self.path("a", "ckpt"), self.path("b", "ckpt")
        write_bundle(a, [("s", "string", [3], [b"hello", b"world", b""]),
                         ("t", "string", [1], [b"x"]), ("u", "float32", [], b"\0\0\x80\x3f")])
        write_bundle(b, [("s", "string", [3], [b"hello", b"worle", b""]),
                         ("t", "float32", [1], b"\0\0\0\0"), ("u", "float32", [], b"\0\0\x80\x3f")])
        out, _ = self.dvar("diff", a, b, code=1)
        self.assertEqual(out.splitlines()[:3], ["values differ: s: 1 of 3 strings",
                                                '    first difference at [1]: "world" vs "worle"',
                                                "dtype differs: t: string vs float32"])
        out, _ = self.dvar("diff", a, a)
        self.assertEqual(out, "identical: 3 variables, 5 elements\n")


# ----------------------------------------------------- crafted bundles


class CraftedTest(TfCase):
    """Bundles written by write_bundle: what no fixture holds."""

    def test_every_dtype(self):
        arrays = {
            "f64": np.array([[0.25, -1e300, np.inf], [np.nan, 0.0, 5e-324]]),
            "i32": np.array([-2**31, 0, 2**31 - 1], np.int32),
            "u8": np.array([0, 255], np.uint8),
            "i16": np.array([[-7]], np.int16),
            "i8": np.array([-128, 127], np.int8),
            "i64": np.array([2**63 - 1, -2**63], np.int64),
            "b": np.array([True, False, True]),
            "u16": np.array([65535], np.uint16),
            "f16": np.array([0.5, -65504], np.float16),
            "u32": np.array([4294967295], np.uint32),
            "u64": np.array([2**64 - 1], np.uint64),
            "empty": np.zeros((2, 0), np.float32),
        }
        names = {"f64": "float64", "i32": "int32", "u8": "uint8", "i16": "int16", "i8": "int8",
                 "i64": "int64", "b": "bool", "u16": "uint16", "f16": "float16",
                 "u32": "uint32", "u64": "uint64", "empty": "float32"}
        bf16 = np.array([0x3f80, 0xc020], "<u2")  # bfloat16 1, -2.5
        prefix = self.path("all", "model.ckpt-100")
        write_bundle(prefix, [(k, names[k], list(v.shape), v.astype(v.dtype.newbyteorder("<"))
                               .tobytes()) for k, v in arrays.items()] +
                     [("bf16", "bfloat16", [2], bf16.tobytes())])
        for name, arr in arrays.items():
            with self.subTest(name=name):
                self.assert_same_array(self.cat_npy(prefix, name), arr)
                self.assertEqual(self.cat_json(prefix, name)["dtype"], names[name])
        self.assertEqual(self.dvar("cat", prefix, "bf16")[0], "[1, -2.5]\n")
        self.assertEqual(self.cat_raw(prefix, "bf16"), bf16.tobytes())
        self.assertEqual(self.dvar("cat", prefix, "i64")[0],
                         "[9223372036854775807, -9223372036854775808]\n")
        self.assertEqual(self.cat_json(prefix, "f64")["values"],
                         [[0.25, -1e300, "inf"], ["nan", 0, 5e-324]])
        self.assertEqual(self.cat_json(prefix, "b")["values"], [True, False, True])
        self.assertEqual(self.cat_json(prefix, "empty")["values"], [[], []])
        self.assertRegex(self.dvar("verify", prefix)[0], r"^13 variables, \d+ chunks, \d+ bytes "
                                                         r"checked: OK\n$")

    def test_string_tensors(self):
        odd = b"a\"b\\c\n\t\r\x00\x7f\xff\xc3\xa9 ~"
        prefix = self.path("s", "ckpt-1")
        write_bundle(prefix, [("vocab", "string", [3], [b"hello", b"", odd]),
                              ("grid", "string", [2, 2], [b"00", b"01", b"10", "é".encode()]),
                              ("none", "string", [0], []),
                              ("one", "string", [], [b"only"])])
        out, err = self.dvar("cat", prefix, "vocab")
        self.assertEqual(err, "")
        self.assertEqual(out, '[0] "hello"\n[1] ""\n[2] %s\n' % cquote(odd))
        self.assertEqual(cquote(odd), r'"a\"b\\c\n\t\r\x00\x7f\xff\xc3\xa9 ~"')
        self.assertEqual(self.dvar("cat", prefix, "vocab", "--slice", "1,2")[0],
                         '[1] ""\n[2] %s\n' % cquote(odd))
        self.assertEqual(self.cat_raw(prefix, "vocab"), b"hello" + odd)
        doc = self.cat_json(prefix, "vocab")
        self.assertEqual(doc["values"][:2], ["hello", ""])
        self.assertEqual(doc["values"][2], {"base64": base64.b64encode(odd).decode()})
        self.assertEqual(self.dvar("cat", prefix, "grid")[0],
                         '[0,0] "00"\n[0,1] "01"\n[1,0] "10"\n[1,1] "\\xc3\\xa9"\n')
        self.assertEqual(self.dvar("cat", prefix, "grid", "--slice", "-:1,1")[0],
                         '[0,1] "01"\n[1,1] "\\xc3\\xa9"\n')
        self.assertEqual(self.cat_json(prefix, "grid")["values"], [["00", "01"], ["10", "é"]])
        self.assertEqual(self.cat_json(prefix, "grid", "--slice", "1,1:-")["values"],
                         [["10", "é"]])
        self.assertEqual(self.dvar("cat", prefix, "none")[0], "")
        self.assertEqual(self.cat_json(prefix, "none")["values"], [])
        self.assertEqual(self.dvar("cat", prefix, "one")[0], '"only"\n')
        self.assertEqual(self.cat_json(prefix, "one")["values"], "only")
        doc = self.inspect_json(prefix)
        sizes = {v["name"]: (v["dtype"], v["shape"], v["raw_bytes"]) for v in doc["variables"]}
        self.assertEqual(sizes, {"vocab": ("string", [3], 3 + 4 + 5 + len(odd)),
                                 "grid": ("string", [2, 2], 4 + 4 + 8),
                                 "none": ("string", [0], 4), "one": ("string", [], 1 + 4 + 4)})
        self.assertRegex(self.dvar("verify", prefix)[0], r"^4 variables, \d+ chunks, \d+ bytes "
                                                         r"checked: OK\n$")
        _, err = self.dvar("cat", prefix, "vocab", "--npy", self.path("v.npy"), code=2)
        self.assertIn("'vocab' is a string tensor", err)
        # Long string tensors need --force to print, as long numeric ones do.
        write_bundle(self.path("big", "ckpt"), [("v", "string", [10001], [b"w"] * 10001)])
        _, err = self.dvar("cat", self.path("big", "ckpt"), "v", code=2)
        self.assertIn("needs --force (or use --slice or --raw)", err)
        out, _ = self.dvar("cat", self.path("big", "ckpt"), "v", "--force")
        self.assertEqual(len(out.splitlines()), 10001)
        self.assertEqual(self.cat_raw(self.path("big", "ckpt"), "v"), b"w" * 10001)

    def test_dtype_dvar_lacks(self):
        prefix = self.path("c", "ckpt")
        write_bundle(prefix, [("z", 8, [2], bytes(16)), ("w", "float32", [], bytes(4))])
        out, _ = self.dvar("inspect", prefix)
        self.assertEqual(self.table(out)["z"][:3], ["dtype 8", "[2]", "16 B"])
        doc = self.inspect_json(prefix)
        self.assertEqual([v["dtype"] for v in doc["variables"]], ["float32", "dtype 8"])
        for args in (["cat", prefix, "z"], ["cat", prefix, "z", "--npy", self.path("z.npy")],
                     ["diff", prefix, prefix],
                     ["reshard", prefix, self.path("out"), "--shards", "2"]):
            with self.subTest(cmd=args[0]):
                _, err = self.dvar(*args, code=3)
                self.assertIn("variable 'z' has dtype 8", err)
        self.assertFalse(os.path.exists(self.path("out")))
        self.assertEqual(self.dvar("cat", prefix, "w")[0], "0\n")


# --------------------------------------------------- a partitioned tensor


class ShardedVariableTest(TfCase):
    """TF's ShardedVariable `s` saved as 4 slices (tf-behavior.md §4.6)."""

    def test_read(self):
        prefix = self.sharded()
        self.assertEqual(os.path.getsize(prefix + ".index"), 291)
        self.assertEqual(self.dvar("cat", prefix, SHARDED)[0], "[0, 1, 2, 3]\n")
        self.assertEqual(self.dvar("cat", prefix, SHARDED, "--slice", "1,2")[0], "[1, 2]\n")
        self.assertEqual(self.dvar("cat", prefix, "s", "--short-names")[0], "[0, 1, 2, 3]\n")
        self.assertEqual(self.cat_json(prefix, SHARDED)["values"], [0, 1, 2, 3])
        self.assert_same_array(self.cat_npy(prefix, SHARDED), np.arange(4, dtype=np.int32))
        out, _ = self.dvar("inspect", prefix)
        self.assertEqual(self.table(out)[SHARDED],
                         ["int32", "[4]", "16 B", "16 B", "1.00", "4", "0,1", "1,1", "2,1", "3,1"])
        doc = self.inspect_json(prefix)
        self.assertEqual(len(doc["variables"]), 1)  # slice keys are not variables
        v = doc["variables"][0]
        self.assertEqual([(s["start"], s["length"]) for s in v["slices"]],
                         [([0], [1]), ([1], [1]), ([2], [1]), ([3], [1])])
        self.assertEqual(self.dvar("verify", prefix)[0],
                         "1 variable, 4 chunks, 16 bytes checked: OK\n")

    def test_flipped_slice(self):
        prefix = self.sharded()
        flip_byte(self.data_file(prefix), 8)  # slice 2,1
        out, _ = self.dvar("verify", prefix, code=1)
        self.assertRegex(out, r"^bad chunk: variable '%s', file \S*ckpt-1\.data-00000-of-00001, "
                              r"offset 8, chunk 0: .+\n1 variable, 4 chunks, 16 bytes checked: "
                              r"1 bad chunk\n$" % re.escape(SHARDED))
        self.assertEqual(self.dvar("cat", prefix, SHARDED, "--slice", "0,2")[0], "[0, 1]\n")
        self.dvar("cat", prefix, SHARDED, code=3)

    def test_reshard(self):
        prefix = self.sharded()
        out = self.path("two")
        self.dvar("reshard", prefix, out, "--shards", "2")
        self.assertEqual(self.dvar("cat", out, SHARDED)[0], "[0, 1, 2, 3]\n")
        v = self.inspect_json(out)["variables"][0]
        self.assertEqual([(s["start"], s["length"]) for s in v["slices"]],
                         [([0], [2]), ([2], [2])])
        self.assertEqual(v["attributes"], {"kind": "sharded", "layout": "div", "shards": "2"})
        self.assertRegex(self.dvar("verify", out)[0], r"^1 variable, 2 chunks, ")

    def test_export(self):
        prefix = self.sharded()
        out = self.path("serve")
        self.dvar("export", prefix, out, "--single-shard")
        v = self.inspect_json(out)["variables"][0]
        self.assertEqual((v["name"], v["dtype"], v["shape"], len(v["slices"])),
                         (SHARDED, "int32", [4], 1))
        self.assertEqual(self.dvar("cat", out, SHARDED)[0], "[0, 1, 2, 3]\n")
        st = self.path("s.safetensors")
        self.dvar("export", prefix, st, "--single-shard", "--format", "safetensors")
        header, tensors = parse_safetensors(st)
        self.assertEqual((header[SHARDED]["dtype"], header[SHARDED]["shape"]), ("I32", [4]))
        self.assertEqual(tensors[SHARDED], SHARDED_DATA)


# -------------------------------------------------------- reshard, export


class RewriteTest(TfCase):
    """reshard and export write dvar checkpoints (or safetensors) from TF ones."""

    def assert_values(self, ckpt, fixture, skip=()):
        variables = FIXTURE_VARS[fixture][1]
        doc = self.inspect_json(ckpt)
        want = sorted(n for n, v in variables.items() if v[2] is not None and n not in skip)
        self.assertEqual(sorted(v["name"] for v in doc["variables"]), want)
        for name in want:
            self.assert_same_array(self.cat_npy(ckpt, name), variables[name][2])

    def test_reshard(self):
        for fixture in FIXTURE_VARS:
            with self.subTest(fixture=fixture):
                prefix = self.fixture(fixture)
                out = self.path(fixture + "-resharded")
                _, err = self.dvar("reshard", prefix, out, "--shards", "2")
                if GRAPH in FIXTURE_VARS[fixture][1]:
                    self.assertIn("note: leaving out '%s', a string tensor" % GRAPH, err)
                else:
                    self.assertEqual(err, "")
                self.assert_values(out, fixture)
                self.assertRegex(self.dvar("verify", out)[0], r"checked: OK\n$")
        # A named variable split into shards.
        prefix = self.path("embedding", "embedding.ckpt")
        out = self.path("emb3")
        self.dvar("reshard", prefix, out, "--var", "my_embedding=3")
        self.assertEqual(len(self.inspect_json(out)["variables"][0]["slices"]), 3)
        self.assert_values(out, "embedding")
        _, err = self.dvar("reshard", self.path("two_shards", "variables"), self.path("x"),
                           "--var", GRAPH + "=2", code=3)
        self.assertIn("string tensor", err)

    def test_export_dvar_and_safetensors(self):
        for fixture in ("embedding", "half_plus_two"):
            with self.subTest(fixture=fixture):
                prefix = self.fixture(fixture)
                out = self.path(fixture + "-serve")
                self.dvar("export", prefix, out, "--single-shard")
                self.assert_values(out, fixture)
                st = self.path(fixture + ".safetensors")
                self.dvar("export", prefix, st, "--single-shard", "--format", "safetensors")
                header, tensors = parse_safetensors(st)
                for name, (_, shape, value, _) in FIXTURE_VARS[fixture][1].items():
                    self.assertEqual((header[name]["dtype"], header[name]["shape"]),
                                     ("F32", shape))
                    self.assertEqual(tensors[name], value.tobytes())
        # The object graph left out by name.
        prefix = self.fixture("optimizer_slots")
        out = self.path("slots-serve")
        self.dvar("export", prefix, out, "--single-shard", "--drop-prefix", GRAPH)
        self.assert_values(out, "optimizer_slots")
        out = self.path("slots-serve-short")
        self.dvar("export", prefix, out, "--single-shard", "--drop-prefix", GRAPH,
                  "--drop-prefix", "v/.OPTIMIZER_SLOT/")
        self.assertEqual(sorted(v["name"] for v in self.inspect_json(out)["variables"]),
                         sorted(key(n) for n in ("v", "opt/iter", "opt/beta_1", "opt/beta_2",
                                                 "opt/decay", "opt/learning_rate")))


# ------------------------------------------------------------------ usage


class HelpTest(TfCase):
    def test_help_mentions_tensorflow(self):
        for cmd in ("inspect", "cat", "verify", "diff", "reshard"):
            with self.subTest(cmd=cmd):
                self.assertIn("TensorFlow checkpoint", self.dvar("help", cmd)[0])
        for cmd in ("inspect", "cat", "verify", "diff"):
            self.assertIn("--short-names", self.dvar("help", cmd)[0])
        self.assertIn("\"tf\" for a TensorFlow checkpoint", self.dvar("help", "ls")[0])
        out, _ = self.dvar("help", "cat")
        self.assertIn("--raw FILE", out)
        _, err = self.dvar("cat", "x", "y", "--npy", "a", "--raw", "b", code=2)
        self.assertIn("give one of them", err)


if __name__ == "__main__":
    test_cli.run(lambda args: TfCase.__subclasses__())
