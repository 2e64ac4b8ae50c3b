"""Tensor.map(): a zero-copy view of the data file (its base is the
mapping, its memory is the file's pages, not the process's own), that
outlives close() safely, and what cannot be mapped."""

import gc

import numpy as np
import pytest

from conftest import SANITIZED, fixture_path, rss_anon

import dvar

SIZE = 64 << 20  # bytes of the mapped variable


@pytest.fixture
def export(tmp_path):
    rows = SIZE // (256 * 4)
    a = np.arange(rows * 256, dtype=np.float32).reshape(rows, 256)
    src = str(tmp_path / "src")
    dvar.save(src, {"big": a, "small": np.arange(10, dtype=np.int16)},
              shards={"big": 3}, fsync=False)
    out = str(tmp_path / "export")
    dvar.export(src, out, format="dvar", progress=False)
    del a
    gc.collect()
    return out


def test_map_is_zero_copy(export):
    with dvar.open(export) as ck:
        t = ck["big"]
        m = t.map()
        assert isinstance(m.base, dvar.MappedBuffer)
        assert m.ctypes.data == m.base.address and m.base.size == SIZE
        assert m.shape == t.shape and m.dtype == np.float32
        assert not m.flags.writeable
        with pytest.raises(ValueError):
            m[0, 0] = 1
        # Reading it through the mapping equals a copy read.
        np.testing.assert_array_equal(m[123], t[123])
        np.testing.assert_array_equal(ck["small"].map(verify=True), np.arange(10))
        # A second mapping is another view of the same file.
        m2 = t.map()
        assert m2.base is not m.base


@pytest.mark.skipif(SANITIZED, reason="AddressSanitizer's shadow memory moves RssAnon")
def test_map_does_not_grow_rss(export):
    with dvar.open(export) as ck:
        t = ck["big"]
        gc.collect()
        before = rss_anon()
        m = t.map()
        total = float(m.sum(dtype=np.float64))  # touches every page
        mapped_growth = rss_anon() - before
        rows = m.shape[0]
        assert total == float(np.arange(rows * 256, dtype=np.float64).sum())
        # The pages are the file's (RssFile), not this process's memory.
        assert mapped_growth < SIZE // 8, mapped_growth
        del m
        gc.collect()
        before = rss_anon()
        copy = np.asarray(t)
        copy_growth = rss_anon() - before
        assert copy.shape == t.shape
        assert copy_growth >= SIZE * 0.9, copy_growth  # the check itself can tell


def test_map_outlives_close(export):
    ck = dvar.open(export)
    m = ck["small"].map()
    t = ck["big"]
    ck.close()
    # The array holds the mapping: still valid after close.
    assert m.tolist() == list(range(10))
    with pytest.raises(dvar.ClosedError):
        t.map()
    del ck, t
    gc.collect()
    assert int(m.sum()) == 45


def test_what_cannot_be_mapped(tmp_path, export):
    src = str(tmp_path / "c")
    dvar.save(src, {"sh": np.zeros((8, 2), np.float32), "z": np.zeros(4096 * 4, np.float32),
                    "bf": np.zeros(3, np.float32)},
              shards={"sh": 2}, compress="lz4", dtypes={"bf": "bfloat16"}, fsync=False)
    with dvar.open(src) as ck:
        with pytest.raises(dvar.Unsupported):
            ck["sh"].map()  # several slices
        with pytest.raises(dvar.Unsupported, match="compress"):
            ck["z"].map()  # lz4 chunks
        with pytest.raises(dvar.Unsupported, match="raw_bfloat16"):
            ck["bf"].map()
    with dvar.open(fixture_path("tf", "embedding", "embedding.ckpt")) as ck:
        with pytest.raises(dvar.Unsupported):
            ck["my_embedding"].map()
    with dvar.open(fixture_path("tf", "vars_and_arithmetic", "variables")) as ck:
        with pytest.raises(dvar.Unsupported, match="string"):
            ck["_CHECKPOINTABLE_OBJECT_GRAPH"].map()
