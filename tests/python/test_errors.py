"""Every exception class, raised by feeding the bad input that causes it;
and bad input from Python (wrong types, closed checkpoints, NUL bytes)
raises instead of crashing."""

import ctypes
import os
import pickle

import numpy as np
import pytest

from conftest import fixture_path

import dvar
from dvar import _lib


def test_not_found(tmp_path):
    with pytest.raises(dvar.NotFound) as e:
        dvar.open(str(tmp_path / "nothing"))
    assert e.value.code == dvar.ENOTFOUND and "nothing" in e.value.message
    assert isinstance(e.value, dvar.Error) and isinstance(e.value, KeyError)
    assert str(e.value) == e.value.message  # not KeyError's quoted repr
    with dvar.open(fixture_path("v1")) as ck:
        with pytest.raises(KeyError, match="'nope' not found"):
            ck["nope"]
    with pytest.raises(dvar.NotFound):
        dvar.digest(fixture_path("v1"), ["nope"])
    with pytest.raises(dvar.NotFound, match="prefix"):
        dvar.export(fixture_path("v1"), str(tmp_path / "e"), drop_prefixes=["zzz"],
                    progress=False)


def test_exists(tmp_path):
    p = str(tmp_path / "c")
    dvar.save(p, {"a": np.arange(3)}, fsync=False)
    with pytest.raises(dvar.ExistsError) as e:
        dvar.save(p, {"a": np.arange(3)})
    assert e.value.code == dvar.EEXISTS and isinstance(e.value, FileExistsError)
    with pytest.raises(dvar.ExistsError):
        dvar.export(fixture_path("v1"), p, progress=False)
    with dvar.open(p) as ck:
        assert repr(ck) == "<dvar.Checkpoint %r (1 variable)>" % p


def test_invalid_argument(tmp_path):
    p = str(tmp_path / "c")
    cases = [
        lambda: dvar.save(p, {"a": np.arange(3)}, compress="zstd"),
        lambda: dvar.save(p, {"a": np.arange(3)}, shards={"a": 0}),
        lambda: dvar.save(p, {"a": np.arange(3)}, shards={"b": 2}),
        lambda: dvar.save(p, {"a\0b": np.arange(3)}),
        lambda: dvar.save(p, {"": np.arange(3)}),  # libdvar: names are 1..1024 bytes
        lambda: dvar.save(p, {"a": np.arange(3)}, chunk_size=1000),  # not a multiple of 4096
        lambda: dvar.save(p, {"a": np.zeros((1,) * 9)}),
        lambda: dvar.save(p, {"a": np.arange(3)}, dtypes={"a": "float8"}),
        lambda: dvar.open("bad\0path"),
        lambda: dvar.export(fixture_path("v1"), str(tmp_path / "x.safetensors"), format="dvar",
                            progress=False),
        lambda: dvar.export(fixture_path("v1"), str(tmp_path / "x"), format="zip"),
        lambda: dvar.reshard(fixture_path("v1"), str(tmp_path / "x"), partitioner="bogus:1",
                             progress=False),
    ]
    for k, f in enumerate(cases):
        with pytest.raises(dvar.InvalidArgument) as e:
            f()
        assert e.value.code == dvar.EINVAL and isinstance(e.value, ValueError), k
        assert e.value.message, k
    assert os.listdir(str(tmp_path)) == []


def test_shape_error(tmp_path):
    # A variable saved in part only (rows 0..1 of 4): reading the rest is a
    # ShapeError, reading the saved part works.
    lib = _lib.lib
    w = ctypes.c_void_p()
    p = str(tmp_path / "holes")
    opts = _lib.WriteOptions(version=1, flags=2)
    _lib.check(lib.dvar_writer_open(ctypes.byref(w), p.encode(), ctypes.byref(opts)))
    try:
        data = np.arange(6, dtype=np.float32)
        full = _lib.shape_struct((4, 3))
        part = _lib.slice_struct((0, 0), (2, 3))
        _lib.check(lib.dvar_writer_add(w, b"t", 1, ctypes.byref(full), ctypes.byref(part),
                                       data.ctypes.data))
        _lib.check(lib.dvar_writer_commit(w))
    finally:
        lib.dvar_writer_free(w)
    with dvar.open(p) as ck:
        t = ck["t"]
        assert t[0:2].tolist() == [[0, 1, 2], [3, 4, 5]]
        with pytest.raises(dvar.ShapeError) as e:
            t[1:4]
        assert e.value.code == dvar.ESHAPE and "not covered" in e.value.message
        with pytest.raises(dvar.ShapeError):
            np.asarray(t)


