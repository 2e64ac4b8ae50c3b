"""Reading: the committed fixtures (TensorFlow's checkpoints in fixtures/tf,
dvar's v1 and v2) read equal to the values the C tests expect; the
Checkpoint mapping, info(), closing, strings and bfloat16."""

import os
import shutil

import numpy as np
import pytest

from conftest import fixture_path

import dvar


def test_tf_embedding():
    with dvar.open(fixture_path("tf", "embedding", "embedding.ckpt")) as ck:
        assert list(ck) == ["my_embedding"]
        t = ck["my_embedding"]
        assert t.dtype == np.float32 and t.shape == (3, 2)
        np.testing.assert_array_equal(np.asarray(t), [[1, 2], [3, 5], [7, 11]])
        np.testing.assert_array_equal(t[:, 1], [2, 5, 11])  # the C test's "-:1,1"
        assert ck.verify() == []


def test_tf_half_plus_two():
    # Any path form: the prefix, its .index file, the directory holding it.
    forms = [fixture_path("tf", "half_plus_two", "variables"),
             fixture_path("tf", "half_plus_two", "variables.index"),
             fixture_path("tf", "half_plus_two")]
    for p in forms:
        with dvar.open(p) as ck:
            assert list(ck) == ["a", "b", "c"]
            assert ck["a"][()] == np.float32(0.5)
            assert ck["b"][()] == np.float32(2.0)
            assert ck["c"][()] == np.float32(3.0)
            assert ck["a"].shape == ()
            assert ck.path.endswith("half_plus_two/variables")


def test_tf_vars_and_arithmetic_strings():
    with dvar.open(fixture_path("tf", "vars_and_arithmetic", "variables")) as ck:
        assert list(ck) == ["_CHECKPOINTABLE_OBJECT_GRAPH", "child/z/.ATTRIBUTES/VARIABLE_VALUE",
                            "x/.ATTRIBUTES/VARIABLE_VALUE", "y/.ATTRIBUTES/VARIABLE_VALUE"]
        assert ck["x/.ATTRIBUTES/VARIABLE_VALUE"][()] == 1.0
        assert ck["y/.ATTRIBUTES/VARIABLE_VALUE"][()] == 2.0
        assert ck["child/z/.ATTRIBUTES/VARIABLE_VALUE"][()] == 3.0
        g = ck["_CHECKPOINTABLE_OBJECT_GRAPH"]
        assert g.dtype == object and g.dvar_dtype == "string" and g.shape == ()
        info = ck.info("_CHECKPOINTABLE_OBJECT_GRAPH")
        assert info.dtype == "string" and info.raw_bytes == 256
        value = np.asarray(g)
        assert value.dtype == object and value.shape == ()
        b = value[()]
        assert isinstance(b, bytes) and len(b) == 256 - 2 - 4
        assert b[0] == 0x0A and b"child/z/.ATTRIBUTES/VARIABLE_VALUE" in b
        assert g[()] == b


def test_tf_optimizer_slots():
    with dvar.open(fixture_path("tf", "optimizer_slots", "variables")) as ck:
        assert len(ck) == 9
        f = lambda n: ck[n + "/.ATTRIBUTES/VARIABLE_VALUE"][()]  # noqa: E731
        assert f("opt/beta_1") == np.float32(0.9)
        assert f("opt/beta_2") == np.float32(0.999)
        assert f("opt/decay") == 0.0
        assert f("opt/learning_rate") == np.float32(0.001)
        it = ck["opt/iter/.ATTRIBUTES/VARIABLE_VALUE"]
        assert it.dtype == np.int64 and it[()] == 1
        assert 0.2999 < f("v/.OPTIMIZER_SLOT/opt/m") < 0.3001
        assert 0.008999 < f("v/.OPTIMIZER_SLOT/opt/v") < 0.009001
        assert 4.9989 < f("v") < 4.9991
        g = ck["_CHECKPOINTABLE_OBJECT_GRAPH"][()]
        assert len(g) == 774 - 2 - 4
        assert b"v/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE" in g


def test_tf_two_shards(tmp_path):
    p = fixture_path("tf", "two_shards", "variables")
    with dvar.open(p) as ck:
        v = ck["v/.ATTRIBUTES/VARIABLE_VALUE"]
        assert v.shape == (1, 1, 1)
        np.testing.assert_array_equal(np.asarray(v), np.ones((1, 1, 1), np.float32))
        assert len(ck["_CHECKPOINTABLE_OBJECT_GRAPH"][()]) == 120 - 1 - 4
        assert ck.verify() == []
    # Damage shard 1: reading v is a CorruptError naming the file.
    for suffix in (".index", ".data-00000-of-00002", ".data-00001-of-00002"):
        shutil.copy(p + suffix, str(tmp_path / ("variables" + suffix)))
    with open(str(tmp_path / "variables.data-00001-of-00002"), "r+b") as f:
        f.seek(1)
        b = f.read(1)
        f.seek(1)
        f.write(bytes([b[0] ^ 0xFF]))
    with dvar.open(str(tmp_path / "variables")) as ck:
        with pytest.raises(dvar.CorruptError) as e:
            np.asarray(ck["v/.ATTRIBUTES/VARIABLE_VALUE"])
        assert e.value.code == dvar.ECORRUPT
        assert "variables.data-00001-of-00002 at offset 0" in str(e.value)
        assert "checksum mismatch" in str(e.value)
        bad = ck.verify()
        assert len(bad) == 1 and bad[0].variable == "v/.ATTRIBUTES/VARIABLE_VALUE"


