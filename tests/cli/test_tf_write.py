#!/usr/bin/python3
"""tests/cli/test_tf_write.py - `dvar export --format tf`: TensorFlow
checkpoints (TensorBundles) written from dvar checkpoints and read back.

Round trips dvar -> tf -> dvar for every dtype and several shapes, sharded
variables merged (--single-shard) or kept as TensorFlow slices
(--keep-shards), tf -> tf, and a kept-shards bundle resharded; the bytes
written, parsed here with a small reader of LevelDB tables and of the
protobuf entries, checked against the encoding rules of
shared/reference/tf-behavior.md §4 (header, entries, keys, slice keys,
block checksums, restarts) and, for TensorFlow's own fixtures and the
reference's worked examples, byte for byte; usage errors, and nothing left
at OUT when an export fails.

    test_tf_write.py --dvar build/cli/dvar --helper build/tests/cli/dvar_cli_helper
                     [--lib build/libdvar.so | --sanitized] [unittest args]
"""
import glob
import os
import struct
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_cli  # noqa: E402
from test_cli import (DTYPES, CliCase, HelperMixin, bf16_bits, div_offsets,  # noqa: E402
                      flip_byte, random_array)
from tfbundle import crc32c, mask  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(SOURCE_DIR, "fixtures", "tf")

# TensorFlow's DataType numbers, which dvar's dtypes share.
TF_DTYPES = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6,
             "int64": 9, "bool": 10, "bfloat16": 14, "uint16": 17, "float16": 19,
             "uint32": 22, "uint64": 23}
DT_STRING = 7
SIZES = {"float32": 4, "float64": 8, "int32": 4, "uint8": 1, "int16": 2, "int8": 1,
         "int64": 8, "bool": 1, "bfloat16": 2, "uint16": 2, "float16": 2, "uint32": 4,
         "uint64": 8}

HEADER = bytes.fromhex("08011a020801")  # num_shards=1, version{producer=1}


# ------------------------------------------------------------ string tensors


def string_tensor_crc(raw, n):
    """A DT_STRING entry's CRC (§4.5): over its n lengths as u32 LE (u64 above
    UINT32_MAX), not as the varints stored, then the 4 checksum bytes, then the
    strings; the length checksum itself checked on the way."""
    lens, at = [], 0
    for _ in range(n):
        v, at = varint(raw, at)
        lens.append(v)
    fixed = b"".join(struct.pack("<I" if v <= 0xFFFFFFFF else "<Q", v) for v in lens)
    crc = crc32c(fixed)
    assert struct.unpack_from("<I", raw, at)[0] == mask(crc), "length checksum"
    assert at + 4 + sum(lens) == len(raw), "lengths add up"
    return crc32c(raw[at + 4:], crc32c(raw[at:at + 4], crc))


# ------------------------------------------------------------ LevelDB tables


def varint(buf, at):
    v = shift = 0
    while True:
        b = buf[at]
        at += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, at


def read_block(t, offset, size):
    """The block's contents, after checking its trailer: type 0, masked CRC-32C."""
    block, kind = t[offset:offset + size], t[offset + size]
    assert kind == 0, "block at %d has type %d, not 0 (uncompressed)" % (offset, kind)
    want = struct.unpack_from("<I", t, offset + size + 1)[0]
    assert mask(crc32c(block + b"\0")) == want, "block at %d: checksum mismatch" % offset
    return block


def block_entries(block):
    """[(key, value, shared)] of a block, and its restart offsets, checked to point at
    entries with shared == 0."""
    n = struct.unpack_from("<I", block, len(block) - 4)[0]
    limit = len(block) - 4 - 4 * n
    restarts = list(struct.unpack_from("<%dI" % n, block, limit))
    out, key, at, starts = [], b"", 0, []
    while at < limit:
        starts.append(at)
        shared, at = varint(block, at)
        nonshared, at = varint(block, at)
        vlen, at = varint(block, at)
        key = key[:shared] + block[at:at + nonshared]
        at += nonshared
        out.append((key, block[at:at + vlen], shared))
        at += vlen
    assert at == limit
    for r in restarts:
        assert r in starts and out[starts.index(r)][2] == 0, "restart %d" % r
    return out, [starts.index(r) for r in restarts]


