"""Writing: every dtype round trips save -> open equal; any memory layout
(Fortran order, strided views, big-endian) is written right, in bounded
pieces; shards, attributes, compression, steps; atomicity."""

import os

import numpy as np
import pytest

import dvar
from dvar import _write

ALL = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
       "float16", "float32", "float64"]


def sample(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    a = (rng.standard_normal(shape) * 1000).astype(dt)
    flat = a.reshape(-1)
    if flat.size >= 4:  # the special values survive too
        flat[:4] = [np.inf, -np.inf, -0.0, np.nan]
    return a


@pytest.mark.parametrize("compress", ["auto", "lz4", "none"])
def test_every_dtype_round_trips(tmp_path, rng, compress):
    arrays = {"v_" + d: sample(rng, d, (37, 5)) for d in ALL}
    arrays["scalar"] = np.float64(2.5)
    arrays["empty"] = np.zeros((0, 4), np.int32)
    arrays["rank8"] = sample(rng, "int16", (2,) * 8)
    path = str(tmp_path / "c")
    assert dvar.save(path, arrays, compress=compress, fsync=False) == path
    with dvar.open(path) as ck:
        assert sorted(ck) == sorted(arrays)
        for name, a in arrays.items():
            got = np.asarray(ck[name])
            assert got.dtype == np.asarray(a).dtype, name
            assert got.shape == np.shape(a), name
            # Bytes equal: NaN and -0.0 included.
            assert got.tobytes() == np.ascontiguousarray(a).tobytes(), name
            assert ck.info(name).dtype == np.asarray(a).dtype.name


def test_bfloat16(tmp_path, rng):
    f = np.array([1.0, -2.5, 3.00390625, np.inf, -np.inf, np.nan, 65504.0, 1.00390625,
                  1.01171875, 1e-40], dtype=np.float32)
    bits = np.array([0x3F80, 0xC020, 0x7F7F, 0x0001], dtype=np.uint16)
    path = str(tmp_path / "c")
    dvar.save(path, {"f": f, "bits": bits}, dtypes={"f": "bfloat16", "bits": "bfloat16"},
              fsync=False)
    with dvar.open(path) as ck:
        assert ck.info("f").dtype == "bfloat16"
        got = np.asarray(ck["f"])
        assert got.dtype == np.float32
        # Rounded to nearest, ties to even: 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6.
        want = np.array([1.0, -2.5, 3.0, np.inf, -np.inf, np.nan, 65536.0, 1.0, 1.015625],
                        np.float32)
        np.testing.assert_array_equal(got[:9], want)
        first = ck["f"][0]  # a scalar read converts too
        assert isinstance(first, np.float32) and first == 1.0
        assert ck["f"][..., 1].shape == () and ck["f"][..., 1] == -2.5
        # A subnormal: 1e-40 is float32 bits 0x000116C2, rounded down to 0x0001 << 16.
        assert got[9] == np.array([0x00010000], np.uint32).view(np.float32)[0]
        np.testing.assert_array_equal(
            np.asarray(ck["bits"]), (bits.astype(np.uint32) << 16).view(np.float32))
    with dvar.open(path, raw_bfloat16=True) as ck:
        raw = np.asarray(ck["bits"])
        assert raw.dtype == np.uint16 and raw.tolist() == bits.tolist()
        assert ck["bits"][1:3].tolist() == [0xC020, 0x7F7F]


def test_layouts(tmp_path, rng, monkeypatch):
    base = sample(rng, "float64", (300, 40))
    layouts = {
        "c": base,
        "fortran": np.asfortranarray(base),
        "strided": base[::3, ::2],
        "reversed": base[::-1],
        "transposed": base.T,
        "bigendian": base.astype(">f8"),
        "bigendian_int": sample(rng, "int32", (50, 7)).astype(">i4"),
        "broadcast": np.broadcast_to(np.arange(40.0), (300, 40)),
    }
    # Pieces of at most 4 KiB: everything that is copied is copied in many pieces.
    monkeypatch.setattr(_write, "PIECE_BYTES", 4096)
    seen = []
    real = _write._convert

    def spy(a, code):
        out = real(a, code)
        seen.append(out.nbytes)
        return out
    monkeypatch.setattr(_write, "_convert", spy)
    path = str(tmp_path / "c")
    dvar.save(path, layouts, shards={"strided": 3, "transposed": 2}, fsync=False)
    assert seen and max(seen) <= 4096
    with dvar.open(path) as ck:
        for name, a in layouts.items():
            got = np.asarray(ck[name])
            assert got.dtype == a.dtype.newbyteorder("<"), name
            np.testing.assert_array_equal(got, a, err_msg=name)
        assert ck.info("transposed").attributes["shards"] == "2"


def test_big_row_is_cut_further(monkeypatch):
    # One row larger than a piece: rows are cut into their own rows.
    monkeypatch.setattr(_write, "PIECE_BYTES", 256)
    a = np.asfortranarray(np.arange(4 * 100 * 3, dtype=np.float32).reshape(4, 100, 3))
    pieces = list(_write._pieces(a, 1))
    assert max(p.nbytes for p in pieces) <= 256
    np.testing.assert_array_equal(np.concatenate([p.ravel() for p in pieces]), a.ravel())


def test_shards_and_attributes(tmp_path, rng):
    a = sample(rng, "float32", (10, 3))
    path = str(tmp_path / "c")
    dvar.save(path, {"t": a, "few": np.arange(2), "s": np.int8(1)},
              shards={"t": 4, "few": 5, "s": 3},
              attributes={"t": {"note": "hello", "kind": "sharded"}}, fsync=False)
    with dvar.open(path) as ck:
        info = ck.info("t")
        # TensorFlow's div rule: 10 rows over 4 shards are 3, 3, 2, 2.
        assert [s[0] for s in info.slices] == [slice(0, 3), slice(3, 6), slice(6, 8),
                                               slice(8, 10)]
        assert info.attributes == {"kind": "sharded", "layout": "div", "note": "hello",
                                   "shards": "4"}
        np.testing.assert_array_equal(np.asarray(ck["t"]), a)
        assert len(ck.info("few").slices) == 2  # capped by the rows
        assert len(ck.info("s").slices) == 1  # a scalar is one shard


def test_step_and_keep_last(tmp_path):
    root = str(tmp_path / "root")
    for step in (1, 2, 3):
        out = dvar.save(root, {"x": np.full(3, step)}, step=step, keep_last=2, fsync=False)
        assert out == os.path.join(root, "ckpt-%d" % step)
    assert sorted(p for p in os.listdir(root) if p.startswith("ckpt-")) == ["ckpt-2", "ckpt-3"]
    with dvar.open(root) as ck:
        assert np.asarray(ck["x"]).tolist() == [3, 3, 3]


def test_atomic_on_failure(tmp_path):
    path = str(tmp_path / "c")

    class Boom:
        def __array__(self, dtype=None):
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        dvar.save(path, {"a": np.arange(3), "b": Boom()})
    # A dtype dvar cannot store: checked before anything is written.
    with pytest.raises(TypeError, match="complex"):
        dvar.save(path, {"a": np.arange(3), "c": np.zeros(2, np.complex64)})
    # A failure inside the writer, after the first array was written.
    with pytest.raises(dvar.InvalidArgument):
        dvar.save(path, {"a": np.arange(3)}, attributes={"a": {"k" * 65: "v"}})
    assert os.listdir(str(tmp_path)) == []
    # A progress callback that raises stops the save, and nothing is left.
    def stop(done, total):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        dvar.save(path, {"a": np.zeros((1 << 20,), np.float32)}, chunk_size=65536,
                  progress=stop)
    assert os.listdir(str(tmp_path)) == []


def _bytes_written_by_this_process():
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def test_ctrl_c_stops_one_large_write(tmp_path):
    """A Ctrl-C inside the one C call that writes every contiguous array
    stops it within a chunk per thread: what is written after the signal is
    at most the chunks in flight, KeyboardInterrupt is raised, and nothing
    is left."""
    if not os.path.exists("/proc/self/io"):
        pytest.skip("needs /proc/self/io to count the bytes written")
    import signal
    a = np.ones(64 << 20, np.float32)  # 256 MiB: 4096 chunks of 64 KiB
    at_cancel = []

    def ctrl_c(done, total):
        if not at_cancel:
            os.kill(os.getpid(), signal.SIGINT)
            # Python runs the handler in this thread at its next check; the
            # other threads go on writing until it has set the flag.
            handler = signal.getsignal(signal.SIGINT).__self__
            while not handler.cancel.value:
                pass
            at_cancel.append(_bytes_written_by_this_process())
    path = str(tmp_path / "c")
    before = _bytes_written_by_this_process()
    with pytest.raises(KeyboardInterrupt):
        dvar.save(path, {"a": a}, compress="none", chunk_size=65536, threads=4, fsync=False,
                  progress=ctrl_c)
    after = _bytes_written_by_this_process()
    assert at_cancel and at_cancel[0] - before < a.nbytes // 2, (before, at_cancel)
    # Once the flag is set, each of the 4 threads finishes at most the chunk
    # it had begun.
    assert after - at_cancel[0] <= 4 * 65536, (before, at_cancel, after)
    assert os.listdir(str(tmp_path)) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_progress_callable(tmp_path):
    calls = []
    dvar.save(str(tmp_path / "c"), {"a": np.zeros((1 << 22,), np.uint8)}, chunk_size=65536,
              progress=lambda done, total: calls.append(done), fsync=False)
    assert calls and calls == sorted(calls) and calls[-1] > 0