def test_tf_sharded_variable():
    with dvar.open(fixture_path("tf", "sharded_variable", "ckpt-1")) as ck:
        info = ck.info("s/.ATTRIBUTES/VARIABLE_VALUE")
        assert info.dtype == "int32" and info.shape == (4,)
        assert info.slices == [(slice(k, k + 1),) for k in range(4)]
        t = ck["s/.ATTRIBUTES/VARIABLE_VALUE"]
        np.testing.assert_array_equal(np.asarray(t), [0, 1, 2, 3])
        np.testing.assert_array_equal(t[1:3], [1, 2])
        np.testing.assert_array_equal(t[::-1], [3, 2, 1, 0])


@pytest.mark.parametrize("which", ["v1", "v2"])
def test_dvar_fixtures(which):
    with dvar.open(fixture_path(which)) as ck:
        assert len(ck) == 9
        assert ck["scalar_f32"][()] == np.float32(3.5)
        m = np.asarray(ck["matrix_f64"])
        np.testing.assert_array_equal(m, np.arange(12).reshape(3, 4) + 0.25)
        iv = np.asarray(ck["int_vec"])
        assert iv.dtype == np.int64 and iv.tolist() == [-2, -1, 0, 1, 9007199254740993]
        np.testing.assert_array_equal(np.asarray(ck["bool_vec"]), [True, False, True, True])
        assert ck["bool_vec"].dtype == np.bool_
        h = np.asarray(ck["half"])
        assert h.dtype == np.float16 and h.tolist() == [1, -2, 0.5, 65504]
        bf = np.asarray(ck["bf16"])
        assert bf.dtype == np.float32 and bf.tolist() == [1.0, -2.5]
        r, c = np.meshgrid(np.arange(256), np.arange(16), indexing="ij")
        emb = np.where(r % 2, 0.0, r * 16 + c + 0.125).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(ck["emb"]), emb)
        np.testing.assert_array_equal(ck["emb"][100:120, 3:9], emb[100:120, 3:9])
        sh = (np.arange(30).reshape(10, 3) - 7.5).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(ck["sharded"]), sh)
        np.testing.assert_array_equal(ck["sharded"][3:8], sh[3:8])  # across two saved slices
        assert ck.info("sharded").slices == [(slice(0, 4), slice(0, 3)),
                                             (slice(4, 7), slice(0, 3)),
                                             (slice(7, 10), slice(0, 3))]
        e = np.asarray(ck["empty"])
        assert e.shape == (0, 5) and e.dtype == np.float32
        if which == "v2":
            assert ck.info("int_vec").attributes == {
                "aggregation": "SUM", "kind": "sync_on_read", "synchronization": "ON_READ"}
        assert ck.verify() == []
    with dvar.open(fixture_path(which), raw_bfloat16=True) as ck:
        raw = np.asarray(ck["bf16"])
        assert raw.dtype == np.uint16 and raw.tolist() == [0x3F80, 0xC020]
        assert ck.info("bf16").numpy_dtype == np.uint16


def test_mapping_protocol_and_close():
    ck = dvar.open(fixture_path("v1"))
    assert "emb" in ck and "nope" not in ck and 5 not in ck
    assert ck.get("nope") is None
    assert sorted(ck.keys()) == list(ck)
    assert len(ck.values()) == 9
    assert isinstance(ck["emb"], dvar.Tensor)
    t = ck["emb"]
    assert t.ndim == 2 and t.size == 4096 and t.nbytes == 16384 and len(t) == 256
    assert "emb" in repr(t) and "9 variables" in repr(ck)
    info = ck.info("emb")
    assert (info.name, info.dtype, info.shape, info.raw_bytes) == ("emb", "float32",
                                                                  (256, 16), 16384)
    assert info.num_chunks >= 1 and info.stored_bytes > 0
    before = ck.bytes_read
    t[0:2]
    assert ck.bytes_read > before
    ck.close()
    assert ck.closed and "closed" in repr(ck)
    ck.close()  # twice is harmless
    for f in (lambda: t[0], lambda: np.asarray(t), lambda: ck["emb"], lambda: list(ck),
              lambda: ck.info("emb"), lambda: t.digest(), lambda: t.map(), lambda: ck.verify(),
              lambda: "emb" in ck, lambda: len(ck)):
        with pytest.raises(dvar.ClosedError):
            f()
    with dvar.open(fixture_path("v1")) as ck2:
        t2 = ck2["int_vec"]
    with pytest.raises(ValueError):  # ClosedError is a ValueError, as for closed files
        t2[0]