def read_table(path):
    """{"entries": [(key, value)], "blocks": [(offset, size, index key, entry indices
    of restarts)], "index_keys": [...]}, every rule of §4.2 the writer must follow checked."""
    with open(path, "rb") as f:
        t = f.read()
    footer = t[-48:]
    assert footer[40:] == bytes.fromhex("57fb808b247547db"), "bad magic"
    mo, at = varint(footer, 0)
    ms, at = varint(footer, at)
    io, at = varint(footer, at)
    isz, at = varint(footer, at)
    assert footer[at:40] == bytes(40 - at), "footer padding"
    assert io + isz + 5 + 48 == len(t), "the index block ends where the footer starts"
    assert mo + ms + 5 == io
    # The metaindex block is always empty (no filter blocks).
    assert read_block(t, mo, ms) == bytes.fromhex("0000000001000000")
    assert t[mo + ms:mo + ms + 5] == bytes.fromhex("00c0f2a1b0")
    index, irestarts = block_entries(read_block(t, io, isz))
    assert irestarts == list(range(len(index))), "the index block restarts at every entry"
    entries, blocks, pos = [], [], 0
    for ikey, handle, _ in index:
        off, at = varint(handle, 0)
        size, at = varint(handle, at)
        assert at == len(handle) and off == pos, "blocks back to back"
        data, restarts = block_entries(read_block(t, off, size))
        # A restart every 16 keys (LevelDB's default interval, TensorFlow's).
        assert restarts == list(range(0, len(data), 16)), restarts
        entries += [(k, v) for k, v, _ in data]
        blocks.append((off, size, ikey, restarts))
        pos = off + size + 5
    assert pos == mo
    keys = [k for k, _ in entries]
    assert all(a < b for a, b in zip(keys, keys[1:])), "keys strictly increasing bytewise"
    return {"entries": entries, "blocks": blocks, "index_keys": [k for k, _, _ in index]}


def short_successor(key):
    """FindShortSuccessor: the index key after a table's last block."""
    for i, b in enumerate(key):
        if b != 0xFF:
            return key[:i] + bytes([b + 1])
    return key


# ------------------------------------------------------------ protobuf


def proto_fields(buf):
    """[(field, value)]: varints as ints, length-delimited as bytes, fixed32 as ints."""
    out, at = [], 0
    while at < len(buf):
        tag, at = varint(buf, at)
        field, wt = tag >> 3, tag & 7
        if wt == 0:
            v, at = varint(buf, at)
        elif wt == 2:
            n, at = varint(buf, at)
            v, at = buf[at:at + n], at + n
        elif wt == 5:
            v, at = struct.unpack_from("<I", buf, at)[0], at + 4
        else:
            raise AssertionError("wire type %d" % wt)
        out.append((field, v))
    return out


def decode_entry(buf):
    """BundleEntryProto as a dict; shape a tuple; slices [(start, length or -1)...]."""
    e = {"dtype": 0, "shape": None, "shard_id": 0, "offset": 0, "size": 0, "crc32c": None,
         "slices": []}
    for field, v in proto_fields(buf):
        if field == 1:
            e["dtype"] = v
        elif field == 2:
            dims = []
            for f2, dim in proto_fields(v):
                assert f2 == 2
                sizes = [x for f3, x in proto_fields(dim) if f3 == 1]
                dims.append(sizes[-1] if sizes else 0)
            e["shape"] = tuple(dims)
        elif field == 3:
            e["shard_id"] = v
        elif field == 4:
            e["offset"] = v
        elif field == 5:
            e["size"] = v
        elif field == 6:
            e["crc32c"] = v
        elif field == 7:
            sl = []
            for f2, ext in proto_fields(v):
                assert f2 == 1
                fx = dict(proto_fields(ext))
                sl.append((fx.get(1, 0), fx.get(2, -1)))
            e["slices"].append(tuple(sl))
        else:
            raise AssertionError("field %d" % field)
    assert e["shape"] is not None, "shape is always present"
    return e