def test_corrupt(tmp_path):
    p = str(tmp_path / "c")
    dvar.save(p, {"a": np.arange(1000, dtype=np.int64)}, compress="none", fsync=False)
    data = os.path.join(p, "data-00000-of-00001")
    with open(data, "r+b") as f:
        f.seek(8)
        f.write(b"\xff")
    with dvar.open(p) as ck:
        with pytest.raises(dvar.CorruptError) as e:
            ck["a"][:10]
        assert e.value.code == dvar.ECORRUPT and "checksum" in e.value.message
        with pytest.raises(dvar.CorruptError):
            ck["a"].map(verify=True)
        assert ck["a"].map()[1] != 1  # unverified: what the file holds
    # A damaged index.
    q = str(tmp_path / "d")
    dvar.save(q, {"a": np.arange(3)}, fsync=False)
    with open(os.path.join(q, "index"), "r+b") as f:
        f.seek(0)
        f.write(b"\0" * 64)
    with pytest.raises(dvar.CorruptError):
        dvar.open(q)


def test_io_error(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(dvar.IOError) as e:
        dvar.save(str(tmp_path / "file" / "sub"), {"a": np.arange(3)})
    assert e.value.code == dvar.EIO and isinstance(e.value, OSError)
    assert "not a directory" in str(e.value)
    p = str(tmp_path / "c")
    dvar.save(p, {"a": np.arange(3)}, fsync=False)
    data = os.path.join(p, "data-00000-of-00001")
    os.remove(data)
    os.mkdir(data)  # unreadable as a file
    with dvar.open(p) as ck:
        with pytest.raises(OSError, match="Is a directory"):
            np.asarray(ck["a"])


def test_unsupported_and_cancelled(tmp_path):
    np.save(str(tmp_path / "c.npy"), np.zeros(2, np.complex128))
    with pytest.raises(dvar.Unsupported) as e:
        dvar.import_(str(tmp_path / "x"), str(tmp_path / "c.npy"), progress=False)
    assert e.value.code == dvar.ENOTSUPP

    def cancel(done, total):
        raise dvar.Cancelled(dvar.ECANCELED, "stop")
    with pytest.raises(dvar.Cancelled) as e:
        dvar.export(fixture_path("v1"), str(tmp_path / "e"), progress=cancel)
    assert e.value.code == dvar.ECANCELED
    assert not os.path.exists(str(tmp_path / "e"))


def test_python_input_never_crashes(tmp_path):
    with pytest.raises(TypeError):
        dvar.open(123)
    with pytest.raises(TypeError):
        dvar.open(fixture_path("v1"), threads="many")
    with pytest.raises(TypeError):
        dvar.save(str(tmp_path / "c"), [np.arange(3)])
    with pytest.raises(TypeError):
        dvar.save(str(tmp_path / "c"), {1: np.arange(3)})
    with pytest.raises(TypeError):
        dvar.save(str(tmp_path / "c"), {"a": object()})
    with pytest.raises(TypeError):
        dvar.save(str(tmp_path / "c"), {"a": np.array(["x"])})
    with pytest.raises(TypeError):
        dvar.reshard(fixture_path("v1"), str(tmp_path / "r"), shards="3")
    with dvar.open(fixture_path("v1")) as ck:
        with pytest.raises(TypeError):
            ck[0]
        t = ck["emb"]
    for f in (lambda: t[0], lambda: t.read(), lambda: t.digest(), lambda: t.info()):
        with pytest.raises(dvar.ClosedError):
            f()
    assert os.listdir(str(tmp_path)) == []


def test_error_record():
    e = dvar.Error(dvar.EIO, "what")
    assert (e.code, e.message, str(e)) == (dvar.EIO, "what", "what")
    back = pickle.loads(pickle.dumps(dvar.NotFound(dvar.ENOTFOUND, "x")))
    assert type(back) is dvar.NotFound and back.code == dvar.ENOTFOUND and back.message == "x"
    for cls in (dvar.NotFound, dvar.ExistsError, dvar.InvalidArgument, dvar.ShapeError,
                dvar.CorruptError, dvar.IOError, dvar.VersionError, dvar.Unsupported,
                dvar.Cancelled, dvar.ClosedError):
        assert issubclass(cls, dvar.Error)


def test_library_checks(monkeypatch):
    # A ctypes mirror that does not match the library's layout fails loudly.
    class Wrong(ctypes.Structure):
        _fields_ = [("rank", ctypes.c_int32), ("dims", ctypes.c_int64 * 4)]
    monkeypatch.setitem(_lib.MIRRORS, "dvar_shape", Wrong)
    with pytest.raises(ImportError, match="dvar_shape in 72 bytes, this package in 40"):
        _lib.load()
    monkeypatch.undo()
    # A DVAR_LIBRARY that does not load names itself.
    monkeypatch.setenv("DVAR_LIBRARY", "/nonexistent/libdvar.so")
    with pytest.raises(ImportError, match="DVAR_LIBRARY=/nonexistent/libdvar.so"):
        _lib.load()
