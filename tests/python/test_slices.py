"""Basic indexing of a dvar.Tensor against NumPy's own indexing of the whole
array, over random shapes, random shard counts and random indices (seeded),
and that a slice reads only what it needs."""

import numpy as np
import pytest

import dvar


def random_index(rng, shape):
    """A random basic index of shape: ints (negative too), slices with
    negative bounds and steps, ..., None."""
    parts = []
    for n in shape:
        kind = rng.integers(0, 5)
        if kind == 0 and n > 0:
            parts.append(int(rng.integers(-n, n)))
        elif kind == 1:
            parts.append(slice(None))
        else:
            a = int(rng.integers(-n - 2, n + 3))
            b = int(rng.integers(-n - 2, n + 3))
            step = int(rng.choice([1, 1, 2, 3, -1, -2, -3]))
            parts.append(slice(a if rng.random() < 0.8 else None,
                               b if rng.random() < 0.8 else None, step))
    # Sometimes only a prefix, an ellipsis, or a new axis.
    r = rng.random()
    if r < 0.2 and parts:
        parts = parts[:int(rng.integers(0, len(parts) + 1))]
    elif r < 0.4 and parts:
        k = int(rng.integers(0, len(parts)))
        cut = int(rng.integers(k, len(parts) + 1))
        parts = parts[:k] + [Ellipsis] + parts[cut:]
    elif r < 0.5:
        parts.insert(int(rng.integers(0, len(parts) + 1)), None)
    return parts[0] if len(parts) == 1 and rng.random() < 0.5 else tuple(parts)


@pytest.mark.parametrize("dtype", ["float32", "int16", "float64", "uint8", "bool"])
def test_random_slices_match_numpy(tmp_path, rng, dtype):
    checked = 0
    for case in range(6):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(rng.integers(1, 9)) for _ in range(rank))
        if case == 0:
            shape = (int(rng.integers(50, 300)),) + shape[1:]
        a = (rng.standard_normal(shape) * 100).astype(dtype)
        shards = int(rng.integers(1, 5))
        path = str(tmp_path / ("c%d" % case))
        dvar.save(path, {"a": a}, shards={"a": shards}, chunk_size=4096, fsync=False)
        with dvar.open(path) as ck:
            t = ck["a"]
            for _ in range(60):
                idx = random_index(rng, shape)
                want = a[idx]
                got = t[idx]
                assert type(got) is type(want) or (isinstance(want, np.generic) and
                                                   isinstance(got, np.generic)), idx
                if isinstance(want, np.ndarray):
                    assert got.shape == want.shape, idx
                    assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want, err_msg=str(idx))
                checked += 1
    assert checked == 360


def test_fixed_forms(tmp_path):
    a = np.arange(10 * 6 * 4, dtype=np.float32).reshape(10, 6, 4)
    dvar.save(str(tmp_path / "c"), {"a": a}, shards={"a": 3}, fsync=False)
    with dvar.open(str(tmp_path / "c")) as ck:
        t = ck["a"]
        for idx in [np.s_[2:5], np.s_[3], np.s_[..., :2], np.s_[2:5, 1:3], np.s_[-1],
                    np.s_[-3:], np.s_[::-1], np.s_[::3], np.s_[8:1:-2], np.s_[..., -1],
                    np.s_[None, 1], np.s_[1, None, :, 2], np.s_[()], np.s_[...],
                    np.s_[5:5], np.s_[7:2], np.s_[np.int64(4), np.int32(-2)],
                    np.s_[-100:100], np.s_[1, 2, 3]]:
            np.testing.assert_array_equal(t[idx], a[idx], err_msg=str(idx))
            assert np.shape(t[idx]) == np.shape(a[idx])
        assert isinstance(t[1, 2, 3], np.float32)
    # A 0-d tensor: [()] is a scalar, [...] a 0-d array, as NumPy has them.
    dvar.save(str(tmp_path / "s"), {"s": np.float64(2.5)}, fsync=False)
    with dvar.open(str(tmp_path / "s")) as ck:
        s = ck["s"]
        assert isinstance(s[()], np.float64) and s[()] == 2.5
        assert isinstance(s[...], np.ndarray) and s[...].shape == ()
        assert s[None].shape == (1,)
        with pytest.raises(IndexError):
            s[0]


def test_reads_only_the_rows_needed(tmp_path):
    rows, cols = 4096, 256  # 4 MiB of float32, in 64 KiB chunks
    a = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    dvar.save(str(tmp_path / "c"), {"a": a}, compress="none", chunk_size=65536, fsync=False)
    with dvar.open(str(tmp_path / "c")) as ck:
        t = ck["a"]
        before = ck.bytes_read
        np.testing.assert_array_equal(t[1000:1010], a[1000:1010])
        assert ck.bytes_read - before <= 2 * 65536 + 10 * cols * 4
        # A big step over big rows reads only the rows it selects.
        b = 4096 * 64
        big = np.arange(64 * b // 4, dtype=np.float32).reshape(64, b // 4)
        dvar.save(str(tmp_path / "d"), {"b": big}, compress="none", fsync=False)
    with dvar.open(str(tmp_path / "d")) as ck:
        before = ck.bytes_read
        np.testing.assert_array_equal(ck["b"][::16], big[::16])
        assert ck.bytes_read - before <= 4 * big[0].nbytes + 4 * 65536
        np.testing.assert_array_equal(ck["b"][-1::-21, 5:9], big[-1::-21, 5:9])


def test_bad_indices(tmp_path):
    dvar.save(str(tmp_path / "c"), {"a": np.zeros((4, 3))}, fsync=False)
    with dvar.open(str(tmp_path / "c")) as ck:
        t = ck["a"]
        # What NumPy refuses too, with the same exception.
        for idx, exc in [(4, IndexError), (-5, IndexError), (np.s_[0, 3], IndexError),
                         (np.s_[0, -4], IndexError), (np.s_[0, 0, 0], IndexError),
                         (np.s_[..., ...], IndexError), ("a", IndexError), (1.5, IndexError),
                         (np.s_[::0], ValueError)]:
            with pytest.raises(exc):
                t[idx]
            with pytest.raises(exc):
                np.zeros((4, 3))[idx]
        # Advanced indexing, which NumPy does and a Tensor refuses (read first).
        for idx in ([0, 1], np.array([1]), True, np.array([True, False, True, True]),
                    np.s_[[0, 1], 1]):
            with pytest.raises(IndexError, match="advanced indexing|valid indices"):
                t[idx]