# ------------------------------------------------------------ OrderedCode


def num_increasing(v):
    b = v.to_bytes((v.bit_length() + 7) // 8, "big") if v else b""
    return bytes([len(b)]) + b


def ordered_string(s):
    return s.replace(b"\xff", b"\xff\x00").replace(b"\x00", b"\x00\xff") + b"\x00\x01"


def signed(v):
    x = ~v if v < 0 else v
    if x < 64:
        return bytes([(0x80 ^ v) & 0xFF])
    n = (x.bit_length() + 1 + 6) // 7
    hdr = {2: (0xC0, 0), 3: (0xE0, 0), 4: (0xF0, 0), 5: (0xF8, 0), 6: (0xFC, 0),
           7: (0xFE, 0), 8: (0xFF, 0), 9: (0xFF, 0x80), 10: (0xFF, 0xC0)}[n]
    b = bytearray((v & (2**80 - 1)).to_bytes(10, "big")[-n:])
    b[0] ^= hdr[0]
    b[1] ^= hdr[1]
    return bytes(b)


def slice_key(full_key, extents):
    """EncodeTensorNameSlice: extents [(start, length)], length -1 for a whole dimension."""
    out = num_increasing(0) + ordered_string(full_key) + num_increasing(len(extents))
    for start, length in extents:
        out += signed(0 if length < 0 else start) + signed(length)
    return out


class OrderedCodeSelfTest(unittest.TestCase):
    """The encoder above gives the reference's expected bytes (§4.6)."""
    group = "tf_write"

    def test_expected_values(self):
        for v, want in [(0, "80"), (1, "81"), (5, "85"), (63, "bf"), (64, "c040"),
                        (100, "c064"), (8191, "dfff"), (8192, "e02000"), (1000000, "ef4240"),
                        (-1, "7f"), (-2, "7e"), (-64, "40"), (-65, "3fbf")]:
            self.assertEqual(signed(v).hex(), want, v)
        for v, want in [(0, "00"), (1, "0101"), (2, "0102"), (300, "02012c")]:
            self.assertEqual(num_increasing(v).hex(), want)
        k = b"s/.ATTRIBUTES/VARIABLE_VALUE"
        self.assertEqual(slice_key(k, [(100, 28)]), b"\0" + k + bytes.fromhex("00010101c0649c"))
        self.assertEqual(slice_key(k, [(0, 5), (0, -1)]),
                         b"\0" + k + bytes.fromhex("00010102" "8085" "807f"))


# ------------------------------------------------------------ the tests


class Bundle:
    """A bundle written by export, parsed and checked against the rules."""

    def __init__(self, case, prefix):
        self.prefix = prefix
        self.table = read_table(prefix + ".index")
        with open(prefix + ".data-00000-of-00001", "rb") as f:
            self.data = f.read()
        entries = self.table["entries"]
        case.assertEqual(entries[0], (b"", HEADER))
        self.entries = {k: decode_entry(v) for k, v in entries[1:]}
        # Data entries tile the data file in order (alignment 1, no padding), each
        # checksummed; full entries of partitioned tensors carry no data fields.
        spans = []
        for key, e in self.entries.items():
            if e["slices"]:
                case.assertEqual((e["offset"], e["size"], e["crc32c"], e["shard_id"]),
                                 (0, 0, None, 0), key)
                continue
            case.assertEqual(e["shard_id"], 0)
            raw = self.data[e["offset"]:e["offset"] + e["size"]]
            case.assertEqual(len(raw), e["size"], key)
            n = int(np.prod(e["shape"], dtype=np.int64))
            if e["dtype"] == DT_STRING:
                case.assertEqual(e["crc32c"], mask(string_tensor_crc(raw, n)), key)
            else:
                size = {v: k for k, v in TF_DTYPES.items()}[e["dtype"]]
                case.assertEqual(e["size"], n * SIZES[size], key)
                case.assertEqual(e["crc32c"], mask(crc32c(raw)), key)
            spans.append((e["offset"], e["size"]))
        spans.sort()
        at = 0
        for off, size in spans:
            case.assertEqual(off, at)
            at += size
        case.assertEqual(at, len(self.data))
        # One data block here: its index key is the last key's short successor.
        if len(self.table["blocks"]) == 1:
            case.assertEqual(self.table["index_keys"], [short_successor(entries[-1][0])])

    def plain(self, name):
        """The bytes of plain entry name."""
        e = self.entries[name.encode() if isinstance(name, str) else name]
        assert not e["slices"]
        return self.data[e["offset"]:e["offset"] + e["size"]]


class TfWriteTest(CliCase, HelperMixin):
    group = "tf_write"

    def files(self, prefix):
        d, base = os.path.split(prefix)
        return sorted(f for f in os.listdir(d) if f.startswith(base))

    def export(self, src, prefix, *opts, code=0, env=None):
        out, err = self.dvar("export", src, prefix, "--format", "tf", *opts, code=code, env=env)
        if code == 0:
            self.assertEqual(self.files(prefix), [os.path.basename(prefix) + ".data-00000-of-00001",
                                                  os.path.basename(prefix) + ".index"])
        return out, err

    def every_dtype_source(self):
        """Every dtype in several shapes; returns (checkpoint, {name: (dtype, shape, bytes)})."""
        shapes = [(), (0,), (5,), (3, 4), (2, 3, 4), (2, 1, 3, 2), (3, 0), (1, 2, 1, 2, 1, 2, 1, 2)]
        arrays, expect = {}, {}
        for dtype, dname in DTYPES.items():
            for k, shape in enumerate(shapes):
                a = random_array(dtype, shape, self.rng)
                name = "%s/r%d_%d" % (dname, len(shape), k)
                arrays[name] = a
                expect[name] = (dname, shape, a.tobytes())
        src = self.path("src")
        self.import_arrays(src, arrays)
        # bfloat16, which .npy cannot carry, through the helper; sharded too.
        bf = bf16_bits(self.rng, (6, 5))
        bf1 = bf16_bits(self.rng, ())
        self.helper_write(self.path("bf"), [
            ("bfloat16/r2", "bfloat16", (6, 5), [("0,4:-", bf[:4]), ("4,2:-", bf[4:])],
             {"kind": "sharded", "shards": "2", "layout": "div"}),
            ("bfloat16/r0", "bfloat16", (), [("all", bf1)], {}),
        ])
        expect["bfloat16/r2"] = ("bfloat16", (6, 5), bf.tobytes())
        expect["bfloat16/r0"] = ("bfloat16", (), bf1.tobytes())
        return src, self.path("bf"), expect

    def test_every_dtype_round_trips(self):
        src, bf, expect = self.every_dtype_source()
        for opt in ("--single-shard", "--keep-shards"):
            with self.subTest(opt=opt):
                out = self.path("tf" + opt, "model.ckpt")
                self.export(src, out, opt, env={"DVAR_CLI_PIECE_BYTES": "40"})
                b = Bundle(self, out)
                names = sorted(k for k in expect if not k.startswith("bfloat16"))
                self.assertEqual(sorted(k.decode() for k in b.entries), names)
                for name in names:
                    dname, shape, data = expect[name]
                    e = b.entries[name.encode()]
                    self.assertEqual((e["dtype"], e["shape"]), (TF_DTYPES[dname], shape), name)
                    self.assertEqual(b.plain(name), data, name)
                # Read back: the same values, dtypes and shapes.
                out_, _ = self.dvar("diff", src, out)
                self.assertTrue(out_.startswith("identical: %d variables" % len(names)), out_)
                b16 = self.path("bf" + opt)
                self.export(bf, b16, opt)
                self.dvar("diff", bf, b16)
        # One of each read back by value with `dvar cat`.
        for name in ("float16/r2_3", "bool/r1_2", "uint64/r0_0", "int8/r8_7"):
            dname, shape, data = expect[name]
            got = self.cat_npy(self.path("tf--keep-shards", "model.ckpt"), name)
            self.assertEqual((got.shape, got.tobytes()), (shape, data))
        b = Bundle(self, self.path("bf--keep-shards"))
        e = b.entries[b"bfloat16/r2"]
        self.assertEqual((e["dtype"], e["shape"]), (14, (6, 5)))
        self.assertEqual(e["slices"], [((0, 4), (0, 5)), ((4, 2), (0, 5))])

    def sharded_source(self):
        a = np.arange(30, dtype=np.float32).reshape(10, 3) * 0.5
        b = np.arange(7 * 2, dtype=np.int16).reshape(7, 2)
        c = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
        s = np.array(3.5)
        src = self.path("src")
        self.import_arrays(src, {"a": a, "b": b, "c": c, "s": s}, "--shards", "a=4",
                           "--shards", "b=3", "--shards", "c=2")
        return src, {"a": a, "b": b, "c": c, "s": s}

    def test_single_shard_merges(self):
        src, arrays = self.sharded_source()
        out = self.path("serving", "model")
        self.export(src, out, "--single-shard")
        b = Bundle(self, out)
        # One plain entry of the full shape per variable: no slice keys.
        self.assertEqual(sorted(b.entries), [b"a", b"b", b"c", b"s"])
        for name, arr in arrays.items():
            e = b.entries[name.encode()]
            self.assertEqual((e["shape"], e["slices"]), (arr.shape, []))
            self.assertEqual(b.plain(name), arr.tobytes())
        layout = self.layout(out)
        self.assertEqual(layout["a"][2], [((0, 0), (10, 3))])
        self.assertEqual(layout["a"][3], {})  # attributes are dropped
        self.dvar("diff", src, out)

    def test_keep_shards_as_tensorflow_slices(self):
        src, arrays = self.sharded_source()
        out = self.path("kept", "model")
        self.export(src, out, "--keep-shards")
        b = Bundle(self, out)
        offsets = {"a": div_offsets(10, 4), "b": div_offsets(7, 3), "c": div_offsets(2, 2)}
        want_keys = [b"s"]
        for name, offs in offsets.items():
            arr = arrays[name]
            full = b.entries[name.encode()]
            # The full entry: dtype, full shape, every extent explicit (start omitted when 0),
            # as TensorFlow's Python writes a ShardedVariable's slices ("10 3 0,3:0,3").
            exts = [((offs[k], offs[k + 1] - offs[k]),) + tuple((0, d) for d in arr.shape[1:])
                    for k in range(len(offs) - 1)]
            self.assertEqual((full["dtype"], full["shape"], full["slices"]),
                             (TF_DTYPES[str(arr.dtype)], arr.shape, exts), name)
            want_keys.append(name.encode())
            for k, ext in enumerate(exts):
                key = slice_key(name.encode(), ext)
                want_keys.append(key)
                e = b.entries[key]
                rows = arr[offs[k]:offs[k + 1]]
                self.assertEqual((e["dtype"], e["shape"]), (full["dtype"], rows.shape))
                self.assertEqual(b.data[e["offset"]:e["offset"] + e["size"]], rows.tobytes())
        self.assertEqual(sorted(b.entries), sorted(want_keys))
        # A known slice key, byte for byte: rows 3,3 of a (all 3 columns).
        self.assertIn(bytes.fromhex("00 61 00 01 01 02 83 83 80 83"), b.entries)
        # Slice keys start with 00: right after the header, before every full key.
        keys = [k for k, _ in b.table["entries"]]
        slice_keys = sorted(k for k in want_keys if k[:1] == b"\0")
        self.assertEqual(len(slice_keys), 9)
        self.assertEqual(keys[1:1 + len(slice_keys)], slice_keys)
        # dvar reads the slices back as saved.
        layout = self.layout(out)
        self.assertEqual(layout["a"][2], [((0, 0), (3, 3)), ((3, 0), (3, 3)), ((6, 0), (2, 3)),
                                          ((8, 0), (2, 3))])
        self.assertEqual(layout["s"][2], [((), ())])
        self.dvar("diff", src, out)
        self.assert_same_array(self.cat_npy(out, "b"), arrays["b"])

        # tf -> tf: the same bundle, byte for byte, both ways of writing.
        again = self.path("again", "model")
        self.export(out, again, "--keep-shards")
        for suffix in (".index", ".data-00000-of-00001"):
            with open(out + suffix, "rb") as f1, open(again + suffix, "rb") as f2:
                self.assertEqual(f1.read(), f2.read(), suffix)
        merged, merged2 = self.path("m1", "model"), self.path("m2", "model")
        self.export(src, merged, "--single-shard")
        self.export(out, merged2, "--single-shard")
        for suffix in (".index", ".data-00000-of-00001"):
            with open(merged + suffix, "rb") as f1, open(merged2 + suffix, "rb") as f2:
                self.assertEqual(f1.read(), f2.read(), suffix)

        # The kept-shards bundle resharded into 3 shards: the original values.
        three = self.path("three")
        self.dvar("reshard", out, three, "--shards", "3")
        layout = self.layout(three)
        self.assertEqual(self.assert_div_layout(layout["a"], 3, (10, 3)), 3)
        self.assertEqual(self.assert_div_layout(layout["b"], 3, (7, 2)), 3)
        self.dvar("diff", src, three)
        for name, arr in arrays.items():
            self.assert_same_array(self.cat_npy(three, name), arr)

    def test_reference_examples_byte_for_byte(self):
        # §4.2: embedding.ckpt, written by TensorFlow (fixtures/tf/embedding).
        emb = np.array([[1, 2], [3, 5], [7, 11]], np.float32)
        src = self.path("src")
        self.import_arrays(src, {"my_embedding": emb})
        out = self.path("embedding.ckpt")
        self.export(src, out, "--single-shard")
        with open(out + ".index", "rb") as f:
            index = f.read()
        self.assertEqual(len(index), 136)
        self.assertEqual(index, bytes.fromhex(
            "000006" "08011a020801" "000c13" + b"my_embedding".hex() +
            "0801120812020803120208022818351e374ff4" "0000000001000000" "00dfaab285"
            "0000000001000000" "00c0f2a1b0" "0001026e0033" "0000000001000000" "002dbf04d1"
            "3808450e" + "00" * 36 + "57fb808b247547db"))
        with open(out + ".data-00000-of-00001", "rb") as f:
            self.assertEqual(f.read(), emb.tobytes())
        # §4.6: a ShardedVariable of 4 int32 shards, kept as slices: the 291-byte index
        # of fixtures/tf/sharded_variable.
        name = "s/.ATTRIBUTES/VARIABLE_VALUE"
        src2 = self.path("src2")
        self.import_arrays(src2, {name: np.arange(4, dtype=np.int32)}, "--shards", name + "=4")
        out2 = self.path("sharded")
        self.export(src2, out2, "--keep-shards")
        with open(out2 + ".index", "rb") as f:
            index = f.read()
        self.assertEqual(len(index), 291)
        with open(os.path.join(FIXTURES, "sharded_variable", "ckpt-1.index"), "rb") as f:
            self.assertEqual(index.hex(), f.read().hex())
        with open(out2 + ".data-00000-of-00001", "rb") as f:
            self.assertEqual(f.read(), np.arange(4, dtype=np.int32).tobytes())

    def test_tensorflow_fixtures_round_trip(self):
        # Checkpoints TensorFlow wrote, read and written again: the same bytes.
        for fixture, prefix in (("embedding", "embedding.ckpt"), ("half_plus_two", "variables")):
            with self.subTest(fixture=fixture):
                tf_prefix = os.path.join(FIXTURES, fixture, prefix)
                if not os.path.exists(tf_prefix + ".index"):
                    self.skipTest("no fixture %s" % tf_prefix)
                out = self.path(fixture, prefix)
                self.export(tf_prefix, out, "--single-shard")
                for suffix in (".index", ".data-00000-of-00001"):
                    with open(tf_prefix + suffix, "rb") as f1, open(out + suffix, "rb") as f2:
                        self.assertEqual(f2.read(), f1.read(), suffix)
        # TF2 checkpoints hold their object graph, a string tensor: copied as it is. The
        # entries are TensorFlow's but for the offsets (TensorFlow wrote the data in its
        # own order, export writes it in key order), the bytes of each tensor the same.
        for fixture in ("vars_and_arithmetic", "two_shards"):
            with self.subTest(fixture=fixture):
                tf_prefix = os.path.join(FIXTURES, fixture, "variables")
                if not os.path.exists(tf_prefix + ".index"):
                    self.skipTest("no fixture %s" % tf_prefix)
                out = self.path("tf-" + fixture, "variables")
                for opt in ("--single-shard", "--keep-shards"):
                    self.export(tf_prefix, out + opt, opt)
                    b = Bundle(self, out + opt)
                    tf_table = read_table(tf_prefix + ".index")
                    tf_entries = {k: decode_entry(v) for k, v in tf_table["entries"][1:]}
                    self.assertEqual(sorted(b.entries), sorted(tf_entries))
                    for key, want in tf_entries.items():
                        got = b.entries[key]
                        for field in ("dtype", "shape", "size", "crc32c", "slices"):
                            self.assertEqual(got[field], want[field], (key, field))
                        shard = "%s.data-%05d-of-%05d" % (tf_prefix, want["shard_id"],
                                                          len(glob.glob(tf_prefix + ".data-*")))
                        with open(shard, "rb") as f:
                            f.seek(want["offset"])
                            self.assertEqual(b.plain(key), f.read(want["size"]), key)
                    self.assertIn(b"_CHECKPOINTABLE_OBJECT_GRAPH", b.entries)
                    self.assertEqual(b.entries[b"_CHECKPOINTABLE_OBJECT_GRAPH"]["dtype"],
                                     DT_STRING)
                    out_, _ = self.dvar("diff", tf_prefix, out + opt)
                    self.assertTrue(out_.startswith("identical: "), out_)
        # optimizer_slots has a snappy-compressed index block (read, never written).
        tf_prefix = os.path.join(FIXTURES, "optimizer_slots", "variables")
        if not os.path.exists(tf_prefix + ".index"):
            self.skipTest("no fixture %s" % tf_prefix)
        out = self.path("opt", "variables")
        self.export(tf_prefix, out, "--keep-shards")
        b = Bundle(self, out)
        self.assertEqual(len(b.entries), 9)
        self.dvar("diff", tf_prefix, out)
        # The other formats cannot hold strings: left out, with a note.
        for fmt, dest in (("dvar", self.path("opt-dvar")),
                          ("safetensors", self.path("opt.safetensors"))):
            _, err = self.dvar("export", tf_prefix, dest, "--single-shard", "--format", fmt)
            self.assertEqual(err, "dvar export: note: leaving out '_CHECKPOINTABLE_OBJECT_GRAPH', "
                                  "a string tensor (%s holds numeric tensors only)\n"
                             % ("a dvar checkpoint" if fmt == "dvar" else "safetensors"))
        self.assertEqual(len(self.inspect_json(self.path("opt-dvar"))["variables"]), 8)
        # ... and --drop-prefix leaves it out of a TensorFlow OUT.
        out = self.path("opt2", "variables")
        self.export(tf_prefix, out, "--single-shard", "--drop-prefix", "_CHECKPOINTABLE")
        self.assertEqual(len(Bundle(self, out).entries), 8)

    def test_large_variable_in_pieces(self):
        a = self.rng.standard_normal((700, 300)).astype(np.float32)
        b = self.rng.integers(0, 2**16, size=(5000,), dtype=np.uint16)
        src = self.path("src")
        self.import_arrays(src, {"a": a, "b": b}, "--shards", "a=3", "--chunk-size", "4K")
        for opt in ("--single-shard", "--keep-shards"):
            out = self.path("o" + opt)
            self.export(src, out, opt, env={"DVAR_CLI_PIECE_BYTES": "1000"})
            bundle = Bundle(self, out)
            self.assertEqual(len(bundle.data), a.nbytes + b.nbytes)
            self.dvar("diff", src, out)

    def test_drop_prefix_and_empty_checkpoint(self):
        src, arrays = self.sharded_source()
        out = self.path("out")
        self.export(src, out, "--keep-shards", "--drop-prefix", "a", "--drop-prefix", "c")
        b = Bundle(self, out)
        self.assertEqual(sorted(k for k in b.entries if k[:1] != b"\0"), [b"b", b"s"])
        # Everything dropped: a bundle of the header alone, which reads as no variables.
        none = self.path("none")
        self.export(src, none, "--single-shard", *[x for n in arrays for x in ("--drop-prefix", n)])
        self.assertEqual(Bundle(self, none).entries, {})
        self.assertEqual(os.path.getsize(none + ".data-00000-of-00001"), 0)
        self.assertEqual(self.inspect_json(none)["variables"], [])

    def test_progress(self):
        src = self.path("src")
        self.import_arrays(src, {"a": np.zeros((3000, 100))}, "--shards", "a=3")
        for opt in ("--single-shard", "--keep-shards"):
            _, err = self.export(src, self.path("p" + opt), opt, "--progress")
            self.assertRegex(err, r"^\rexport: +\d+% \(.* of 2\.3 MiB\)")
            self.assertRegex(err, r"\r *\r$")
            _, err = self.export(src, self.path("q" + opt), opt)
            self.assertEqual(err, "")

    def test_usage_errors(self):
        src, out = self.errors_source()
        usage = [
            (["--format", "tf"], "--format tf needs --single-shard (every variable one tensor) "
                                 "or --keep-shards (sharded variables as TensorFlow slices)"),
            (["--format", "tf", "--single-shard", "--keep-shards"],
             "--single-shard and --keep-shards exclude each other: give one"),
            (["--keep-shards"], "--keep-shards applies to --format tf only"),
            (["--format", "safetensors", "--keep-shards", "--single-shard"],
             "--keep-shards applies to --format tf only"),
            (["--format", "tf", "--keep-shards", "--chunk-size", "8K"],
             "--chunk-size applies to --format dvar only"),
        ]
        self.assert_usage_errors("export", [src, out], out, usage)
        self.assertEqual(self.files(out), [])

    def test_existing_out_is_refused(self):
        src, out = self.errors_source()
        for suffix in (".index", ".data-00000-of-00001", ""):
            with self.subTest(suffix=suffix):
                with open(out + suffix, "w") as f:
                    f.write("x")
                for opt in ("--single-shard", "--keep-shards"):
                    _, err = self.export(src, out, opt, code=3)
                    hint = ", or --force to replace it" if suffix else ""
                    self.assertEqual(err, "dvar export: '%s%s' already exists; give a new prefix%s\n"
                                     % (out, suffix, hint))
                self.assertEqual(self.files(out), [os.path.basename(out) + suffix])
                with open(out + suffix) as f:
                    self.assertEqual(f.read(), "x")
                os.unlink(out + suffix)

    def test_failed_export_leaves_nothing(self):
        src, _ = self.errors_source()
        flip_byte(self.data_files(src)[0], 64 + 7)  # shard 1's packed chunk
        for opt in ("--single-shard", "--keep-shards"):
            out = self.path("new", "dirs", "model")
            _, err = self.export(src, out, opt, code=3)
            self.assertTrue(err.startswith("dvar export: "), err)
            self.assertIn("checksum mismatch", err)
            # Neither the files, their temporaries nor the directories made for them.
            self.assertEqual(sorted(os.listdir(self.dir)), ["a0.npy", "src"])
        # Into an existing directory: only what was there stays.
        os.mkdir(self.path("d"))
        self.export(src, self.path("d", "m"), "--keep-shards", code=3)
        self.assertEqual(os.listdir(self.path("d")), [])
        self.assertEqual(glob.glob(self.path("d", ".*dvartmp*")), [])


if __name__ == "__main__":
    test_cli.run(lambda args: [OrderedCodeSelfTest, TfWriteTest])