def test_root_opens_latest(tmp_path):
    root = str(tmp_path / "root")
    dvar.save(root, {"x": np.arange(3)}, step=1)
    dvar.save(root, {"x": np.arange(3) * 2}, step=2)
    with dvar.open(root) as ck:
        assert ck.path.endswith("ckpt-2")
        assert np.asarray(ck["x"]).tolist() == [0, 2, 4]
    with dvar.open(os.path.join(root, "ckpt-1")) as ck:
        assert np.asarray(ck["x"]).tolist() == [0, 1, 2]


@pytest.mark.parametrize("raw_bfloat16", [False, True])
def test_read_many_equals_one_by_one(tmp_path, raw_bfloat16):
    # Every dtype, many small variables and a few large ones, a 0-d one and
    # an empty one, read in one batch, equal to reading each by itself.
    rng = np.random.default_rng(5)
    arrays = {"big": rng.random((600, 1024), dtype=np.float32),
              "scalar": np.float64(2.5), "empty": np.zeros((0, 3), np.int32)}
    for k, dt in enumerate(["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
                            "uint64", "float16", "float32", "float64", "bool"]):
        for j in range(4):
            arrays["v%02d_%d" % (k, j)] = (rng.integers(0, 100, size=37 + 101 * j)
                                           .astype(dt))
    path = str(tmp_path / "ck")
    dvar.save(path, arrays)
    with dvar.open(fixture_path("v2"), raw_bfloat16=raw_bfloat16) as ck:
        got = ck.read_many()  # bfloat16 (as float32, or raw), sharded, empty
        assert got["bf16"].tolist() == ([0x3F80, 0xC020] if raw_bfloat16 else [1.0, -2.5])
        for name in ck:
            np.testing.assert_array_equal(got[name], np.asarray(ck[name]))
            assert got[name].dtype == ck[name].dtype
    with dvar.open(path, raw_bfloat16=raw_bfloat16) as ck:
        got = ck.read_many()
        assert list(got) == list(ck)
        for name in ck:
            np.testing.assert_array_equal(got[name], np.asarray(ck[name]))
            assert got[name].dtype == ck[name].dtype
        np.testing.assert_array_equal(got["big"], arrays["big"])
        some = ck.read_many(["v03_2", "big", "v03_2"])
        assert list(some) == ["v03_2", "big"]
        np.testing.assert_array_equal(some["v03_2"], arrays["v03_2"])
        assert list(ck.read_many("scalar")) == ["scalar"]
        assert ck.read_many([]) == {}
        with pytest.raises(dvar.NotFound):
            ck.read_many(["big", "nope"])
        with pytest.raises(TypeError):
            ck.read_many([3])
    with pytest.raises(dvar.ClosedError):
        ck.read_many()


def test_read_many_strings():
    # A TF checkpoint's string tensor comes back as from np.asarray.
    with dvar.open(fixture_path("tf", "vars_and_arithmetic", "variables")) as ck:
        got = ck.read_many()
        assert got["_CHECKPOINTABLE_OBJECT_GRAPH"][()] == ck["_CHECKPOINTABLE_OBJECT_GRAPH"][()]
        assert got["y/.ATTRIBUTES/VARIABLE_VALUE"][()] == 2.0


def test_large_reads_land_on_pages(tmp_path):
    # Arrays of 1 MiB and more are read into memory that starts on a page,
    # where the reader can read cold chunks straight from the disk; they
    # are plain writable arrays, equal to NumPy's slicing of the original.
    rng = np.random.default_rng(9)
    a = rng.random((1100, 300), dtype=np.float32)  # 1.3 MB; a row is not a page
    path = str(tmp_path / "ck")
    dvar.save(path, {"a": a, "small": a[:10]})
    with dvar.open(path) as ck:
        reads = {"whole": (np.asarray(ck["a"]), a), "many": (ck.read_many()["a"], a),
                 "rows": (ck["a"][100:1000], a[100:1000])}
        for what, (got, want) in reads.items():
            assert got.ctypes.data % 4096 == 0, what
            assert got.flags.writeable and got.flags.c_contiguous, what
            np.testing.assert_array_equal(got, want)
        small = np.asarray(ck["small"])
        np.testing.assert_array_equal(small, a[:10])
        stepped = ck["a"][::-3, 1:]
        np.testing.assert_array_equal(stepped, a[::-3, 1:])
        assert stepped.base is None  # a copy: the whole box is not kept alive
        got = np.asarray(ck["a"])
        got[0, 0] = -1  # its own memory
        assert np.asarray(ck["a"])[0, 0] == a[0, 0]
    # Through the page cache (DVAR_READ_CACHED): the same values.
    with dvar.open(path, cache=True) as ck:
        np.testing.assert_array_equal(np.asarray(ck["a"]), a)
        np.testing.assert_array_equal(ck["a"][7:900:2], a[7:900:2])
